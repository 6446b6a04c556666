"""Sandbox cgroups: one set per sandbox (pids, memory), capped at `pids.max` and the memory
limit, released and swept with what runs in them.

The machine's real cgroup file system, real bubblewrap: these tests skip, saying why, where no
pids or memory cgroup is usable (they need root, or a delegated cgroup v2 subtree).
`CGROUP_HOST` stands in for a host that gets killed. The argv that joins the groups is pinned
in tests/test_sandbox.py; a memfd flood held by the memory cgroup, in tests/test_launch.py.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from mcp_host.sandbox.bwrap import Limits, SandboxSpec, build_command
from mcp_host.sandbox.cgroups import SandboxCgroup, SandboxCgroups
from mcp_host.sandbox.seccomp import open_filter
from tests.hosting import PLUGINS
from tests.processes import FORK_LOOP, needs_bwrap, read_line, wait_until

# Any plugin folder will do: the fork bombs below are commands, not plugins.
PLUGIN_DIR = (PLUGINS / "escape").resolve()
MiB = 1024 * 1024
LIMITS = Limits(memory_bytes=1024 * MiB, max_processes=64, max_open_files=256, cpu_seconds=60, max_file_bytes=16 * MiB)
# What the host binds for `command: python` (mcp_host/launch.py): the venv and its base.
INTERPRETER = tuple(dict.fromkeys((Path(sys.prefix), Path(sys.base_prefix))))


# Forks until the pids cap refuses, and keeps trying: every process loops, none exits.
FORK_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.05)
"""

# A stand-in host for the cgroup sweep: makes a sandbox's groups in the pids and memory bases
# (argv[1], argv[2]; "-" for none), starts a sleep in them the way the host starts a sandbox,
# prints the groups and the sleep's pid, and waits to be killed.
CGROUP_HOST = """
import subprocess, sys, time
from pathlib import Path
from mcp_host.sandbox.cgroups import SandboxCgroups
pids, memory = (None if arg == "-" else Path(arg) for arg in sys.argv[1:3])
group = SandboxCgroups(pids, memory).create("test.sweep", 8, 64 << 20)
sleeper = subprocess.Popen([*group.join_argv(), "/bin/sleep", "60"], start_new_session=True)
print(",".join(map(str, group.paths)), sleeper.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def cgroups() -> SandboxCgroups:
    """The machine's sandbox cgroups, as a host detects them at start (pids and memory)."""
    groups = SandboxCgroups.detect()
    if groups is None or groups.pids is None or groups.memory is None:
        pytest.skip(
            "no usable pids and memory cgroups here: needs writable cgroup v1 pids and memory hierarchies "
            "under /sys/fs/cgroup, or cgroup v2 with both controllers in the root or a delegated cgroup "
            "(see the log)"
        )
    return groups


@pytest.fixture
def pids_cgroups() -> SandboxCgroups:
    """The machine's sandbox cgroups, with a pids controller."""
    groups = SandboxCgroups.detect()
    if groups is None or groups.pids is None:
        pytest.skip(
            "no usable pids cgroup here: needs a writable cgroup v1 pids hierarchy at /sys/fs/cgroup/pids, "
            "or cgroup v2 with the pids controller in the root or a delegated cgroup (see the log)"
        )
    return groups


def sandboxed(command: str, *args: str, limits: Limits = LIMITS) -> SandboxSpec:
    """A sandbox for `command`, with the host's interpreter bound as for `command: python`."""
    return SandboxSpec(PLUGIN_DIR, command, args, {}, limits, extra_ro_binds=INTERPRETER)


# --- a group's life ----------------------------------------------------------------------------


