"""What starts a plugin's process: the argv, working directory and environment, the fd of its
seccomp filter, and the sandbox's cgroups (pids, memory), released once the process has exited.

Above: `children` (which spawns what this returns with `pass_fds=launch.pass_fds`, calls
`Launch.close_passed_fds` right after the spawn and `Launch.release` after reaping it). Below:
`sandbox` (the bubblewrap argv), `seccomp` (the filter) and `sandbox.cgroups`. `command: python` in a
manifest means the host's own interpreter, so the MCP SDK (and the plugin kit) are importable
inside the sandbox: its base prefix is bound read-only at its own path and a virtualenv at
`/opt/mcp-host/venv`, nothing else of the host's tree.

No host path is on a sandboxed child's command line, nor on bwrap's, which is also the one of
the sandbox's pid 1: bwrap reads its operations (the bind sources) from a sealed memfd
(`--args`), and a venv's interpreter is run by its path inside. Every process in the sandbox
can read every other's /proc/<pid>/cmdline, and the venv's path would name the host's checkout.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import anyio.to_thread

from mcp_host.plugins import Plugin
from mcp_host.settings import Settings

from .bwrap import Limits, SandboxSpec, SandboxUnavailable, build_command, bwrap_arguments
from .cgroups import SandboxCgroup, SandboxCgroups
from .seccomp import open_filter

__all__ = ["SOCKET_ENV", "SOCKET_INSIDE", "Launch", "host_cgroups", "host_pids_cgroups", "launch_for"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """How to start one child. `cgroup` is its sandbox's cgroups (None when the host has
    none, or the sandbox is off); `release` removes them.

    pass_fds: the fds the child must inherit, the only ones (the seccomp filter's and the one
    bwrap reads its operations from, which the argv names; none with the sandbox off). The
    launch owns them: `close_passed_fds` closes the host's copies, as soon as the child is
    spawned or will not be.
    bwrap_args: what the argv's `--args FD` stands for (the content of that fd), kept to be
    read back (`full_argv`).
    """

    argv: list[str]
    cwd: Path | None
    env: dict[str, str]
    cgroup: SandboxCgroup | None = None
    pass_fds: tuple[int, ...] = ()
    bwrap_args: tuple[str, ...] = ()
    _open_fds: set[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_open_fds", set(self.pass_fds))

    def full_argv(self) -> list[str]:
        """`argv` as bwrap parses it, its operations inline rather than behind `--args FD`:
        for reading (logs, tests); it starts the same sandbox without that fd."""
        if not self.bwrap_args:
            return list(self.argv)
        at = self.argv.index("--args")  # the first: only manifest values come later, after `--`
        return [*self.argv[:at], *self.bwrap_args, *self.argv[at + 2 :]]

    def close_passed_fds(self) -> None:
        """Close the host's copies of `pass_fds`. Safe to call twice: an fd is closed once,
        never again after its number may have been reused."""
        while self._open_fds:
            os.close(self._open_fds.pop())

    async def release(self) -> None:
        """Close the fds still open, kill what is left in the sandbox's cgroups and remove
        them; call it once the process has been reaped, or failed to spawn. Safe to call twice."""
        self.close_passed_fds()
        if self.cgroup is not None:
            await anyio.to_thread.run_sync(self.cgroup.release)


@functools.cache
def host_cgroups(cgroup_root: Path) -> SandboxCgroups | None:
    """The host's sandbox cgroups (pids, memory) under `cgroup_root`: detected once per process
    (sweeping the groups of hosts that are gone); a controller that is not usable is logged
    once, and None when neither is.

    Call it at host start; otherwise the first launch does.
    """
    return SandboxCgroups.detect(cgroup_root)


host_pids_cgroups = host_cgroups  # the name before the memory cgroup joined it


# Where a sandboxed child finds its host-op socket, (for `command: python`) the plugin kit and
# the host's virtualenv.
SOCKET_INSIDE = "/run/mcp-host/ops.sock"
SOCKET_ENV = "MCP_HOST_SOCKET"
_KIT_INSIDE = "/opt/mcp-host/lib"
_KIT_PACKAGE = "mcp_host_kit"
_VENV_INSIDE = "/opt/mcp-host/venv"


@dataclass(frozen=True)
class _Interpreter:
    """How a sandbox runs the host's Python: `command` (a path inside), the trees bound at
    their own paths, and the venv bound at `_VENV_INSIDE` (None outside a venv)."""

    command: str
    own_paths: tuple[Path, ...]
    venv: Path | None


@functools.cache
def _interpreter() -> _Interpreter:
    base = {Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent.parent}
    if sys.prefix == sys.base_prefix:
        return _Interpreter(sys.executable, tuple(sorted(base)), None)
    # A venv is found from the path its python was run by (pyvenv.cfg one level up), not the
    # symlink's target, so it works from any mount point; its python links into the base
    # interpreter's tree by absolute path, which stays at its own path (so do a base's
    # compiled-in prefix and library paths). A venv made with --copies: its bin/python is its
    # own file, so the venv alone would be bound twice; it is not.
    venv = Path(sys.prefix).resolve()
    try:
        command = f"{_VENV_INSIDE}/{Path(sys.executable).relative_to(sys.prefix)}"
    except ValueError:  # a python outside its venv's tree: run it by its own path, as found
        return _Interpreter(sys.executable, tuple(sorted(base | {venv})), None)
    return _Interpreter(command, tuple(sorted(base - {venv})), venv)


@functools.cache
def _kit_dir() -> Path | None:
    """The plugin kit's package folder on the host, or None when it is not installed."""
    spec = importlib.util.find_spec(_KIT_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent


def launch_for(plugin: Plugin, settings: Settings, *, host_socket: Path | None = None) -> Launch:
    """The launch of `plugin`'s stdio child under the host's sandbox settings; sandboxed, under
    its own seccomp filter's fd, in new pids and memory cgroups when the host has them. The caller must
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
    sandboxed = settings.sandbox.mode == "on"
    interpreter = _interpreter()
    command = transport.command
    if python:
        command = interpreter.command if sandboxed else sys.executable
    env = dict(transport.env or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
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
            memory_bytes=settings.sandbox.memory_bytes,
            max_processes=settings.sandbox.max_processes,
            max_open_files=settings.sandbox.max_open_files,
            cpu_seconds=settings.sandbox.cpu_seconds,
            max_file_bytes=settings.sandbox.max_file_bytes,
            tmp_bytes=settings.sandbox.tmp_bytes,
            shm_bytes=settings.sandbox.shm_bytes,
        ),
        extra_ro_binds=interpreter.own_paths,
        ro_binds_at=(
            *(((interpreter.venv, _VENV_INSIDE),) if interpreter.venv is not None else ()),
            *(((kit, f"{_KIT_INSIDE}/{_KIT_PACKAGE}"),) if kit is not None else ()),
        ),
        socket_binds=((host_socket, SOCKET_INSIDE),) if host_socket is not None else (),
    )
    if not sandboxed:
        argv = build_command(spec, sandbox=False)
        logger.warning("%s: starting UNSANDBOXED (MCP_HOST_SANDBOX=off; development only)", plugin.manifest.id)
        return Launch(argv=argv, cwd=plugin.folder, env=env)
    seccomp_fd = open_filter()
    args_fd: int | None = None
    cgroup: SandboxCgroup | None = None
    try:
        operations = bwrap_arguments(spec, seccomp_fd=seccomp_fd)
        args_fd = _sealed_memfd("mcp-host-bwrap-args", b"".join(os.fsencode(arg) + b"\0" for arg in operations))
        cgroup = _sandbox_cgroup(plugin.manifest.id, settings)
        argv = build_command(spec, seccomp_fd=seccomp_fd, cgroup=cgroup, args_fd=args_fd)
    except BaseException:
        for fd in (seccomp_fd, args_fd):
            if fd is not None:
                os.close(fd)
        if cgroup is not None:
            cgroup.release()
        raise
    fds = (seccomp_fd, args_fd)
    return Launch(argv=argv, cwd=None, env={}, cgroup=cgroup, pass_fds=fds, bwrap_args=tuple(operations))


def _sealed_memfd(name: str, data: bytes) -> int:
    """A close-on-exec memfd holding `data`, sealed, read offset 0 (bwrap reads it to the end).
    Raises `SandboxUnavailable` when it cannot be made: no sandbox without its arguments."""
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as exc:
        raise SandboxUnavailable(f"could not make the memfd of bwrap's arguments: {exc.strerror or exc}") from exc
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _sandbox_cgroup(plugin_id: str, settings: Settings) -> SandboxCgroup | None:
    groups = host_cgroups(settings.sandbox.cgroup_root)
    if groups is None:
        return None
    memory_bytes = settings.sandbox.memory_cgroup_bytes or settings.sandbox.memory_bytes
    try:
        return groups.create(plugin_id, settings.sandbox.max_processes, memory_bytes)
    except OSError as exc:
        # Start the child as a host without cgroups would, rather than not at all: an
        # exception here would end the pool's task group (children.py calls us unguarded).
        logger.error(
            "%s: could not make its cgroups (%s); its caps are its rlimits and tmpfs sizes alone", plugin_id, exc
        )
        return None
