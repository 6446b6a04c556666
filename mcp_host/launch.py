"""What starts a plugin's process: the argv, working directory and environment, the fd of its
seccomp filter, and the sandbox's pids cgroup, released once the process has exited.

Above: `children` (which spawns what this returns with `pass_fds=launch.pass_fds`, calls
`Launch.close_passed_fds` right after the spawn and `Launch.release` after reaping it). Below:
`sandbox` (the bubblewrap argv), `seccomp` (the filter) and `pids_cgroup`. `command: python` in a
manifest means the host's own interpreter, so the MCP SDK (and later the plugin kit) are
importable inside the sandbox: its prefix and base prefix are bound read-only, nothing else of
the host's tree.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import anyio.to_thread

from .pids_cgroup import PidsCgroup, PidsCgroups
from .plugins import Plugin
from .sandbox import Limits, SandboxSpec, build_command
from .seccomp import open_filter
from .settings import Settings

__all__ = ["SOCKET_ENV", "SOCKET_INSIDE", "Launch", "host_pids_cgroups", "launch_for"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """How to start one child. `cgroup` is its sandbox's pids cgroup (None when the host has
    none, or the sandbox is off); `release` removes it.

    pass_fds: the fds the child must inherit, the only ones (the seccomp filter's, which the
    argv names; none with the sandbox off). The launch owns them: `close_passed_fds` closes the
    host's copies, as soon as the child is spawned or will not be.
    """

    argv: list[str]
    cwd: Path | None
    env: dict[str, str]
    cgroup: PidsCgroup | None = None
    pass_fds: tuple[int, ...] = ()
    _open_fds: set[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_open_fds", set(self.pass_fds))

    def close_passed_fds(self) -> None:
        """Close the host's copies of `pass_fds`. Safe to call twice: an fd is closed once,
        never again after its number may have been reused."""
        while self._open_fds:
            os.close(self._open_fds.pop())

    async def release(self) -> None:
        """Close the fds still open, kill what is left in the sandbox's pids cgroup and remove
        it; call it once the process has been reaped, or failed to spawn. Safe to call twice."""
        self.close_passed_fds()
        if self.cgroup is not None:
            await anyio.to_thread.run_sync(self.cgroup.release)


@functools.cache
def host_pids_cgroups(cgroup_root: Path) -> PidsCgroups | None:
    """The host's pids cgroups under `cgroup_root`: detected once per process (sweeping the
    groups of hosts that are gone), and None, logged once, when none is usable.

    Call it at host start; otherwise the first launch does.
    """
    return PidsCgroups.detect(cgroup_root)


def _interpreter_dirs() -> tuple[Path, ...]:
    dirs = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    # A venv's python is a symlink into the base interpreter's bin; both trees are needed.
    dirs.add(Path(sys.executable).resolve().parent.parent)
    return tuple(sorted(dirs))


# Where a sandboxed child finds its host-op socket and (for `command: python`) the plugin kit.
SOCKET_INSIDE = "/run/mcp-host/ops.sock"
SOCKET_ENV = "MCP_HOST_SOCKET"
_KIT_INSIDE = "/opt/mcp-host/lib"
_KIT_PACKAGE = "mcp_host_kit"


@functools.cache
def _kit_dir() -> Path | None:
    """The plugin kit's package folder on the host, or None when it is not installed."""
    spec = importlib.util.find_spec(_KIT_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent


def launch_for(plugin: Plugin, settings: Settings, *, host_socket: Path | None = None) -> Launch:
    """The launch of `plugin`'s stdio child under the host's sandbox settings; sandboxed, under
    its own seccomp filter's fd, in a new pids cgroup when the host has them. The caller must
    pass `pass_fds` to the spawn, then `close_passed_fds` and `release` it.

    host_socket: the plugin's host-op socket (only for a plugin that named host ops); it is
    bound at `SOCKET_INSIDE` and named by `MCP_HOST_SOCKET`. A plugin without one gets neither.
    `command: python` children also see the plugin kit, read-only, on their PYTHONPATH.

    Raises `SandboxUnavailable` when the sandbox cannot be had (bwrap or prlimit missing, no
    seccomp filter), ValueError for a manifest value that cannot be passed safely; nothing is
    left open then.
    """
    transport = plugin.manifest.transport
    if transport is None or transport.command is None:
        raise ValueError(f"{plugin.manifest.id} has no stdio command")
    python = transport.command == "python"
    command = sys.executable if python else transport.command
    env = dict(transport.env or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sandboxed = settings.sandbox == "on"
    kit = _kit_dir() if python else None
    if kit is not None:
        env["PYTHONPATH"] = _KIT_INSIDE if sandboxed else str(kit.parent)
    if host_socket is not None:
        env[SOCKET_ENV] = SOCKET_INSIDE if sandboxed else str(host_socket)
    spec = SandboxSpec(
        plugin_dir=plugin.folder,
        command=command,
        args=tuple(transport.args or ()),
        env=env,
        allow_net=bool(transport.sandbox and transport.sandbox.allow_net),
        limits=Limits(
            memory_bytes=settings.child_memory_bytes,
            max_processes=settings.child_max_processes,
            max_open_files=settings.child_max_open_files,
            cpu_seconds=settings.child_cpu_seconds,
            max_file_bytes=settings.child_max_file_bytes,
        ),
        extra_ro_binds=_interpreter_dirs(),
        ro_binds_at=((kit, f"{_KIT_INSIDE}/{_KIT_PACKAGE}"),) if kit is not None else (),
        socket_binds=((host_socket, SOCKET_INSIDE),) if host_socket is not None else (),
    )
    if not sandboxed:
        argv = build_command(spec, sandbox=False)
        logger.warning("%s: starting UNSANDBOXED (MCP_HOST_SANDBOX=off; development only)", plugin.manifest.id)
        return Launch(argv=argv, cwd=plugin.folder, env=env)
    seccomp_fd = open_filter()
    cgroup = None
    try:
        cgroup = _pids_cgroup(plugin.manifest.id, settings)
        argv = build_command(spec, seccomp_fd=seccomp_fd, cgroup=cgroup)
    except BaseException:
        os.close(seccomp_fd)
        if cgroup is not None:
            cgroup.release()
        raise
    return Launch(argv=argv, cwd=None, env={}, cgroup=cgroup, pass_fds=(seccomp_fd,))


def _pids_cgroup(plugin_id: str, settings: Settings) -> PidsCgroup | None:
    groups = host_pids_cgroups(settings.cgroup_root)
    if groups is None:
        return None
    try:
        return groups.create(plugin_id, settings.child_max_processes)
    except OSError as exc:
        # Start the child as a host without pids cgroups would, rather than not at all: an
        # exception here would end the pool's task group (children.py calls us unguarded).
        logger.error("%s: could not make its pids cgroup (%s); its task cap is RLIMIT_NPROC alone", plugin_id, exc)
        return None
