"""Losing the embedded PostgreSQL under load (issue 11, defect 4): recovery time, refusals, rows lost.

One `mcp-host serve` (embedded PostgreSQL, sandbox on) with bench/outage_plugin, whose `put`
stores one keyed record per call. `--workers` visitor sessions call `put` with unique keys in
a loop; a prober polls `/healthz` and `/readyz` and opens a session (`POST /v1/sessions`)
every 50 ms. After `--before-s` the postmaster is killed with SIGKILL (pid from
`postmaster.pid`); the loops go on until `/readyz` has answered 200 again for `--after-s`.
`--kills` repeats that. Then every acknowledged key is looked up in the plugin's store.

Printed (and written to bench-results/db_outage.json): per kill, the time until `/readyz`
answered 200 again and until the first `put` succeeded; the outcomes of the calls and
requests made meanwhile (`unavailable` results, HTTP statuses, client exceptions); `/healthz`
answers other than 200; rows acknowledged, stored, lost (acknowledged but not stored: must be
0) and stored without an acknowledgement (the answer of a committed write was lost with the
connection); and what the host logged (outage lines, tracebacks).

    .venv/bin/python bench/db_outage.py [--workers 8] [--before-s 3] [--after-s 3] [--kills 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx2
from legs import http_client
from procs import Processes
from servers import REPO, start_host

from mcp_host.store.plugin_store import store_schema

PLUGIN = Path(__file__).resolve().parent / "outage_plugin"
RESULTS = REPO / "bench-results" / "db_outage.json"
PROBE_EVERY_S = 0.05


@dataclass
class Run:
    """Everything observed, with times on `time.monotonic()`."""

    kills: list[float] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)
    puts: list[tuple[float, str]] = field(default_factory=list)
    """(when the call started, its outcome: ok | a refusal code | http <status> | an exception name)"""
    opens: list[tuple[float, str]] = field(default_factory=list)
    ready: list[tuple[float, int]] = field(default_factory=list)
    health: list[tuple[float, int]] = field(default_factory=list)
    stop: anyio.Event = field(default_factory=anyio.Event)


def _postmaster(pgdata: Path) -> tuple[int, str]:
    """The postmaster's pid and the DSN of its unix socket, from postmaster.pid."""
    lines = (pgdata / "postmaster.pid").read_text().splitlines()
    return int(lines[0]), f"postgresql://postgres@/postgres?host={lines[4]}&port={lines[3]}"


async def _worker(run: Run, client: Any, name: str) -> None:
    n = 0
    while not run.stop.is_set():
        key = f"{name}-{n}"
        n += 1
        started = time.monotonic()
        try:
            result = await client.call_tool("put", {"key": key})
        except Exception as exc:  # what the visitor's client saw: an HTTP error or a broken stream
            status = getattr(getattr(exc, "response", None), "status_code", None)
            outcome = f"http {status}" if status else type(exc).__name__
        else:
            if result.is_error:
                outcome = str((result.structured_content or {}).get("code", "error"))
            else:
                outcome = "ok"
                run.acked.add(key)
        run.puts.append((started, outcome))


async def _prober(run: Run, url: str) -> None:
    async with httpx2.AsyncClient(timeout=5) as http:
        while not run.stop.is_set():
            now = time.monotonic()
            for path, into in (("/readyz", run.ready), ("/healthz", run.health)):
                try:
                    into.append((now, (await http.get(url + path)).status_code))
                except httpx2.TransportError:
                    into.append((now, 0))
            try:
                opened = await http.post(f"{url}/v1/sessions", json={})
                retry = opened.headers.get("retry-after")
                run.opens.append((now, f"{opened.status_code}" + (f" retry-after {retry}" if retry else "")))
            except httpx2.TransportError as exc:
                run.opens.append((now, type(exc).__name__))
            await anyio.sleep(PROBE_EVERY_S)


def _ready_again(run: Run, since: float) -> float | None:
    """When /readyz first answered 200 after a 503 that followed `since`, or None."""
    was_down = False
    for at, status in run.ready:
        if at < since:
            continue
        if status != 200:
            was_down = True
        elif was_down:
            return at
    return None


