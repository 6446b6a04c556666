"""How long a client takes to walk in: from its first request to `/mcp` to its first tool result,
through the front desk, signing in as the MCP Python SDK's own `OAuthClientProvider` does.

Each run is a new client (no registration, no token): its first request gets 401 and the
resource metadata's URL; the SDK discovers the authorization server, registers itself (RFC
7591), sends the "browser" (`tests.desk.walk_in.DeskBrowser`, which fetches the desk's page and
submits its form as a public visitor) through `/authorize` and the desk, redeems the code with
PKCE, then connects (2026-07-28: `server/discover`; 2025-11-25: `initialize`) and calls `echo`.
The clock stops at that call's result. Then the same client's next call, for comparison, and
last a warm call's median through OAuth at `/mcp` against a session's own endpoint.
Prints the median of `--runs` (5) per era; an embedded PostgreSQL and a host of its own, on
loopback (a browser's and a person's time at the page are not in it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: `tests.*`

from mcp_host.store.embedded_postgres import embedded_postgres  # noqa: E402
from tests.desk.walk_in import DeskBrowser, walked_in  # noqa: E402
from tests.hosting import RunningHost, host_settings, running_host  # noqa: E402

ERAS = {"2026-07-28": "2026-07-28", "2025-11-25": "legacy"}


async def _walk_in(door: str, mode: str) -> tuple[float, float]:
    """Seconds to the first tool result, and for the next call of the same client."""
    started = time.perf_counter()
    async with walked_in(door, DeskBrowser({"name": "Bench"}), mode=mode) as (client, _, _tokens):
        first = await client.call_tool("echo", {"text": "hi"})
        walked = time.perf_counter() - started
        assert first.is_error is not True, first
        again = time.perf_counter()
        await client.call_tool("echo", {"text": "again"})
        return walked, time.perf_counter() - again


async def _warm_calls(running: RunningHost, calls: int) -> dict[str, float]:
    """Median ms of a warm `echo` call, 2026-07-28: an OAuth client at `/mcp` against a session's
    own token at its own endpoint (cached 1 s), interleaved."""
    times: dict[str, list[float]] = {"oauth_at_one_url": [], "session_token_at_session_url": []}
    session = await running.new_session()
    async with (
        walked_in(f"{running.url}/mcp", DeskBrowser({"name": "Warm"}), mode="2026-07-28") as (oauth, _, _t),
        running.client(session, mode="2026-07-28") as own,
    ):
        for _ in range(calls):
            for label, client in (("oauth_at_one_url", oauth), ("session_token_at_session_url", own)):
                started = time.perf_counter()
                await client.call_tool("echo", {"text": "warm"})
                times[label].append(time.perf_counter() - started)
    return {label: round(statistics.median(t) * 1000, 1) for label, t in times.items()}


async def _run(runs: int, tmp: Path) -> dict[str, Any]:
    async with embedded_postgres(tmp / "pg") as dsn:
        settings = host_settings(tmp, dsn, ["echo"], access_failures_free=100)
        async with running_host(settings) as running:
            report: dict[str, Any] = {"runs": runs}
            for era, mode in ERAS.items():
                await _walk_in(f"{running.url}/mcp", mode)  # the echo child starts; not counted
                times = [await _walk_in(f"{running.url}/mcp", mode) for _ in range(runs)]
                report[era] = {
                    "first_request_to_first_result_ms": [round(t * 1000, 1) for t, _ in times],
                    "median_ms": round(statistics.median(t for t, _ in times) * 1000, 1),
                    "next_call_median_ms": round(statistics.median(n for _, n in times) * 1000, 1),
                }
            report["warm_call_median_ms"] = await _warm_calls(running, 50)
            return report


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-host-bench-walk-in-") as tmp:
        report = await _run(args.runs, Path(tmp))
    print(json.dumps(report, indent=2))  # noqa: T201 - a bench prints its report


if __name__ == "__main__":
    anyio.run(main)