@pytest.mark.parametrize("owner", ["", "../x", "a/b", "Calendar", "a b", "-", "x" * 65])
def test_sandbox_cgroup_owner_must_be_a_plugin_id(owner: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be a plugin id"):
        SandboxCgroups(tmp_path, tmp_path).create(owner, 8, 64 * MiB)
    assert list(tmp_path.iterdir()) == []


def test_sandbox_cgroups_get_their_limits_and_release_kills_what_runs_in_them(cgroups: SandboxCgroups) -> None:
    group = cgroups.create("test.sandbox", 24, 96 * MiB)
    sleeper = subprocess.Popen([*group.join_argv(), "/bin/sleep", "60"], start_new_session=True)
    try:
        assert group.pids is not None and group.memory is not None
        assert (group.pids.parent, group.memory.parent) == (cgroups.pids, cgroups.memory)
        assert group.pids.name == group.memory.name and group.pids.name.startswith(f"test.sandbox-{os.getpid()}-")
        assert (group.pids / "pids.max").read_text() == "24\n"
        assert _memory_limits(group.memory) == {"memory": 96 * MiB, "memory+swap": 96 * MiB}
        for path in group.paths:  # sh joined each, then exec'd

            def joined(path: Path = path) -> bool:
                return _members(path) == {sleeper.pid}

            assert wait_until(joined, timeout=5)
        assert group.release()
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert not any(path.exists() for path in group.paths)
        assert group.release()  # twice is fine
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_child_that_cannot_join_its_cgroup_never_starts(cgroups: SandboxCgroups) -> None:
    group = cgroups.create("test.sandbox", 24, 64 * MiB)
    assert group.release()
    done = subprocess.run([*group.join_argv(), "/bin/echo", "started"], capture_output=True, text=True, timeout=10)
    assert done.returncode != 0 and done.stdout == ""


def test_sweep_removes_the_cgroups_of_a_dead_host_and_spares_a_live_hosts(cgroups: SandboxCgroups) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CGROUP_HOST, str(cgroups.pids), str(cgroups.memory)], stdout=subprocess.PIPE
    ) as host:
        try:
            paths, pid = read_line(host, timeout=30).split()
            groups, sleeper = [Path(path) for path in paths.split(",")], int(pid)
            assert {group.parent for group in groups} == {cgroups.pids, cgroups.memory}  # pids and memory
            assert wait_until(lambda: all(_members(group) == {sleeper} for group in groups), timeout=5)
            assert not set(groups) & set(cgroups.sweep())  # its host is alive
            assert all(_members(group) == {sleeper} for group in groups)
            host.kill()
            host.wait(timeout=5)
            assert all(_members(group) == {sleeper} for group in groups)  # the sleep outlived its host
            assert SandboxCgroups.detect() is not None  # what a host does at start: detect, then sweep
            assert not any(group.exists() for group in groups)
            assert wait_until(lambda: _gone(sleeper), timeout=3)
        finally:
            host.kill()


# --- detecting the host's cgroups --------------------------------------------------------------


