"""A child's answer the host cannot read is answered at once (`wire.framing`): the sandboxed
`unreadable` plugin answers `garble` with a line holding a lone surrogate (escaped, or as raw
CESU-8 bytes), bytes that are not UTF-8, a 5000-digit integer, nesting past the parser's limit
or a result that is no object; the visitor's call is refused
`unavailable` within 2 s rather than at the call timeout (30 s), and the same child and the host
go on serving. Below, the framing itself over in-memory bytes: what the session is handed for
each kind of line."""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as types
import pytest
from anyio.abc import ByteReceiveStream, ByteSendStream
from mcp.shared.message import SessionMessage

from mcp_host.wire import UNREADABLE_ANSWER, framed_transport
from mcp_host_kit.contract import codes
from tests.hosting import RunningHost, host_fixture, refusal

pytestmark = pytest.mark.anyio

host = host_fixture(["unreadable"], scope="module", call_timeout_s=30.0)

GARBLED = ["surrogate", "cesu", "latin1", "long_integer", "deep", "not_an_object"]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("how", GARBLED)
async def test_an_answer_the_host_cannot_read_is_refused_unavailable_at_once_and_the_child_serves_on(
    host: RunningHost, how: str, mode: str
) -> None:
    session = await host.new_session()
    async with host.client(session, mode=mode) as visitor:
        before = await visitor.call_tool("ok", {})
        with anyio.fail_after(2):
            garbled = await visitor.call_tool("garble", {"how": how})
        after = await visitor.call_tool("ok", {})

    assert garbled.is_error
    assert refusal(garbled) == {
        "code": codes.UNAVAILABLE,
        "message": "the capability's answer could not be read; try again",
    }
    # The same process answered before and after: it was not restarted, and it served all three.
    assert before.structured_content is not None and after.structured_content is not None
    assert after.structured_content["pid"] == before.structured_content["pid"]
    assert after.structured_content["served"] == before.structured_content["served"] + 2


class _Bytes(ByteReceiveStream):
    """What a child wrote, handed out in one chunk."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._data:
            raise anyio.EndOfStream
        chunk, self._data = self._data[:max_bytes], self._data[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        self._data = b""


class _Nowhere(ByteSendStream):
    async def send(self, item: bytes) -> None:
        pass

    async def aclose(self) -> None:
        pass


def _outcome(item: SessionMessage | Exception) -> tuple[Any, ...]:
    if isinstance(item, Exception):
        return ("exception",)
    message = item.message
    if isinstance(message, types.JSONRPCError):
        return ("error", message.id, message.error.code)
    return (type(message).__name__, getattr(message, "id", None))


async def test_an_unreadable_answer_is_answered_by_its_id_and_any_other_unreadable_line_is_passed_on() -> None:
    lines = [
        rb'{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"\ud800"}]}}',
        # The id of the top level, not one inside the result, whatever the order of the members.
        rb'{"jsonrpc":"2.0","result":{"id":9,"x":"\ud800","y":[{"id":8}]},"id":"a-1"}',
        b'{"jsonrpc":"2.0","id":4,"error":{"code":1,"message":"caf\xe9"}}',
        # Not an answer of ours: a request (the child's), a batch, an id that is no plain value.
        rb'{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"x":"\ud800"}}',
        rb'[{"jsonrpc":"2.0","id":6,"result":{"x":"\ud800"}}]',
        rb'{"jsonrpc":"2.0","id":{"n":7},"result":{"x":"\ud800"}}',
        rb'{"jsonrpc":"2.0","id":"\ud800","result":{}}',
        b'{"jsonrpc":"2.0","id":10,"result":{}}',  # readable: passed on as it is
    ]
    received = []
    async with framed_transport(
        _Bytes(b"\n".join(lines) + b"\n"), _Nowhere(), max_line_bytes=1 << 20, on_overflow=lambda: None
    ) as (read, _):
        with anyio.fail_after(5):
            while True:
                try:
                    received.append(_outcome(await read.receive()))
                except anyio.EndOfStream:
                    break

    assert received == [
        ("error", 3, UNREADABLE_ANSWER),
        ("error", "a-1", UNREADABLE_ANSWER),
        ("error", 4, UNREADABLE_ANSWER),
        ("exception",),
        ("exception",),
        ("exception",),
        ("exception",),
        ("JSONRPCResponse", 10),
    ]