async def _wait_ready_again(run: Run, since: float, limit_s: float) -> float:
    with anyio.fail_after(limit_s):
        while (at := _ready_again(run, since)) is None:  # noqa: ASYNC110 - another process's state
            await anyio.sleep(PROBE_EVERY_S)
    return at


def _window(samples: list[tuple[float, str]], start: float, end: float) -> dict[str, int]:
    return dict(Counter(outcome for at, outcome in samples if start <= at < end))


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    host = await start_host(procs, "host-outage", plugins=PLUGIN, data_dir=workdir / "data")
    pgdata = workdir / "data" / "postgres"
    run = Run()
    kills: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        clients = []
        for _ in range(args.workers):
            visitor = await host.open_session()
            clients.append(await http_client(stack, visitor.mcp_url, args.era, visitor.token))
        async with anyio.create_task_group() as tg:
            for i, client in enumerate(clients):
                tg.start_soon(_worker, run, client, f"w{i}")
            tg.start_soon(_prober, run, host.url)
            for k in range(args.kills):
                await anyio.sleep(args.before_s)
                pid, _ = _postmaster(pgdata)
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                run.kills.append(killed_at)
                print(f"[db_outage] kill {k + 1}: SIGKILL to postmaster {pid}")
                ready_at = await _wait_ready_again(run, killed_at, args.limit_s)
                await anyio.sleep(args.after_s)
                first_ok = min((at for at, o in run.puts if at >= killed_at and o == "ok"), default=None)
                kills.append(
                    {
                        "postmaster": pid,
                        "readyz_200_again_s": round(ready_at - killed_at, 3),
                        "first_ok_put_s": None if first_ok is None else round(first_ok - killed_at, 3),
                        "puts_meanwhile": _window(run.puts, killed_at, ready_at),
                        "session_opens_meanwhile": _window(run.opens, killed_at, ready_at),
                    }
                )
            run.stop.set()
    _, dsn = _postmaster(pgdata)
    conn = await asyncpg.connect(dsn)
    try:
        schema = store_schema("capability", "bench_outage")
        stored = {r[0] for r in await conn.fetch(f"SELECT doc->>'key' FROM {schema}.records WHERE collection = 'puts'")}
    finally:
        await conn.close()
    log = host.proc.log.read_text(errors="replace")
    return {
        "workers": args.workers,
        "era": args.era,
        "kills": kills,
        "puts": dict(Counter(o for _, o in run.puts)),
        "healthz_not_200": sum(1 for _, status in run.health if status != 200),
        "rows": {
            "acknowledged": len(run.acked),
            "stored": len(stored),
            "lost": len(run.acked - stored),
            "stored_unacknowledged": len(stored - run.acked),
        },
        "host_log": {
            "outage_warnings": len(re.findall(r"database outage: ", log)),
            "outage_over": re.findall(r"database outage over after [0-9.]+ s", log),
            "tracebacks": log.count("Traceback (most recent call last)"),
            "errors": len(re.findall(r"\bERROR\b", log)),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/db_outage.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8, help="concurrent visitor sessions calling put (8)")
    parser.add_argument("--era", default="2026-07-28", choices=["legacy", "2026-07-28"], help="client mode")
    parser.add_argument("--before-s", type=float, default=3.0, help="load before each kill (3 s)")
    parser.add_argument("--after-s", type=float, default=3.0, help="load after /readyz is 200 again (3 s)")
    parser.add_argument("--kills", type=int, default=1, help="how many times to kill the postmaster (1)")
    parser.add_argument("--limit-s", type=float, default=60.0, help="give up waiting for recovery after (60 s)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (host log)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="mcpdb-", dir="/tmp"))
    procs = Processes(workdir)
    try:
        result = anyio.run(bench, args, procs, workdir)
    finally:
        procs.close()
        if args.keep:
            print(f"[db_outage] kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    rows = result["rows"]
    print(
        f"[db_outage] recovery (readyz 200 again): {[k['readyz_200_again_s'] for k in result['kills']]} s; "
        f"rows acknowledged {rows['acknowledged']}, lost {rows['lost']}; "
        f"host tracebacks {result['host_log']['tracebacks']}"
    )
    return 0 if rows["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
