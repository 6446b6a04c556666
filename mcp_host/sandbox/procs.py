"""Reading processes from /proc: a pid's parent, process group and start time.

Above: `sandbox`'s ledger (which sandbox is still the process it recorded, and its children
to kill) and `sandbox.cgroups` (a group's name carries its host's pid and start time; a sweep
spares the groups of a live host). Below: Linux procfs, `/proc/<pid>/stat`. A pid alone can
be recycled; a pid with its start time names one process. Nothing here signals a process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcStat", "child_pids", "proc_stat", "started_at"]


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the host uses; `starttime` is in clock ticks since boot."""

    ppid: int
    pgid: int
    starttime: int


def proc_stat(pid: int) -> ProcStat | None:
    """Fields of /proc/<pid>/stat, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may hold spaces and parentheses; the fields after the last ")" start at
    # field 3 (state): ppid is field 4, pgrp 5, starttime 22.
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(ppid=int(fields[1]), pgid=int(fields[2]), starttime=int(fields[19]))


def started_at(pid: int, starttime: int) -> bool:
    """Whether `pid` is alive and is the process that started at `starttime` (not a reuse)."""
    stat = proc_stat(pid)
    return stat is not None and stat.starttime == starttime


def child_pids(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (a scan of /proc: callers use it rarely)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat.ppid == pid:
                found.append(int(entry.name))
    return found
