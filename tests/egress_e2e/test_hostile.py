"""A hostile child against the host's egress proxy: raw sockets that bypass it reach nothing
(its own network namespace has loopback alone), every forbidden destination through it is
refused with the reason (HTTP CONNECT and SOCKS5 alike) and logged once, a flood of 1,000
connections is capped at the plugin's limit while the host and another plugin's child keep
serving, a request head dripped a byte at a time is cut at the head deadline, a silent tunnel
is closed after the idle time, and a download past the byte budget is slowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest

from tests.egress_e2e.support import (
    Allowed,
    Site,
    catalogue_refusals,
    egress_counts,
    egress_host_fixture,
    egress_settings,
    fixture_plugin,
    logged_refusals,
    site_fixture,
)
from tests.hosting import RunningHost, running_host
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]  # children in the real sandbox

HOSTILE = "test.egress_hostile"
CONNECTIONS = 16  # the hostile plugin's limits.egress_connections
IDLE_S = 4.0  # the host's MCP_HOST_EGRESS_IDLE_S here
HEAD_DEADLINE_S = 10.0  # the proxy's, for a request head (spec)


site = site_fixture()


def hostile(site: Site, **limits: Any) -> Allowed:
    """The hostile plugin, allowed the test site's names at its port (`site.example.test` at its
    loopback address), as a plugin wanting a whole domain would be."""
    allowed = [f"site.example.test:{site.allowed}", f"*.example.test:{site.allowed}"]
    return fixture_plugin("egress_hostile", allowed, ["site.example.test"], **limits)


def hostile_and_another(site: Site) -> list[Allowed]:
    """The hostile plugin and, beside it, httpx allowed the site: the other plugin that must keep
    serving. Enough file descriptors for the flood's 1,000 sockets (and the bridge's)."""
    return [
        hostile(site, egress_connections=CONNECTIONS, open_files=4096),
        fixture_plugin("egress_httpx", [f"site.example.test:{site.allowed}"], ["site.example.test"]),
    ]


# The drip lasts past the head deadline (10 s), the tests' usual call timeout.
host = egress_host_fixture(hostile_and_another, child_max_open_files=4096, egress_idle_s=IDLE_S, call_timeout_s=30.0)


async def call(running: RunningHost, tool: str, /, **arguments: Any) -> dict[str, Any]:
    """A visitor's call of `tool` on a new session: its structured result."""
    async with running.client(await running.new_session()) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return dict(result.structured_content or {})


async def test_raw_sockets_past_the_proxy_reach_neither_the_hosts_services_nor_the_metadata_address(
    host: RunningHost, site: Site, postgres_server: str
) -> None:
    socket_dir = parse_qs(urlsplit(postgres_server).query).get("host", ["/tmp"])[0]
    postgres = await call(host, "unix_connect", path=str(Path(socket_dir) / ".s.PGSQL.5432"))
    http = await call(host, "direct_tcp", host="127.0.0.1", port=host.settings.port)
    site_v6 = await call(host, "direct_tcp", host="::1", port=site.allowed)
    metadata = await call(host, "direct_tcp", host="169.254.169.254", port=80)

    assert postgres["outcome"] in {"ENOENT", "EACCES"}  # the host's folders are not in the sandbox
    # The sandbox's own network namespace: loopback alone, nothing listening but the bridge.
    assert http["outcome"] == "ECONNREFUSED"
    assert site_v6["outcome"] in {"ECONNREFUSED", "EADDRNOTAVAIL", "ENETUNREACH"}
    assert metadata["outcome"] in {"ENETUNREACH", "EHOSTUNREACH"}


async def test_every_forbidden_destination_is_refused_through_connect_and_socks_and_logged_once(
    host: RunningHost, site: Site
) -> None:
    forbidden = {
        "169.254.169.254:80": "169.254.169.254:80 is not in the plugin's egress",
        f"127.0.0.1:{host.settings.port}": f"127.0.0.1:{host.settings.port} is not in the plugin's egress",
        f"[::1]:{site.allowed}": f"[::1]:{site.allowed} is not in the plugin's egress",
        f"site.example.test:{site.other}": f"site.example.test:{site.other} is not in the plugin's egress",
        f"loop.example.test:{site.allowed}": "loop.example.test resolves to 127.0.0.1, a loopback or private address",
    }
    answers = {target: await call(host, "proxy_connect", target=target) for target in forbidden}
    allowed = await call(host, "proxy_connect", target=f"site.example.test:{site.allowed}")
    socks = [
        await call(host, "socks_connect", host="169.254.169.254", port=80, kind="ipv4"),
        await call(host, "socks_connect", host="::1", port=site.allowed, kind="ipv6"),
        await call(host, "socks_connect", host="loop.example.test", port=site.allowed, kind="domain"),
        await call(host, "socks_connect", host="site.example.test", port=site.allowed, kind="domain"),
    ]

    for target, reason in forbidden.items():
        assert answers[target]["status"].startswith("HTTP/1.1 403"), (target, answers[target])
        assert reason in answers[target]["reason"], (target, answers[target])
    assert allowed["status"].startswith("HTTP/1.1 200"), allowed
    assert [answer["reply"] for answer in socks] == [2, 2, 2, 0]
    # Each destination once, although SOCKS asked for three of them again.
    logged = await logged_refusals(host, HOSTILE, list(forbidden))
    assert logged == dict.fromkeys(forbidden, 1)
    catalogue = await catalogue_refusals(host, HOSTILE)
    assert {target: catalogue.get(target, "") for target in forbidden} == {
        target: answers[target]["reason"] for target in forbidden
    }


