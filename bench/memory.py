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
      (and after `--settle` s); target <= 50 MB added. Before the reading, `--warm-up` sessions
      the same way: a fresh host's allocator grows on first use whatever it keeps (with no
      session kept at all, 0.72 KiB per session over the first 3,000, 0.07-0.14 by the 4th).
  m3  `--protocol` 2025-11-25 protocol sessions (initialize + notifications/initialized, never
      DELETEd), each on its own visitor session: first spread over 127.0.0.2-5, then as many
      again over 127.0.0.6-9 and over 127.0.0.10-13, then all from 127.0.0.1, where the cap of
      that address's principal (principal_max_protocol_sessions, 256 by default) closes its
      least recently used idle ones. Each: answers by status, the host's RSS added after
      `--settle` s and again once the sessions had `--rest` s more to rest (idle past
      protocol_session_rest_s, 60 s by default: ended in the SDK, kept by the host); at the
      end, how many of each still answer a ping (each ping wakes one). CPython keeps the memory
      the resting sessions freed (its arenas stay partly used), and the next sessions reuse it:
      the third run's figure is what abandoned sessions add in that steady state (the second's
      still holds the first's resting records beside its own sessions' token cache entries,
      kept for the auth outage grace, 60 s).
  Target <= 1 MB per 1,000 abandoned sessions in each era (issue 26, defect 7): m2's RSS added,
  and m3's third run's once rested.
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
MAX_MB_PER_1000_ABANDONED = 1.0
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
    http: httpx2.AsyncClient, host: RunningHost, count: int, warm_up: int, concurrency: int, settle_s: float
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

    await _pool(warm_up, concurrency, one)  # warm-up: first-use allocations, not per session
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


@dataclass(frozen=True)
class _Opened2025:
    source: str
    visitor: Opened
    session_id: str


def _clients(sources: list[str], concurrency: int) -> dict[str, httpx2.AsyncClient]:
    """One HTTP client per source address."""
    return {
        source: httpx2.AsyncClient(
            timeout=60,
            transport=httpx2.AsyncHTTPTransport(local_address=source),
            limits=httpx2.Limits(max_connections=concurrency),
        )
        for source in sources
    }


