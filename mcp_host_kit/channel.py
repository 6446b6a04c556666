"""The back-channel client: host ops as MCP `tools/call`s on the unix socket in `MCP_HOST_SOCKET`.

Above: `host` (the typed ops). Below: the socket, which speaks MCP as newline-delimited
JSON-RPC; the host serves it with the SDK's low-level `Server`, both protocol eras, and answers
the op lines this channel sends on its fast path (`mcp_host/backchannel/fast_ops.py`). Lines are
written with pydantic's encoder and read with `json.loads`, no SDK model on the way (a
refusal's is read with `CallToolResult`, to find its code).

We speak the 2026-07-28 era: each request carries its own envelope in `_meta`, so there is
no `initialize` round trip, and a connection holds no session a later call depends on. Each
op takes an idle connection from a small pool (or opens one), writes one request line, reads
lines until the response with its id, and puts the connection back. A connection that saw
any error, timeout or cancellation is closed, never reused: a late answer to an abandoned
request must not be read as the answer to the next one. The pool lives per event loop
(`RunVar`), so no connection crosses loops, and no task holds a cancel scope across calls
(anyio requires a scope to exit in the task that entered it, which rules out a long-lived
`ClientSession` opened lazily inside one tool call).

Every wait is bounded (`timeout_s`, the whole op) and so is every line read
(`max_response_bytes`). A broken socket, a protocol error or no answer in time is
`Unavailable`; a refusal is the `HostOpError` its `code` names.

A request carries the trace context of the call it serves (`traceparent` in `_meta`, from the
OpenTelemetry API the MCP SDK already depends on), so the host's trace of a visitor's call
goes on through its host ops; the kit records and exports nothing itself.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import SocketStream
from anyio.lowlevel import RunVar
from anyio.streams.buffered import BufferedByteReceiveStream
from opentelemetry.propagate import inject
from opentelemetry.trace import get_current_span
from pydantic import ValidationError
from pydantic_core import to_json

from .contract import refusal_of
from .errors import Denied, Unavailable, error_for
from .session import GRANT_KEY, SessionInfo

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "DEFAULT_TIMEOUT_S", "SocketChannel"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
_PROTOCOL_VERSION = "2026-07-28"
_BROKEN = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.DelimiterNotFound,
)


class _Connection:
    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.lines = BufferedByteReceiveStream(stream)

    async def discard(self) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.aclose_forcefully(self.stream)


@dataclass
class _Pool:
    """One event loop's idle connections, and the limit on open ones."""

    limit: anyio.Semaphore
    idle: list[_Connection] = field(default_factory=list)


