"""A memfd flood from a sandboxed child, with and without the sandbox's cgroups: how much host
`Shmem` it holds (issue 11, sandbox memory).

The child, Python in real bubblewrap with a 512 MiB budget (`Limits.memory_bytes`), writes (never
maps) 16 MiB memfds up to `--mib` MiB (default 800) and keeps them open. Pages written to a memfd
are not in its address space, so RLIMIT_AS does not stop it; the sandbox's memory cgroup
(`sandbox_cgroup`, capped at the same 512 MiB) does. Printed per run: what the child said (or that
it was killed), its exit status, host `Shmem` at its highest while the child ran and once it ended
(deltas, MiB). Needs a usable memory cgroup (root, or a delegated cgroup v2 subtree).

Usage: .venv/bin/python bench/memfd_flood.py [--mib 800]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from mcp_host.sandbox.bwrap import Limits, SandboxSpec, build_command
from mcp_host.sandbox.cgroups import SandboxCgroups
from mcp_host.sandbox.seccomp import open_filter

MiB = 1 << 20
FLOOD = """
import json, os, sys
fds, total, err = [], 0, None
try:
    while total < int(sys.argv[1]) << 20:
        fd = os.memfd_create("x"); fds.append(fd)
        for _ in range(16):
            total += os.write(fd, bytes(1 << 20))
except OSError as e:
    err = e.strerror
print(json.dumps({"mib": total >> 20, "err": err}), flush=True)
sys.stdin.readline()
"""


def shmem_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no Shmem in /proc/meminfo")


def run(spec: SandboxSpec, groups: SandboxCgroups | None) -> str:
    group = groups.create("bench.memfd", 64, spec.limits.memory_bytes) if groups is not None else None
    fd = open_filter()
    before = shmem_mib()
    peak = before
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, shmem_mib())

    watcher = threading.Thread(target=watch)
    watcher.start()
    argv = build_command(spec, seccomp_fd=fd, cgroup=group)
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, pass_fds=(fd,))
    os.close(fd)
    assert child.stdout is not None and child.stdin is not None
    said = child.stdout.readline().strip() or "(killed before it answered)"
    peak = max(peak, shmem_mib())
    try:
        child.stdin.write("\n")
        child.stdin.flush()
    except BrokenPipeError:
        pass
    child.wait(30)
    done.set()
    watcher.join()
    if group is not None:
        group.release()
    return f"{said} exit={child.returncode} Shmem peak +{peak - before} MiB, after +{shmem_mib() - before} MiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=800)
    options = parser.parse_args()
    groups = SandboxCgroups.detect()
    if groups is None or groups.memory is None:
        sys.exit("no usable memory cgroup here (see the log)")
    limits = Limits(
        memory_bytes=512 * MiB, max_processes=64, max_open_files=256, cpu_seconds=60, max_file_bytes=16 * MiB
    )
    with tempfile.TemporaryDirectory(prefix="memfd-flood-") as folder:
        Path(folder, "flood.py").write_text(FLOOD)
        os.chmod(folder, 0o755)
        binds = tuple(dict.fromkeys((Path(sys.prefix), Path(sys.base_prefix))))
        spec = SandboxSpec(
            Path(folder), sys.executable, ("flood.py", str(options.mib)), {}, False, limits, extra_ro_binds=binds
        )
        print("without cgroups:", run(spec, None))
        print("with cgroups:   ", run(spec, groups))


if __name__ == "__main__":
    main()
