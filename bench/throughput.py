"""Throughput under concurrency (issue 18): the host against the SDK serving the same child.

Legs, all `tools/call echo` on the bench's echo child, the SDK client (`mcp.Client`, `cache=None`):
  t  16 calls in flight on ONE session, each era: through the host (visitor endpoint, sandboxed
     child over stdio) and to the echo child served directly by the SDK over streamable HTTP
     (uvicorn, own process). In the 2025-11-25 era the 16 share one protocol session. The two
     take turns in blocks of 320 calls, `-n` calls each per round for `--rounds` rounds (order
     alternating), so machine noise lands on both; calls/s over all rounds, and host/direct
     (target >= 0.9). Also the servers' CPU ms per call (user + system, read around each block):
     the host with its sandboxed child, its PostgreSQL apart, and the SDK's echo server — a
     figure the machine's other load disturbs far less than calls/s.
  s  64 visitor sessions x 4 in flight through the host, each era: one client per session,
     `--per-session` calls each; errors (target 0), p50/p99, calls/s.
  p  the bare pass-through peer `mcp-proxy` (PyPI, own venv under .bench/, installed on first
     use; `--no-peer` skips it) against the host and the direct SDK server, 2025-11-25: 16 in
     flight on 1 session and on 8 sessions (`peer_throughput.py`; target: the host ahead).
Results go to bench-results/throughput.json. Run by `scripts/bench`; `--quick` for fewer calls.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
from fixtures import ensure_mcp_proxy, make_plugins
from legs import ERAS, Op, call_echo, http_client, timed
from load import Run, cpu_s, in_flight, postgres_of, run_leg, said_where, tree
from peer_throughput import peer_targets, peer_throughput, print_peer
from procs import Processes
from servers import REPO, RunningHost, start_echo_http, start_host

RESULTS = REPO / "bench-results" / "throughput.json"
MCP_PROXY_VENV = REPO / ".bench" / "mcp-proxy-venv"
IN_FLIGHT = 16
BLOCK = 20 * IN_FLIGHT
SESSIONS, PER_SESSION_IN_FLIGHT = 64, 4
MIN_RATIO = 0.9


@dataclass(frozen=True)
class Servers:
    """The processes serving each leg, whose CPU time is read around each block."""

    host: RunningHost
    data_dir: Path
    echo_url: str
    echo_pid: int

    def processes(self) -> dict[str, list[psutil.Process]]:
        """host: the host and its sandboxed child; postgres: its embedded PostgreSQL;
        direct: the SDK's echo server."""
        return {
            "host": tree(self.host.proc.popen.pid),
            "postgres": postgres_of(self.data_dir),
            "direct": [psutil.Process(self.echo_pid)],
        }


def _cpu_ms_per_call(cpu: dict[str, float], runs: dict[str, Run]) -> dict[str, float]:
    host_calls = len(runs["host"].samples) + sum(runs["host"].errors.values())
    direct_calls = len(runs["direct"].samples) + sum(runs["direct"].errors.values())
    out = {
        "host": cpu["host"] * 1000 / host_calls,
        "host_postgres": cpu["postgres"] * 1000 / host_calls,
        "direct": cpu["direct"] * 1000 / direct_calls,
    }
    return {k: round(v, 3) for k, v in out.items()}


