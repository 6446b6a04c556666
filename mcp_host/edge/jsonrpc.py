"""The JSON-RPC edge of both MCP doors: what a POSTed message must be before the SDK sees it.

Above: the visitor and owner endpoints (`visitor.http.VisitorMCPEndpoint`,
`owner_facade.http.OwnerMCPEndpoint`), which authenticate first and then hand the request
here. Below: the SDK's `StreamableHTTPSessionManager.handle_request`.

Two things are decided here, once, for every message of either era:

- **Strings must be Unicode.** JSON may spell a lone UTF-16 surrogate (`"\\ud800"`); the
  2026-07-28 transport parses bodies with `json.loads`, which accepts it, and the string then
  cannot be encoded again — not to a child's stdin, not into PostgreSQL, not into a log
  line's JSON. Such a message is refused with a JSON-RPC error (`INVALID_PARAMS`, `data.code`
  `invalid_arguments`), whatever field holds the string; nothing after the edge has to care.
  (Invalid UTF-8 bytes are refused by both eras' parsers already.)
- **A body is UTF-8** (RFC 8259 8.1). Python's parser would also take UTF-16 and UTF-32
  bodies, and surrogates written as raw bytes (CESU-8) — lone ones included, which the
  escape check above cannot see. Anything else is refused as a parse error.
- **A request id is in flight once per protocol session** (2025-11-25 `Mcp-Session-Id`). The
  SDK keys each POST's response stream by request id: a second request with the id of one
  still running takes the first one's stream and leaves its POST open forever. The duplicate
  is refused (`INVALID_REQUEST`, HTTP 409) and the first goes on. The id is free again as
  its answer leaves, not when the SDK's handler returns a moment later.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, InvalidArguments

from .credential import credential_of

__all__ = ["FastPath", "RpcEdge", "drain_limit", "has_lone_surrogate", "is_utf8_text", "read_body"]

FastPath = Callable[[Scope, bytes, Receive, Send], Awaitable[bool]]
"""Offered each checked POST without a protocol session (its whole body read): answers it and
says True, or sends nothing and says False (`visitor.exchange`, the 2026-07-28 hot path)."""

logger = logging.getLogger(__name__)

DRAIN_FACTOR = 4
DRAIN_MIN_BYTES = 1024 * 1024


def drain_limit(cap: int) -> int:
    """How much of a body over `cap` is read (and thrown away) before its 413."""
    return max(DRAIN_FACTOR * cap, DRAIN_MIN_BYTES)


# Where a surrogate escape may hide: an escaped backslash (consumed, so `\\ud800` is the text
# "\ud800", not an escape), a valid pair, or a lone half (group 1).
_ESCAPES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)
_MAYBE = re.compile(rb"\\u[dD][89a-fA-F]")


def is_utf8_text(raw: bytes) -> bool:
    """Whether `raw` is UTF-8 without a NUL byte: a JSON text's only encoding on the wire.

    UTF-16 and UTF-32 spell every ASCII character with a NUL, which JSON allows nowhere
    unescaped; Python's UTF-8 codec refuses encoded surrogates. ASCII, the common case, is
    one fast scan.
    """
    if b"\x00" in raw:
        return False
    if raw.isascii():
        return True
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def has_lone_surrogate(raw: bytes) -> bool:
    """Whether JSON text `raw` spells a UTF-16 surrogate that is not half of a valid pair."""
    if _MAYBE.search(raw) is None:  # the common case: one scan, no match
        return False
    return any(m.group(1) is not None for m in _ESCAPES.finditer(raw))


class RpcEdge:
    """ASGI wrapper: check one POSTed JSON-RPC message, then replay it to `app`."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, fast: FastPath | None = None) -> None:
        self._app = app
        self._max_body_bytes = max_body_bytes
        self._fast = fast
        self._in_flight: set[Hashable] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        body, trailing = await read_body(receive, self._max_body_bytes)
        if body is None:
            await _reply(send, 413, None, INVALID_REQUEST, f"the body is over {self._max_body_bytes} bytes")
            return
        if not is_utf8_text(body):
            logger.debug("refused a JSON-RPC message whose body is not UTF-8")
            await _reply(send, 400, None, PARSE_ERROR, "the body is not UTF-8 text")
            return
        lone = has_lone_surrogate(body)
        protocol_session = _header(scope, b"mcp-session-id")
        # Parsed only when needed: a 2026-07-28 request with valid strings goes by untouched.
        message = _parse(body) if lone or protocol_session is not None else None
        request_id = _request_id(message)
        if lone:
            logger.debug("refused a JSON-RPC message holding a string that is not valid Unicode")
            await _reply(
                send,
                400,
                request_id,
                INVALID_PARAMS,
                "a string in this message is not valid Unicode (a lone UTF-16 surrogate)",
                data={"code": InvalidArguments.code},
            )
            return
        key = _in_flight_key(scope, protocol_session, message, request_id)
        if key is not None and key in self._in_flight:
            await _reply(
                send, 409, request_id, INVALID_REQUEST, "a request with this id is already in flight; use a new id"
            )
            return
        if protocol_session is None and self._fast is not None:
            after = receive if trailing is None else _replayer(None, trailing, receive)
            if await self._fast(scope, body, after, send):
                return
        replay = _replayer(body, trailing, receive)
        if key is None:
            await self._app(scope, replay, send)
            return
        self._in_flight.add(key)
        try:
            await self._app(scope, replay, _releasing(send, self._in_flight, key, request_id))
        finally:
            self._in_flight.discard(key)


