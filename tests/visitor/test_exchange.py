"""The 2026-07-28 hot path (`visitor.exchange`) answers exactly what the SDK's own entry answers.

One SDK `Server` is served twice on loopback, by the same `RpcEdge` and session manager, with
and without the fast path; the same requests get the same status and body from both. What the
fast path declines (progress, log levels, a `requestState`, a header mismatch, listen) is the
SDK's, and a long call keeps its connection alive with SSE pings and is cancelled when the
client goes away.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from mcp_host.edge import RpcEdge
from mcp_host.visitor.exchange import ModernExchange
from tests.hosting import free_port, modern_request, wait_until

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
_ECHO = types.Tool(
    name="echo",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    output_schema={"type": "object", "properties": {"text": {"type": "string"}}},
)
_SLOW = types.Tool(name="slow", input_schema={"type": "object"})


class _Tools:
    """A server whose `slow` tool waits until released, and says whether it was cancelled."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.slow_started = anyio.Event()
        self.slow_cancelled = anyio.Event()
        self.server: Server[Any] = Server(
            "exchange-test",
            version="1",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            get_tool_input_schema=lambda name: {"echo": _ECHO.input_schema}.get(name),
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_ECHO, _SLOW])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name == "echo":
            text = (params.arguments or {}).get("text", "")
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(text))], structured_content={"text": text}
            )
        if params.name == "slow":
            self.slow_started.set()
            try:
                await self.release.wait()
            except anyio.get_cancelled_exc_class():
                self.slow_cancelled.set()
                raise
            return types.CallToolResult(content=[types.TextContent(type="text", text="done")])
        return types.CallToolResult(content=[types.TextContent(type="text", text="no such tool")], is_error=True)


@asynccontextmanager
async def _serve(tools: _Tools, *, fast: bool) -> AsyncIterator[str]:
    """The server behind `RpcEdge`, with or without the fast path, on a loopback port; its URL."""
    port = free_port()
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=[f"127.0.0.1:{port}"], allowed_origins=[]
    )
    manager = StreamableHTTPSessionManager(tools.server, security_settings=security)
    exchange = ModernExchange(tools.server, security, watch_after_s=0.05, ping_after_s=0.3) if fast else None
    edge = RpcEdge(manager.handle_request, max_body_bytes=1_000_000, fast=exchange)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return
        await edge(scope, receive, send)

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    async with manager.run(), anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        await wait_until(lambda: server.started, within_s=10)
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True


def _request(method: str, params: dict[str, Any], **meta: Any) -> tuple[dict[str, Any], dict[str, str]]:
    return modern_request(method, params, 7, **meta)


_SAME_ANSWER = {
    "call": _request("tools/call", {"name": "echo", "arguments": {"text": "hi ✓"}}),
    "list": _request("tools/list", {}),
    "unknown tool": _request("tools/call", {"name": "nope", "arguments": {}}),
    "bad params": _request("tools/call", {"arguments": {"text": "hi"}}),
    "unknown method": _request("nope/nope", {}),
    "ping": _request("ping", {}),
    "missing envelope key": (
        {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_meta": {}}},
        _request("ping", {})[1],
    ),
    "header mismatch": (_request("tools/list", {})[0], {**_request("tools/list", {})[1], "Mcp-Method": "ping"}),
    "param header mismatch": (
        _request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})[0],
        {**_request("tools/call", {"name": "echo", "arguments": {}})[1], "Mcp-Param-Text": "other"},
    ),
}


@pytest.mark.parametrize("case", list(_SAME_ANSWER))
async def test_the_fast_path_answers_what_the_sdk_answers(case: str) -> None:
    body, headers = _SAME_ANSWER[case]
    tools = _Tools()
    answers = []
    for fast in (False, True):
        async with _serve(tools, fast=fast) as url, httpx2.AsyncClient(timeout=10) as http:
            response = await http.post(url, json=body, headers=headers)
            payload = response.text
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                payload = json.dumps(json.loads(payload.split("data: ", 1)[1]))  # the SDK's SSE mode
            answers.append((response.status_code, json.loads(payload)))
    assert answers[0] == answers[1]
    if case == "call":
        assert answers[1][1]["result"]["structuredContent"] == {"text": "hi ✓"}


async def test_a_quick_answer_is_one_json_response() -> None:
    body, headers = _request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    async with _serve(_Tools(), fast=True) as url, httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(url, json=body, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "exchange-test"


async def test_a_long_call_is_kept_alive_with_pings_then_answered_on_the_stream() -> None:
    tools = _Tools()
    body, headers = _request("tools/call", {"name": "slow", "arguments": {}})
    async with _serve(tools, fast=True) as url, httpx2.AsyncClient(timeout=10) as http:
        async with http.stream("POST", url, json=body, headers=headers) as response:
            assert response.headers["content-type"] == "text/event-stream"
            chunks = response.aiter_text()
            assert (await chunks.__anext__()).startswith(": ping")
            tools.release.set()
            rest = "".join([chunk async for chunk in chunks])
    event = json.loads(rest.split("data: ", 1)[1])
    assert event["id"] == 7 and event["result"]["content"][0]["text"] == "done"


async def test_a_client_that_goes_away_cancels_its_call() -> None:
    tools = _Tools()
    body, headers = _request("tools/call", {"name": "slow", "arguments": {}})
    async with _serve(tools, fast=True) as url:
        async with httpx2.AsyncClient(timeout=10) as http, anyio.create_task_group() as tg:
            tg.start_soon(lambda: http.post(url, json=body, headers=headers))
            await tools.slow_started.wait()
            await anyio.sleep(0.1)  # past watch_after_s: the watcher runs
            tg.cancel_scope.cancel()  # the client closes its connection
        with anyio.fail_after(5):
            await tools.slow_cancelled.wait()


@pytest.mark.parametrize(
    "meta",
    [{"progressToken": "p1"}, {"io.modelcontextprotocol/logLevel": "debug"}],
    ids=["progress", "log level"],
)
async def test_a_request_that_may_stream_is_left_to_the_sdk(meta: dict[str, Any]) -> None:
    """The fast path sends nothing for it; the SDK's SSE mode answers."""
    tools = _Tools()
    exchange = ModernExchange(tools.server, TransportSecuritySettings(enable_dns_rebinding_protection=False))
    body, headers = _request("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, **meta)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    assert not await exchange(scope, json.dumps(body).encode(), receive, send)
    assert not await exchange(scope, json.dumps({**body, "params": {"requestState": "x"}}).encode(), receive, send)
    assert sent == []