async def _protocol_sessions(
    host: RunningHost, visitors: list[Opened], sources: list[str], concurrency: int, settle_s: float, rest_s: float
) -> tuple[dict[str, Any], list[_Opened2025]]:
    """m3: one initialize (never deleted) per visitor in `visitors`, from `sources` in turn; the
    host's RSS after `settle_s`, then after `rest_s` more (the sessions idle: they rest). The
    sessions opened, to be pinged once every run is done (a ping wakes a resting one)."""
    pid = host.proc.popen.pid
    statuses: Counter[int] = Counter()
    opened: list[_Opened2025] = []
    clients = _clients(sources, concurrency)
    try:

        async def one(i: int) -> None:
            source, visitor = sources[i % len(sources)], visitors[i]
            headers = {**HEADERS, "Authorization": f"Bearer {visitor.token}"}
            answer = await clients[source].post(visitor.mcp_url, json=INITIALIZE, headers=headers)
            statuses[answer.status_code] += 1
            session_id = answer.headers.get("mcp-session-id")
            if session_id is None:
                return
            opened.append(_Opened2025(source, visitor, session_id))
            headers |= {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
            await clients[source].post(visitor.mcp_url, json=INITIALIZED, headers=headers)

        before = rss_mib(pid)
        seconds = await _pool(len(visitors), concurrency, one)
    finally:
        for client in clients.values():
            await client.aclose()
    await anyio.sleep(settle_s)
    after = rss_mib(pid)
    await anyio.sleep(rest_s)
    rested = rss_mib(pid)
    result = {
        "initialize_sent": len(visitors),
        "from": sources,
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "seconds": seconds,
        "host_rss_mib": {"before": before, f"after_{settle_s:g}s": after, f"rested_{settle_s + rest_s:g}s": rested},
        "added_mb": _mb(after - before),
        "rested_added_mb": _mb(rested - before),
    }
    return result, opened


async def _still_open(host: RunningHost, opened: list[_Opened2025], concurrency: int) -> Counter[int]:
    """A ping in each of `opened` (from the address that opened it): the answers by status."""
    live: Counter[int] = Counter()
    clients = _clients(sorted({o.source for o in opened}), concurrency)
    try:

        async def ping(k: int) -> None:
            o = opened[k]
            headers = {
                **HEADERS,
                "Authorization": f"Bearer {o.visitor.token}",
                "Mcp-Session-Id": o.session_id,
                "MCP-Protocol-Version": "2025-11-25",
            }
            answer = await clients[o.source].post(o.visitor.mcp_url, json=PING, headers=headers)
            live[answer.status_code] += 1

        await _pool(len(opened), concurrency, ping)
    finally:
        for client in clients.values():
            await client.aclose()
    return live


async def _m3(host: RunningHost, visitors: list[Opened], args: argparse.Namespace) -> dict[str, Any]:
    """m3's runs, each on visitors of its own: from four addresses, twice more from four others
    (the third's figure is what abandoned sessions add once the memory of those before them,
    freed as they rested and their tokens' cache entries expired, is reused), from one; then a
    ping in every session opened."""
    n, at_once, settle, rest = args.protocol, args.concurrency, args.settle, args.rest
    # Four other addresses for each run (at one address's cap, 256, a new session would close
    # one of an earlier run's), and the one-address run last: the first three are read within
    # protocol_session_idle_s (300 s) of the first's start, none of them closed or expired.
    runs = {
        "four_addresses": [f"127.0.0.{i}" for i in range(2, 6)],
        "four_addresses_again": [f"127.0.0.{i}" for i in range(6, 10)],
        "four_addresses_third": [f"127.0.0.{i}" for i in range(10, 14)],
        "one_address": ["127.0.0.1"],
    }
    results: dict[str, Any] = {}
    opened: dict[str, list[_Opened2025]] = {}
    for k, (name, sources) in enumerate(runs.items()):
        print(f"[bench] memory: m3 {name}: {n} initialize, then {settle + rest:g} s idle")
        visitors_k = visitors[k * n : (k + 1) * n]
        results[name], opened[name] = await _protocol_sessions(host, visitors_k, sources, at_once, settle, rest)
    for name, result in results.items():
        # Pinged once all have run: the first run's sessions have been idle past
        # protocol_session_idle_s by then (404: they expired, as they should).
        live = await _still_open(host, opened[name], at_once)
        rss, count = result["host_rss_mib"], max(1, len(opened[name]))
        after, rested = list(rss.values())[1:]
        result |= {
            "still_open_at_the_end": live.get(200, 0),
            "ping_answers": {str(k): v for k, v in sorted(live.items())},
            "added_kib_per_session": round((after - rss["before"]) * 1024 / count, 2),
            "rested_mb_per_1000": round(_mb(rested - rss["before"]) * 1000 / count, 2),
        }
    return results


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    data_dir = workdir / "d"
    host = await start_host(procs, "host-memory", plugins=BUILTINS, data_dir=data_dir)
    print(f"[bench] memory: host ready after {host.ready_s:.1f} s; waiting for the {CAPABILITIES} builtin children")
    result: dict[str, Any] = {"m1_builtins": await _builtins(host, data_dir)}
    print(f"[bench] memory: {args.sessions} visitor sessions, one 2026-07-28 tools/list each")
    limits = httpx2.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        m2, opened = await _visitor_sessions(http, host, args.sessions, args.warm_up, args.concurrency, args.settle)
    result["m2_idle_sessions"] = m2
    if len(opened) < 4 * args.protocol:
        raise RuntimeError(f"only {len(opened)} visitor sessions opened; m3 needs {4 * args.protocol}")
    result["m3_protocol_sessions"] = await _m3(host, opened, args)
    return result


def _targets(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    both = result["m1_builtins"]["host_and_children"]
    m2 = result["m2_idle_sessions"]
    ok2 = m2["added_mb"] <= MAX_IDLE_SESSIONS_MB and set(m2["outcomes"]) == {"ok"}
    m2_per_1000 = round(m2["added_mb"] * 1000 / m2["sessions"], 2)
    m3 = result["m3_protocol_sessions"]["four_addresses_third"]
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
        (
            "PASS" if m2_per_1000 <= MAX_MB_PER_1000_ABANDONED else "MISS",
            f"2026-07-28 abandoned sessions <= {MAX_MB_PER_1000_ABANDONED:g} MB per 1,000 (m2)",
            f"{m2_per_1000} MB per 1,000",
        ),
        (
            "PASS" if m3["rested_mb_per_1000"] <= MAX_MB_PER_1000_ABANDONED else "MISS",
            f"2025-11-25 abandoned protocol sessions <= {MAX_MB_PER_1000_ABANDONED:g} MB per 1,000, rested (m3)",
            f"{m3['rested_mb_per_1000']} MB per 1,000 ({m3['still_open_at_the_end']} still open at the end)",
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
            f"{m3['still_open_at_the_end']} still open at the end; host RSS +{m3['added_mb']} MB "
            f"({m3['added_kib_per_session']} KiB per session opened), once rested "
            f"+{m3['rested_added_mb']} MB ({m3['rested_mb_per_1000']} MB per 1,000)"
        )
    for status, name, value in result["targets"]:
        print(f"  {status:<4}  {name}: {value}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/memory.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=10_000, help="idle visitor sessions, m2 (default 10000)")
    p.add_argument("--protocol", type=int, default=1000, help="2025-11-25 protocol sessions per run of m3 (1000)")
    p.add_argument("--concurrency", type=int, default=32, help="requests at once (default 32)")
    p.add_argument("--settle", type=float, default=5.0, help="seconds before the after-RSS reading (default 5)")
    p.add_argument("--rest", type=float, default=80.0, help="m3: seconds more for the sessions to rest (default 80)")
    p.add_argument("--warm-up", type=int, default=1000, help="m2: sessions opened before the reading (default 1000)")
    p.add_argument("--quick", action="store_true", help="1000 visitor sessions (200 first), 200 protocol sessions")
    args = p.parse_args(argv)
    if args.quick:
        args.sessions, args.protocol, args.warm_up = 1000, 200, 200
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
