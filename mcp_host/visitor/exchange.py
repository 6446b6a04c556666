"""The hot path of the 2026-07-28 era: one request in, one JSON response out, served directly.

Above: `edge.RpcEdge` (which has read the body, refused what is not Unicode, and offers each
2026-07-28 POST here first). Below: the SDK's `serve_one` with the visitor `Server` — the same
handlers, middleware, params validation and result shaping (`resultType`, the `serverInfo`
stamp, cache hints) as the SDK's own single-exchange entry.

What it leaves out is the SDK transport's per-request machinery, which a request that can
only end in one JSON response does not need: the session manager's routing, a memory stream
and two tasks per request (SSE mode's deferral), the replica forward and the protocol-session
caps (a 2026-07-28 request has no protocol session), and a second pass over the body. A
request it cannot answer exactly as the SDK would is declined (`False`) and goes the full way,
so every refusal (a header mismatch, an unsupported version, a malformed envelope, a wrong
Host or Origin, a missing Accept) is still the SDK's own:
- a notification, a batch, a body that is not JSON, `subscriptions/listen` (a stream);
- a request that may stream notifications: a progress token, or a log level opted in to;
- a retry carrying a `requestState` (it may belong to a parked call on another replica,
  `replica_forward`).

A call that runs longer than `watch_after_s` gets a watcher: the client closing the
connection cancels the call (the 2026-07-28 cancellation), and past `ping_after_s` the
answer becomes an SSE stream with keep-alive comments, as the SDK's SSE mode does, so a
proxy's idle timeout does not cut a long call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
from mcp.server import Server
from mcp.server.connection import Connection
from mcp.server.runner import modern_error_data, serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import LOG_LEVEL_META_KEY, JSONRPCError, JSONRPCRequest, RequestId
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

__all__ = ["DirectAnswer", "ModernExchange"]

logger = logging.getLogger(__name__)

_VERSION_HEADER: Final = b"mcp-protocol-version"
_SESSION_HEADER: Final = b"mcp-session-id"
_MODERN: Final = frozenset(v.encode() for v in MODERN_PROTOCOL_VERSIONS)
_PARAM_PREFIX: Final = MCP_PARAM_HEADER_PREFIX.lower()
_JSON_HEADERS: Final = (b"content-type", b"application/json")
_SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
_PING: Final = b": ping\r\n\r\n"

DirectAnswer = Callable[[Scope, Mapping[str, Any], Connection], Awaitable[dict[str, Any] | None]]
"""Answers one method's request without the SDK's server (`ModernExchange(direct=…)`), given the
request's scope (its session under `server.SCOPE_KEY`), params and envelope: the result exactly
as `serve_one` would give it, or None — not this request, which then goes to `serve_one`. It
raises as a handler does; the failure is answered with the SDK's own mapping."""


