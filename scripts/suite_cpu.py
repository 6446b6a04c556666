"""Where the test suite's CPU goes: run pytest as `scripts/test` does, sample `/proc` every 0.1 s,
and print the CPU seconds and the process count of each kind of process the run started.

    .venv/bin/python scripts/suite_cpu.py [pytest arguments, e.g. tests/capabilities]

The suite is CPU-bound on two cores (mcp_host/README.md, "Where the suite's time goes"), so
what shortens it is less CPU, and this says whose. Only the run's processes count (its
descendants, detached daemons included); one that lives under 0.1 s may be missed.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
_PR_SET_CHILD_SUBREAPER = 36

# (a test of the command line, the kind): the first that matches names a process.
_KINDS: tuple[tuple[str, str], ...] = (
    ("bwrap ", "bwrap"),
    ("egress-bridge", "egress bridge"),
    ("/opt/mcp-host/", "sandboxed child"),
    ("server.py", "child outside a sandbox"),
    ("exec(eval(sys.stdin.readline()))", "xdist worker"),
    ("bin/pytest ", "pytest controller"),
    ("bin/mcp-host ", "mcp-host command"),
    ("postgres", "postgresql"),
    ("initdb", "postgresql"),
    ("chrom", "chromium"),
    ("node", "node"),
    ("npm", "node"),
    ("pip", "pip"),
    ("haproxy", "haproxy"),
    ("python", "other python"),
)


def _kind(process: psutil.Process) -> str:
    command = " ".join(process.cmdline())
    return next((kind for needle, kind in _KINDS if needle in command), "other")


class Sampler:
    """CPU seconds by kind of process, for this process's descendants. It is their subreaper, so
    a daemon that detaches (PostgreSQL under `pg_ctl`) stays one of them."""

    def __init__(self) -> None:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self._ours: dict[int, tuple[float, str]] = {}  # pid -> (seconds counted, kind)
        self.seconds: Counter[str] = Counter()
        self.processes: Counter[str] = Counter()
        self._stop = threading.Event()

    def run(self, pytest: int) -> None:
        while not self._stop.wait(0.1):
            self._sample()
            _reap_orphans(pytest)

    def stop(self) -> None:
        self._stop.set()

    def _sample(self) -> None:
        for process in psutil.Process().children(recursive=True):
            try:
                with process.oneshot():
                    counted, kind = self._ours.get(process.pid) or (0.0, _kind(process))
                    times = process.cpu_times()
            except psutil.Error:  # ended (or a zombie) since the listing
                continue
            if process.pid not in self._ours:
                self.processes[kind] += 1
            spent = times.user + times.system
            self.seconds[kind] += max(spent - counted, 0.0)
            self._ours[process.pid] = (max(spent, counted), kind)


def _reap_orphans(pytest: int) -> None:
    """Reap the orphans that ended, not pytest: its `Popen` waits for it."""
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if ended is None or ended.si_pid == pytest:
            return
        os.waitpid(ended.si_pid, 0)


def main(args: list[str]) -> int:
    workers = os.environ.get("MCP_HOST_TEST_WORKERS", "4")
    command = [str(ROOT / ".venv/bin/pytest"), "-n", workers, "--dist", "loadgroup", "-q", *args]
    sampler = Sampler()
    started = time.monotonic()
    with subprocess.Popen(command, cwd=ROOT) as pytest:
        watching = threading.Thread(target=sampler.run, args=(pytest.pid,), daemon=True)
        watching.start()
        code = pytest.wait()
    wall = time.monotonic() - started
    sampler.stop()
    watching.join()
    total = sum(sampler.seconds.values())
    print(f"\npytest exited {code} after {wall:.0f} s; {total:.0f} CPU s in the processes it started")
    print(f"{'CPU s':>8} {'share':>6} {'processes':>9}  kind")
    for kind, seconds in sampler.seconds.most_common():
        print(f"{seconds:8.1f} {seconds / total:6.1%} {sampler.processes[kind]:9d}  {kind}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
