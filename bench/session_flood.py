"""What one caller's `initialize` flood costs the host, and whether others still get in
(issue 11, defect 2; docs/security.md C2). Not part of `scripts/bench`.

Starts `mcp-host serve` (embedded PostgreSQL, sandbox on, no plugins), opens one public
visitor session and sends `--count` 2025-11-25 `initialize` requests with its token, never
deleting a protocol session (`--concurrency` at a time). Reports the answers by status, the
host process's RSS before and after (and after `--settle` seconds), how many of the flooder's
protocol sessions still answer, and whether a second visitor and the flooder itself can still
initialize. `--uncapped` runs the host with the per-session and per-principal caps as high as
the settings allow (9,999 of a host-wide 10,000), close to the SDK's defaults before the caps.

    .venv/bin/python bench/session_flood.py [--count 10000] [--concurrency 16] [--uncapped]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any

import anyio
import httpx2
import psutil
from servers import bare_host

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "flood", "version": "1"}},
}
UNCAPPED = {
    "MCP_HOST_SESSION_MAX_PROTOCOL_SESSIONS": "9999",
    "MCP_HOST_PRINCIPAL_MAX_PROTOCOL_SESSIONS": "9999",
    "MCP_HOST_PROTOCOL_SESSIONS_MAX": "10000",
    "MCP_HOST_PROTOCOL_SESSION_IDLE_S": "1800",
}


def _rss_mib(pid: int) -> float:
    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


async def _visitor(http: httpx2.AsyncClient, url: str) -> tuple[str, dict[str, str]]:
    response = await http.post(f"{url}/v1/sessions", json={})
    response.raise_for_status()
    body = response.json()
    return body["mcp_url"], {**HEADERS, "Authorization": f"Bearer {body['token']}"}


async def _flood(url: str, count: int, concurrency: int, pid: int, settle_s: float) -> dict[str, Any]:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:
        mcp_url, headers = await _visitor(http, url)
        statuses: Counter[int] = Counter()
        opened: list[str] = []
        remaining = iter(range(count))
        rss_before = _rss_mib(pid)
        started = time.perf_counter()

        async def worker() -> None:
            for _ in remaining:
                response = await http.post(mcp_url, json=INITIALIZE, headers=headers)
                statuses[response.status_code] += 1
                if "mcp-session-id" in response.headers:
                    opened.append(response.headers["mcp-session-id"])

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        elapsed = time.perf_counter() - started
        rss_after = _rss_mib(pid)
        other_url, other_headers = await _visitor(http, url)
        other = await http.post(other_url, json=INITIALIZE, headers=other_headers)
        again = await http.post(mcp_url, json=INITIALIZE, headers=headers)
        live = 0
        for session_id in opened[-64:]:  # the newest: the ones a cap would keep
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            answer = await http.post(mcp_url, json=ping, headers={**headers, "Mcp-Session-Id": session_id})
            live += answer.status_code == 200
        await anyio.sleep(settle_s)
        return {
            "initialize_sent": count,
            "answers": dict(sorted(statuses.items())),
            "seconds": round(elapsed, 1),
            "host_rss_mib": {"before": rss_before, "after": rss_after, f"after_{settle_s:g}s": _rss_mib(pid)},
            "rss_growth_kib_per_initialize": round((rss_after - rss_before) * 1024 / count, 2),
            "newest_64_still_open": live,
            "another_visitor_initialize": other.status_code,
            "flooder_initialize_again": again.status_code,
        }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    async with bare_host("mcpb-flood-", UNCAPPED if args.uncapped else None) as host:
        result = await _flood(host.url, args.count, args.concurrency, host.proc.popen.pid, args.settle)
    result["caps"] = "uncapped (9999/9999 of 10000, idle 1800 s)" if args.uncapped else "defaults"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait before the last RSS reading")
    parser.add_argument("--uncapped", action="store_true")
    args = parser.parse_args()
    result = anyio.run(_run, args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
