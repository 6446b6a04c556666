"""Load for the issue-18 legs (throughput, memory, soak): calls kept in flight, and what a
process and its descendants hold in memory.

`in_flight` runs a fixed number of calls over a set of workers, each worker one call at a time
on its own slot (several slots may share one client: that is "calls in flight on one session").
A failed call is counted by its exception's type and the run goes on, so a leg reports its
errors instead of dying on the first one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil
from legs import Op
from procs import Processes
from report import stats

__all__ = [
    "MiB",
    "Run",
    "cpu_s",
    "in_flight",
    "loadavg",
    "memory_of",
    "postgres_of",
    "rss_mib",
    "run_leg",
    "said_where",
    "sandboxes",
    "tree",
]

MiB = 1024**2


@dataclass
class Run:
    """One `in_flight` run: every successful call's latency (ns), the failures, the wall time."""

    samples: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    @property
    def calls_per_s(self) -> float:
        return (len(self.samples) + sum(self.errors.values())) / self.wall_s if self.wall_s else 0.0

    def summary(self) -> dict[str, Any]:
        """calls, errors (by exception type), calls/s, and median/p99 latency in ms."""
        latency = stats(self.samples) if self.samples else {}
        return {
            "calls": len(self.samples) + sum(self.errors.values()),
            "errors": sum(self.errors.values()),
            "errors_by_type": dict(self.errors),
            "wall_s": round(self.wall_s, 2),
            "calls_per_s": round(self.calls_per_s, 1),
            "median_ms": round(latency["median_ms"], 3) if latency else None,
            "p99_ms": round(latency["p99_ms"], 3) if latency else None,
        }

    def merge(self, other: Run) -> None:
        self.samples += other.samples
        self.errors.update(other.errors)
        self.wall_s += other.wall_s


async def in_flight(slots: Sequence[Op], total: int) -> Run:
    """Make `total` calls, `len(slots)` at a time: each slot's worker calls its op, one after
    another, until `total` calls have started. Latency is per call; wall time is the whole run."""
    run = Run()
    started_calls = 0

    async def worker(op: Op) -> None:
        nonlocal started_calls
        while started_calls < total:
            started_calls += 1
            began = time.perf_counter_ns()
            try:
                await op()
            except Exception as exc:  # counted, not fatal: the leg reports its errors
                run.errors[type(exc).__name__] += 1
            else:
                run.samples.append(time.perf_counter_ns() - began)

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for op in slots:
            tg.start_soon(worker, op)
    run.wall_s = time.perf_counter() - began
    return run


def rss_mib(pid: int) -> float:
    """The resident set of one process, MiB."""
    rss: int = psutil.Process(pid).memory_info().rss
    return round(rss / MiB, 1)


def memory_of(procs: Sequence[psutil.Process]) -> dict[str, float]:
    """RSS and PSS summed over `procs` (MiB) and how many were read; PSS splits shared pages
    between the processes that map them, so summed PSS does not count a library twice."""
    rss = pss = 0
    read = 0
    for p in procs:
        try:
            info = p.memory_full_info()
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
        rss += info.rss
        pss += info.pss
        read += 1
    return {"rss_mib": round(rss / MiB, 1), "pss_mib": round(pss / MiB, 1), "processes": read}


def sandboxes(host_pid: int, ledger: Path) -> dict[str, list[psutil.Process]]:
    """The host's sandboxed children by plugin id: each direct child of the host (a sandbox's
    outer bwrap) with all its descendants. The plugin id comes from the host's sandbox ledger
    (`<data dir>/run/sandboxes/<pid>.json`); a child it does not name is `pid <n>`."""
    out: dict[str, list[psutil.Process]] = {}
    for top in psutil.Process(host_pid).children():
        try:
            tree = [top, *top.children(recursive=True)]
        except psutil.Error:
            continue
        try:
            plugin_id = str(json.loads((ledger / f"{top.pid}.json").read_text())["plugin_id"])
        except (OSError, ValueError, KeyError):
            plugin_id = f"pid {top.pid}"
        out[plugin_id] = tree
    return out


def tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants (the host: its sandboxes, bwrap and the servers)."""
    top = psutil.Process(pid)
    return [top, *top.children(recursive=True)]


def postgres_of(data_dir: Path) -> list[psutil.Process]:
    """A host's embedded PostgreSQL (run detached, not under the host): the postmaster whose
    data directory is under `data_dir`, and its backends."""
    mark = str(data_dir / "postgres")
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        if cmdline and cmdline[0].endswith("/postgres") and mark in cmdline:
            try:
                return [p, *p.children(recursive=True)]
            except psutil.Error:
                return [p]
    return []


def cpu_s(procs: Sequence[psutil.Process]) -> float:
    """User + system CPU seconds used so far by `procs` (those still alive)."""
    total = 0.0
    for p in procs:
        try:
            times = p.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


Bench = Callable[[Any, Processes, Path], Awaitable[dict[str, Any]]]


def run_leg(
    name: str,
    bench: Bench,
    args: Any,
    results: Path,
    finish: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """Run one leg's `bench(args, procs, workdir)` in a fresh folder under /tmp (every process
    it started stopped, the folder removed, on error too), add what `finish(result)` returns
    (its targets, its config), the duration and the load average before and after, and write
    it all to `results`."""
    workdir = Path(tempfile.mkdtemp(prefix=f"mcp{name}-", dir="/tmp"))
    procs = Processes(workdir)
    began = time.perf_counter()
    load_before = loadavg()
    try:
        result = anyio.run(bench, args, procs, workdir)
    finally:
        procs.close()
        shutil.rmtree(workdir, ignore_errors=True)
    result |= finish(result)
    result |= {
        "duration_s": round(time.perf_counter() - began, 1),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
    }
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(result, indent=1) + "\n")
    return result


def said_where(result: dict[str, Any], results: Path, repo: Path) -> str:
    """The closing line of a leg: how long, the load, where its results are."""
    load = f"loadavg {result['loadavg_before']} -> {result['loadavg_after']}"
    return f"[bench] {result['duration_s']} s, {load}; results in {results.relative_to(repo)}"
