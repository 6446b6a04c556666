"""The kit under a host: ops over a real unix socket to a real low-level MCP `Server`.

The fake host here is the host's back-channel in miniature: the SDK's `Server` per accepted
connection behind the host's own line framing, checking the grant in each call's `_meta`
and answering ops from a table (or refusing them with `{code, message}`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.streams.buffered
import mcp.types as types
import pytest
from inline_snapshot import snapshot
from mcp import Client
from mcp.server import Server, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer

from mcp_host.wire.framing import framed_transport
from mcp_host_kit import (
    GRANT_KEY,
    SESSION_KEY,
    SOCKET_ENV,
    Denied,
    HostOpError,
    InvalidArguments,
    Kit,
    QuotaExhausted,
    Unavailable,
    tool_errors,
)
from mcp_host_kit.channel import SocketChannel
from mcp_host_kit.host import Host
from tests.hosting import PLUGINS

pytestmark = pytest.mark.anyio

NOTES = PLUGINS / "notes"
GRANT = "grant-of-this-call"
SESSION = {
    "owner_id": "owner-1",
    "session_id": "0123456789abcdef0123456789abcdef",
    "mode": "code",
    "subject": {"kind": "code", "id": "SPRING"},
    "visitor": {"name": "Ada", "email": None},
    "role": "guests",
}
META = {GRANT_KEY: GRANT, SESSION_KEY: SESSION}

Answer = Callable[[dict[str, Any]], Awaitable[types.CallToolResult]]


def answered(value: dict[str, Any]) -> Answer:
    async def answer(arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content=value)

    return answer


def refused(code: str, message: str) -> Answer:
    async def answer(arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content={"code": code, "message": message}, is_error=True)

    return answer


@dataclass
class FakeHost:
    path: str
    answers: dict[str, Answer]
    calls: list[tuple[str, dict[str, Any], Any]] = field(default_factory=list)
    connections: int = 0
    kits: list[Kit] = field(default_factory=list)

    def kit(self, **options: Any) -> Kit:
        """A kit under this host; its idle connections are closed when the host stops."""
        kit = Kit(NOTES, environ={SOCKET_ENV: self.path}, **options)
        self.kits.append(kit)
        return kit


def _server(fake: FakeHost) -> Server[Any]:
    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        grant = dict(ctx.meta or {}).get(GRANT_KEY)
        fake.calls.append((params.name, params.arguments or {}, grant))
        if grant != GRANT:
            return await refused("denied", "denied")({})
        return await fake.answers[params.name](params.arguments or {})  # unknown op: a protocol error

    return Server("fake-host", on_call_tool=call_tool)


@asynccontextmanager
async def unix_server(
    serve: Callable[[anyio.abc.SocketStream], Coroutine[Any, Any, None]], before_stop: Callable[[], Awaitable[None]]
) -> AsyncIterator[str]:
    """Serve each connection to a fresh socket path with `serve`. On the way out `before_stop`
    runs (it closes the clients' connections), then every served connection ends at its EOF:
    none is cancelled mid-read (asyncio can fail a read cancelled as its data arrives)."""
    folder = tempfile.mkdtemp(prefix="kit-")  # short: a socket path holds at most 107 bytes
    path = str(Path(folder) / "ops.sock")
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as connections:
                async with await anyio.create_unix_listener(path) as listener:
                    accepting = anyio.CancelScope()

                    async def accept() -> None:
                        with accepting:
                            while True:
                                connections.start_soon(serve, await listener.accept())

                    connections.start_soon(accept)
                    try:
                        yield path
                    finally:
                        with anyio.CancelScope(shield=True):
                            await before_stop()
                        accepting.cancel()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@asynccontextmanager
async def fake_host(answers: dict[str, Answer]) -> AsyncIterator[FakeHost]:
    """A host's back-channel answering `answers`; the kits made from it are closed at the end."""
    fake = FakeHost("", answers)
    server = _server(fake)

    async def serve(conn: anyio.abc.SocketStream) -> None:
        fake.connections += 1
        async with framed_transport(conn, conn, max_line_bytes=1 << 20, on_overflow=lambda: None) as (read, write):
            await server.run(read, write, server.create_initialization_options())

    async def close_kits() -> None:
        for kit in fake.kits:
            await kit.aclose()

    async with unix_server(serve, close_kits) as path:
        fake.path = path
        yield fake


ALL_OPS = {
    "store.insert": answered({"id": "r1"}),
    "store.query": answered(
        {"records": [{"id": "r1", "doc": {"text": "hi"}, "created_at": "2026-01-02T03:04:05+00:00"}]}
    ),
    "store.count": answered({"count": 1}),
    "store.update": answered({"updated": True}),
    "store.delete": answered({"deleted": 1}),
    "store.claim": answered({"claimed": True}),
    "store.release": answered({"released": False}),
    "config.get": answered(
        {
            "values": {
                "config": {"greeting": "hello", "page_size": 10},
                "code_config": {"max_notes": 3},
                "role_config": {},
                "key_config": {"max_notes": None},
            }
        }
    ),
    "owner.meta": answered({"value": "Europe/Oslo"}),
}


async def test_every_op_carries_the_calls_grant_and_returns_its_typed_result() -> None:
    async with fake_host(ALL_OPS) as fake:
        kit = fake.kit()
        host = kit.host(META)
        inserted = await host.store.insert("notes", {"text": "hi"})
        records = await host.store.query("notes", filter={"text": "hi"}, limit=5)
        counted = await host.store.count("notes")
        updated = await host.store.update("notes", "r1", {"text": "hello"})
        deleted = await host.store.delete("notes", id="r1")
        claimed = await host.store.claim("slots", "10:00", 60)
        released = await host.store.release("slots", "10:00")
        config = await host.config.get()
        timezone = await host.owner.meta("timezone")

    assert [r.model_dump(mode="json") for r in records] == snapshot(
        [{"id": "r1", "doc": {"text": "hi"}, "created_at": "2026-01-02T03:04:05Z"}]
    )
    assert (inserted, counted, updated, deleted, claimed, released, timezone) == snapshot(
        ("r1", 1, True, 1, True, False, "Europe/Oslo")
    )
    assert config.model_dump() == snapshot(
        {
            "config": {"greeting": "hello", "page_size": 10},
            "code_config": {"max_notes": 3},
            "role_config": {},
            "key_config": {"max_notes": None},
        }
    )
    assert fake.calls == snapshot(
        [
            ("store.insert", {"collection": "notes", "doc": {"text": "hi"}}, "grant-of-this-call"),
            ("store.query", {"collection": "notes", "filter": {"text": "hi"}, "limit": 5}, "grant-of-this-call"),
            ("store.count", {"collection": "notes"}, "grant-of-this-call"),
            ("store.update", {"collection": "notes", "id": "r1", "doc": {"text": "hello"}}, "grant-of-this-call"),
            ("store.delete", {"collection": "notes", "id": "r1"}, "grant-of-this-call"),
            ("store.claim", {"collection": "slots", "key": "10:00", "ttl_s": 60}, "grant-of-this-call"),
            ("store.release", {"collection": "slots", "key": "10:00"}, "grant-of-this-call"),
            ("config.get", {}, "grant-of-this-call"),
            ("owner.meta", {"field": "timezone"}, "grant-of-this-call"),
        ]
    )
    assert fake.connections == 1  # one pooled connection served every op


async def test_concurrent_ops_use_separate_connections_and_each_gets_its_own_answer() -> None:
    gate = anyio.Event()
    arrived = 0

    async def count_after_gate(arguments: dict[str, Any]) -> types.CallToolResult:
        nonlocal arrived
        arrived += 1
        if arrived == 3:
            gate.set()
        await gate.wait()  # all three are in flight at once
        return await answered({"count": arguments["filter"]["n"]})(arguments)

    async with fake_host({"store.count": count_after_gate}) as fake:
        kit = fake.kit(timeout_s=10)
        host = kit.host(META)
        counts: dict[int, int] = {}

        async def count(n: int) -> None:
            counts[n] = await host.store.count("notes", {"n": n})

        async with anyio.create_task_group() as tg:
            for n in (1, 2, 3):
                tg.start_soon(count, n)

    assert counts == {1: 1, 2: 2, 3: 3}
    assert fake.connections == 3


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        ("denied", Denied),
        ("quota_exhausted", QuotaExhausted),
        ("invalid_arguments", InvalidArguments),
        ("unavailable", Unavailable),
        ("timeout", HostOpError),
        ("plugin_own_code", HostOpError),
    ],
)
async def test_a_refused_op_raises_the_exception_of_its_code(code: str, error_type: type[HostOpError]) -> None:
    async with fake_host({"store.count": refused(code, "refused for a reason")}) as fake:
        kit = fake.kit()
        with pytest.raises(HostOpError) as raised:
            await kit.host(META).store.count("notes")

    assert type(raised.value) is error_type
    assert (raised.value.code, raised.value.message) == (code, "refused for a reason")


