"""A pids cgroup per sandbox: the only cap on a sandbox's tasks that holds when the host runs
as root (the kernel never applies RLIMIT_NPROC to root; see `sandbox._prlimit_argv`).

Above: `launch` detects the host's `PidsCgroups` once (which sweeps the groups of hosts that
are gone) and creates one `PidsCgroup` per sandbox, which `children` releases (`Launch.release`)
once the child has been reaped; `sandbox.build_command` puts the group's `join_argv` in front
of bwrap, so `/bin/sh` moves itself into the group and then execs bwrap. Below: the kernel's
cgroup file system under /sys/fs/cgroup, either cgroup v1's `pids` hierarchy or cgroup v2 (the
root cgroup, or the delegated parent of the host's own), and `procs` for whether a group's
host still runs.

Each group is named after its plugin, the host's pid and start time and a random suffix, so
every host on a machine shares one `mcp-host/` directory and a sweep never touches the groups
of a live host. Nothing here starts a process; `PidsCgroup.release` and the sweep only kill.
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

from .procs import proc_stat, started_at

__all__ = ["PidsCgroup", "PidsCgroups"]

logger = logging.getLogger(__name__)

_CGROUP_FS = Path("/sys/fs/cgroup")
_GROUPS_DIR = "mcp-host"
_SH = "/bin/sh"
# The sandbox's first act, before bwrap exists: the shell moves itself ($$, the pid that `exec`
# then hands to bwrap) into the group at $0. Nothing has forked yet, so no task escapes the cap,
# and there is no window in which the host would have to move a running process. The path is
# an argument, never shell text; if the write fails, `&&` stops before bwrap: no child.
# Rejected: the host writing the pid after spawning (bwrap may fork first), `preexec_fn` (not
# safe with threads), clone3(CLONE_INTO_CGROUP) (v2 only, not in Python), a Python trampoline
# (tens of ms per start, for what dash does in one), cgexec (one more package).
_JOIN_SCRIPT = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
# "<plugin id>-<host pid>-<host start time>-<random>": a sweep spares the groups of a live host.
_GROUP_OWNER = re.compile(r"[a-z0-9_.]{1,64}")
_GROUP_NAME = re.compile(r"[a-z0-9_.]{1,64}-(?P<host_pid>[0-9]+)-(?P<host_start>[0-9]+)-[0-9a-f]{8}")
_RELEASE_TIMEOUT_S = 5.0
_RELEASE_POLL_S = 0.01


class _Unusable(Exception):
    """A pids cgroup cannot be made here; the message says why (for the fallback warning)."""


@dataclass(frozen=True)
class PidsCgroup:
    """One sandbox's pids cgroup: a directory of a cgroup file system, its `pids.max` set.

    `pids.max` counts tasks (threads too) of the whole sandbox: bwrap's two processes, the
    command and everything it starts. At the cap fork() and clone() fail with EAGAIN.
    """

    path: Path

    def join_argv(self) -> list[str]:
        """The argv prefix that joins this group, then execs the rest of the argv (bwrap)."""
        return [_SH, "-c", _JOIN_SCRIPT, str(self.path)]

    def release(self, timeout_s: float = _RELEASE_TIMEOUT_S) -> bool:
        """SIGKILL whatever still runs in the group, then remove it. Call it once the sandbox's
        process has exited (or was never spawned).

        Blocks until the group is gone or `timeout_s` has passed; returns whether it is gone
        (a group left behind is logged, and removed by the sweep of the next host).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    logger.warning("could not remove pids cgroup %s: %s", self.path, exc)
                    return False
            _kill_members(self.path)
            time.sleep(_RELEASE_POLL_S)  # SIGKILLed tasks leave the group as they exit


