"""The cgroups of a sandbox: a pids cgroup, the only cap on a sandbox's tasks that holds when
the host runs as root (the kernel never applies RLIMIT_NPROC to root; see
`sandbox._prlimit_argv`), and a memory cgroup, the only cap on the shared memory a sandbox
fills through write() (memfds, tmpfs), which no rlimit sees: pages written to a memfd are
not in the writer's address space (RLIMIT_AS), yet held until the last fd closes.

Above: `launch` detects the host's `SandboxCgroups` once (which sweeps the groups of hosts
that are gone) and creates one `SandboxCgroup` per sandbox, which `children` releases
(`Launch.release`) once the child has been reaped; `sandbox.build_command` puts the group's
`join_argv` in front of bwrap, so `/bin/sh` moves itself into the group and then execs bwrap.
Below: the kernel's cgroup file system under /sys/fs/cgroup, cgroup v2 (the root cgroup, or
the delegated parent of the host's own: one group holds both controllers) or cgroup v1's
`pids` and `memory` hierarchies (one group in each), and `procs` for whether a group's host
still runs. Each controller is detected on its own; a missing one is a warning, not a
refusal to start (fail-open, as the host has always run without a pids cgroup).

Each group is named after its plugin, the host's pid and start time and a random suffix, so
every host on a machine shares one `mcp-host/` directory per hierarchy and a sweep never
touches the groups of a live host. Nothing here starts a process; `SandboxCgroup.release` and
the sweep only kill.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mcp_host.errors import InternalError

from .procs import proc_stat, started_at

__all__ = ["SandboxCgroup", "SandboxCgroups"]

logger = logging.getLogger(__name__)

Controller = Literal["pids", "memory"]
_CONTROLLERS: tuple[Controller, ...] = ("pids", "memory")
_CGROUP_FS = Path("/sys/fs/cgroup")
_GROUPS_DIR = "mcp-host"
_SH = "/bin/sh"
# The sandbox's first act, before bwrap exists: the shell moves itself ($$, the pid that `exec`
# then hands to bwrap) into the group at $0 (and, on cgroup v1, the one at $1 of the other
# hierarchy). Nothing has forked yet, so no task escapes a cap, and there is no window in which
# the host would have to move a running process. The paths are arguments, never shell text; if
# a write fails, `&&` stops before bwrap: no child.
# Rejected: the host writing the pid after spawning (bwrap may fork first), `preexec_fn` (not
# safe with threads), clone3(CLONE_INTO_CGROUP) (v2 only, not in Python), a Python trampoline
# (tens of ms per start, for what dash does in one), cgexec (one more package).
_JOIN_SCRIPTS = {
    1: 'echo $$ > "$0/cgroup.procs" && exec "$@"',
    2: 'echo $$ > "$0/cgroup.procs" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
}
# "<plugin id>-<host pid>-<host start time>-<random>": a sweep spares the groups of a live host.
_GROUP_OWNER = re.compile(r"[a-z0-9_.]{1,64}")
_GROUP_NAME = re.compile(r"[a-z0-9_.]{1,64}-(?P<host_pid>[0-9]+)-(?P<host_start>[0-9]+)-[0-9a-f]{8}")
_RELEASE_TIMEOUT_S = 5.0
_RELEASE_POLL_S = 0.01
# The control file whose presence says a group has the controller (v2, v1).
_LIMIT_FILES: dict[Controller, tuple[str, str]] = {
    "pids": ("pids.max", "pids.max"),
    "memory": ("memory.max", "memory.limit_in_bytes"),
}


class _Unusable(InternalError):
    """A cgroup cannot be made here; the message says why (for the fallback warning)."""


@dataclass(frozen=True)
class SandboxCgroup:
    """One sandbox's cgroups: `pids`, a directory with `pids.max` set, and `memory`, one with
    the memory limit set; the same directory under cgroup v2, None for a controller the host
    has not got (never both None).

    `pids.max` counts tasks (threads too) of the whole sandbox: bwrap's two processes, the
    command and everything it starts. At the cap fork() and clone() fail with EAGAIN.
    The memory limit counts every page the sandbox's processes allocate: their anonymous
    memory, the tmpfs and memfd pages they write, page cache and kernel memory; no swap. At
    the cap the kernel reclaims what it can, then a write fails or the OOM killer kills
    within the group (on v2 the whole group: `memory.oom.group`).
    """

    pids: Path | None = None
    memory: Path | None = None

    @property
    def paths(self) -> tuple[Path, ...]:
        """The distinct directories of this sandbox's groups."""
        return tuple(dict.fromkeys(path for path in (self.pids, self.memory) if path is not None))

    def join_argv(self) -> list[str]:
        """The argv prefix that joins these groups, then execs the rest of the argv (bwrap)."""
        paths = self.paths
        return [_SH, "-c", _JOIN_SCRIPTS[len(paths)], *map(str, paths)]

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in the memory group for its
        limit (cgroup v2's `memory.events`, v1's `memory.oom_control`: `oom_kill N`); 0 with no
        memory group, or a kernel that does not count (v1 before Linux 4.13). Read it before
        `release`, which removes the group."""
        if self.memory is None:
            return 0
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = (self.memory / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
        return 0

    def release(self, timeout_s: float = _RELEASE_TIMEOUT_S) -> bool:
        """SIGKILL whatever still runs in the groups, then remove them. Call it once the
        sandbox's process has exited (or was never spawned).

        Blocks until the groups are gone or `timeout_s` has passed; returns whether they are
        gone (a group left behind is logged, and removed by the sweep of the next host).
        """
        deadline = time.monotonic() + timeout_s
        released = [_release(path, deadline) for path in self.paths]  # each, even after a failure
        return all(released)


def _release(path: Path, deadline: float) -> bool:
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                logger.warning("could not remove cgroup %s: %s", path, exc)
                return False
        _kill_members(path)
        time.sleep(_RELEASE_POLL_S)  # SIGKILLed tasks leave the group as they exit


@dataclass(frozen=True)
class _Hierarchy:
    """The `mcp-host` directory of one cgroup hierarchy, `base`, and the controllers the host
    uses there (both under cgroup v2, one per v1 hierarchy)."""

    base: Path
    controllers: frozenset[Controller]


class SandboxCgroups:
    """Where the host makes its sandboxes' cgroups: per controller (`pids`, `memory`), the
    `mcp-host` directory of a hierarchy that has it, shared by every host on the machine (their
    group names tell them apart); None for a controller the host cannot use. Under cgroup v2
    both are the same directory.

    `detect` finds them: cgroup v2 (the unified hierarchy with the controller) or v1 (a
    hierarchy of that name), under the host's own cgroup. Without pids a sandbox's only task
    cap is prlimit's RLIMIT_NPROC, which holds for a non-root host alone; without memory,
    nothing caps the memfd pages a sandbox writes, and tmpfs only by its size.
    """

    def __init__(self, pids: Path | None = None, memory: Path | None = None) -> None:
        self.pids = pids
        self.memory = memory
        wanted: dict[Path, set[Controller]] = {}
        bases: tuple[tuple[Controller, Path | None], ...] = (("pids", pids), ("memory", memory))
        for controller, base in bases:
            if base is not None:
                wanted.setdefault(base, set()).add(controller)
        self._hierarchies = [_Hierarchy(base, frozenset(controllers)) for base, controllers in wanted.items()]

    @property
    def bases(self) -> tuple[Path, ...]:
        return tuple(h.base for h in self._hierarchies)

    @classmethod
    def detect(cls, fs_root: Path = _CGROUP_FS) -> SandboxCgroups | None:
        """The host's sandbox cgroups under `fs_root` (where cgroup file systems are mounted),
        after sweeping the groups of hosts that are gone; None when no controller is usable.

        A controller neither cgroup v2 nor v1 offers as a group this process may create and
        fill is logged with the reasons: for pids a warning for a root host (whose fork bombs
        are then bounded by pid_max alone), else info; for memory always a warning.
        """
        own = _own_cgroups()
        found: dict[Controller, Path] = {}
        for controller in _CONTROLLERS:
            reasons: list[str] = []
            for version, find_base in (("v2", _v2_base), ("v1", _v1_base)):
                try:
                    base = find_base(fs_root, own, controller)
                    _probe(base, controller)
                except (_Unusable, OSError) as exc:
                    reasons.append(f"{version}: {exc}")
                    continue
                logger.info("each sandbox gets a %s cgroup under %s (cgroup %s)", controller, base, version)
                found[controller] = base
                break
            else:
                _log_unusable(controller, "; ".join(reasons))
        if not found:
            return None
        groups = cls(found.get("pids"), found.get("memory"))
        groups.sweep()
        return groups

    def create(self, owner: str, max_pids: int, memory_bytes: int) -> SandboxCgroup:
        """New groups for one sandbox of `owner` (a plugin id), capped at `max_pids` tasks and
        `memory_bytes` of memory (each where the host has the controller).

        Raises ValueError for an owner that is not a plugin id, OSError when the cgroup file
        system refuses (nothing is left behind then).
        """
        if not _GROUP_OWNER.fullmatch(owner):
            raise ValueError(f"cgroup owner {owner!r} must be a plugin id")
        if not self._hierarchies:
            raise ValueError("no cgroup hierarchy to make a sandbox's groups in")
        name = _group_name(owner)
        made: dict[Controller, Path] = {}
        try:
            for hierarchy in self._hierarchies:
                path = hierarchy.base / name
                path.mkdir()
                for controller in hierarchy.controllers:
                    made[controller] = path
                if "pids" in hierarchy.controllers:
                    _write(path / "pids.max", str(max_pids))
                if "memory" in hierarchy.controllers:
                    _limit_memory(path, memory_bytes)
        except OSError:
            SandboxCgroup(made.get("pids"), made.get("memory")).release()
            raise
        return SandboxCgroup(made.get("pids"), made.get("memory"))

    def sweep(self) -> list[Path]:
        """Remove the groups of hosts that are gone, first killing what still runs in them
        (docs/security.md B4: sandboxes a SIGKILLed host left, even ones it never recorded in its
        ledger). The groups of a live host, this one's included, are spared. Returns the
        groups removed.
        """
        removed: list[Path] = []
        deadline = time.monotonic() + _RELEASE_TIMEOUT_S
        for base in self.bases:
            for path in sorted(base.iterdir()):
                match = _GROUP_NAME.fullmatch(path.name)
                if match is None or not path.is_dir():
                    continue  # cgroup v1's control files, or not ours
                if started_at(int(match["host_pid"]), int(match["host_start"])):
                    continue
                if _release(path, deadline):
                    logger.warning("removed cgroup %s, left by a host that is gone", path)
                    removed.append(path)
        return removed


def _log_unusable(controller: Controller, reasons: str) -> None:
    if controller == "pids":
        level = logging.WARNING if os.geteuid() == 0 else logging.INFO
        logger.log(
            level,
            "no usable pids cgroup (%s); a sandbox's task cap is RLIMIT_NPROC alone, which the kernel "
            "does not enforce when the host runs as root",
            reasons,
        )
    else:
        logger.warning(
            "no usable memory cgroup (%s); sandboxes run without one: their memfd pages are not "
            "counted (a sandbox can hold host RAM past child_memory_bytes until it exits)",
            reasons,
        )


def _probe(base: Path, controller: Controller) -> None:
    """Make, cap and remove a group: `base` must be a cgroup of `controller` this process can
    fill."""
    path = base / _group_name("probe")
    path.mkdir()
    try:
        if not any((path / name).is_file() for name in _LIMIT_FILES[controller]):
            raise _Unusable(f"{base} is not in a {controller} cgroup hierarchy")
        if controller == "pids":
            _write(path / "pids.max", "1")
        else:
            _limit_memory(path, 64 << 20)
        if not os.access(path / "cgroup.procs", os.W_OK):
            raise _Unusable(f"{path / 'cgroup.procs'} is not writable")
    finally:
        path.rmdir()


def _limit_memory(path: Path, memory_bytes: int) -> None:
    """Cap the group at `memory_bytes`, swap included (no swap beyond it)."""
    if (path / "memory.max").is_file():  # v2
        _write(path / "memory.max", str(memory_bytes))
        if (path / "memory.swap.max").is_file():
            _write(path / "memory.swap.max", "0")
        if (path / "memory.oom.group").is_file():
            _write(path / "memory.oom.group", "1")  # an OOM kill ends the whole sandbox
        return
    # v1: memsw (memory + swap) must stay >= the memory limit, so the memory limit goes
    # first; memsw exists only with swap accounting on.
    _write(path / "memory.limit_in_bytes", str(memory_bytes))
    if (path / "memory.memsw.limit_in_bytes").is_file():
        _write(path / "memory.memsw.limit_in_bytes", str(memory_bytes))


def _group_name(owner: str) -> str:
    host = proc_stat(os.getpid())
    assert host is not None  # this very process
    return f"{owner}-{os.getpid()}-{host.starttime}-{secrets.token_hex(4)}"


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 one (/proc/self/cgroup).

    The paths are relative to this process's cgroup namespace, as the mounts under
    /sys/fs/cgroup are.
    """
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    return own