@dataclass
class _Exchange:
    """`DispatchContext` of one request answered here: no back-channel (the 2026-07-28 era has
    none), and nothing to notify (a request that could be notified of is declined)."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: MessageMetadata
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = field(default=False, init=False)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        logger.debug("dropped %s: a single-exchange request has no stream", method)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


def _eligible_headers(scope: Scope) -> bool:
    """A 2026-07-28 POST (its version header names a modern revision) with no protocol session."""
    modern = False
    for key, value in scope["headers"]:
        if key == _VERSION_HEADER:
            modern = value in _MODERN
        elif key == _SESSION_HEADER:
            return False
    return modern


def _streams(params: Mapping[str, Any]) -> bool:
    """Whether the request asked for notifications on its response: progress, or log messages."""
    meta = params.get("_meta")
    if not isinstance(meta, Mapping):
        return False
    return progress_token_from_params(params) is not None or meta.get(LOG_LEVEL_META_KEY) is not None


class ModernExchange:
    """Serve a 2026-07-28 request in one JSON exchange, or decline it (see the module)."""

    def __init__(
        self,
        server: Server[Any],
        security: TransportSecuritySettings,
        *,
        watch_after_s: float = 1.0,
        ping_after_s: float = 15.0,
        direct: Mapping[str, DirectAnswer] | None = None,
    ) -> None:
        """`direct`: by method, what answers a request of that method before `serve_one` may
        (issue 31: the hot methods without the SDK's models); None: `serve_one` answers all."""
        self._server = server
        self._direct: Mapping[str, DirectAnswer] = direct or {}
        self._security = TransportSecurityMiddleware(security)
        self._watch_after_s = watch_after_s
        self._ping_after_s = ping_after_s

    async def __call__(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> bool:
        """Answer the request whose whole `body` was read; False: not answered, nothing sent."""
        if not _eligible_headers(scope) or b'"requestState"' in body:
            return False
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            return False
        if not isinstance(decoded, dict) or "id" not in decoded or decoded.get("method") == "subscriptions/listen":
            return False
        params = decoded.get("params")
        if not isinstance(params, dict) or _streams(params):
            return False
        request = Request(scope)
        if await self._security.validate_request(request, is_post=True) is not None:
            return False
        if not check_accept_headers(request)[0]:
            return False
        try:
            rpc = JSONRPCRequest.model_validate(decoded)
        except ValidationError:
            return False
        headers = request.headers
        if find_duplicated_routing_header(headers.items()) is not None:
            return False
        verdict = classify_inbound_request(decoded, headers=dict(headers))
        if isinstance(verdict, InboundLadderRejection) or self._param_headers_refused(rpc, params, request):
            return False
        dctx = _Exchange(
            transport=TransportContext(kind="streamable-http", can_send_request=False, headers=headers),
            request_id=rpc.id,
            message_metadata=ServerMessageMetadata(request_context=request),
        )
        connection = Connection.from_envelope(
            verdict.protocol_version, verdict.client_info, verdict.client_capabilities
        )
        await self._answer(rpc, dctx, connection, receive, send, scope)
        return True

    def _param_headers_refused(self, rpc: JSONRPCRequest, params: Mapping[str, Any], request: Request) -> bool:
        """Whether the SDK's `Mcp-Param-*` check of a `tools/call` (against the tool's input
        schema) refuses it, or must be left to the SDK."""
        if rpc.method != "tools/call":
            return False
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or (arguments is not None and not isinstance(arguments, Mapping)):
            return False
        if not arguments and not any(key.startswith(_PARAM_PREFIX) for key in request.headers):
            return False
        lookup = self._server.get_tool_input_schema
        if lookup is None:  # the SDK would list the tools to find the schema: its own way
            return True
        schema = lookup(name)
        if schema is None:  # a tool the host does not know: the call's own refusal says so
            return False
        return validate_mcp_param_headers(schema, arguments or {}, request.headers) is not None

    async def _answer(
        self, rpc: JSONRPCRequest, dctx: _Exchange, connection: Connection, receive: Receive, send: Send, http: Scope
    ) -> None:
        """Run the request; answer JSON, or SSE once it ran past `ping_after_s`."""
        loop = asyncio.get_running_loop()
        streaming = _Streaming(send, self._ping_after_s - self._watch_after_s)
        with anyio.CancelScope() as scope:
            timer = loop.call_later(self._watch_after_s, streaming.watch, receive, scope)
            try:
                reply = await self._run(rpc, dctx, connection, http)
            finally:
                timer.cancel()
                await streaming.stop()
        if scope.cancelled_caught:
            logger.debug("request %r ended: the client closed its connection", rpc.id)
            return
        payload = json.dumps(reply, separators=(",", ":")).encode()
        if streaming.committed:
            await send({"type": "http.response.body", "body": b"event: message\r\ndata: " + payload + b"\r\n\r\n"})
            return
        status = 200
        if "error" in reply:
            status = ERROR_CODE_HTTP_STATUS.get(reply["error"].get("code"), 200)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [_JSON_HEADERS, (b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    async def _run(self, rpc: JSONRPCRequest, dctx: _Exchange, connection: Connection, http: Scope) -> dict[str, Any]:
        """The JSON-RPC reply as the SDK's single-exchange entry writes it."""
        direct = self._direct.get(rpc.method)
        try:
            result = None if direct is None else await direct(http, rpc.params or {}, connection)
            if result is None:
                result = await serve_one(
                    self._server, dctx, rpc.method, rpc.params, connection=connection, lifespan_state={}
                )
        except Exception as exc:
            return _error_reply(rpc.id, exc)
        return {"jsonrpc": "2.0", "id": rpc.id, "result": result}


def _error_reply(request_id: RequestId, exc: Exception) -> dict[str, Any]:
    """The SDK's own mapping of a handler's failure (internals never reach the wire)."""
    reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=modern_error_data(exc))
    return reply.model_dump(mode="json", by_alias=True, exclude_none=True)


class _Streaming:
    """What a long request gets: a watcher task (started by a timer, so a quick request pays
    nothing) that cancels it when the client disconnects and, past the ping delay, commits
    the answer to an SSE stream and keeps it alive."""

    def __init__(self, send: Send, ping_after_s: float) -> None:
        self._send = send
        self._ping_after_s = max(ping_after_s, 0.0)
        self._task: asyncio.Task[None] | None = None
        self.committed = False

    def watch(self, receive: Receive, scope: anyio.CancelScope) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(receive, scope))

    async def _watch(self, receive: Receive, scope: anyio.CancelScope) -> None:
        wait = self._ping_after_s
        while True:
            with anyio.move_on_after(wait):
                while (await receive())["type"] != "http.disconnect":
                    pass
                scope.cancel()
                return
            if not self.committed:
                self.committed = True
                await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await self._send({"type": "http.response.body", "body": _PING, "more_body": True})
            wait = 15.0

    async def stop(self) -> None:
        task = self._task
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:  # the client went away while a ping was written
            logger.debug("a keep-alive of a long request failed", exc_info=True)
