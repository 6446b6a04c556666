"""The back-channel's sockets: one bound unix listener per plugin that named host ops.

Above: the composition root (which enters `OpSockets` before any child starts and before the
database opens, and hands each plugin's socket path to its launch) and `server.BackChannel`
(which, once the database is open, serves ops on these listeners). Below: `sandbox.procs`
(whether a host that left a folder is still alive).

The sockets exist before any child starts: a sandbox binds its plugin's socket when the child
starts, and children boot while the database starts. Nothing is served here; a connection
made before `BackChannel` starts waits in its listener's backlog.

The socket of a plugin lives in a private folder of the host's (mode 0700) under a name the
host derives from the plugin id; the plugin never declares it. Inside the sandbox it is bound
at one fixed path, named by `MCP_HOST_SOCKET`.

Without a `runtime_dir`, the sockets live in a fresh folder under the system temp dir, named
after the host's pid and start time (`mcp-host-ops-<pid>-<start>-…`); a host killed before it
removed its folder leaves it behind, and the next host start removes every such folder whose
host is gone (`sweep_ops_folders`, as `SandboxLedger` and `PidsCgroups` sweep theirs).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio.abc import SocketListener

from mcp_host.plugins import Plugin
from mcp_host.sandbox import proc_stat, started_at

__all__ = ["OpSockets", "named_ops", "sweep_ops_folders"]

logger = logging.getLogger(__name__)

# sockaddr_un.sun_path holds 108 bytes, the final NUL included.
_MAX_SOCKET_PATH = 107
_FOLDER_PREFIX = "mcp-host-ops-"
_FOLDER_NAME = re.compile(r"mcp-host-ops-(?P<host_pid>[0-9]{1,10})-(?P<host_start>[0-9]{1,20})-[A-Za-z0-9_]+")


def named_ops(plugin: Plugin) -> tuple[str, ...]:
    """The host ops `plugin`'s manifest names (none for an http plugin)."""
    transport = plugin.manifest.transport
    return transport.sandbox.host_ops if transport is not None and transport.kind == "stdio" else ()


class OpSockets:
    """The bound host-op sockets of all plugins that named ops; an async context manager that
    makes their folder on entry, and closes and removes them on exit."""

    def __init__(
        self, plugins: Sequence[Plugin], *, runtime_dir: Path | None = None, temp_dir: Path | None = None
    ) -> None:
        """`runtime_dir`: where the sockets go; else a fresh folder under `temp_dir` (the system
        temp dir when None), where dead hosts' folders are swept first."""
        self._plugins = [p for p in plugins if named_ops(p)]
        self._runtime_dir = runtime_dir
        self._temp_dir = temp_dir
        self._folder: Path | None = None
        self._made_folder = False
        self._sockets: dict[str, Path] = {}
        self._listeners: list[tuple[Plugin, SocketListener]] = []

    def socket_for(self, plugin_id: str) -> Path | None:
        """The host path of `plugin_id`'s socket; None for a plugin that named no ops."""
        return self._sockets.get(plugin_id)

    def listeners(self) -> Sequence[tuple[Plugin, SocketListener]]:
        """Each plugin that named ops with its listener (empty outside the context)."""
        return tuple(self._listeners)

    async def __aenter__(self) -> OpSockets:
        """Raises ValueError when a socket path would be too long for a unix socket."""
        self._folder = self._make_folder()
        try:
            for plugin in self._plugins:
                path = self._folder / f"{_socket_name(plugin.manifest.id)}.sock"
                if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
                    raise ValueError(f"socket path {path} is over {_MAX_SOCKET_PATH} bytes; set a shorter runtime_dir")
                path.unlink(missing_ok=True)
                self._listeners.append((plugin, await anyio.create_unix_listener(path, mode=0o600)))
                self._sockets[plugin.manifest.id] = path
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        with anyio.CancelScope(shield=True):
            for _, listener in self._listeners:
                await listener.aclose()
        self._listeners.clear()
        for path in self._sockets.values():
            path.unlink(missing_ok=True)
        self._sockets.clear()
        if self._made_folder and self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _make_folder(self) -> Path:
        if self._runtime_dir is None:
            temp = self._temp_dir or Path(tempfile.gettempdir())
            sweep_ops_folders(temp)
            host = proc_stat(os.getpid())
            assert host is not None  # this very process
            self._made_folder = True
            return Path(tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-{host.starttime}-", dir=temp))
        self._runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self._runtime_dir, 0o700)
        return self._runtime_dir


def sweep_ops_folders(temp_dir: Path) -> list[Path]:
    """Remove the socket folders under `temp_dir` whose host is gone (its pid is not the
    process that started at the recorded time); a live host's, this one's included, are kept,
    and so is anything not named like ours or not a folder of this user's. Returns the removed.
    """
    removed: list[Path] = []
    try:
        entries = sorted(temp_dir.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _FOLDER_NAME.fullmatch(path.name)
        if match is None or started_at(int(match["host_pid"]), int(match["host_start"])):
            continue
        try:
            info = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue  # a symlink, a file, or someone else's: never ours to remove
        shutil.rmtree(path, ignore_errors=True)
        logger.warning("removed host-op socket folder %s, left by a host that is gone", path)
        removed.append(path)
    return removed


def _socket_name(plugin_id: str) -> str:
    """A short, fixed-length file name for a plugin's socket (ids may be 64 characters)."""
    return hashlib.sha256(plugin_id.encode()).hexdigest()[:16]