async def _one_session(servers: Servers, era: str, args: argparse.Namespace) -> dict[str, Any]:
    """Leg t of one era: 16 in flight on one client, host and direct taking turns; the calls/s
    and the servers' CPU time per call (which the machine's other load disturbs far less)."""
    runs = {"host": Run(), "direct": Run()}
    cpu = {"host": 0.0, "postgres": 0.0, "direct": 0.0}
    per_round: list[dict[str, float]] = []
    host = servers.host
    async with AsyncExitStack() as stack:
        visitor = await host.open_session()
        ops: dict[str, Op] = {
            "host": call_echo(await http_client(stack, visitor.mcp_url, era, visitor.token)),
            "direct": call_echo(await http_client(stack, servers.echo_url, era)),
        }
        for op in ops.values():
            await timed(op, 20)
            await in_flight([op] * IN_FLIGHT, IN_FLIGHT * 5)
        watched = servers.processes()
        groups = {"host": ("host", "postgres"), "direct": ("direct",)}
        for r in range(args.rounds):
            order = ("host", "direct") if r % 2 == 0 else ("direct", "host")
            this_round = {"host": Run(), "direct": Run()}
            # Blocks of BLOCK calls in turn, so a burst of load from elsewhere on this shared
            # machine lands on both legs; each block ramps down as its last calls finish, the
            # same for both.
            for done in range(0, args.n, BLOCK):
                for name in order:
                    before = {g: cpu_s(watched[g]) for g in groups[name]}
                    this_round[name].merge(await in_flight([ops[name]] * IN_FLIGHT, min(BLOCK, args.n - done)))
                    for g in groups[name]:
                        cpu[g] += cpu_s(watched[g]) - before[g]
            rates = {name: round(run.calls_per_s, 1) for name, run in this_round.items()}
            per_round.append({**rates, "ratio": round(rates["host"] / rates["direct"], 3)})
            for name, run in this_round.items():
                runs[name].merge(run)
    host_s, direct_s = runs["host"].summary(), runs["direct"].summary()
    ratio = host_s["calls_per_s"] / direct_s["calls_per_s"] if direct_s["calls_per_s"] else None
    cpu_ms = _cpu_ms_per_call(cpu, runs)
    return {
        "host": host_s,
        "direct": direct_s,
        "host_over_direct": round(ratio, 3) if ratio else None,
        "cpu_ms_per_call": cpu_ms,
        "cpu_host_over_direct": round(cpu_ms["host"] / cpu_ms["direct"], 3) if cpu_ms["direct"] else None,
        "rounds_calls_per_s": per_round,
    }


async def _many_sessions(host: RunningHost, era: str, per_session: int) -> dict[str, Any]:
    """Leg s of one era: 64 sessions, one client each, 4 calls in flight per session."""
    async with AsyncExitStack() as stack:
        clients = []
        for _ in range(SESSIONS):
            visitor = await host.open_session()
            clients.append(await http_client(stack, visitor.mcp_url, era, visitor.token))
        for client in clients:  # warm: each client's first call fetches the tool's output schema
            await call_echo(client)()
        runs: list[Run] = []

        async def session(op: Op) -> None:
            runs.append(await in_flight([op] * PER_SESSION_IN_FLIGHT, per_session))

        began = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for client in clients:
                tg.start_soon(session, call_echo(client))
        wall_s = time.perf_counter() - began
    total = Run()
    for run in runs:
        total.merge(run)
    total.wall_s = wall_s  # the sessions ran at the same time: one wall clock
    return {"sessions": SESSIONS, "in_flight_per_session": PER_SESSION_IN_FLIGHT, **total.summary()}


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    plugins = make_plugins(workdir, count=1)
    echo_url = await start_echo_http(procs, plugins.echo_server)
    echo_pid = next(p.popen.pid for p in procs.running if p.name == "echo-http")
    host = await start_host(procs, "host-throughput", plugins=plugins.one, data_dir=workdir / "d")
    servers = Servers(host, workdir / "d", echo_url, echo_pid)
    result: dict[str, Any] = {"t_one_session": {}, "s_many_sessions": {}}
    for era in ERAS:
        print(f"[bench] throughput: {IN_FLIGHT} in flight on one session, {era}")
        result["t_one_session"][era] = await _one_session(servers, era, args)
    for era in ERAS:
        print(f"[bench] throughput: {SESSIONS} sessions x {PER_SESSION_IN_FLIGHT} in flight, {era}")
        result["s_many_sessions"][era] = await _many_sessions(host, era, args.per_session)
    result["p_peer"] = await _peer(args, procs, servers, plugins.echo_server)
    return result


