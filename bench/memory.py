"""Memory (issue 18): the host with its builtins, and what idle sessions add to it.

Starts `mcp-host serve` as `scripts/run` does (the builtin plugins of `capabilities/`, embedded
PostgreSQL, sandbox on, default settings) and waits until the 5 builtin capabilities' children
run. Then:
  m1  RSS and PSS of the host process and of each child's sandbox (its bwrap processes and the
      server, summed); target host + children <= 350 MB (RSS summed: shared pages counted in
      every process that maps them, so the summed PSS is printed beside it). The embedded
      PostgreSQL (postmaster and backends) is reported apart, outside the target.
  m2  `--sessions` visitor sessions (POST /v1/sessions, public) each sending one 2026-07-28
      `tools/list`, `--concurrency` at a time, then left idle: the host's RSS before and after
      (and after `--settle` s); target <= 50 MB added.
  m3  `--protocol` 2025-11-25 protocol sessions (initialize + notifications/initialized, never
      DELETEd), each on its own visitor session: first all from 127.0.0.1, where the cap of
      that address's principal (principal_max_protocol_sessions, 256 by default) closes its
      least recently used idle ones; then as many again spread over 127.0.0.2-5, under that
      cap. Each: answers by status, how many still answer a ping, the host's RSS added.
Results go to bench-results/memory.json. Run by `scripts/bench`; `--quick` for fewer sessions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
from load import memory_of, postgres_of, rss_mib, run_leg, said_where, sandboxes
from procs import Processes
from servers import REPO, RunningHost, start_host

RESULTS = REPO / "bench-results" / "memory.json"
BUILTINS = REPO / "capabilities"
CAPABILITIES = 5
MAX_HOST_AND_CHILDREN_MB = 350.0
MAX_IDLE_SESSIONS_MB = 50.0
MB = 1e6
MiB = 1024**2
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST_2026 = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/list",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "bench-memory", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


@dataclass(frozen=True)
class Opened:
    mcp_url: str
    token: str


def _mb(mib: float) -> float:
    return round(mib * MiB / MB, 1)


async def _wait_for_children(host: RunningHost, ledger: Path, timeout_s: float = 90.0) -> dict[str, Any]:
    """Until `CAPABILITIES` sandboxes run a server under the host; then a few seconds to settle."""
    deadline = time.perf_counter() + timeout_s
    while True:
        found = sandboxes(host.proc.popen.pid, ledger)
        running = [k for k, tree in found.items() if any("server.py" in _cmdline(p) for p in tree[1:])]
        if len(running) >= CAPABILITIES:
            break
        if time.perf_counter() > deadline:
            raise RuntimeError(f"after {timeout_s:g} s only {sorted(running)} run:\n{host.proc.tail()}")
        await anyio.sleep(0.5)
    await anyio.sleep(5)
    return found


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


async def _builtins(host: RunningHost, data_dir: Path) -> dict[str, Any]:
    found = await _wait_for_children(host, data_dir / "run" / "sandboxes")
    host_mem = memory_of([psutil.Process(host.proc.popen.pid)])
    children = {plugin: memory_of(tree) for plugin, tree in sorted(found.items())}
    rss = host_mem["rss_mib"] + sum(c["rss_mib"] for c in children.values())
    pss = host_mem["pss_mib"] + sum(c["pss_mib"] for c in children.values())
    return {
        "host": host_mem,
        "children": children,
        "host_and_children": {"rss_mib": round(rss, 1), "pss_mib": round(pss, 1), "rss_mb": _mb(rss)},
        "postgres": memory_of(postgres_of(data_dir)),
    }


async def _pool(count: int, concurrency: int, job: Callable[[int], Awaitable[None]]) -> float:
    """Run `job(i)` for i in range(count), `concurrency` at a time; the seconds it took."""
    remaining = iter(range(count))

    async def worker() -> None:
        for i in remaining:
            await job(i)

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return round(time.perf_counter() - began, 1)


def _tools_of(response: httpx2.Response) -> int | None:
    """How many tools a tools/list answer lists (JSON or one SSE event); None if it is an error."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = next((line[5:] for line in text.splitlines() if line.startswith("data:")), "{}")
    body = json.loads(text)
    tools = body.get("result", {}).get("tools")
    return len(tools) if isinstance(tools, list) else None


