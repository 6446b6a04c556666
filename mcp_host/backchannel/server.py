"""The back-channel: one unix socket per plugin that named host ops, speaking MCP.

Above: the composition root (which opens the back-channel before any child starts, and hands
each plugin's socket path to its launch). Below: `framing` (bounded lines), the SDK's low-level
`Server` (both protocol eras), `grants` (who may do what) and `host_ops` (what is done).

The sockets exist before any child starts (a sandbox binds its socket when it is made) and
before the database is open; ops are served once `services` is set.

The socket of a plugin lives in a private folder of the host's (mode 0700) under a name the
host derives from the plugin id; the plugin never declares it. Inside the sandbox it is bound
at one fixed path, named by `MCP_HOST_SOCKET`. The caller is known by which socket it used —
each socket belongs to exactly one plugin — never by anything it says (SECURITY.md D8).

The MCP server on a plugin's socket lists exactly the ops that plugin named. Every call must
carry a live grant minted for this plugin in `_meta["mcp-host/grant"]`; the op then runs for
the grant's owner and scope. `BackChannel.call` is the door's error boundary (answering
through `errors.tool_error`): a refusal is answered
`{code: denied, message: "denied"}` and the reason is logged — except an op the plugin's
manifest does not name, whose message names the op and the manifest key that must name it
(the plugin knows its own manifest; a grant's fate is never told); other host errors keep their
code and message (they are about the caller's own input); anything unexpected is logged with
its traceback and answered opaquely. The socket is untrusted input: messages are capped
(`host_op_max_message_bytes`; a longer line ends the connection) and so are concurrent
connections per plugin (`host_op_max_connections`; one more is closed at once). Denials (and
connections over the cap) are logged within a token bucket per plugin (`log_limit`): a plugin
calling ops it may not in a loop is refused every time, but cannot flood the log.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import SocketListener, SocketStream, TaskGroup
from mcp.server import Server, ServerRequestContext

from mcp_host.edge import untraced
from mcp_host.errors import DatabaseUnavailable, Denied, HostError, Unavailable, tool_error
from mcp_host.plugins import Plugin
from mcp_host.sandbox import proc_stat, started_at
from mcp_host.store import as_unavailable
from mcp_host.wire import GRANT_KEY, LimitedLog, framed_transport, structured_result

from .grants import GrantBook
from .ops import OPS, OpServices, run_op

__all__ = ["BackChannel", "BackChannelLimits", "named_ops", "sweep_ops_folders"]

logger = logging.getLogger(__name__)

# sockaddr_un.sun_path holds 108 bytes, the final NUL included.
_MAX_SOCKET_PATH = 107
_FOLDER_PREFIX = "mcp-host-ops-"
_FOLDER_NAME = re.compile(r"mcp-host-ops-(?P<host_pid>[0-9]{1,10})-(?P<host_start>[0-9]{1,20})-[A-Za-z0-9_]+")


@dataclass(frozen=True)
class BackChannelLimits:
    max_message_bytes: int
    max_connections: int
    denials_logged_per_s: float = 1.0
    """Denial log lines per plugin and second, after a burst of `denials_logged_burst`."""
    denials_logged_burst: int = 20


def named_ops(plugin: Plugin) -> tuple[str, ...]:
    """The host ops `plugin`'s manifest names (none for an http plugin)."""
    transport = plugin.manifest.transport
    return transport.sandbox.host_ops if transport is not None and transport.kind == "stdio" else ()


