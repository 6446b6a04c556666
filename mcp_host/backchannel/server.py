"""The back-channel's serving part: host ops, as an MCP server on each plugin's socket.

Above: the composition root (which enters `sockets.OpSockets` before any child starts and this
`BackChannel` once the database is open). Below: `sockets` (the bound listeners), `framing`
(bounded lines), `fast_ops` (the kit's 2026-07-28 op lines, read and answered as plain JSON),
the SDK's low-level `Server` (every other message, both protocol eras), `grants` (who may do
what) and `ops` (what is done).

`BackChannel` is built with everything it serves with: the sockets, the grant book, the op
services and the limits. A connection made before it starts (while the database opens) waits
in its socket's backlog; no op could succeed earlier anyway, as no grant exists before the
doors that mint them open, after the database. The caller is known by which socket it used —
each socket belongs to exactly one plugin — never by anything it says (docs/security.md D8).

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
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import SocketListener, SocketStream, TaskGroup
from mcp.server import Server, ServerRequestContext

from mcp_host.errors import (
    Denied,
    QuotaExhausted,
    at_boundary,
    tool_error,
)
from mcp_host.observe import HostMetrics, untraced
from mcp_host.plugins import Plugin
from mcp_host.wire import GRANT_KEY, LimitedLog, framed_transport, refusal_of, structured_result
from mcp_host_kit.contract import REFUSAL_CODES

from .fast_ops import FastOps
from .grants import GrantBook
from .ops import OPS, OpServices, run_op
from .sockets import OpSockets, named_ops

__all__ = ["BackChannel", "BackChannelLimits", "ServesOps"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackChannelLimits:
    max_message_bytes: int
    max_connections: int
    denials_logged_per_s: float = 1.0
    """Denial log lines per plugin and second, after a burst of `denials_logged_burst`."""
    denials_logged_burst: int = 20


class BackChannel:
    """Serving host ops on the back-channel's sockets; an async context manager that owns the
    accept loops and every connection's task."""

    def __init__(
        self,
        sockets: OpSockets,
        grants: GrantBook,
        services: OpServices,
        limits: BackChannelLimits,
        metrics: HostMetrics | None = None,
    ) -> None:
        """`sockets` must be entered first (its listeners are served on entry); they stay
        open, and owned by `sockets`, after this exits. `metrics`: where each op's outcome is
        counted (an op the table does not have as `unknown`: the name is the plugin's text)."""
        self._sockets = sockets
        self._grants = grants
        self._services = services
        self._limits = limits
        self._metrics = metrics
        self._denials = LimitedLog(
            logger, per_s=limits.denials_logged_per_s, burst=limits.denials_logged_burst, what="host-op denials"
        )
        self._connections: dict[str, int] = {}
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> BackChannel:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for plugin, listener in self._sockets.listeners():
            self._tg.start_soon(self._accept, plugin, listener, _server_for(plugin, self))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self._tg = None
        self._denials.flush()

    async def _accept(self, plugin: Plugin, listener: SocketListener, server: Server[Any]) -> None:
        pid = plugin.manifest.id
        while True:  # the listener is the sockets' to close
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
            self._tg.start_soon(self._serve, plugin, conn, server)

    async def _serve(self, plugin: Plugin, conn: SocketStream, server: Server[Any]) -> None:
        pid = plugin.manifest.id
        self._connections[pid] = self._connections.get(pid, 0) + 1
        try:
            async with anyio.create_task_group() as fast_tasks:
                name = f"{pid} (host-op socket)"
                fast = FastOps(functools.partial(self.call, plugin), fast_tasks, name, server.server_info_stamp)
                async with framed_transport(
                    conn,
                    conn,
                    max_line_bytes=self._limits.max_message_bytes,
                    on_overflow=lambda: None,  # the transport ends; pending ops fail
                    name=name,
                    intercept=fast.take,
                ) as (read, write):
                    fast.attach(write)
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
        answer = await self._answer(plugin, name, arguments, meta)
        if self._metrics is not None:
            pair = refusal_of(answer)
            # A connector's verb answers with its own code: only the contract's codes are labels.
            outcome = "ok" if not answer.is_error else pair.code if pair and pair.code in REFUSAL_CODES else "error"
            self._metrics.backchannel_op(name if name in OPS else "unknown", outcome)
            if outcome == QuotaExhausted.code:
                self._metrics.quota_refused(plugin.manifest.id, "insert")
        return answer

    async def _answer(
        self, plugin: Plugin, name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> types.CallToolResult:
        pid = plugin.manifest.id
        try:
            if name not in named_ops(plugin):
                self._denials.log(
                    pid, logging.WARNING, "%s: host op %r denied: not named in its manifest", pid, name[:64]
                )
                return tool_error(Denied(_unnamed(name)))
            grant = self._grants.redeem((meta or {}).get(GRANT_KEY), pid)
            answer = await run_op(name, arguments, plugin, grant, self._services)
            return answer if isinstance(answer, types.CallToolResult) else structured_result(answer)
        except Denied as exc:  # the reason is logged, never told (a grant's fate stays the host's)
            self._denials.log(pid, logging.WARNING, "%s: host op %r denied: %s", pid, name[:64], exc.message)
            return tool_error(Denied("denied"))
        except Exception as exc:
            known = at_boundary(exc, logger, "%s: host op %r", pid, name[:64])
            return tool_error(known or exc, "the host op failed inside the host")


ServesOps = Callable[
    [OpSockets, GrantBook, OpServices, BackChannelLimits, HostMetrics], AbstractAsyncContextManager[object]
]
"""What serves host ops on the sockets while the host runs: `BackChannel`; a test may give the
host its own (one whose start fails)."""


def _unnamed(op: str) -> str:
    return (
        f"denied: op {op[:64]!r} is not named in this plugin's manifest; "
        "name it in transport.sandbox.host_ops to use it"
    )


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
    # Kept when tracing is set up: a host op's span continues the trace its `_meta` carries
    # (`traceparent`, passed on by the kit from the forwarded call).
    return untraced(server)