def test_detect_falls_back_when_the_root_is_not_a_cgroup_file_system(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.sandbox.cgroups")
    empty = tmp_path / "empty"
    empty.mkdir()
    # Looks like a v2 root cgroup and a v1 pids hierarchy, but mkdir makes no control files here.
    lookalike = tmp_path / "lookalike"
    (lookalike / "pids").mkdir(parents=True)
    (lookalike / "pids" / "cgroup.procs").write_text("")
    (lookalike / "cgroup.controllers").write_text("cpu pids\n")
    # Looks like a v2 cgroup other than the root (it has a cgroup.type), not delegated.
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "cgroup.controllers").write_text("pids\n")
    (nested / "cgroup.type").write_text("domain\n")
    for root in (empty, lookalike, nested):
        assert SandboxCgroups.detect(root) is None
    root_host = os.geteuid() == 0  # a root host's fork bombs are then unbounded: a warning
    pids_level = logging.WARNING if root_host else logging.INFO
    # Without a memory cgroup nothing counts a sandbox's memfds, root or not: always a warning.
    assert [r.levelno for r in caplog.records] == [pids_level, logging.WARNING] * 3
    assert [r.getMessage().replace(str(tmp_path), "<tmp>") for r in caplog.records] == snapshot(
        [
            "no usable pids cgroup (v2: no cgroup2 hierarchy at <tmp>/empty; v1: no pids hierarchy at "
            "<tmp>/empty/pids); a sandbox's task cap is RLIMIT_NPROC alone, which the kernel does not "
            "enforce when the host runs as root",
            "no usable memory cgroup (v2: no cgroup2 hierarchy at <tmp>/empty; v1: no memory hierarchy at "
            "<tmp>/empty/memory); sandboxes run without one: their memfd pages are not counted (a sandbox can "
            "hold host RAM past child_memory_bytes until it exits)",
            "no usable pids cgroup (v2: [Errno 2] No such file or directory: '<tmp>/lookalike/cgroup.subtree_control'; "
            "v1: <tmp>/lookalike/pids/mcp-host is not in a pids cgroup hierarchy); a sandbox's task cap is "
            "RLIMIT_NPROC alone, which the kernel does not enforce when the host runs as root",
            "no usable memory cgroup (v2: the memory controller is not available in <tmp>/lookalike; v1: no "
            "memory hierarchy at <tmp>/lookalike/memory); sandboxes run without one: their memfd pages are not "
            "counted (a sandbox can hold host RAM past child_memory_bytes until it exits)",
            "no usable pids cgroup (v2: <tmp>/nested holds processes, so cgroup v2 gives its children no "
            "controller; run the host under systemd with Delegate=pids memory and DelegateSubgroup=, or as a "
            "non-root user; v1: no pids hierarchy at <tmp>/nested/pids); a sandbox's task cap is RLIMIT_NPROC "
            "alone, which the kernel does not enforce when the host runs as root",
            "no usable memory cgroup (v2: the memory controller is not available in <tmp>/nested; v1: no memory "
            "hierarchy at <tmp>/nested/memory); sandboxes run without one: their memfd pages are not counted (a "
            "sandbox can hold host RAM past child_memory_bytes until it exits)",
        ]
    )
    # The probe group made in the lookalike is gone again.
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "empty",
        "lookalike",
        "lookalike/cgroup.controllers",
        "lookalike/pids",
        "lookalike/pids/cgroup.procs",
        "lookalike/pids/mcp-host",
        "nested",
        "nested/cgroup.controllers",
        "nested/cgroup.type",
    ]


def test_detect_under_cgroup_v2_uses_the_delegated_parent_of_the_hosts_cgroup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # systemd's Delegate= with DelegateSubgroup=: the host runs in <unit>/<subgroup>, and the
    # unit's cgroup, marked delegated and holding no process, is where mcp-host/ goes.
    unit = tmp_path / "unit.service"
    (unit / "main").mkdir(parents=True)
    (unit / "main" / "cgroup.controllers").write_text("pids\n")
    (unit / "main" / "cgroup.type").write_text("domain\n")
    try:
        os.setxattr(unit, "user.delegate", b"1")
    except OSError as exc:
        pytest.skip(f"no user xattrs on {tmp_path}: {exc}")
    caplog.set_level(logging.INFO, logger="mcp_host.sandbox.cgroups")
    assert SandboxCgroups.detect(unit / "main") is None  # a lookalike: it picks the unit, then fails there
    assert "v2: [Errno 2] No such file or directory: '<tmp>/unit.service/cgroup.subtree_control'" in (
        caplog.records[0].getMessage().replace(str(tmp_path), "<tmp>")
    )


# --- containing a fork bomb ------------------------------------------------------------------


