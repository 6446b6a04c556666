"""Throughput against the bare pass-through peer (issue 31): the host, `mcp-proxy` and the SDK
serving the echo child directly, in the 2025-11-25 era (the only one mcp-proxy speaks: it is
built on the SDK v1).

Two shapes, each 16 `tools/call echo` in flight: one session (16 on one client), and 8 sessions
(one client each, 2 in flight per session). The three servers take turns in blocks of `BLOCK`
calls, the order rotating each round, so machine noise lands on all three; calls/s over all
rounds. Target (issue 31): the host ahead of mcp-proxy in both shapes (host/mcp-proxy >= 1).
Run by bench/throughput.py as its leg p.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from legs import Op, call_echo, http_client
from load import Run, in_flight
from procs import Processes
from servers import RunningHost, start_mcp_proxy

__all__ = ["peer_targets", "peer_throughput", "print_peer"]

ERA = "legacy"
SHAPES = {"1 session": (1, 16), "8 sessions": (8, 2)}
"""Each shape's sessions and calls in flight per session: 16 in flight in both."""
BLOCK = 320
NAMES = ("host", "mcp-proxy", "direct")

Connect = Callable[[AsyncExitStack], Awaitable[Op]]
"""Opens one session (one client) on a server under test; its echo call."""


def _connectors(host: RunningHost, mcp_proxy_url: str, direct_url: str) -> dict[str, Connect]:
    async def host_session(stack: AsyncExitStack) -> Op:
        visitor = await host.open_session()
        return call_echo(await http_client(stack, visitor.mcp_url, ERA, visitor.token))

    def plain(url: str) -> Connect:
        async def connect(stack: AsyncExitStack) -> Op:
            return call_echo(await http_client(stack, url, ERA))

        return connect

    return {"host": host_session, "mcp-proxy": plain(mcp_proxy_url), "direct": plain(direct_url)}


def _ratio(top: float, bottom: float) -> float | None:
    return round(top / bottom, 3) if bottom else None


async def _measure(
    stack: AsyncExitStack, connect: dict[str, Connect], sessions: int, per_session: int, n: int, rounds: int
) -> dict[str, Run]:
    """Open `sessions` clients per server on `stack`, warm them, then the rounds of turns."""
    runs = {name: Run() for name in NAMES}
    slots: dict[str, list[Op]] = {}
    for name in NAMES:
        ops = [await connect[name](stack) for _ in range(sessions)]
        for op in ops:  # warm: each client's first call fetches the tool's output schema
            await op()
        slots[name] = [op for op in ops for _ in range(per_session)]
        await in_flight(slots[name], len(slots[name]) * 5)
    for r in range(rounds):
        order = NAMES[r % len(NAMES) :] + NAMES[: r % len(NAMES)]
        for done in range(0, n, BLOCK):
            for name in order:
                runs[name].merge(await in_flight(slots[name], min(BLOCK, n - done)))
    return runs


async def _close(stack: AsyncExitStack) -> str | None:
    """Close the shape's clients; what went wrong doing so, if anything. (Seen once at load ~9:
    a client's background reader raising httpx's ReadError on the way out, after every call
    had been counted; the figures stand, the note says so.)"""
    try:
        await stack.aclose()
    except Exception as exc:  # reported with the figures, not fatal to them
        return f"closing a client: {type(exc).__name__}"
    return None


async def _shape(connect: dict[str, Connect], sessions: int, per_session: int, n: int, rounds: int) -> dict[str, Any]:
    """One shape: `sessions` clients per server, `per_session` calls in flight on each."""
    stack = AsyncExitStack()
    try:
        runs = await _measure(stack, connect, sessions, per_session, n, rounds)
    finally:
        closing = await _close(stack)
    summary = {name: run.summary() for name, run in runs.items()}
    host, peer, direct = (summary[name]["calls_per_s"] for name in NAMES)
    return {
        "sessions": sessions,
        "in_flight_per_session": per_session,
        **summary,
        "host_over_mcp_proxy": _ratio(host, peer),
        "mcp_proxy_over_direct": _ratio(peer, direct),
        "host_over_direct": _ratio(host, direct),
        "closing_error": closing,
    }


async def peer_throughput(
    procs: Processes, host: RunningHost, direct_url: str, mcp_proxy: Path, echo_server: Path, n: int, rounds: int
) -> dict[str, Any]:
    """Leg p: start mcp-proxy in front of the echo child; each shape, `n` calls per server per
    round for `rounds` rounds."""
    url = await start_mcp_proxy(procs, mcp_proxy, echo_server, "throughput")
    connect = _connectors(host, url, direct_url)
    out: dict[str, Any] = {"era": "2025-11-25"}
    for shape, (sessions, per_session) in SHAPES.items():
        print(f"[bench] throughput: host, mcp-proxy and direct, {shape} x {per_session} in flight, 2025-11-25")
        out[shape] = await _shape(connect, sessions, per_session, n, rounds)
    return out


def peer_targets(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Issue 31: the host ahead of mcp-proxy in calls/s, in each shape (SKIP when not run)."""
    out = []
    for shape, (_sessions, per_session) in SHAPES.items():
        name = f"host ahead of mcp-proxy, calls/s, {shape} x {per_session} in flight (2025-11-25)"
        leg = result.get(shape)
        if leg is None:
            out.append(("SKIP", name, result.get("skipped", "leg did not run")))
            continue
        ratio = leg["host_over_mcp_proxy"]
        ok = ratio is not None and ratio >= 1.0 and leg["host"]["errors"] == 0
        value = f"host/mcp-proxy {ratio}; mcp-proxy/direct {leg['mcp_proxy_over_direct']}"
        out.append(("PASS" if ok else "MISS", name, value))
    return out


def print_peer(result: dict[str, Any]) -> None:
    """Leg p's rows in throughput.py's table."""
    for shape, (sessions, per_session) in SHAPES.items():
        leg = result.get(shape)
        if leg is None:
            continue
        for name in NAMES:
            s = leg[name]
            title = f"p legacy {name} ({sessions} x {per_session})"
            latency = f"{s['median_ms']:>8.2f} {s['p99_ms']:>8.2f}" if s["median_ms"] is not None else " " * 17
            print(f"  {title:<44} {s['calls']:>6} {s['errors']:>4} {s['calls_per_s']:>8.1f} {latency}")
        if leg["closing_error"]:
            print(f"  p {shape}: {leg['closing_error']} (after the figures above were counted)")
    if "skipped" in result:
        print(f"  p skipped: {result['skipped']}")