async def test_a_call_without_grant_is_denied_without_touching_the_socket() -> None:
    async with fake_host(ALL_OPS) as fake:
        kit = fake.kit()
        for meta in ({SESSION_KEY: SESSION}, {GRANT_KEY: "", SESSION_KEY: SESSION}, None):
            with pytest.raises(Denied) as raised:
                await kit.host(meta).store.insert("notes", {"text": "hi"})

    assert raised.value.message == snapshot(
        "store.insert: this call carries no grant (_meta['mcp-host/grant']); host ops are refused"
    )
    assert (fake.connections, fake.calls) == (0, [])


async def test_a_grant_the_host_refuses_is_denied() -> None:
    async with fake_host(ALL_OPS) as fake:
        kit = fake.kit()
        with pytest.raises(Denied):
            await kit.host({GRANT_KEY: "a-stale-grant"}).store.count("notes")

    assert fake.calls == [("store.count", {"collection": "notes"}, "a-stale-grant")]


async def test_an_answer_over_the_line_cap_is_unavailable_and_its_connection_dropped() -> None:
    huge = {"records": [{"id": "r1", "doc": {"text": "x" * 10_000}, "created_at": "2026-01-02T03:04:05+00:00"}]}
    async with fake_host({**ALL_OPS, "store.query": answered(huge)}) as fake:
        kit = fake.kit(max_response_bytes=4096)
        host = kit.host(META)
        with pytest.raises(Unavailable) as raised:
            await host.store.query("notes")
        assert await host.store.count("notes") == 1

    assert raised.value.message == snapshot("store.query: the host's answer is over 4096 bytes")
    assert fake.connections == 2


