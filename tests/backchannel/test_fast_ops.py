"""Which lines the back-channel's fast path takes: exactly the kit's 2026-07-28 op line; every
other line goes on to the SDK's server (tests/backchannel/test_server.py compares the answers)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio
import mcp.types as types
import pytest
from anyio.abc import ByteSendStream

from mcp_host.backchannel.fast_ops import FastCall, FastOps, fast_call
from mcp_host.wire import LineWriter
from mcp_host_kit.channel import SocketChannel

ENVELOPE = {
    types.PROTOCOL_VERSION_META_KEY: "2026-07-28",
    types.CLIENT_CAPABILITIES_META_KEY: {},
    types.CLIENT_INFO_META_KEY: {"name": "t", "version": "1"},
    "mcp-host/grant": "g",
}


GONE = object()


def line(
    top: dict[str, Any] | None = None, params: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
) -> bytes:
    """The op line with `top`, `params` and `meta` keys changed (GONE: removed)."""
    message: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "store.count", "arguments": {"collection": "c"}, "_meta": dict(ENVELOPE)},
    }
    for holder, changes in ((message, top), (message["params"], params), (message["params"]["_meta"], meta)):
        for key, value in (changes or {}).items():
            if value is GONE:
                holder.pop(key, None)
            else:
                holder[key] = value
    return json.dumps(message).encode()


def test_the_kits_own_line_is_taken() -> None:
    kit = SocketChannel("/nowhere")._request_line(5, "store.count", {"collection": "c"}, "grant")
    call = fast_call(kit)
    assert call is not None
    assert (call.id, call.name, call.arguments) == (5, "store.count", {"collection": "c"})
    assert call.meta["mcp-host/grant"] == "grant"


def test_a_plain_op_line_is_read_whole() -> None:
    assert fast_call(line()) == FastCall(3, "store.count", {"collection": "c"}, ENVELOPE)
    assert fast_call(line(params={"arguments": GONE})) == FastCall(3, "store.count", None, ENVELOPE)
    assert fast_call(line({"id": "abc"})) is not None


@pytest.mark.parametrize(
    "other",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "_meta": {}, "n": NaN}}',
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}).encode(),
        json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x", "_meta": ENVELOPE}}).encode(),
        line({"jsonrpc": "1.0"}),
        line({"id": True}),
        line({"id": 1.5}),
        line({"id": None}),
        line({"extra": 1}),  # a key JSON-RPC does not have
        line({"params": [1]}),
        line(params={"name": 7}),
        line(params={"arguments": [1]}),
        line(params={"task": {"ttl": 1}}),  # params this path does not know
        line(params={"_meta": GONE}),
        line(params={"_meta": "x"}),
        line(meta={types.PROTOCOL_VERSION_META_KEY: "2025-11-25"}),
    ],
)
def test_any_other_line_is_left_to_the_sdks_server(other: bytes) -> None:
    assert fast_call(other) is None


@pytest.mark.parametrize("key", ["traceparent", "tracestate", "baggage"])
def test_a_traced_line_is_left_to_the_sdks_server_which_continues_the_trace(key: str) -> None:
    assert fast_call(line(meta={key: "00-x"})) is None


def test_a_line_nested_past_the_parsers_limit_is_left_to_the_sdks_server() -> None:
    assert fast_call(b"[" * 100_000 + b"]" * 100_000) is None


class _Sink(ByteSendStream):
    """The socket's sending side, kept in memory (a unit test of the writing logic)."""

    def __init__(self, broken: bool = False) -> None:
        self.sent = b""
        self.broken = broken

    async def send(self, item: bytes) -> None:
        if self.broken:
            raise anyio.BrokenResourceError
        self.sent += item

    async def aclose(self) -> None:
        pass

    async def send_eof(self) -> None:
        pass


async def _answered(result: types.CallToolResult, sink: _Sink) -> None:
    async def answer(name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> types.CallToolResult:
        return result

    async with anyio.create_task_group() as tg:
        fast = FastOps(answer, tg, "test", {"name": "mcp-host", "version": "0"})
        fast.attach(LineWriter(sink, "test"))
        assert fast.take(line())


@pytest.mark.anyio
async def test_an_answer_that_is_not_unicode_is_refused_in_its_place() -> None:
    sink = _Sink()
    await _answered(types.CallToolResult(content=[types.TextContent(type="text", text="\ud800")]), sink)
    assert json.loads(sink.sent) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": types.INVALID_PARAMS, "message": "the message could not be encoded as JSON"},
    }


@pytest.mark.anyio
async def test_an_answer_to_a_plugin_that_hung_up_is_dropped() -> None:
    await _answered(types.CallToolResult(content=[]), _Sink(broken=True))  # no exception escapes


@pytest.mark.anyio
async def test_before_the_writer_is_attached_no_line_is_taken() -> None:
    async def answer(name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> types.CallToolResult:
        raise AssertionError("answered")

    async with anyio.create_task_group() as tg:
        assert not FastOps(answer, tg, "test", {}).take(line())
