"""An MCP App read through the host against direct (issue 30): `resources/read` of the ext-apps
`system-monitor` example's `ui://` app (about 430 KB of HTML; scripts/install-apps installs it).

Legs, each a warm SDK client making N reads in turn (median and p90, ms):
- direct-stdio: the Python SDK client → the example over stdio (`node dist/index.js --stdio`);
- direct-http: the same, to the example serving streamable HTTP itself (`node dist/index.js`, PORT);
- host-legacy, host-modern: through `mcp-host serve` (embedded PostgreSQL, sandbox on, the example
  as its builtin folder's plugin), a visitor session, 2025-11-25 and 2026-07-28.
Ratios: each host leg's median over direct-http's (HTTP both sides) and over direct-stdio's.
Every read is checked to be the app, byte for byte what direct-stdio read first.

`.venv/bin/python bench/apps.py [-n 200] [--quick]` (not part of `scripts/bench`); prints the
report and writes bench-results/apps.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
from legs import http_client
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from procs import Processes, free_port, wait_http
from servers import start_host

HERE = Path(__file__).resolve().parent
APPS = HERE.parent / ".cache" / "ecosystem" / "apps"
EXAMPLE = APPS / "system-monitor"
SERVER = EXAMPLE / "node_modules" / "@modelcontextprotocol" / "server-system-monitor" / "dist" / "index.js"
APP = "ui://system-monitor/mcp-app.html"
RESULTS = HERE.parent / "bench-results" / "apps.json"
Read = Callable[[], Awaitable[str]]


def reader(client: Client) -> Read:
    async def read() -> str:
        result = await client.read_resource(APP)
        (content,) = result.contents
        return str(getattr(content, "text", ""))

    return read


async def timed(read: Read, n: int, expected: str) -> dict[str, float]:
    """`n` reads after 10 to warm up; each checked against `expected`."""
    for _ in range(10):
        await read()
    samples: list[float] = []
    for _ in range(n):
        started = time.perf_counter()
        text = await read()
        samples.append(time.perf_counter() - started)
        if text != expected:
            raise RuntimeError("a read did not answer the app as the example serves it")
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1e3, 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e3, 3),
        "n": n,
    }


async def session_of(url: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(f"{url}/v1/sessions", json={})
        response.raise_for_status()
        return dict(response.json())


async def run(n: int, procs: Processes, workdir: Path) -> dict[str, Any]:
    legs: dict[str, dict[str, float]] = {}
    async with AsyncExitStack() as stack:
        server = StdioServerParameters(command="node", args=[str(SERVER), "--stdio"], cwd=str(EXAMPLE))
        direct = await stack.enter_async_context(Client(stdio_client(server), cache=None))
        expected = await reader(direct)()
        legs["direct-stdio"] = await timed(reader(direct), n, expected)

        port = free_port()
        env = {**os.environ, "PORT": str(port)}
        proc = procs.spawn("example-http", ["node", str(SERVER)], env=env, cwd=EXAMPLE)
        await wait_http(proc, f"http://127.0.0.1:{port}/mcp")
        over_http = await http_client(stack, f"http://127.0.0.1:{port}/mcp", "auto")
        legs["direct-http"] = await timed(reader(over_http), n, expected)

        host = await start_host(procs, "host", plugins=APPS, data_dir=workdir / "d")
        for leg, mode in (("host-legacy", "legacy"), ("host-modern", "auto")):
            session = await session_of(host.url)
            client = await http_client(stack, session["mcp_url"], mode, session["token"])
            legs[leg] = await timed(reader(client), n, expected)
    return {"app_bytes": len(expected.encode()), "legs": legs, "ratios": ratios(legs)}


def ratios(legs: dict[str, dict[str, float]]) -> dict[str, float]:
    found: dict[str, float] = {}
    for leg in ("host-legacy", "host-modern"):
        for base in ("direct-http", "direct-stdio"):
            found[f"{leg}/{base}"] = round(legs[leg]["median_ms"] / legs[base]["median_ms"], 2)
    return found


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=None, help="reads per leg (default 200, quick 50)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not SERVER.exists() or shutil.which("node") is None:
        sys.exit("bench/apps.py: run scripts/install-apps first (needs Node.js 20+)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-apps-", dir="/tmp"))
    procs = Processes(workdir)
    try:
        report = await run(args.n or (50 if args.quick else 200), procs, workdir)
    finally:
        procs.close()
    report["loadavg"] = [round(x, 2) for x in os.getloadavg()]  # a shared machine: medians are noisy
    print(json.dumps(report, indent=2))  # noqa: T201 - a bench prints its report
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    anyio.run(main)