async def _visitor_sessions(
    http: httpx2.AsyncClient, host: RunningHost, count: int, concurrency: int, settle_s: float
) -> tuple[dict[str, Any], list[Opened]]:
    """m2: `count` sessions, one 2026-07-28 tools/list each; the sessions opened, for m3."""
    pid = host.proc.popen.pid
    opened: list[Opened] = []
    outcomes: Counter[str] = Counter()
    tools_seen: Counter[int] = Counter()
    marks: list[float] = []  # when each 1,000th session was done: does opening slow down as they pile up?

    async def one(_: int) -> None:
        made = await http.post(f"{host.url}/v1/sessions", json={})
        if made.status_code != 201:
            outcomes[f"POST /v1/sessions {made.status_code}"] += 1
            return
        body = made.json()
        session = Opened(body["mcp_url"], body["token"])
        opened.append(session)
        headers = {
            **HEADERS,
            "Authorization": f"Bearer {session.token}",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/list",
        }
        listed = await http.post(session.mcp_url, json=LIST_2026, headers=headers)
        tools = _tools_of(listed) if listed.status_code == 200 else None
        if tools is None:
            outcomes[f"tools/list {listed.status_code} (error)"] += 1
        else:
            outcomes["ok"] += 1
            tools_seen[tools] += 1
        done = sum(outcomes.values())
        if done % 1000 == 0:
            marks.append(time.perf_counter())
            if count > 1000:
                print(f"[bench] memory: {done} sessions, host RSS {rss_mib(pid)} MiB")

    await _pool(min(50, count), concurrency, one)  # warm-up: first-use allocations, not per session
    warm = len(opened)
    await anyio.sleep(2)
    before = rss_mib(pid)
    outcomes.clear()
    marks.append(time.perf_counter())
    seconds = await _pool(count, concurrency, one)
    after = rss_mib(pid)
    await anyio.sleep(settle_s)
    settled = rss_mib(pid)
    result = {
        "sessions": count,
        "warm_up_sessions": warm,
        "outcomes": dict(outcomes),
        "tools_listed": {str(k): v for k, v in tools_seen.items()},
        "seconds": seconds,
        "seconds_per_1000": [round(b - a, 1) for a, b in zip(marks, marks[1:], strict=False)],
        "host_rss_mib": {"before": before, "after": after, f"after_{settle_s:g}s": settled},
        "added_mb": _mb(settled - before),
        "added_kib_per_session": round((settled - before) * 1024 / count, 2),
    }
    return result, opened[warm:]


