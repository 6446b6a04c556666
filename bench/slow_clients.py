"""What connections that dribble their request headers cost the host, and whether a normal
client still gets through meanwhile (issue 11, defect 6; docs/security.md C3). Not part of
`scripts/bench`.

Starts `mcp-host serve` (embedded PostgreSQL, sandbox on, no plugins, default settings unless
`--env NAME=VALUE`), times a normal client for `--warmup` seconds (each request on a fresh
connection from `--normal-from`, alternately `GET /healthz` and `POST /v1/sessions`), then
opens `--slow` connections from `--slow-from` that each send half a request head and then one
more byte every `--interval` seconds, never finishing it. While any of them is open (at most
`--duration` seconds) the normal client goes on. Reports how the host ended the slow
connections (by the status it answered first: 408 for the head deadline, 503 for the cap per
client address, none) and when (seconds after their start), the host's open file descriptors
before, at the peak and after, and the normal client's statuses and latency (p50, p99) before
and during.

The host listens on 127.0.0.1, which uvicorn trusts as a proxy and the host does not cap per
address; the clients come from other loopback addresses (Linux routes all of 127.0.0.0/8 to
`lo`), as remote clients would. `--slow-from 127.0.0.1` shows a flood from a proxy's address.

    .venv/bin/python bench/slow_clients.py [--slow 400] [--interval 1] [--duration 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import psutil
from servers import bare_host


def _percentiles(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50_ms": None, "p99_ms": None}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2), "p99_ms": round(p99 * 1000, 2)}


class Normal:
    """A well-behaved client: one request after another, each on a connection of its own."""

    def __init__(self, url: str, source: str) -> None:
        self.url = url
        self.source = source
        self.samples: dict[str, list[float]] = {"before": [], "during": []}
        self.statuses: dict[str, Counter[str]] = {"before": Counter(), "during": Counter()}
        self.phase = "before"

    async def run(self, stop: anyio.Event) -> None:
        turn = 0
        while not stop.is_set():
            turn += 1
            started = time.perf_counter()
            try:
                transport = httpx2.AsyncHTTPTransport(local_address=self.source)
                async with httpx2.AsyncClient(timeout=30, transport=transport) as http:
                    if turn % 2:
                        status = (await http.get(f"{self.url}/healthz")).status_code
                    else:
                        status = (await http.post(f"{self.url}/v1/sessions", json={})).status_code
                outcome = str(status)
            except httpx2.TransportError as exc:
                outcome = type(exc).__name__
            self.samples[self.phase].append(time.perf_counter() - started)
            self.statuses[self.phase][outcome] += 1


async def _slow(args: argparse.Namespace, port: int, results: list[dict[str, Any]]) -> None:
    started = time.perf_counter()
    record: dict[str, Any] = {"closed_after_s": None, "answer": None}
    results.append(record)
    try:
        stream = await anyio.connect_tcp("127.0.0.1", port, local_host=args.slow_from)
    except OSError as exc:
        record["connect_error"] = type(exc).__name__
        return
    answer = b""

    async def read() -> None:
        nonlocal answer
        while True:
            try:
                answer += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                record["closed_after_s"] = round(time.perf_counter() - started, 2)
                record["answer"] = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1 ") else None
                tg.cancel_scope.cancel()
                return

    async def dribble() -> None:
        try:
            await stream.send(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
            while True:
                await anyio.sleep(args.interval)
                await stream.send(b"a")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await anyio.sleep_forever()  # the reader records the close

    with anyio.move_on_after(args.duration):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(dribble)
    await stream.aclose()


def _closes(slow: list[dict[str, Any]]) -> dict[str, Any]:
    """The slow connections the host closed, by the status it answered first: how many, and
    when (seconds after their start)."""
    by_answer: dict[str, list[float]] = {}
    for record in slow:
        if record["closed_after_s"] is not None:
            by_answer.setdefault(record["answer"] or "none", []).append(record["closed_after_s"])
    return {
        answer: {"count": len(times), "min_s": min(times), "median_s": statistics.median(times), "max_s": max(times)}
        for answer, times in sorted(by_answer.items())
    }


async def _measure(args: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    host = psutil.Process(pid)
    port = urlsplit(url).port
    assert port is not None
    normal = Normal(url, args.normal_from)
    stop = anyio.Event()
    fds = {"before": host.num_fds(), "peak": 0}
    slow: list[dict[str, Any]] = []

    async def sample_fds() -> None:
        while not stop.is_set():
            fds["peak"] = max(fds["peak"], host.num_fds())
            await anyio.sleep(0.25)

    async with anyio.create_task_group() as tg:
        tg.start_soon(normal.run, stop)
        await anyio.sleep(args.warmup)
        normal.phase = "during"
        tg.start_soon(sample_fds)
        slow_started = time.perf_counter()
        async with anyio.create_task_group() as slow_group:
            for _ in range(args.slow):
                slow_group.start_soon(_slow, args, port, slow)
        slow_s = time.perf_counter() - slow_started
        stop.set()
    await anyio.sleep(1)
    fds["after"] = host.num_fds()
    closed = sum(r["closed_after_s"] is not None for r in slow)
    return {
        "slow_connections": args.slow,
        "slow_from": args.slow_from,
        "normal_from": args.normal_from,
        "closed_by_host": closed,
        "closed_by_answer": _closes(slow),
        "still_open_after_s": None if closed == args.slow else args.duration,
        "connect_errors": sum("connect_error" in r for r in slow),
        "slow_phase_s": round(slow_s, 1),
        "host_fds": fds,
        "normal_before": {
            "requests": len(normal.samples["before"]),
            "statuses": dict(normal.statuses["before"]),
            **_percentiles(normal.samples["before"]),
        },
        "normal_during": {
            "requests": len(normal.samples["during"]),
            "statuses": dict(normal.statuses["during"]),
            **_percentiles(normal.samples["during"]),
        },
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    settings = dict(pair.split("=", 1) for pair in args.env)
    async with bare_host("mcpb-slow-", settings) as host:
        result = await _measure(args, host.url, host.proc.popen.pid)
    result["env"] = args.env
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=400, help="slow connections")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a slow connection's bytes")
    parser.add_argument("--duration", type=float, default=60.0, help="longest a slow connection is kept")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of normal traffic before")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a host setting")
    parser.add_argument("--slow-from", default="127.0.0.2", help="the slow connections' address (127.0.0.2)")
    parser.add_argument("--normal-from", default="127.0.0.3", help="the normal client's address (127.0.0.3)")
    args = parser.parse_args()
    result = anyio.run(_run, args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
