"""Bounded newline-delimited JSON-RPC framing over a byte-stream pair.

Below: a child's stdout/stdin pipes (or any anyio byte streams). Above: the MCP SDK's
`ClientSession`, which takes a `(read_stream, write_stream)` pair of `SessionMessage`s.

We do not use the SDK's stdio client: it reads lines without a cap, so a child that writes
no newline pins a host core and grows memory without end (SECURITY.md A2, measured in §2.6).
Here a line longer than `max_line_bytes` ends the transport and calls `on_overflow`, which
kills the child; complete messages before it are still delivered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import mcp.types as types
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic_core import PydanticSerializationError

__all__ = ["framed_transport"]

logger = logging.getLogger(__name__)

_END_OF_INPUT = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
)


ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


async def _refuse_unencodable(
    message: types.JSONRPCMessage,
    in_send: MemoryObjectSendStream[SessionMessage | Exception],
    send: ByteSendStream,
    name: str,
) -> None:
    """A message that cannot be written as JSON (e.g. a string that is not Unicode).

    A request of ours is answered locally with an error, so its caller fails at once; an
    answer to the peer's request becomes an error answer; a notification is dropped.
    """
    logger.warning("a %s for %s could not be encoded as JSON; not sent", type(message).__name__, name)
    error = types.ErrorData(code=types.INVALID_PARAMS, message="the message could not be encoded as JSON")
    if isinstance(message, types.JSONRPCRequest):
        await in_send.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)))
    elif isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
        reply = types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        try:
            line = reply.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        except (PydanticSerializationError, ValueError):
            return  # its id itself cannot be written: the peer's request times out
        await send.send(line)


@asynccontextmanager
async def framed_transport(
    receive: ByteReceiveStream,
    send: ByteSendStream,
    *,
    max_line_bytes: int,
    on_overflow: Callable[[], None],
    name: str = "peer",
) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Yield SDK streams reading lines from `receive` and writing lines to `send`.

    A line over `max_line_bytes` calls `on_overflow()` and closes the read side, so pending
    requests fail as "connection closed". A line that is not JSON-RPC is handed to the
    session as an exception (the SDK logs it) and reading goes on.
    """
    in_send, in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    out_send, out_recv = anyio.create_memory_object_stream[SessionMessage](16)
    buffered = BufferedByteReceiveStream(receive)

    async def read_lines() -> None:
        async with in_send:
            try:
                while True:
                    line = await buffered.receive_until(b"\n", max_line_bytes)
                    if not line.strip():
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError as exc:
                        await in_send.send(exc)
                        continue
                    await in_send.send(SessionMessage(message))
            except anyio.DelimiterNotFound:
                logger.error("%s wrote a line over %d bytes; closing it", name, max_line_bytes)
                on_overflow()
            except _END_OF_INPUT:
                pass

    async def write_lines() -> None:
        async with out_recv:
            try:
                async for item in out_recv:
                    try:
                        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    except (PydanticSerializationError, ValueError):
                        # Only this message is lost: its request fails, the transport goes on.
                        await _refuse_unencodable(item.message, in_send, send, name)
                        continue
                    await send.send(data.encode() + b"\n")
            except _END_OF_INPUT:
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_lines)
        tg.start_soon(write_lines)
        try:
            yield in_recv, out_send
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await send.aclose()