class PidsCgroups:
    """Where the host makes its sandboxes' pids cgroups: `base`, the `mcp-host` directory of
    a pids hierarchy, shared by every host on the machine (their group names tell them apart).

    `detect` finds it: cgroup v2 (the unified hierarchy with the pids controller) or v1 (a
    `pids` hierarchy), under the host's own cgroup. Without one a sandbox's only task cap is
    prlimit's RLIMIT_NPROC, which holds for a non-root host alone.
    """

    def __init__(self, base: Path) -> None:
        self.base = base

    @classmethod
    def detect(cls, fs_root: Path = _CGROUP_FS) -> PidsCgroups | None:
        """The host's pids cgroups under `fs_root` (where cgroup file systems are mounted),
        after sweeping the groups of hosts that are gone; None when neither cgroup v2 nor v1
        offers a pids cgroup this process may create and fill (logged with the reasons: a
        warning for a root host, whose fork bombs are then bounded by pid_max alone).
        """
        own = _own_cgroups()
        reasons: list[str] = []
        for version, find_base in (("v2", _v2_base), ("v1", _v1_base)):
            try:
                groups = cls(find_base(fs_root, own))
                groups._probe()
            except (_Unusable, OSError) as exc:
                reasons.append(f"{version}: {exc}")
                continue
            logger.info("each sandbox gets a pids cgroup under %s (cgroup %s)", groups.base, version)
            groups.sweep()
            return groups
        level = logging.WARNING if os.geteuid() == 0 else logging.INFO
        logger.log(
            level,
            "no usable pids cgroup (%s); a sandbox's task cap is RLIMIT_NPROC alone, which the kernel "
            "does not enforce when the host runs as root",
            "; ".join(reasons),
        )
        return None

    def create(self, owner: str, max_pids: int) -> PidsCgroup:
        """A new group for one sandbox of `owner` (a plugin id), capped at `max_pids` tasks.

        Raises ValueError for an owner that is not a plugin id, OSError when the cgroup file
        system refuses.
        """
        if not _GROUP_OWNER.fullmatch(owner):
            raise ValueError(f"pids cgroup owner {owner!r} must be a plugin id")
        path = self.base / _group_name(owner)
        path.mkdir()
        group = PidsCgroup(path)
        try:
            _write(path / "pids.max", str(max_pids))
        except OSError:
            group.release()
            raise
        return group

    def sweep(self) -> list[Path]:
        """Remove the groups of hosts that are gone, first killing what still runs in them
        (SECURITY.md B4: sandboxes a SIGKILLed host left, even ones it never recorded in its
        ledger). The groups of a live host, this one's included, are spared. Returns the
        groups removed.
        """
        removed: list[Path] = []
        for path in sorted(self.base.iterdir()):
            match = _GROUP_NAME.fullmatch(path.name)
            if match is None or not path.is_dir():
                continue  # cgroup v1's control files, or not ours
            if started_at(int(match["host_pid"]), int(match["host_start"])):
                continue
            if PidsCgroup(path).release():
                logger.warning("removed pids cgroup %s, left by a host that is gone", path.name)
                removed.append(path)
        return removed

    def _probe(self) -> None:
        """Make, cap and remove a group: `base` must be a pids cgroup this process can fill."""
        path = self.base / _group_name("probe")
        path.mkdir()
        try:
            if not (path / "pids.max").is_file():
                raise _Unusable(f"{self.base} is not in a pids cgroup hierarchy")
            _write(path / "pids.max", "1")
            if not os.access(path / "cgroup.procs", os.W_OK):
                raise _Unusable(f"{path / 'cgroup.procs'} is not writable")
        finally:
            path.rmdir()


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


def _v1_base(fs_root: Path, own: Mapping[str, str]) -> Path:
    mount = fs_root / "pids"
    if not (mount / "cgroup.procs").is_file():
        raise _Unusable(f"no pids hierarchy at {mount}")
    base = _inside(mount, own.get("pids")) / _GROUPS_DIR
    base.mkdir(exist_ok=True)
    return base


def _v2_base(fs_root: Path, own: Mapping[str, str]) -> Path:
    mounts = [path for path in (fs_root, fs_root / "unified") if (path / "cgroup.controllers").is_file()]
    if not mounts:
        raise _Unusable(f"no cgroup2 hierarchy at {fs_root}")
    here = _inside(mounts[0], own.get(""))
    if "pids" not in _words(here / "cgroup.controllers"):
        # Also the hybrid layout, where pids is bound to its v1 hierarchy.
        raise _Unusable(f"the pids controller is not available in {here}")
    parent = _v2_parent(here)
    _enable_pids(parent)
    base = parent / _GROUPS_DIR
    base.mkdir(exist_ok=True)
    _enable_pids(base)
    return base


def _v2_parent(here: Path) -> Path:
    """The cgroup to make `mcp-host/` in, given the host's own cgroup `here`.

    cgroup v2's no-internal-process rule: a non-root cgroup that holds processes gives its
    children no domain controller. pids is a threaded controller, so enabling it there is not
    refused, but it turns the host's cgroup into a threaded domain (cgroup-v2.rst, "Threads"),
    whose new children are invalid until made threaded, and systemd, which owns that cgroup
    unless it delegated it, may undo the change. So: the root cgroup (exempt; the only one
    without `cgroup.type`), or the parent of `here` when it was delegated to us and holds no
    process itself (systemd's `Delegate=pids` with `DelegateSubgroup=`, which runs the
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
        "under systemd with Delegate=pids and DelegateSubgroup=, or as a non-root user"
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


def _enable_pids(path: Path) -> None:
    if "pids" not in _words(path / "cgroup.subtree_control"):
        _write(path / "cgroup.subtree_control", "+pids")


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
