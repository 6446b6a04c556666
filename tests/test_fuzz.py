"""The fuzz suite: about a thousand hostile messages, seeded, against every edge of a real host.

Each class of docs/security.md §A (invalid JSON, wrong types, huge numbers, deep nesting, batches,
invalid UTF-8, lone surrogates in every string position, duplicate keys, JSON-RPC shape,
header games, forged `_meta`) goes to the visitor endpoint, the one visitor URL `/mcp` and the
owner door in both eras, to the REST routes, the OAuth routes and the front desk, and to a
plugin's host-op socket; mutated HTTP proxy heads and SOCKS5 greetings go to a sandboxed
child's egress gate. The host passes when no answer is a 5xx (the proxy's 502 for an
unreachable destination aside), none is missing past its timeout, every JSON answer parses and
every egress answer is one of the proxy's in one line, nothing is logged with a traceback, its
memory stays bounded, and after each class it still serves a normal session — and, after each
egress class, the same child still fetches its allowed page through the same gate.
`scripts/fuzz` runs the same with ten thousand cases per endpoint against `mcp-host serve`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.egress.loopback import echo_server
from tests.egress_e2e.support import copy_with_egress, fixture_plugin, running_site, write_hosts_file
from tests.fuzzing import Fuzzer, Target, egress_target, serves_a_normal_session, still_reaches
from tests.hosting import host_settings, running_host

pytestmark = pytest.mark.anyio

SEED = 20261201
PER_ENDPOINT = {
    "visitor-legacy": 180,
    "visitor-modern": 180,
    "owner-legacy": 150,
    "owner-modern": 150,
    "rest": 150,
    "oneurl-legacy": 60,
    "oneurl-modern": 60,
    "oauth": 150,
    "backchannel": 190,
    "egress": 140,
}
EGRESS = "test.egress_httpx"
"""The sandboxed plugin whose child's gate is fuzzed: it fetches a url with httpx."""


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.timeout(600)
async def test_a_thousand_hostile_messages_leave_the_host_serving(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with running_site() as site, echo_server() as echo:
        # The egress plugin may reach the site (what it fetches) and the echo server (where the
        # egress cases ask to go), both on 127.0.0.1 under a name of the host's hosts file.
        allowed = [f"site.example.test:{site.allowed}", f"site.example.test:{echo.port}"]
        (tmp_path / "plugins").mkdir()
        plugin = copy_with_egress(fixture_plugin("egress_httpx", allowed, ["site.example.test"]), tmp_path / "plugins")
        # The health check after each class opens a public session, as the `rest` cases do: more
        # than an address's pace of public sessions (60 a minute) in all, not what is fuzzed here.
        settings = host_settings(
            tmp_path,
            database_url,
            ["echo", "notes", str(plugin)],
            call_timeout_s=5.0,
            principal_public_sessions_per_minute=1000,
            egress_hosts_file=write_hosts_file(tmp_path),
        )
        async with running_host(settings) as running:
            egress = await egress_target(
                running.url,
                EGRESS,
                lambda: running.egress_gates(EGRESS),
                port=echo.port,
                tool="httpx_get",
                fetch=site.url(),
                says=site.says(),
            )
            socket = running.socket_for("notes")
            target = Target(running.url, running.owner_token(), await running.new_session(), socket, egress)
            assert await still_reaches(running.url, egress) is None
            rss_before = _rss_bytes()
            fuzzer = Fuzzer(target, timeout_s=15.0)
            try:
                for endpoint, n in PER_ENDPOINT.items():
                    if endpoint == "egress":
                        await fuzzer.run(endpoint, n, SEED, lambda: still_reaches(running.url, egress))
                    else:
                        await fuzzer.run(endpoint, n, SEED, lambda: serves_a_normal_session(running.url))
            finally:
                await fuzzer.aclose()
            grown = _rss_bytes() - rss_before
    report = fuzzer.report
    summary = report.summary()
    assert summary["sent"] == sum(PER_ENDPOINT.values()), summary
    assert report.server_errors == []
    assert report.hangs == []
    assert report.malformed == []
    assert report.health_failures == []
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert tracebacks == []
    assert grown < 200 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB"