class SocketChannel:
    """Host ops over the back-channel socket at `path`."""

    def __init__(
        self,
        path: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_connections: int = 8,
        max_idle: int = 4,
    ) -> None:
        self.path = path
        self._timeout_s = timeout_s
        self._max_response_bytes = max_response_bytes
        self._max_connections = max_connections
        self._max_idle = max_idle
        self._ids = itertools.count(1)
        self._pools: RunVar[_Pool] = RunVar(f"mcp_host_kit.channel.{id(self)}")
        self._envelope = {
            types.PROTOCOL_VERSION_META_KEY: _PROTOCOL_VERSION,
            types.CLIENT_CAPABILITIES_META_KEY: {},
            types.CLIENT_INFO_META_KEY: {"name": "mcp-host-kit", "version": "1"},
        }

    async def call(
        self, op: str, arguments: Mapping[str, Any], *, grant: str | None, session: SessionInfo | None
    ) -> dict[str, Any]:
        """Run `op` for the call that holds `grant`; return the result's structured content.

        Raises Denied at once (no connection) when `grant` is missing; Unavailable when the
        socket breaks, the host does not answer within `timeout_s` or answers out of protocol;
        the HostOpError of the refusal's code otherwise. `session` is not sent: the host
        knows it from the grant.
        """
        if not grant:
            raise Denied(f"{op}: this call carries no grant (_meta[{GRANT_KEY!r}]); host ops are refused")
        request_id = next(self._ids)
        line = self._request_line(request_id, op, arguments, grant)
        try:
            with anyio.fail_after(self._timeout_s):
                raw = await self._round_trip(request_id, line)
        except TimeoutError:
            raise Unavailable(f"{op}: the host did not answer within {self._timeout_s:g} s") from None
        except anyio.DelimiterNotFound:
            raise Unavailable(f"{op}: the host's answer is over {self._max_response_bytes} bytes") from None
        except _BROKEN as exc:
            logger.warning("host op %s: back-channel failed: %r", op, exc)
            raise Unavailable(f"{op}: the back-channel to the host failed") from None
        return _outcome(op, raw)

    async def aclose(self) -> None:
        """Close this event loop's idle connections (ops after this open new ones)."""
        pool = self._pool()
        while pool.idle:
            await pool.idle.pop().discard()

    def _request_line(self, request_id: int, op: str, arguments: Mapping[str, Any], grant: str) -> bytes:
        meta: dict[str, Any] = {**self._envelope, GRANT_KEY: grant}
        # The trace of the call this op serves (W3C `traceparent`), so the host's span for the op
        # joins it: the SDK's server took it from the forwarded call's `_meta` into the current
        # context. Nothing is exported from here; without a trace nothing is added (and the
        # propagators are not run: ~3 µs an op).
        if get_current_span().get_span_context().is_valid:
            inject(meta)
        params = {"name": op, "arguments": dict(arguments), "_meta": meta}
        message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        # pydantic's encoder, as the SDK's models used: the same values pass (a datetime as ISO
        # text), the same ones fail (a string that is not Unicode raises).
        return to_json(message) + b"\n"

    def _pool(self) -> _Pool:
        try:
            return self._pools.get()
        except LookupError:
            pool = _Pool(anyio.Semaphore(self._max_connections))
            self._pools.set(pool)
            return pool

    async def _round_trip(self, request_id: int, line: bytes) -> dict[str, Any]:
        pool = self._pool()
        async with pool.limit:
            conn = pool.idle.pop() if pool.idle else _Connection(await anyio.connect_unix(self.path))
            try:
                await conn.stream.send(line)
                answer = await self._answer(conn, request_id)
            except BaseException:  # error, timeout or cancellation: the connection is spent
                await conn.discard()
                raise
            if len(pool.idle) < self._max_idle:
                pool.idle.append(conn)
            else:
                await conn.discard()
        return answer

    async def _answer(self, conn: _Connection, request_id: int) -> dict[str, Any]:
        """Read lines until the response to `request_id` (a JSON-RPC answer: `result` or
        `error`); notifications and requests are skipped."""
        while True:
            line = await conn.lines.receive_until(b"\n", self._max_response_bytes)
            if len(line) > self._max_response_bytes:  # receive_until caps only lines it had to wait for
                raise anyio.DelimiterNotFound(self._max_response_bytes)
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                raise anyio.BrokenResourceError("the host wrote a line that is not JSON") from None
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                raise anyio.BrokenResourceError("the host wrote a line that is not JSON-RPC")
            if "method" not in message and message.get("id") in (request_id, None):
                return message


def _outcome(op: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a successful op; raises the refusal as its HostOpError.

    The answer is read as plain JSON (the SDK's models only for a refusal): a result with
    `structuredContent` and no `isError` is the op's answer as the host wrote it."""
    error, result = answer.get("error"), answer.get("result")
    if error is not None or not isinstance(result, dict):
        code = error.get("code") if isinstance(error, dict) else None
        text = str(error.get("message", ""))[:200] if isinstance(error, dict) else ""
        logger.warning("host op %s: JSON-RPC error %r: %s", op, code, text)
        raise Unavailable(f"{op}: the host answered with protocol error {code}")
    if result.get("isError") is True:
        raise _refusal(op, result)
    content = result.get("structuredContent")
    if not isinstance(result.get("content", []), list) or result.get("isError") not in (None, False):
        raise Unavailable(f"{op}: the host's answer is not a tool result")
    if not isinstance(content, dict):
        raise Unavailable(f"{op}: the host's answer has no structured content")
    return content


def _refusal(op: str, result: dict[str, Any]) -> Exception:
    """The HostOpError an `isError` result names (`_meta["mcp-host/error"]`, else a structured
    `{code, message}`), or Unavailable."""
    try:
        refusal = refusal_of(types.CallToolResult.model_validate(result))
    except ValidationError:
        return Unavailable(f"{op}: the host's answer is not a tool result")
    if refusal is None:
        return Unavailable(f"{op}: the host refused the op without a code")
    return error_for(refusal.code, refusal.message)
