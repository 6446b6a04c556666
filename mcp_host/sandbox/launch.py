"""What starts a plugin's process: the argv, working directory and environment, the fd of its
seccomp filter, and the sandbox's cgroups (pids, memory), released once the process has exited.

Above: `children` (which spawns what this returns with `pass_fds=launch.pass_fds`, calls
`Launch.close_passed_fds` right after the spawn, asks `Launch.out_of_memory` why it died and
calls `Launch.release` after reaping it). Below: `sandbox` (the bubblewrap argv), `seccomp`
(the filter), `sandbox.cgroups`, `sandbox.budget` (the plugin's limits under the host's) and
`sandbox.runtimes` (what its runtime sees). `command: python` in a manifest means the host's
own interpreter, so the MCP SDK (and the plugin kit) are importable inside the sandbox: the
base interpreter at its own path, and at `/opt/mcp-host/venv` a virtualenv holding only the
SDK's packages; any other command gets none of the host's Python.

No host path is on a sandboxed child's command line, nor on bwrap's, which is also the one of
the sandbox's pid 1: bwrap reads its operations (the bind sources) from a sealed memfd
(`--args`), and a venv's interpreter is run by its path inside. Every process in the sandbox
can read every other's /proc/<pid>/cmdline, and the venv's path would name the host's checkout.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio.to_thread

from mcp_host.egress import egress_limit_warnings
from mcp_host.plugins import Plugin, Transport, args_need_config, fixed_env
from mcp_host.settings import Settings

from . import overlay
from .budget import Budget, budget_for
from .bwrap import SandboxSpec, SandboxUnavailable, build_command, bwrap_arguments
from .cgroups import SandboxCgroup, SandboxCgroups
from .runtimes import command_view, kit_dir, python_view
from .seccomp import open_filter

__all__ = [
    "SOCKET_ENV",
    "SOCKET_INSIDE",
    "Launch",
    "host_cgroups",
    "host_pids_cgroups",
    "launch_for",
    "says_out_of_memory",
]

logger = logging.getLogger(__name__)

_MiB = 1024 * 1024
# What a runtime writes to stderr when an allocation failed: V8 ("FATAL ERROR: … JavaScript
# heap out of memory", "Fatal process out of memory: …"), CPython ("MemoryError"), C++.
_OUT_OF_MEMORY = re.compile(r"out of memory|\bMemoryError\b|std::bad_alloc", re.IGNORECASE)


def says_out_of_memory(line: str) -> bool:
    """Whether a child's stderr line says an allocation failed (`Launch.out_of_memory`)."""
    return _OUT_OF_MEMORY.search(line) is not None


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
    memory_bytes: the sandbox's memory limit (its cgroup's, else its budget), None unsandboxed.
    """

    argv: list[str]
    cwd: Path | None
    env: dict[str, str]
    cgroup: SandboxCgroup | None = None
    pass_fds: tuple[int, ...] = ()
    bwrap_args: tuple[str, ...] = ()
    memory_bytes: int | None = None
    closers: tuple[Callable[[], Awaitable[None]], ...] = ()
    """What else ends with the child, awaited by `release` (its egress gate)."""
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

    def out_of_memory(self, returncode: int | None, said_out_of_memory: bool) -> str | None:
        """Why the sandbox ended, when it hit its memory limit: "out of memory (limit N MiB)";
        else None. Call it once the process has exited, before `release`.

        With a memory cgroup, its OOM-kill counter; without (or for a runtime that failed
        its own allocation before the kernel had to kill), an abnormal exit (a signal, an
        abort, a non-zero status) of a child whose stderr said out of memory
        (`says_out_of_memory`: V8's "heap out of memory", CPython's MemoryError).
        """
        if self.memory_bytes is None:
            return None
        killed = self.cgroup is not None and self.cgroup.oom_kills() > 0
        failed = said_out_of_memory and returncode is not None and returncode != 0
        if not (killed or failed):
            return None
        return f"out of memory (limit {self.memory_bytes // _MiB} MiB)"

    def close_passed_fds(self) -> None:
        """Close the host's copies of `pass_fds`. Safe to call twice: an fd is closed once,
        never again after its number may have been reused."""
        while self._open_fds:
            os.close(self._open_fds.pop())

    async def release(self) -> None:
        """Close the fds still open, kill what is left in the sandbox's cgroups and remove
        them; call it once the process has been reaped, or failed to spawn. Safe to call twice."""
        self.close_passed_fds()
        closers = self.closers
        object.__setattr__(self, "closers", ())  # frozen; safe to call twice
        for close in closers:
            await close()
        if self.cgroup is not None:
            await anyio.to_thread.run_sync(self.cgroup.release)

    def closing(self, close: Callable[[], Awaitable[None]]) -> Launch:
        """This launch, with `close` awaited by its `release` too; use it instead of this one
        (both hold the same fds)."""
        return replace(self, closers=(*self.closers, close))


@functools.cache
def host_cgroups(cgroup_root: Path) -> SandboxCgroups | None:
    """The host's sandbox cgroups (pids, memory) under `cgroup_root`: detected once per process
    (sweeping the groups of hosts that are gone); a controller that is not usable is logged
    once, and None when neither is.

    Call it at host start; otherwise the first launch does.
    """
    return SandboxCgroups.detect(cgroup_root)


host_pids_cgroups = host_cgroups  # the name before the memory cgroup joined it


# Where a sandboxed child finds its host-op socket.
SOCKET_INSIDE = "/run/mcp-host/ops.sock"
SOCKET_ENV = "MCP_HOST_SOCKET"


def launch_for(
    plugin: Plugin,
    settings: Settings,
    *,
    host_socket: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    args: Sequence[str] | None = None,
    egress_socket: Path | None = None,
) -> Launch:
    """The launch of `plugin`'s stdio child under the host's sandbox settings and its manifest's
    `limits` (`sandbox.budget`); sandboxed, under its own seccomp filter's fd, in new pids and
    memory cgroups when the host has them. The caller must pass `pass_fds` to the spawn, then
    `close_passed_fds` and `release` it.

    host_socket: the plugin's host-op socket (only for a plugin that named host ops); it is
    bound at `SOCKET_INSIDE` and named by `MCP_HOST_SOCKET`. A plugin without one gets neither.
    extra_env: variables from the owner's config (`ChildConfig.env`: `env_from_config` and the
    manifest's `env` entries holding `${config.KEY}`, secrets among them), set like the
    manifest's other `env` entries: inside the sealed memfd bwrap reads (`--setenv`), never on
    a command line (unsandboxed, development only: in the spawn's environment, which holds
    them alone; `env` adds the rest from its argv).
    args: the arguments with the owner's config resolved (`ChildConfig.args`); None: the
    manifest's, which must then hold no `${config.KEY}`.
    `command: python` children also see the SDK's packages and the plugin kit, read-only, the
    kit on their PYTHONPATH; other commands see none of the host's Python (`sandbox.runtimes`).
    egress_socket: the host's egress proxy socket opened for this child (`EgressProxy.open`):
    the child reaches what the proxy lets through, by the proxy variables (`sandbox.egress_view`).
    Without one a sandboxed child reaches no network, whatever its manifest asks
    (`allow_net` and `egress` are the proxy's policy, not the sandbox's). Unsandboxed it is
    ignored: the child has the host's network (one warning).
    A sandboxed child sees its plugin folder writable through its own throwaway layer, where the
    machine can make one (`sandbox.overlay`), else read-only.

    Raises `SandboxUnavailable` when the sandbox cannot be had (bwrap or prlimit missing, no
    seccomp filter), ValueError for a manifest value that cannot be passed safely; nothing is
    left open then.
    """
    transport = plugin.manifest.transport
    if transport is None or transport.command is None:
        raise ValueError(f"{plugin.manifest.id} has no stdio command")
    if args is None and args_need_config(transport):
        raise ValueError(f"{plugin.manifest.id}'s arguments need the owner's config, which was not given")
    argv_tail = tuple(transport.args if args is None else args)
    sandboxed = settings.sandbox.mode == "on"
    budget = budget_for(plugin, settings.sandbox)
    egress_warnings = egress_limit_warnings(plugin, settings.egress) if egress_socket is not None else ()
    for warning in (*budget.warnings, *egress_warnings):
        _warn_once(warning)
    env = _env(transport, extra_env, None if host_socket is None else SOCKET_INSIDE if sandboxed else str(host_socket))
    if not sandboxed:
        if egress_socket is not None or _asks_network(transport):
            _warn_once(f"{plugin.manifest.id}: sandbox off: its network is the host's, through no egress proxy")
        return _unsandboxed(plugin, transport.command, argv_tail, env, dict(extra_env or {}), budget)
    view = python_view() if transport.command == "python" else command_view(transport.command, plugin.folder)
    env.update(view.env)
    spec = SandboxSpec(
        plugin_dir=plugin.folder,
        command=view.command,
        args=argv_tail,
        env=env,
        limits=budget.limits,
        extra_ro_binds=view.own_paths,
        ro_binds_at=view.binds_at,
        hidden=view.hidden,
        socket_binds=((host_socket, SOCKET_INSIDE),) if host_socket is not None else (),
        layer_dir=_layer_dir(settings),
        egress_socket=egress_socket,
    )
    return _sandboxed(plugin.manifest.id, spec, settings, budget)


def _asks_network(transport: Transport) -> bool:
    sandbox = transport.sandbox
    return sandbox.allow_net or bool(sandbox.egress)


def _env(transport: Transport, extra_env: Mapping[str, str] | None, socket: str | None) -> dict[str, str]:
    """The child's variables: the manifest's fixed `env` entries, the owner's (an entry holding
    `${config.KEY}` comes resolved in `extra_env`), Python's two quiet ones, and the host-op
    socket's path where it has one."""
    env = fixed_env(transport)
    env.update(extra_env or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    if socket is not None:
        env[SOCKET_ENV] = socket
    return env


def _unsandboxed(
    plugin: Plugin,
    command: str,
    argv_tail: tuple[str, ...],
    env: dict[str, str],
    owners: dict[str, str],
    budget: Budget,
) -> Launch:
    """The launch with `MCP_HOST_SANDBOX=off` (development only): `env -i` and the variables
    but the owner's on its argv, the owner's (`owners`) in the spawn's environment alone."""
    python = command == "python"
    if python:
        kit = _kit_parent()
        if kit is not None:
            env["PYTHONPATH"] = str(kit)
    spec = SandboxSpec(
        plugin_dir=plugin.folder,
        command=sys.executable if python else command,
        args=argv_tail,
        env=env,
        limits=budget.limits,
    )
    build_command(spec, sandbox=False)  # checks every variable, the owner's too, as it would pass them
    shown = {key: value for key, value in env.items() if key not in owners}
    argv = build_command(replace(spec, env=shown), sandbox=False)  # env -i -- K=V… command args
    # Without -i: env starts from the spawn's environment, which is the owner's variables
    # alone (`Launch.env`; nothing of the host's), so none of their values is on an argv.
    assert argv[1] == "-i", argv
    logger.warning("%s: starting UNSANDBOXED (MCP_HOST_SANDBOX=off; development only)", plugin.manifest.id)
    return Launch(argv=[argv[0], *argv[2:]], cwd=plugin.folder, env=owners)


def _sandboxed(plugin_id: str, spec: SandboxSpec, settings: Settings, budget: Budget) -> Launch:
    seccomp_fd = open_filter()
    args_fd: int | None = None
    cgroup: SandboxCgroup | None = None
    try:
        operations = bwrap_arguments(spec, seccomp_fd=seccomp_fd)
        args_fd = _sealed_memfd("mcp-host-bwrap-args", b"".join(os.fsencode(arg) + b"\0" for arg in operations))
        cgroup = _sandbox_cgroup(plugin_id, settings, budget)
        argv = build_command(spec, seccomp_fd=seccomp_fd, cgroup=cgroup, args_fd=args_fd)
    except BaseException:
        for fd in (seccomp_fd, args_fd):
            if fd is not None:
                os.close(fd)
        if cgroup is not None:
            cgroup.release()
        raise
    fds = (seccomp_fd, args_fd)
    memory = (
        budget.cgroup_memory_bytes if cgroup is not None and cgroup.memory is not None else budget.limits.memory_bytes
    )
    return Launch(
        argv=argv,
        cwd=None,
        env={},
        cgroup=cgroup,
        pass_fds=fds,
        bwrap_args=tuple(operations),
        memory_bytes=memory,
    )


def _layer_dir(settings: Settings) -> Path | None:
    """Where a sandbox's writable plugin layer is mounted (in its own mount namespace only;
    on the host an empty directory), or None where the machine cannot make one (`overlay`:
    one warning, and /plugin read-only)."""
    if not overlay.available():
        return None
    path = settings.data_dir / "run" / "plugin-layer"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.cache
def _warn_once(message: str) -> None:
    """Log a plugin's limit warning once per host (every child of the plugin would repeat it)."""
    logger.warning("%s", message)


def _kit_parent() -> Path | None:
    """The folder holding the plugin kit's package on the host (its PYTHONPATH entry)."""
    kit = kit_dir()
    return kit.parent if kit is not None else None


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


def _sandbox_cgroup(plugin_id: str, settings: Settings, budget: Budget) -> SandboxCgroup | None:
    groups = host_cgroups(settings.sandbox.cgroup_root)
    if groups is None:
        return None
    try:
        return groups.create(plugin_id, budget.limits.max_processes, budget.cgroup_memory_bytes)
    except OSError as exc:
        # Start the child as a host without cgroups would, rather than not at all: an
        # exception here would end the pool's task group (children.py calls us unguarded).
        logger.error(
            "%s: could not make its cgroups (%s); its caps are its rlimits and tmpfs sizes alone", plugin_id, exc
        )
        return None
