"""Bounded newline-delimited JSON-RPC framing over a byte-stream pair.

Below: a child's stdout/stdin pipes (or any anyio byte streams). Above: the MCP SDK's
`ClientSession`, which takes a `(read_stream, write_stream)` pair of `SessionMessage`s.

We do not use the SDK's stdio client: it reads lines without a cap, so a child that writes
no newline pins a host core and grows memory without end (docs/security.md A2, measured in §2.6).
Here a line longer than `max_line_bytes` ends the transport and calls `on_overflow`, which
kills the child; complete messages before it are still delivered.

A line the host cannot read (a lone surrogate, bytes that are not UTF-8, a number out of range,
nesting past the parser's limit, a result that is no object) is handed to the session as an
exception, and reading goes on; when its top level still reads as an answer to one of our
requests (an `id`, a `result` or an `error`), that request is answered at once in the peer's
stead with `UNREADABLE_ANSWER`, which the caller's side turns into `unavailable`, rather than
left to wait for its timeout.

No task of its own and no memory stream in between (issue 18): the dispatcher's reading task
reads the pipe itself, and a sender writes its line itself, so a call to a child and its
answer each cost one wake-up of the event loop fewer.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.lowlevel
import mcp.types as types
from anyio.abc import ByteReceiveStream, ByteSendStream, ObjectReceiveStream, ObjectSendStream
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import MCPError
from mcp.shared.message import SessionMessage
from pydantic_core import PydanticSerializationError

from mcp_host.errors import UNREADABLE_ANSWER

__all__ = ["UNREADABLE_ANSWER", "Intercept", "LineWriter", "framed_transport"]

logger = logging.getLogger(__name__)


Intercept = Callable[[bytes], bool]
"""Offered each line before the SDK's models read it: True when it took the line (and answers
it itself, through the `LineWriter`), False to let the session have it."""

_END_OF_INPUT = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
)


class _Lines(ObjectReceiveStream[SessionMessage | Exception]):
    """The messages of `receive`, one per line, read in the task that asks for the next one
    (the SDK dispatcher's): no reader task and no memory stream between the pipe and it."""

    def __init__(
        self,
        receive: ByteReceiveStream,
        max_line_bytes: int,
        on_overflow: Callable[[], None],
        name: str,
        intercept: Intercept | None,
    ) -> None:
        self._buffered = BufferedByteReceiveStream(receive)
        self._intercept = intercept
        self._max_line_bytes = max_line_bytes
        self._on_overflow = on_overflow
        self._name = name
        self._ended = False
        self._after_notice = False

    async def receive(self) -> SessionMessage | Exception:
        if self._after_notice:
            # What the dispatcher started for the last notification or request (a progress
            # relay) gets a turn before the next line is read: lines already buffered would
            # otherwise let the call's answer overtake its progress, as a reader task's memory
            # stream never did.
            self._after_notice = False
            await anyio.lowlevel.checkpoint()
        while not self._ended:
            try:
                line = await self._buffered.receive_until(b"\n", self._max_line_bytes)
            except anyio.DelimiterNotFound:
                self._ended = True
                logger.error("%s wrote a line over %d bytes; closing it", self._name, self._max_line_bytes)
                self._on_overflow()
                break
            except _END_OF_INPUT:
                self._ended = True
                break
            if not line.strip() or (self._intercept is not None and self._intercept(line)):
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError as exc:
                answered = _answer_id(line)
                if answered is None:
                    return exc  # the session logs it; reading goes on
                logger.warning(
                    "%s answered request %r with a line that cannot be read; answered for it", self._name, answered
                )
                error = types.ErrorData(code=UNREADABLE_ANSWER, message="the answer could not be read")
                return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=answered, error=error))
            self._after_notice = not isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
            return SessionMessage(message)
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        self._ended = True


