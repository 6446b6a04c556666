"""A child cannot speak for the host: the host's own `_meta` keys and reserved protocol keys a
child puts into anything it sends never reach a visitor (real host, real sandboxed `liar`
child, real SDK clients over HTTP, both eras). The pure-function cases are in test_meta.py.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import BaseModel

from mcp_host.wire.meta import speaks_for_host
from tests.hosting import RunningHost, host_settings, running_host

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "auto"]  # auto negotiates 2026-07-28 with this host
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


class _Tee(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, sink: bytearray) -> None:
        self._inner = inner
        self._sink = sink

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._sink.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Recording(httpx2.AsyncBaseTransport):
    """An HTTP transport that keeps every byte the host sent back (every SSE event included)."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self.received = bytearray()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, self.received),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def _recorded_client(
    running: RunningHost, session: dict[str, Any], mode: str, wire: _Recording, **callbacks: Any
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {session['token']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60), transport=wire) as http:
        transport = streamable_http_client(session["mcp_url"], http_client=http)
        async with Client(transport, mode=mode, cache=None, **callbacks) as client:
            yield client


def _metas(value: Any) -> list[dict[str, Any]]:
    """Every `_meta` object anywhere in `value` (a message as the client received it)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("_meta"), dict):
                found.append(item["_meta"])
            stack.extend(v for k, v in item.items() if k != "_meta")
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _host_speaking(meta: dict[str, Any]) -> dict[str, Any]:
    """The keys of `meta` that speak for the host, but the host's own serverInfo stamp."""
    spoken = {k: v for k, v in meta.items() if speaks_for_host(k)}
    if spoken.get(SERVER_INFO, {}).get("name") == "mcp-host":
        del spoken[SERVER_INFO]
    return spoken


@pytest.mark.parametrize("mode", ERAS)
async def test_a_childs_host_and_protocol_meta_never_reach_the_visitor(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    heard: list[Any] = []
    reported: list[float] = []
    wire = _Recording()

    async def on_message(message: Any) -> None:
        heard.append(message)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    async with running_host(host_settings(tmp_path, database_url, ["liar"])) as host:
        code, _ = await host.access.create_code(host.owner_id, "public", {"test.liar": {"max_lies": 5}})
        session = await host.new_session({"code": code})
        async with _recorded_client(host, session, mode, wire, message_handler=on_message) as client:
            log_opt_in: dict[str, Any] = {}
            if mode == "legacy":
                with warnings.catch_warnings():  # logging/setLevel is 2025-11-25's
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.set_logging_level("debug")
            else:
                log_opt_in = {"io.modelcontextprotocol/logLevel": "debug"}
            listed = await client.session.list_tools()
            answers: list[Any] = [
                await client.call_tool(
                    "lie", {}, progress_callback=on_progress, meta=cast(types.RequestParamsMeta, log_opt_in)
                ),
                await client.list_prompts(),
                await client.get_prompt("liar_prompt", {}),
                await client.list_resources(),
                await client.list_resource_templates(),
                await client.read_resource("liar://note"),
            ]

    logs = [m for m in heard if isinstance(m, types.LoggingMessageNotification)]
    assert [m.params.data for m in logs] == ["a lie"]
    assert reported == [1]
    # The host's own figures, not the child's 999 (nor its U+2010 variant's 998).
    assert (listed.meta or {})["mcp-host/quota"] == {"test.liar": {"limit": 5, "used": 0, "remaining": 5}}
    assert _host_speaking({k: v for k, v in (listed.meta or {}).items() if k != "mcp-host/quota"}) == {}
    everything = [*listed.tools, *answers, *heard]
    metas = [meta for message in everything for meta in _metas(message)]
    assert [_host_speaking(meta) for meta in metas if _host_speaking(meta)] == []
    # The child's own key still passes, everywhere it put one: the test reached every kind of message.
    kept = [meta["trace"] for meta in metas if "trace" in meta]
    assert kept == ["liar-trace"] * 11
    # On the wire too, the progress notice included (the SDK hands a client only its figures;
    # the host passes on only those, so the child's `trace` is not in it either).
    assert b"forged" not in wire.received
    assert wire.received.count(b"liar-trace") == 11


async def test_the_owner_door_does_not_pass_on_a_childs_claims_either(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["liar"])) as running:
        token = running.owner_token()
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{running.url}/v1/owner/mcp", http_client=http)
            async with Client(transport, cache=None) as owner:
                result = await owner.call_tool(
                    "capability_invoke", {"capability": "test.liar", "tool": "liar.lie", "arguments": {}}
                )
        assert result.is_error is not True
        wire = result.model_dump_json(by_alias=True)
        assert "forged" not in wire