async def test_a_host_that_never_answers_is_unavailable_after_the_timeout() -> None:
    async def never(arguments: dict[str, Any]) -> types.CallToolResult:
        await anyio.Event().wait()
        raise AssertionError("unreachable")

    async with fake_host({"store.count": never}) as fake:
        kit = fake.kit(timeout_s=0.2)
        with anyio.fail_after(10), pytest.raises(Unavailable) as raised:
            await kit.host(META).store.count("notes")

    assert raised.value.message == snapshot("store.count: the host did not answer within 0.2 s")


async def test_a_cancelled_op_discards_its_connection_and_the_next_op_gets_its_own_answer() -> None:
    started, release = anyio.Event(), anyio.Event()

    async def count(arguments: dict[str, Any]) -> types.CallToolResult:
        if arguments.get("filter") == {"slow": True}:
            started.set()
            await release.wait()
            return await answered({"count": 99})(arguments)
        return await answered({"count": 1})(arguments)

    async with fake_host({"store.count": count}) as fake:
        kit = fake.kit()
        host = kit.host(META)
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.store.count, "notes", {"slow": True})
            with anyio.fail_after(10):
                await started.wait()
            tg.cancel_scope.cancel()
        release.set()
        assert await host.store.count("notes") == 1

    assert fake.connections == 2


async def test_protocol_errors_and_malformed_answers_are_unavailable() -> None:
    async def no_code(arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text="nope")], is_error=True)

    answers = {"store.count": answered({"count": "many"}), "store.claim": answered({}), "store.release": no_code}
    async with fake_host(answers) as fake:
        kit = fake.kit()
        host = kit.host(META)
        messages = []
        for call in (
            host.store.count("notes"),
            host.store.claim("slots", "k", 5),
            host.store.release("slots", "k"),
            host.store.insert("notes", {}),  # not answered by this host: a JSON-RPC error
        ):
            with pytest.raises(Unavailable) as raised:
                await call
            messages.append(raised.value.message)

    assert messages == snapshot(
        [
            "store.count: the host's answer does not have the op's shape",
            "store.claim: the host's answer does not have the op's shape",
            "store.release: the host refused the op without a code",
            "store.insert: the host answered with protocol error -32603",
        ]
    )