class BackChannel:
    """The host-op sockets of all plugins; an async context manager that owns their tasks."""

    def __init__(
        self,
        plugins: Sequence[Plugin],
        grants: GrantBook,
        limits: BackChannelLimits,
        *,
        runtime_dir: Path | None = None,
        temp_dir: Path | None = None,
    ) -> None:
        """`runtime_dir`: where the sockets go; else a fresh folder under `temp_dir` (the system
        temp dir when None), where dead hosts' folders are swept first."""
        self._plugins = [p for p in plugins if named_ops(p)]
        self._grants = grants
        self.services: OpServices | None = None
        """Set once the database is open; ops answer `unavailable` until then (no grant can
        exist before it either: the doors that mint them open after the database)."""
        self._limits = limits
        self._runtime_dir = runtime_dir
        self._temp_dir = temp_dir
        self._denials = LimitedLog(
            logger, per_s=limits.denials_logged_per_s, burst=limits.denials_logged_burst, what="host-op denials"
        )
        self._folder: Path | None = None
        self._made_folder = False
        self._sockets: dict[str, Path] = {}
        self._connections: dict[str, int] = {}
        self._tg: TaskGroup | None = None

    def socket_for(self, plugin_id: str) -> Path | None:
        """The host path of `plugin_id`'s socket; None for a plugin that named no ops."""
        return self._sockets.get(plugin_id)

    async def __aenter__(self) -> BackChannel:
        self._folder = self._make_folder()
        listeners: list[tuple[Plugin, SocketListener]] = []
        try:
            for plugin in self._plugins:
                path = self._folder / f"{_socket_name(plugin.manifest.id)}.sock"
                if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
                    raise ValueError(f"socket path {path} is over {_MAX_SOCKET_PATH} bytes; set a shorter runtime_dir")
                path.unlink(missing_ok=True)
                listener = await anyio.create_unix_listener(path, mode=0o600)
                listeners.append((plugin, listener))
                self._sockets[plugin.manifest.id] = path
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
        except BaseException:
            for _, listener in listeners:
                await listener.aclose()
            self._remove_folder()
            raise
        for plugin, listener in listeners:
            self._tg.start_soon(self._accept, plugin, listener, _server_for(plugin, self))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self._tg = None
        self._remove_folder()
        self._denials.flush()

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

    def _remove_folder(self) -> None:
        for path in self._sockets.values():
            path.unlink(missing_ok=True)
        self._sockets.clear()
        if self._made_folder and self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    async def _accept(self, plugin: Plugin, listener: SocketListener, server: Server[Any]) -> None:
        pid = plugin.manifest.id
        async with listener:
            while True:
                try:
                    conn = await listener.accept()
                except OSError as exc:  # e.g. EMFILE: keep serving the connections we have
                    logger.error("%s: host-op socket accept failed: %s", pid, exc.strerror or exc)
                    await anyio.sleep(0.1)
                    continue
                if self._connections.get(pid, 0) >= self._limits.max_connections:
                    limit = self._limits.max_connections
                    self._denials.log(pid, logging.WARNING, "%s: over %d host-op connections; closing one", pid, limit)
                    await conn.aclose()
                    continue
                assert self._tg is not None
                self._tg.start_soon(self._serve, pid, conn, server)

    async def _serve(self, pid: str, conn: SocketStream, server: Server[Any]) -> None:
        self._connections[pid] = self._connections.get(pid, 0) + 1
        try:
            async with framed_transport(
                conn,
                conn,
                max_line_bytes=self._limits.max_message_bytes,
                on_overflow=lambda: None,  # the transport ends; pending ops fail
                name=f"{pid} (host-op socket)",
            ) as (read, write):
                await server.run(read, write, server.create_initialization_options())
        except Exception:  # one connection's failure must never end the listener
            logger.exception("%s: host-op connection failed", pid)
        finally:
            self._connections[pid] -= 1
            with anyio.CancelScope(shield=True):
                await conn.aclose()

    async def call(
        self, plugin: Plugin, name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> types.CallToolResult:
        """One op call that arrived on `plugin`'s socket; the back-channel's error boundary."""
        pid = plugin.manifest.id
        try:
            if name not in named_ops(plugin):
                self._denials.log(
                    pid, logging.WARNING, "%s: host op %r denied: not named in its manifest", pid, name[:64]
                )
                return tool_error(Denied(_unnamed(name)))
            grant = self._grants.redeem((meta or {}).get(GRANT_KEY), pid)
            if self.services is None:
                raise Unavailable("the host is starting")
            answer = await run_op(name, arguments, plugin, grant, self.services)
            return answer if isinstance(answer, types.CallToolResult) else structured_result(answer)
        except Denied as exc:  # the reason is logged, never told (a grant's fate stays the host's)
            self._denials.log(pid, logging.WARNING, "%s: host op %r denied: %s", pid, name[:64], exc.message)
            return tool_error(Denied("denied"))
        except Exception as exc:
            known = exc if isinstance(exc, HostError) else as_unavailable(exc)
            if known is None:
                logger.exception("%s: host op %r failed", pid, name[:64])
            elif not isinstance(known, DatabaseUnavailable):  # an outage: the database watch logs it, once
                logger.info("%s: host op %r refused: %s: %s", pid, name[:64], known.code, known.message)
            return tool_error(known or exc, "the host op failed inside the host")


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


def _unnamed(op: str) -> str:
    return (
        f"denied: op {op[:64]!r} is not named in this plugin's manifest; "
        "name it in transport.sandbox.host_ops to use it"
    )


def _socket_name(plugin_id: str) -> str:
    """A short, fixed-length file name for a plugin's socket (ids may be 64 characters)."""
    return hashlib.sha256(plugin_id.encode()).hexdigest()[:16]


def _server_for(plugin: Plugin, channel: BackChannel) -> Server[Any]:
    """The MCP server on `plugin`'s socket: its named ops as tools, nothing else."""
    tools = [OPS[name].tool() for name in named_ops(plugin)]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await channel.call(plugin, params.name, params.arguments, ctx.meta)

    server: Server[Any] = Server("mcp-host", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    return untraced(server, always=True)