def _inside(mount: Path, own: str | None) -> Path:
    """`own` (a cgroup path) under `mount`; the mount itself when a container mounted only its
    own subtree there (its cgroup path then names a directory the mount does not show)."""
    path = mount / (own or "/").lstrip("/")
    return path if path.is_dir() else mount


def _v1_base(fs_root: Path, own: Mapping[str, str], controller: Controller) -> Path:
    mount = fs_root / controller
    if not (mount / "cgroup.procs").is_file():
        raise _Unusable(f"no {controller} hierarchy at {mount}")
    base = _inside(mount, own.get(controller)) / _GROUPS_DIR
    base.mkdir(exist_ok=True)
    return base


def _v2_base(fs_root: Path, own: Mapping[str, str], controller: Controller) -> Path:
    mounts = [path for path in (fs_root, fs_root / "unified") if (path / "cgroup.controllers").is_file()]
    if not mounts:
        raise _Unusable(f"no cgroup2 hierarchy at {fs_root}")
    here = _inside(mounts[0], own.get(""))
    if controller not in _words(here / "cgroup.controllers"):
        # Also the hybrid layout, where the controller is bound to its v1 hierarchy.
        raise _Unusable(f"the {controller} controller is not available in {here}")
    parent = _v2_parent(here)
    _enable(parent, controller)
    base = parent / _GROUPS_DIR
    base.mkdir(exist_ok=True)
    _enable(base, controller)
    return base