async def test_a_missing_socket_is_unavailable() -> None:
    kit = Kit(NOTES, environ={SOCKET_ENV: "/nonexistent/mcp-host/ops.sock"})
    with pytest.raises(Unavailable):
        await kit.host(META).store.count("notes")


async def test_arguments_that_are_not_json_are_refused_before_sending() -> None:
    async with fake_host(ALL_OPS) as fake:
        kit = fake.kit()
        with pytest.raises(InvalidArguments):
            await kit.host(META).store.insert("notes", {"when": object()})
        with pytest.raises(InvalidArguments):
            await kit.host(META).store.insert("notes", {"ratio": float("nan")})

    assert fake.connections == 0


async def test_the_session_is_read_from_the_calls_meta() -> None:
    kit = Kit(NOTES, environ={SOCKET_ENV: "/unused.sock"})

    assert kit.host(META).session.model_dump() == snapshot(
        {
            "owner_id": "owner-1",
            "session_id": "0123456789abcdef0123456789abcdef",
            "mode": "code",
            "subject": {"kind": "code", "id": "SPRING"},
            "visitor": {"name": "Ada", "email": None},
            "role": "guests",
        }
    )
    for meta in ({GRANT_KEY: GRANT}, {GRANT_KEY: GRANT, SESSION_KEY: {**SESSION, "mode": "boss"}}):
        with pytest.raises(Denied):
            kit.host(meta).session  # noqa: B018


async def test_a_plugin_tool_passes_its_grant_to_the_host_and_reports_refusals_as_structured_errors() -> None:
    async with fake_host({**ALL_OPS, "store.insert": refused("quota_exhausted", "no more notes")}) as fake:
        kit = fake.kit()
        plugin = MCPServer("plugin")

        @plugin.tool()
        @tool_errors
        async def add(text: str, ctx: Context) -> dict[str, Any]:
            return {"id": await kit.host(ctx).store.insert("notes", {"text": text})}

        @plugin.tool()
        @tool_errors
        async def count(ctx: Context) -> dict[str, Any]:
            return {"count": await kit.host(ctx).store.count("notes")}

        async with Client(plugin) as client:
            refusal = await client.call_tool("add", {"text": "hi"}, meta=META)  # type: ignore[arg-type]
            counted = await client.call_tool("count", {}, meta=META)  # type: ignore[arg-type]

    assert (refusal.is_error, refusal.structured_content) == snapshot(
        (True, {"code": "quota_exhausted", "message": "no more notes"})
    )
    assert (counted.is_error, counted.structured_content) == snapshot((False, {"count": 1}))
    assert [grant for _, _, grant in fake.calls] == [GRANT, GRANT]


async def test_a_lowlevel_server_handler_reads_the_session_from_its_context() -> None:
    kit = Kit(NOTES, environ={SOCKET_ENV: "/unused.sock"})

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return types.CallToolResult(content=[], structured_content=kit.host(ctx).session.model_dump())

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="whoami", input_schema={"type": "object"})])

    async with Client(Server("plugin", on_call_tool=call_tool, on_list_tools=list_tools)) as client:
        result = await client.call_tool("whoami", {}, meta=META)  # type: ignore[arg-type]

    assert result.structured_content == SESSION


def test_tool_errors_accepts_async_tools_only() -> None:
    def sync_tool() -> dict[str, Any]:
        return {}

    with pytest.raises(TypeError):
        tool_errors(sync_tool)  # type: ignore[arg-type]


@asynccontextmanager
async def raw_host(reply: Callable[[dict[str, Any]], list[bytes]]) -> AsyncIterator[SocketChannel]:
    """A peer that answers each request line with the lines `reply` gives (to test framing),
    and a channel to it."""

    async def serve(conn: anyio.abc.SocketStream) -> None:
        async with conn:
            lines = anyio.streams.buffered.BufferedByteReceiveStream(conn)
            try:
                while True:
                    request = json.loads(await lines.receive_until(b"\n", 1 << 20))
                    for line in reply(request):
                        await conn.send(line)
            except (anyio.IncompleteRead, anyio.BrokenResourceError):
                pass  # the client closed the connection

    channels: list[SocketChannel] = []

    async def close_channel() -> None:
        await channels[0].aclose()

    async with unix_server(serve, close_channel) as path:
        channels.append(SocketChannel(path))
        yield channels[0]