class LineWriter(ObjectSendStream[SessionMessage]):
    """Each message written as one line by the task that sends it, no writer task in between;
    concurrent senders take turns (a socket stream refuses two at once), and the turn costs
    nothing when nobody waits (`fast_acquire`)."""

    def __init__(self, send: ByteSendStream, name: str) -> None:
        self._send = send
        self._name = name
        self._turn = anyio.Lock(fast_acquire=True)

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        try:
            data = message.model_dump_json(by_alias=True, exclude_unset=True)
        except (PydanticSerializationError, ValueError):
            await self._refuse_unencodable(message)  # only this message is lost
            return
        await self.send_line(data.encode() + b"\n")

    async def send_line(self, line: bytes) -> None:
        """Write `line` (one JSON-RPC message and its newline) in turn with the session's own."""
        try:
            async with self._turn:
                await self._send.send(line)
        except _END_OF_INPUT:
            raise anyio.BrokenResourceError from None

    async def _refuse_unencodable(self, message: types.JSONRPCMessage) -> None:
        """A message that cannot be written as JSON (e.g. a string that is not Unicode).

        A request of ours fails at once for its caller; an answer to the peer's request
        becomes an error answer; a notification is dropped.
        """
        logger.warning("a %s for %s could not be encoded as JSON; not sent", type(message).__name__, self._name)
        text = "the message could not be encoded as JSON"
        if isinstance(message, types.JSONRPCRequest):
            raise MCPError(types.INVALID_PARAMS, text)
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            error = types.ErrorData(code=types.INVALID_PARAMS, message=text)
            reply = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
            try:
                line = reply.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
            except (PydanticSerializationError, ValueError):
                return  # its id itself cannot be written: the peer's request times out
            with suppress(*_END_OF_INPUT):
                async with self._turn:
                    await self._send.send(line)

    async def aclose(self) -> None:
        """The pipe itself is closed by `framed_transport`, when its block ends."""


# A JSON value's tokens, enough to walk its top level: a string, a bracket, `:` or `,`, a scalar.
_TOKEN_RE = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s"{}\[\]:,]+')
_INTEGER_RE = re.compile(rb"-?[0-9]{1,18}")
_ANSWER_KEYS = frozenset({b'"result"', b'"error"'})


def _answer_id(line: bytes) -> int | str | None:
    """The `id` of `line` when its top level reads as a JSON-RPC answer (an integer or string
    `id`, a `result` or an `error`, no `method`), whatever its values hold; else None. Only
    the top level is walked, so what made the line unreadable below it does not hide its id."""
    depth = 0
    expecting = "key"
    key = found = None
    keys: set[bytes] = set()
    for match in _TOKEN_RE.finditer(line):
        token = match.group()
        if token in (b"{", b"["):
            if depth == 0 and token == b"[":
                return None  # a batch: not one answer
            depth += 1
            expecting = "key" if depth == 1 else "-"
        elif token in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                break
        elif depth != 1:
            continue
        elif token == b":":
            expecting = "value"
        elif token == b",":
            expecting = "key"
        elif expecting == "key":
            key = token
            keys.add(token)
        elif expecting == "value" and key == b'"id"':
            found = token
        if found is not None and keys & _ANSWER_KEYS:
            break
    if found is None or not keys & _ANSWER_KEYS or b'"method"' in keys:
        return None
    if _INTEGER_RE.fullmatch(found):
        return int(found)
    if found.startswith(b'"'):
        with suppress(ValueError):
            text = json.loads(found)
            if isinstance(text, str) and text.isprintable():
                return text
    return None


@asynccontextmanager
async def framed_transport(
    receive: ByteReceiveStream,
    send: ByteSendStream,
    *,
    max_line_bytes: int,
    on_overflow: Callable[[], None],
    name: str = "peer",
    intercept: Intercept | None = None,
) -> AsyncIterator[tuple[ObjectReceiveStream[SessionMessage | Exception], LineWriter]]:
    """Yield SDK streams reading lines from `receive` and writing lines to `send`.

    A line over `max_line_bytes` calls `on_overflow()` and ends the read side, so pending
    requests fail as "connection closed". A line that is not JSON-RPC is handed to the
    session as an exception (the SDK logs it) and reading goes on. `intercept`, when given, sees
    each line first and may take it. `send` is closed when the block ends.
    """
    try:
        yield _Lines(receive, max_line_bytes, on_overflow, name, intercept), LineWriter(send, name)
    finally:
        with anyio.CancelScope(shield=True):
            await send.aclose()