async def _peer(args: argparse.Namespace, procs: Processes, servers: Servers, echo_server: Path) -> dict[str, Any]:
    """Leg p, or why it was skipped (not installed, or mcp-proxy did not start)."""
    if args.mcp_proxy is None:
        return {"skipped": args.mcp_proxy_note}
    try:
        return await peer_throughput(
            procs, servers.host, servers.echo_url, args.mcp_proxy, echo_server, args.n, args.rounds
        )
    except RuntimeError as exc:  # a peer that does not start skips its leg, not the bench
        return {"skipped": f"mcp-proxy did not start: {str(exc).splitlines()[0]}"}


def _targets(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    out = []
    for era, leg in result["t_one_session"].items():
        ratio = leg["host_over_direct"]
        ok = ratio is not None and ratio >= MIN_RATIO and leg["host"]["errors"] == 0
        name = f"{IN_FLIGHT} in flight, host/direct calls/s >= {MIN_RATIO} ({era})"
        out.append(("PASS" if ok else "MISS", name, f"{ratio}"))
    for era, leg in result["s_many_sessions"].items():
        out.append(
            (
                "PASS" if leg["errors"] == 0 else "MISS",
                f"{SESSIONS} sessions x {PER_SESSION_IN_FLIGHT}: no error ({era})",
                f"{leg['errors']} of {leg['calls']}; p99 {leg['p99_ms']} ms",
            )
        )
    return out + peer_targets(result["p_peer"])


def _print(result: dict[str, Any]) -> None:
    print("[bench] throughput (tools/call echo, SDK client)")
    print(f"  {'leg':<44} {'calls':>6} {'err':>4} {'calls/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    rows = [
        (f"t {era} {name} ({IN_FLIGHT} in flight, 1 session)", leg[name])
        for era, leg in result["t_one_session"].items()
        for name in ("host", "direct")
    ]
    many = result["s_many_sessions"]
    rows += [(f"s {era} host ({SESSIONS} x {PER_SESSION_IN_FLIGHT})", leg) for era, leg in many.items()]
    for title, s in rows:
        latency = f"{s['median_ms']:>8.2f} {s['p99_ms']:>8.2f}" if s["median_ms"] is not None else "       -        -"
        print(f"  {title:<44} {s['calls']:>6} {s['errors']:>4} {s['calls_per_s']:>8.1f} {latency}")
    print_peer(result["p_peer"])
    for era, leg in result["t_one_session"].items():
        cpu = leg["cpu_ms_per_call"]
        print(
            f"  t {era} server CPU ms per call: host {cpu['host']} (+ PostgreSQL {cpu['host_postgres']}), "
            f"direct {cpu['direct']}; host/direct {leg['cpu_host_over_direct']}"
        )
        print(f"  t {era} host/direct per round: {' / '.join(str(r['ratio']) for r in leg['rounds_calls_per_s'])}")
    for status, name, value in result["targets"]:
        print(f"  {status:<4}  {name}: {value}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/throughput.py", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=960, help="calls per leg per round, leg t (default 960)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of leg t (default 3)")
    p.add_argument("--per-session", type=int, default=16, help="calls per session, leg s (default 16)")
    p.add_argument("--quick", action="store_true", help="n=320, 8 calls per session")
    p.add_argument("--no-peer", action="store_true", help="skip leg p (mcp-proxy)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.per_session = 320, 8
    args.mcp_proxy, args.mcp_proxy_note = (None, "--no-peer") if args.no_peer else ensure_mcp_proxy(MCP_PROXY_VENV)
    print(f"[bench] throughput: mcp-proxy: {args.mcp_proxy_note}")
    config = {"n_per_round": args.n, "rounds": args.rounds, "per_session": args.per_session, "quick": args.quick}
    result = run_leg("t", bench, args, RESULTS, lambda found: {"targets": _targets(found), "config": config})
    _print(result)
    print(said_where(result, RESULTS, REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