def _v2_parent(here: Path) -> Path:
    """The cgroup to make `mcp-host/` in, given the host's own cgroup `here`.

    cgroup v2's no-internal-process rule: a non-root cgroup that holds processes gives its
    children no domain controller (memory is one). pids is a threaded controller, so enabling it there is not
    refused, but it turns the host's cgroup into a threaded domain (cgroup-v2.rst, "Threads"),
    whose new children are invalid until made threaded, and systemd, which owns that cgroup
    unless it delegated it, may undo the change. So: the root cgroup (exempt; the only one
    without `cgroup.type`), or the parent of `here` when it was delegated to us and holds no
    process itself (systemd's `Delegate=pids memory` with `DelegateSubgroup=`, which runs the
    service one level down). Rejected: moving the host into a leaf of its own cgroup, which
    would also move (or strand) every other process there, behind systemd's back.
    """
    if not (here / "cgroup.type").exists():
        return here
    above = here.parent
    if _delegated(above) and not _members(above):
        return above
    raise _Unusable(
        f"{here} holds processes, so cgroup v2 gives its children no controller; run the host "
        "under systemd with Delegate=pids memory and DelegateSubgroup=, or as a non-root user"
    )


def _delegated(path: Path) -> bool:
    """Whether systemd marked `path` as delegated (the `trusted.`/`user.delegate` xattr)."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(path, name) == b"1":
                return True
        except OSError:
            continue
    return False


def _enable(path: Path, controller: Controller) -> None:
    if controller not in _words(path / "cgroup.subtree_control"):
        _write(path / "cgroup.subtree_control", f"+{controller}")


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except FileNotFoundError:
        return []


def _write(path: Path, text: str) -> None:
    """Write a cgroup control file; never creates one (a missing file is FileNotFoundError)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _members(group: Path) -> set[int]:
    """The pids of the processes in `group` (none when it is gone or unreadable)."""
    try:
        return {int(pid) for pid in (group / "cgroup.procs").read_text().split()}
    except OSError:
        return set()


def _kill_members(group: Path) -> None:
    """SIGKILL every process in `group`: at once through `cgroup.kill` (v2, Linux 5.14+), else
    one by one through pidfds opened *before* the membership is read again, so a pid recycled
    after the first listing is never signalled (its pidfd is the old, dead process's)."""
    # OSError, not just ProcessLookupError: a group we may not empty is reported by `release`
    # (it stays busy), never raised into the caller's cleanup.
    kill_all = group / "cgroup.kill"
    if kill_all.exists():
        try:
            _write(kill_all, "1")
        except OSError:
            pass
        return
    pidfds: dict[int, int] = {}
    try:
        for pid in _members(group):
            try:
                pidfds[pid] = os.pidfd_open(pid)
            except OSError:
                continue
        for pid in _members(group) & pidfds.keys():
            try:
                signal.pidfd_send_signal(pidfds[pid], signal.SIGKILL)
            except OSError:
                continue
    finally:
        for fd in pidfds.values():
            os.close(fd)
