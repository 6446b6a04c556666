"""Real HTTP clients inside the sandbox reach the hosts their manifest names, and only those,
through the host's egress proxy: Node's global `fetch` (routed by the host's preload) and
httpx's AsyncClient as it comes (proxy from the environment). A visitor calls their tools; the
owner sees each refused destination in the plugin's log, once.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.egress_e2e.support import (
    Allowed,
    Site,
    catalogue_refusals,
    egress_host_fixture,
    fixture_plugin,
    logged_refusals,
    site_fixture,
)
from tests.hosting import RunningHost
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]  # children in the real sandbox

NODE, HTTPX = "test.egress_node", "test.egress_httpx"
METADATA = "http://169.254.169.254/latest/meta-data/"


site = site_fixture()


def clients_allowed(site: Site) -> list[Allowed]:
    """Node allowed the site by name at one port; httpx allowed `*.example.test` at that port,
    two of those names at their loopback address."""
    return [
        fixture_plugin("egress_node", [f"site.example.test:{site.allowed}"], ["site.example.test"]),
        fixture_plugin("egress_httpx", [f"*.example.test:{site.allowed}"], ["site.example.test", "a.example.test"]),
    ]


host = egress_host_fixture(clients_allowed)


async def get_each(host: RunningHost, tool: str, urls: list[str]) -> list[dict[str, Any]]:
    """A visitor's call of `tool` (a plugin's GET) on each of `urls`, in order: what the
    plugin's client saw."""
    answers = []
    async with host.client(await host.new_session()) as client:
        for url in urls:
            result = await client.call_tool(tool, {"url": url})
            assert not result.is_error, result
            answers.append(dict(result.structured_content or {}))
    return answers


def refusal_seen(answer: dict[str, Any]) -> str:
    """What a client saw of the proxy's refusal. httpx sends a plain-http request to the proxy
    (absolute-form) and gets its 403 as the response; Node's fetch, which the host's preload
    sends through a CONNECT tunnel every time, fails with an error naming the 403."""
    if "status" in answer:
        assert answer["status"] == 403, answer
        return str(answer["text"])
    assert answer["detail"].startswith("egress proxy refused ") and "HTTP/1.1 403" in answer["detail"], answer
    return str(answer["detail"])


@pytest.mark.parametrize(("plugin", "tool"), [(NODE, "node_get"), (HTTPX, "httpx_get")])
async def test_a_client_reaches_the_named_site_and_is_refused_another_port_and_the_metadata_address(
    host: RunningHost, site: Site, plugin: str, tool: str
) -> None:
    other = site.url(port=site.other)
    allowed, other_port, metadata = await get_each(host, tool, [site.url(), other, METADATA])

    assert allowed == {"status": 200, "text": site.says()}
    assert f"site.example.test:{site.other}" in refusal_seen(other_port)
    assert "169.254.169.254:80" in refusal_seen(metadata)
    refused = [f"site.example.test:{site.other}", "169.254.169.254:80"]
    assert await logged_refusals(host, plugin, refused) == dict.fromkeys(refused, 1)
    catalogue = await catalogue_refusals(host, plugin)
    assert catalogue[refused[0]] == f"site.example.test:{site.other} is not in the plugin's egress"
    assert catalogue[refused[1]] == "169.254.169.254:80 is not in the plugin's egress"


async def test_a_wildcard_reaches_a_subdomain_not_a_lookalike_and_not_a_name_resolving_to_loopback_unnamed(
    host: RunningHost, site: Site
) -> None:
    """`*.example.test:P` reaches `a.example.test` (named in allow_private, its address being
    loopback here); not `example.test.evil`, which ends with the domain's text but is not under
    it; and not `loop.example.test`, under it but resolving to loopback without being named."""
    urls = [site.url("a.example.test"), site.url("example.test.evil"), site.url("loop.example.test")]
    a, evil, loop = await get_each(host, "httpx_get", urls)

    assert a == {"status": 200, "text": site.says("a.example.test")}
    assert f"example.test.evil:{site.allowed} is not in the plugin's egress" in refusal_seen(evil)
    assert "loop.example.test resolves to 127.0.0.1" in refusal_seen(loop)
    refused = [f"example.test.evil:{site.allowed}", f"loop.example.test:{site.allowed}"]
    assert await logged_refusals(host, HTTPX, refused) == dict.fromkeys(refused, 1)
    catalogue = await catalogue_refusals(host, HTTPX)
    # What the owner reads is what the plugin's client was told.
    assert [catalogue[destination] for destination in refused] == [
        refusal_seen(evil).strip(),
        refusal_seen(loop).strip(),
    ]


async def test_a_destination_refused_twice_is_logged_once(host: RunningHost, site: Site) -> None:
    other = site.url("a.example.test", port=site.other)
    first, second = await get_each(host, "httpx_get", [other, other])

    assert refusal_seen(first) == refusal_seen(second)
    destination = f"a.example.test:{site.other}"
    assert await logged_refusals(host, HTTPX, [destination]) == {destination: 1}