async def test_a_thousand_connections_at_once_are_capped_while_the_host_and_another_child_keep_serving(
    host: RunningHost, site: Site
) -> None:
    holding = anyio.Event()
    meanwhile: dict[str, Any] = {}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        holding.set()

    async def others_serve() -> None:
        with anyio.fail_after(60):
            await holding.wait()
        meanwhile["healthz"] = (await host.http.get(f"{host.url}/healthz")).status_code
        meanwhile["httpx"] = await call(host, "httpx_get", url=site.url())
        meanwhile["flood_done"] = flooded.is_set()

    flooded = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(others_serve)
        async with host.client(await host.new_session()) as client:
            target = f"site.example.test:{site.allowed}"
            result = await client.call_tool(
                "flood", {"target": target, "count": 1000, "hold_s": 2.0}, progress_callback=on_progress
            )
        flooded.set()

    assert not result.is_error, result
    flood = dict(result.structured_content or {})
    answers: dict[str, int] = flood["answers"]
    # The first CONNECTIONS get their tunnel and hold it; past them the proxy answers "too
    # many" (429), and past twice as many held it closes a connection unanswered.
    assert sum(answers.values()) == 1000
    assert answers["200"] == CONNECTIONS and answers["429"] >= 1, answers
    assert set(answers) <= {"200", "429", "closed"}, answers
    counted = await egress_counts(host, HOSTILE)
    assert counted["connections capped"] >= 1000 - CONNECTIONS, counted
    assert meanwhile == {"healthz": 200, "httpx": {"status": 200, "text": site.says()}, "flood_done": False}
    # Once the flood is over, the hostile child gets connections again.
    after = await call(host, "proxy_connect", target=target)
    assert after["status"].startswith("HTTP/1.1 200"), after


async def test_a_request_head_dripped_a_byte_at_a_time_is_cut_at_the_head_deadline(
    host: RunningHost, site: Site
) -> None:
    dripped = await call(host, "drip", target=f"site.example.test:{site.allowed}", interval_s=0.5, max_s=30.0)

    assert dripped["status"] is not None and dripped["status"].startswith("HTTP/1.1 408"), dripped
    assert HEAD_DEADLINE_S - 1 <= dripped["after_s"] <= HEAD_DEADLINE_S + 5, dripped


async def test_a_silent_tunnel_is_closed_after_the_idle_time(host: RunningHost, site: Site) -> None:
    silent = await call(host, "idle", target=f"site.example.test:{site.allowed}", max_s=IDLE_S + 10)

    assert silent["status"].startswith("HTTP/1.1 200"), silent
    assert silent["closed_after_s"] is not None and IDLE_S - 0.5 <= silent["closed_after_s"] <= IDLE_S + 5, silent


async def test_a_download_past_the_byte_budget_is_slowed_not_cut(site: Site, tmp_path: Path, database_url: str) -> None:
    """1 MiB per minute: of 3 MiB, about the first MiB comes in 6 s (and what the kernel's
    buffers hold), the rest waits for the window; the tunnel stays open."""
    settings = egress_settings(tmp_path, database_url, [hostile(site, egress_mb_per_minute=1)])
    async with running_host(settings) as running:
        three_mib = "/bytes/3145728"
        got = await call(running, "download", host="site.example.test", port=site.allowed, path=three_mib, seconds=6.0)

        counted = await egress_counts(running, HOSTILE)

    assert got["status"].startswith("HTTP/1.1 200"), got
    assert got["ended"] is False, got
    assert 512 * 1024 <= got["bytes"] <= 2 * 1024 * 1024, got
    assert counted["bytes down"] == got["bytes"], counted  # what the host counted is what came