def response(request: dict[str, Any], result: dict[str, Any], request_id: Any = None) -> bytes:
    return (
        json.dumps(
            {"jsonrpc": "2.0", "id": request["id"] if request_id is None else request_id, "result": result}
        ).encode()
        + b"\n"
    )


async def test_blank_lines_notifications_and_other_answers_before_ours_are_skipped() -> None:
    def reply(request: dict[str, Any]) -> list[bytes]:
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}
        return [
            b"\n",
            json.dumps(progress).encode() + b"\n",
            response(request, {"content": [], "structuredContent": {"count": -1}}, request_id=10_000),
            response(request, {"content": [], "structuredContent": {"count": 7}}),
        ]

    async with raw_host(reply) as channel:
        counted = await Host(channel, grant=GRANT, session=None).store.count("notes")

    assert counted == 7


@pytest.mark.parametrize(
    "answer",
    [
        b"this is not JSON-RPC\n",
        b'{"jsonrpc": "2.0", "id": 1, "result": {"content": "not a list"}}\n',
        b'{"jsonrpc": "2.0", "id": 1, "result": {"content": []}}\n',
        b'{"jsonrpc": "2.0", "id": 1, "result": {"content": "x", "structuredContent": {"count": 1}}}\n',
        b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": "no", "structuredContent": {"count": 1}}}\n',
        b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": true, "structuredContent": 5}}\n',
        b'{"jsonrpc": "2.0", "id": 1, "result": [1]}\n',
        b'{"jsonrpc": "1.0", "id": 1, "result": {"content": [], "structuredContent": {"count": 1}}}\n',
        b"42\n",
        b"[" * 100_000 + b"\n",
    ],
)
async def test_an_answer_that_is_not_a_structured_tool_result_is_unavailable(answer: bytes) -> None:
    async with raw_host(lambda request: [answer]) as channel:
        with pytest.raises(Unavailable):
            await Host(channel, grant=GRANT, session=None).store.count("notes")


async def test_connections_beyond_the_idle_limit_are_closed_after_use() -> None:
    rounds = [anyio.Event(), anyio.Event()]
    arrived = 0

    async def count_in_rounds_of_three(arguments: dict[str, Any]) -> types.CallToolResult:
        nonlocal arrived
        arrived += 1
        gate = rounds[(arrived - 1) // 3]
        if arrived % 3 == 0:
            gate.set()
        await gate.wait()  # three ops in flight at once
        return await answered({"count": 1})(arguments)

    async with fake_host({"store.count": count_in_rounds_of_three}) as fake:
        channel = SocketChannel(fake.path, max_idle=1)
        host = Host(channel, grant=GRANT, session=None)
        for _ in rounds:
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(host.store.count, "notes")
        await channel.aclose()  # before the host stops

    assert fake.connections == 5  # 3, then the one kept idle and 2 new


async def test_inference_generate_sends_the_messages_and_returns_the_text() -> None:
    async with fake_host({"inference.generate": answered({"text": "A short summary."})}) as fake:
        host = fake.kit().host(META)
        text = await host.inference.generate(
            [{"role": "user", "content": "Summarise"}, {"role": "assistant", "content": "Of what?"}],
            max_tokens=200,
            system="Be brief.",
        )
        shorthand = await host.inference.generate("Hello")

    assert (text, shorthand) == ("A short summary.", "A short summary.")
    assert fake.calls == snapshot(
        [
            (
                "inference.generate",
                {
                    "messages": [
                        {"role": "user", "content": "Summarise"},
                        {"role": "assistant", "content": "Of what?"},
                    ],
                    "max_tokens": 200,
                    "system": "Be brief.",
                },
                "grant-of-this-call",
            ),
            ("inference.generate", {"messages": [{"role": "user", "content": "Hello"}]}, "grant-of-this-call"),
        ]
    )


async def test_a_client_without_sampling_is_unavailable_to_inference_generate() -> None:
    answers = {"inference.generate": refused("unavailable", "the visitor's client cannot write text (no sampling)")}
    async with fake_host(answers) as fake:
        with pytest.raises(Unavailable) as raised:
            await fake.kit().host(META).inference.generate("Hello")

    assert raised.value.message == "the visitor's client cannot write text (no sampling)"