def _releasing(send: Send, in_flight: set[Hashable], key: Hashable, request_id: str | int | None) -> Send:
    """`send`, that frees `key` as the request's answer leaves, before the caller can see it.

    The SDK forgets the request (its per-id stream) before it writes the answer, but its
    handler returns only after the response's last chunk: a client that reused the id as soon
    as it read the answer was refused 409 now and then (14 of 200 sequential pings).
    """

    async def send_and_release(message: Message) -> None:
        if key in in_flight and message["type"] == "http.response.body":
            if not message.get("more_body", False) or _answers(message.get("body", b""), request_id):
                in_flight.discard(key)
        await send(message)

    return send_and_release


def _answers(chunk: bytes, request_id: str | int | None) -> bool:
    """Whether a body chunk (JSON, or SSE events) holds the response to `request_id`."""
    if b'"result"' not in chunk and b'"error"' not in chunk:
        return False
    lines = [line[5:] for line in chunk.splitlines() if line.startswith(b"data:")] or [chunk]
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("id") != request_id:
            continue
        if "result" in message or "error" in message:
            return True
    return False


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def _in_flight_key(
    scope: Scope, protocol_session: bytes | None, message: Any, request_id: str | int | None
) -> Hashable | None:
    """(principal, protocol session, id) of a 2025-11-25 request; None for anything else.

    Without an `Mcp-Session-Id` (2026-07-28, or an initialize) each POST is its own exchange.
    """
    if protocol_session is None or request_id is None or not isinstance(message, dict) or "method" not in message:
        return None
    return (credential_of(scope), protocol_session, type(request_id).__name__, request_id)


async def read_body(receive: Receive, cap: int) -> tuple[bytes | None, Message | None]:
    """The whole body (None when over `cap`), and a non-body message that ended it, if any.

    A body over the cap is still read, and thrown away, up to `drain_limit(cap)`: a
    client gets its 413 instead of a connection reset while it is still sending. Past that the
    answer goes out unread.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return (b"".join(chunks) if size <= cap else None), message
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size <= cap:
            chunks.append(chunk)
        elif chunks:
            chunks.clear()
        if not message.get("more_body", False) or size > drain_limit(cap):
            return (b"".join(chunks) if size <= cap else None), None


def _replayer(body: bytes | None, trailing: Message | None, receive: Receive) -> Receive:
    """`receive` as if nothing had been read: `body` (None: nothing), then `trailing`, then on."""
    pending: list[Message] = [] if body is None else [{"type": "http.request", "body": body, "more_body": False}]
    if trailing is not None:
        pending.append(trailing)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


def _parse(body: bytes) -> Any:
    """The message as JSON, or None when it is not (the SDK answers that with its parse error)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _request_id(message: Any) -> str | int | None:
    """The message's id when it is one a reply may echo: an integer, or a string of Unicode.

    Any integer: two requests with the same 20-digit id are as much a duplicate as two with id 1.
    """
    if not isinstance(message, dict):
        return None
    value = message.get("id")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and not has_lone_surrogate(json.dumps(value).encode()):
        return value
    return None


async def _reply(
    send: Send,
    status: int,
    request_id: str | int | None,
    code: int,
    message: str,
    *,
    data: dict[str, Any] | None = None,
) -> None:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    payload = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