@needs_bwrap
@pytest.mark.skipif(
    os.geteuid() != 0, reason="as non-root, see test_sandbox.py::..._per_sandbox_when_the_host_is_not_root"
)
def test_fork_bomb_is_capped_when_the_host_is_root(pids_cgroups: SandboxCgroups) -> None:
    # As root RLIMIT_NPROC is never enforced (kuid 0 is exempt in fork()): the pids cgroup
    # caps the sandbox. Its budget also holds bwrap's two processes and the two shells.
    limits = replace(LIMITS, max_processes=24)
    spec = sandboxed("/bin/sh", "-c", FORK_LOOP, limits=limits)
    group = pids_cgroups.create("test.bomb", limits.max_processes, limits.memory_bytes)
    seccomp_fd = open_filter()
    try:
        argv = build_command(spec, seccomp_fd=seccomp_fd, cgroup=group)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, pass_fds=(seccomp_fd,))
    finally:
        os.close(seccomp_fd)
        assert group.release()
    assert limits.max_processes - 6 <= int(done.stdout) < limits.max_processes


@needs_bwrap
def test_a_running_fork_bomb_is_held_at_pids_max_while_the_host_still_spawns(pids_cgroups: SandboxCgroups) -> None:
    limits = replace(LIMITS, max_processes=32)
    spec = sandboxed(sys.executable, "-c", FORK_BOMB, limits=limits)
    group = pids_cgroups.create("test.bomb", limits.max_processes, limits.memory_bytes)
    seccomp_fd, other_fd = open_filter(), open_filter()
    bomb = subprocess.Popen(
        build_command(spec, seccomp_fd=seccomp_fd, cgroup=group),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        pass_fds=(seccomp_fd,),
    )
    os.close(seccomp_fd)
    try:
        assert wait_until(lambda: _refused_forks(group) > 0, timeout=20)  # the bomb reached the cap
        assert group.pids is not None
        assert bomb.pid in _members(group.pids)  # bwrap itself runs in the group
        assert wait_until(lambda: _refused_forks(group) > 100, timeout=20)  # and keeps pressing on it
        assert int((group.pids / "pids.current").read_text()) <= limits.max_processes
        assert len(_members(group.pids)) <= limits.max_processes
        assert bomb.poll() is None
        # The host spawns a process, and another sandbox, as if nothing happened.
        assert subprocess.run(["/bin/true"], timeout=10).returncode == 0
        other = build_command(sandboxed("/bin/echo", "alive"), seccomp_fd=other_fd)
        done = subprocess.run(other, capture_output=True, text=True, timeout=30, pass_fds=(other_fd,))
        assert done.stdout == "alive\n"
    finally:
        os.close(other_fd)
        assert group.release()  # kills the whole bomb
        bomb.wait(timeout=10)
    assert bomb.returncode == -signal.SIGKILL
    assert not any(path.exists() for path in group.paths)


# --- helpers ---------------------------------------------------------------------------------


def _members(group: Path | None) -> set[int]:
    assert group is not None
    try:
        return {int(pid) for pid in (group / "cgroup.procs").read_text().split()}
    except FileNotFoundError:
        return set()


def _memory_limits(group: Path) -> dict[str, int]:
    """A memory group's caps: memory, and memory plus swap (v2: memory.max + memory.swap.max,
    v1: memory.memsw.limit_in_bytes where swap is accounted, else no swap to count)."""
    if (group / "memory.max").exists():
        memory = int((group / "memory.max").read_text())
        swap = group / "memory.swap.max"
        return {"memory": memory, "memory+swap": memory + (int(swap.read_text()) if swap.exists() else 0)}
    memory = int((group / "memory.limit_in_bytes").read_text())
    memsw = group / "memory.memsw.limit_in_bytes"
    return {"memory": memory, "memory+swap": int(memsw.read_text()) if memsw.exists() else memory}


def _refused_forks(group: SandboxCgroup) -> int:
    """How many forks the group's pids.max refused (the "max" count of pids.events)."""
    assert group.pids is not None
    events = dict(line.split() for line in (group.pids / "pids.events").read_text().splitlines())
    return int(events["max"])


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie whose new parent has not reaped it yet counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"
