"""A cluster under load (issue 16): 3 `mcp-host serve` replicas on one PostgreSQL behind a real
HAProxy (deploy/haproxy.cfg), the cluster tests' own set-up (tests/cluster/support.py).

Phases (one cluster, an embedded PostgreSQL, sandbox on):
  kill     30 visitors, half 2025-11-25 and half 2026-07-28, each calling in turn `note_add`
           (the shared `notes` plugin, a row in the store), `count` (the per-session
           `sessionless` plugin: its own instance) and `echo` (shared) for --seconds; one replica
           (the one holding most sessions) is SIGKILLed half way. A call that fails is made again
           with a new client. Figures: calls, calls failed (and how many were in flight on the
           victim when it died), retries that succeeded, sessions that carried on after the kill,
           notes acknowledged before the kill and found in the store after (and all of them).
  quota    50 visitors on one access code capped at 7 notes, spread over the 3 replicas, call
           `note_add` at once: added and refused (exact: 7 and 43).
  rolling  the same 30 visitors while each replica in turn gets SIGTERM (it drains and exits),
           starts again and is seen by HAProxy: failed 2026-07-28 calls, errors that reached a
           2025-11-25 caller, exit codes.
Results go to bench-results/cluster.json. Needs haproxy and bubblewrap (scripts/bench installs
them). Run by `scripts/bench --cluster` (or alone); `--seconds` sets the kill phase's length.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import MCPError

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mcp_host.store.embedded_postgres import embedded_postgres  # noqa: E402
from tests.cluster.support import (  # noqa: E402
    Cluster,
    add_notes_at_once,
    home_of,
    restart_each,
    running_cluster,
    stored_note_ids,
    structured,
)
from tests.conftest import fresh_database  # noqa: E402

RESULTS = REPO / "bench-results" / "cluster.json"
LEGACY, MODERN = "legacy", "2026-07-28"


@dataclass
class Call:
    visitor: int
    mode: str
    tool: str
    started: float
    ended: float
    error: str | None
    retried: bool = False
    row: str | None = None


def _failure(exc: BaseException) -> str:
    leaves = list(exc.exceptions) if isinstance(exc, BaseExceptionGroup) else [exc]
    while any(isinstance(leaf, BaseExceptionGroup) for leaf in leaves):
        leaves = [x for leaf in leaves for x in (leaf.exceptions if isinstance(leaf, BaseExceptionGroup) else [leaf])]
    return "connection: " + ", ".join(sorted({type(leaf).__name__ for leaf in leaves}))


def _step(n: int, turn: int) -> tuple[str, dict[str, Any]]:
    return (("note_add", {"text": f"v{n} t{turn}"}), ("count", {}), ("echo", {"text": f"{n}.{turn}"}))[turn % 3]


async def _load(
    cluster: Cluster, sessions: list[dict[str, Any]], modes: dict[int, str], stop: anyio.Event
) -> tuple[list[Call], list[int]]:
    """Every visitor calls until `stop`; a failed call is made again with a new client."""
    calls: list[Call] = []
    reconnects: list[int] = []

    async def visit(n: int) -> None:
        session, mode, turn = sessions[n], modes[n], 0
        while not stop.is_set():
            tool, arguments = _step(n, turn)
            began, error, sent = time.monotonic(), None, False
            try:
                async with cluster.client(session, mode) as client:
                    while not stop.is_set():
                        tool, arguments = _step(n, turn)
                        began, sent = time.monotonic(), True
                        try:
                            result = await client.call_tool(tool, arguments)
                        except MCPError as exc:
                            error = f"MCPError: {exc.error.message}"
                            break
                        if result.is_error:
                            error = str((result.structured_content or {}).get("code"))
                            break
                        sent = False
                        row = (result.structured_content or {}).get("id") if tool == "note_add" else None
                        calls.append(Call(n, mode, tool, began, time.monotonic(), None, row=row))
                        turn += 1
                        await anyio.sleep(0.2)
            except Exception as exc:  # noqa: BLE001 - counted: what reached the caller
                error = _failure(exc)
            if error is None:
                return
            if not sent:
                reconnects.append(n)
                continue
            calls.append(Call(n, mode, tool, began, time.monotonic(), error))
            try:
                async with cluster.client(session, mode) as client:
                    result = await client.call_tool(tool, arguments)
                retry_error = str((result.structured_content or {}).get("code")) if result.is_error else None
                row = (result.structured_content or {}).get("id") if tool == "note_add" and not retry_error else None
            except Exception as exc:  # noqa: BLE001 - counted
                retry_error, row = _failure(exc), None
            now = time.monotonic()
            calls.append(Call(n, mode, tool, now, now, retry_error, True, row))
            turn += 1

    async with anyio.create_task_group() as tg:
        for n in range(len(sessions)):
            tg.start_soon(visit, n)
    return calls, reconnects


async def _visitors(cluster: Cluster, count: int) -> tuple[list[dict[str, Any]], dict[int, str], list[str]]:
    sessions = [await cluster.new_session() for _ in range(count)]
    homes = [await home_of(cluster, s) for s in sessions]
    modes = {n: (LEGACY, MODERN)[n % 2] for n in range(count)}

    starting = anyio.CapacityLimiter(3)  # 30 sandboxed children at once overrun a 2-core machine

    async def warm(n: int) -> None:
        async with starting, cluster.client(sessions[n], modes[n]) as client:
            for _ in range(3):  # a per-session child that did not initialize in time is started again
                if not (await client.call_tool("count", {})).is_error:
                    break
            structured(await client.call_tool("note_add", {"text": "warm"}))

    async with anyio.create_task_group() as tg:
        for n in range(count):
            tg.start_soon(warm, n)
    return sessions, modes, homes


async def kill_phase(cluster: Cluster, visitors: int, seconds: float) -> dict[str, Any]:
    sessions, modes, homes = await _visitors(cluster, visitors)
    victim = Counter(homes).most_common(1)[0][0]
    stop, killed = anyio.Event(), [0.0]

    async def kill_then_stop() -> None:
        await anyio.sleep(seconds / 2)
        killed[0] = time.monotonic()
        await cluster.kill(victim)
        await anyio.sleep(seconds / 2)
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(kill_then_stop)
        calls, reconnects = await _load(cluster, sessions, modes, stop)
    kill = killed[0]
    first = [c for c in calls if not c.retried]
    failed = [c for c in first if c.error is not None]
    retries = [c for c in calls if c.retried]
    in_flight = [c for c in failed if c.started <= kill <= c.ended and homes[c.visitor] == victim]
    acked = {c.row for c in calls if c.row}
    acked_before = {c.row for c in calls if c.row and c.ended < kill}
    stored = await stored_note_ids(cluster)
    return {
        "visitors": dict(Counter(modes.values())),
        "homes": dict(Counter(homes)),
        "victim": victim,
        "calls": len(first),
        "calls_per_era": dict(Counter(c.mode for c in first)),
        "failed": len(failed),
        "failed_in_flight_on_victim": len(in_flight),
        "failed_otherwise": [asdict(c) for c in failed if c not in in_flight],
        "retries": len(retries),
        "retries_ok": sum(r.error is None for r in retries),
        "errors_between_calls": len(reconnects),
        "sessions_continued": len({c.visitor for c in calls if c.started > kill + 1 and c.error is None}),
        "notes_acked_before_kill": len(acked_before),
        "notes_acked_before_kill_found": len(acked_before & stored),
        "notes_acked": len(acked),
        "notes_acked_found": len(acked & stored),
    }


async def quota_phase(cluster: Cluster, cap: int = 7, callers: int = 50) -> dict[str, Any]:
    async with cluster.owner() as owner:
        made = await owner.call_tool("code_create", {"role": "public", "config": {"notes": {"max_notes": cap}}})
    code = structured(made)["code"]
    sessions = [await cluster.new_session({"code": code}) for _ in range(callers)]
    homes = Counter([await home_of(cluster, s) for s in sessions])
    outcomes = await add_notes_at_once(cluster, sessions, connect_timeout_s=120)
    counted = Counter(outcomes)
    return {
        "callers": callers,
        "cap": cap,
        "homes": dict(homes),
        "added": counted[None],
        "refused": counted["quota_exhausted"],
        "exact": counted == {None: cap, "quota_exhausted": callers - cap},
    }


async def rolling_phase(cluster: Cluster, visitors: int) -> dict[str, Any]:
    sessions, modes, _ = await _visitors(cluster, visitors)
    stop = anyio.Event()
    exits: list[int | None] = []
    started = time.monotonic()

    async def roll() -> None:
        await restart_each(cluster, exits, settle_s=3)
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(roll)
        calls, reconnects = await _load(cluster, sessions, modes, stop)
    first = [c for c in calls if not c.retried]
    return {
        "seconds": round(time.monotonic() - started, 1),
        "exits": exits,
        "calls": len(first),
        "calls_per_era": dict(Counter(c.mode for c in first)),
        "failed_2026": sum(c.error is not None for c in first if c.mode == MODERN),
        "legacy_errors": sum(c.error is not None for c in first if c.mode == LEGACY)
        + sum(modes[n] == LEGACY for n in reconnects),
        "errors": dict(Counter(f"{c.mode}: {c.error}" for c in first if c.error is not None)),
        "errors_between_calls": dict(Counter(modes[n] for n in reconnects)),
    }


async def main(seconds: float, visitors: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="mcp-host-bench-cluster-"))
    try:
        async with embedded_postgres(root / "pg") as dsn, fresh_database(dsn) as url:
            async with running_cluster(root / "cluster", url) as cluster:
                kill = await kill_phase(cluster, visitors, seconds)
                await cluster.revive()
                quota = await quota_phase(cluster)
                rolling = await rolling_phase(cluster, visitors)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"seconds": seconds, "kill": kill, "quota": quota, "rolling": rolling}


def report(result: dict[str, Any]) -> None:
    k, q, r = result["kill"], result["quota"], result["rolling"]
    print(f"cluster: 3 replicas behind HAProxy, {k['visitors']} visitors, {result['seconds']:g} s, SIGKILL half way")
    print(
        f"  kill: {k['calls']} calls, {k['failed']} failed ({k['failed_in_flight_on_victim']} in flight on"
        f" {k['victim']}), {k['retries_ok']}/{k['retries']} retries OK, {k['errors_between_calls']} errors between"
        f" calls, {k['sessions_continued']} sessions continued; notes acked before the kill"
        f" {k['notes_acked_before_kill']}, found after {k['notes_acked_before_kill_found']} (all:"
        f" {k['notes_acked_found']}/{k['notes_acked']})"
    )
    print(
        f"  quota: {q['callers']} callers over {q['homes']}: {q['added']} added, {q['refused']} refused,"
        f" exact {q['exact']}"
    )
    print(
        f"  rolling SIGTERM restart ({r['seconds']} s): exits {r['exits']}, {r['calls']} calls {r['calls_per_era']},"
        f" failed 2026-07-28 {r['failed_2026']}, legacy errors {r['legacy_errors']} {r['errors'] or ''}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--visitors", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="20 s, 12 visitors")
    args = parser.parse_args()
    if shutil.which("haproxy") is None:
        sys.exit("bench/cluster.py needs haproxy (apt-get install haproxy)")
    seconds, visitors = (20.0, 12) if args.quick else (args.seconds, args.visitors)
    logging.getLogger("mcp").setLevel(logging.ERROR)  # the SDK client warns at every note_add (no schema)
    outcome = anyio.run(main, seconds, visitors)
    report(outcome)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(outcome, indent=2) + "\n")