async def _protocol_sessions(
    host: RunningHost, visitors: list[Opened], sources: list[str], concurrency: int, settle_s: float
) -> dict[str, Any]:
    """m3: one initialize (never deleted) per visitor in `visitors`, from `sources` in turn."""
    pid = host.proc.popen.pid
    statuses: Counter[int] = Counter()
    ids: list[tuple[int, Opened, str]] = []
    clients = [
        httpx2.AsyncClient(
            timeout=60,
            transport=httpx2.AsyncHTTPTransport(local_address=source),
            limits=httpx2.Limits(max_connections=concurrency),
        )
        for source in sources
    ]
    try:

        async def one(i: int) -> None:
            http, visitor = clients[i % len(clients)], visitors[i]
            headers = {**HEADERS, "Authorization": f"Bearer {visitor.token}"}
            answer = await http.post(visitor.mcp_url, json=INITIALIZE, headers=headers)
            statuses[answer.status_code] += 1
            session_id = answer.headers.get("mcp-session-id")
            if session_id is None:
                return
            ids.append((i, visitor, session_id))
            headers |= {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
            await http.post(visitor.mcp_url, json=INITIALIZED, headers=headers)

        before = rss_mib(pid)
        seconds = await _pool(len(visitors), concurrency, one)
        await anyio.sleep(settle_s)
        after = rss_mib(pid)
        live: Counter[int] = Counter()

        async def ping(k: int) -> None:
            i, visitor, session_id = ids[k]
            headers = {
                **HEADERS,
                "Authorization": f"Bearer {visitor.token}",
                "Mcp-Session-Id": session_id,
                "MCP-Protocol-Version": "2025-11-25",
            }
            answer = await clients[i % len(clients)].post(visitor.mcp_url, json=PING, headers=headers)
            live[answer.status_code] += 1

        await _pool(len(ids), concurrency, ping)
    finally:
        for client in clients:
            await client.aclose()
    return {
        "initialize_sent": len(visitors),
        "from": sources,
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "seconds": seconds,
        "still_open": live.get(200, 0),
        "ping_answers": {str(k): v for k, v in sorted(live.items())},
        "host_rss_mib": {"before": before, f"after_{settle_s:g}s": after},
        "added_mb": _mb(after - before),
        "added_kib_per_open_session": round((after - before) * 1024 / max(1, live.get(200, 0)), 2),
    }


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    data_dir = workdir / "d"
    host = await start_host(procs, "host-memory", plugins=BUILTINS, data_dir=data_dir)
    print(f"[bench] memory: host ready after {host.ready_s:.1f} s; waiting for the {CAPABILITIES} builtin children")
    result: dict[str, Any] = {"m1_builtins": await _builtins(host, data_dir)}
    print(f"[bench] memory: {args.sessions} visitor sessions, one 2026-07-28 tools/list each")
    limits = httpx2.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        m2, opened = await _visitor_sessions(http, host, args.sessions, args.concurrency, args.settle)
    result["m2_idle_sessions"] = m2
    if len(opened) < 2 * args.protocol:
        raise RuntimeError(f"only {len(opened)} visitor sessions opened; m3 needs {2 * args.protocol}")
    print(f"[bench] memory: {args.protocol} 2025-11-25 protocol sessions from 127.0.0.1, then from 127.0.0.2-5")
    n, at_once, settle = args.protocol, args.concurrency, args.settle
    one_address = await _protocol_sessions(host, opened[:n], ["127.0.0.1"], at_once, settle)
    spread = [f"127.0.0.{i}" for i in range(2, 6)]
    four = await _protocol_sessions(host, opened[n : 2 * n], spread, at_once, settle)
    result["m3_protocol_sessions"] = {"one_address": one_address, "four_addresses": four}
    return result


def _targets(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    both = result["m1_builtins"]["host_and_children"]
    m2 = result["m2_idle_sessions"]
    ok2 = m2["added_mb"] <= MAX_IDLE_SESSIONS_MB and set(m2["outcomes"]) == {"ok"}
    return [
        (
            "PASS" if both["rss_mb"] <= MAX_HOST_AND_CHILDREN_MB else "MISS",
            f"host + {CAPABILITIES} builtin children <= {MAX_HOST_AND_CHILDREN_MB:g} MB RSS",
            f"{both['rss_mb']} MB (PSS {_mb(both['pss_mib'])} MB)",
        ),
        (
            "PASS" if ok2 else "MISS",
            f"{m2['sessions']} idle visitor sessions add <= {MAX_IDLE_SESSIONS_MB:g} MB",
            f"{m2['added_mb']} MB; outcomes {m2['outcomes']}",
        ),
    ]


def _print(result: dict[str, Any]) -> None:
    m1 = result["m1_builtins"]
    print("[bench] memory (MiB; MB = 10^6 bytes in the targets)")
    print(f"  {'process':<28} {'RSS':>8} {'PSS':>8} {'procs':>6}")
    rows = [("host", m1["host"]), *m1["children"].items(), ("host + children", m1["host_and_children"])]
    rows.append(("embedded PostgreSQL (apart)", m1["postgres"]))
    for name, m in rows:
        print(f"  {name:<28} {m['rss_mib']:>8.1f} {m['pss_mib']:>8.1f} {m.get('processes', ''):>6}")
    m2 = result["m2_idle_sessions"]
    rss = m2["host_rss_mib"]
    print(
        f"  m2 {m2['sessions']} visitor sessions + tools/list in {m2['seconds']} s: host RSS "
        f"{' -> '.join(str(v) for v in rss.values())} MiB ({m2['added_kib_per_session']} KiB each); {m2['outcomes']}"
    )
    print(f"     seconds per 1,000 sessions: {m2['seconds_per_1000']}")
    for name, m3 in result["m3_protocol_sessions"].items():
        print(
            f"  m3 {m3['initialize_sent']} initialize ({name}): answers {m3['answers']}, "
            f"{m3['still_open']} still open; host RSS +{m3['added_mb']} MB "
            f"({m3['added_kib_per_open_session']} KiB per still-open session)"
        )
    for status, name, value in result["targets"]:
        print(f"  {status:<4}  {name}: {value}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/memory.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=10_000, help="idle visitor sessions, m2 (default 10000)")
    p.add_argument("--protocol", type=int, default=1000, help="2025-11-25 protocol sessions per run of m3 (1000)")
    p.add_argument("--concurrency", type=int, default=32, help="requests at once (default 32)")
    p.add_argument("--settle", type=float, default=5.0, help="seconds before the after-RSS reading (default 5)")
    p.add_argument("--quick", action="store_true", help="1000 visitor sessions, 200 protocol sessions")
    args = p.parse_args(argv)
    if args.quick:
        args.sessions, args.protocol = 1000, 200
    result = run_leg(
        "m",
        bench,
        args,
        RESULTS,
        lambda found: {
            "targets": _targets(found),
            "config": vars(args),
            "host": "mcp-host serve as scripts/run: builtins of capabilities/, embedded PostgreSQL, sandbox on, "
            "defaults",
        },
    )
    _print(result)
    print(said_where(result, RESULTS, REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
