"""Remote plugins (`transport.kind: http`) through a real host: an SDK streamable-HTTP server
started here on loopback, requiring a bearer token, reached by visitor sessions of both eras;
the token from the owner's sealed config, a 401 shown `unconfigured` in the catalogue, a
changed remote tool pending again, a redirect off the allowed hosts refused, and a visitor's
own Authorization never forwarded (the server records every request's headers)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx2
import mcp.types as types
import pytest
import uvicorn
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel

from mcp_host.children.remote import _Guard
from tests.hosting import free_port, host_settings, refusal, running_host
from tests.owner_facade.test_door import call, owner_client

pytestmark = pytest.mark.anyio

TOKEN = "tok-remote-5b1e9c"
PLUGIN = "test.remote"


@dataclass
class Remote:
    url: str
    seen: list[dict[str, str]] = field(default_factory=list)
    """The headers of every request that reached the server (lower-cased names)."""


class Qty(BaseModel):
    copies: int


async def _ask() -> Elicit[Qty]:
    return Elicit("How many copies?", Qty)


def _server() -> MCPServer:
    mcp = MCPServer("remote-test", version="1", log_level="WARNING")

    @mcp.tool(description="reserve copies of a title, asking how many")
    async def reserve(title: str, qty: Annotated[ElicitationResult[Qty], Resolve(_ask)]) -> str:
        n = qty.data.copies if isinstance(qty, AcceptedElicitation) else 0
        return f"reserved {n} x {title}"

    @mcp.tool(description="say hello")
    def hello(name: str) -> str:
        return f"hello {name}"

    @mcp.tool(description="change hello's description")
    async def morph(ctx: Context) -> str:
        mcp.remove_tool("hello")

        @mcp.tool(name="hello", description="say hello, differently")
        def hello_again(name: str) -> str:
            return f"hi {name}"

        await ctx.session.send_tool_list_changed()  # the handshake era's notice
        await ctx.notify_tools_changed()  # 2026-07-28's, on subscriptions/listen
        return "morphed"

    return mcp


class _Gate:
    """Records each request's headers; answers 401 without the bearer token, and a redirect
    to `localhost` (not in the plugin's allowed hosts) on /away/."""

    def __init__(self, app: Any, remote: Remote, port: int, token: str | None, *, legacy_only: bool = False) -> None:
        self._app = app
        self._remote = remote
        self._port = port
        self._token = token
        self._legacy_only = legacy_only

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self._remote.seen.append(headers | {":path": scope["path"]})
        if scope["path"].startswith("/away/"):
            location = f"http://localhost:{self._port}/mcp".encode()
            await send({"type": "http.response.start", "status": 307, "headers": [(b"location", location)]})
            await send({"type": "http.response.body", "body": b""})
            return
        if self._legacy_only and headers.get("mcp-method") == "server/discover":  # a server of the handshake era
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if self._token is not None and headers.get("authorization") != f"Bearer {self._token}":
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await self._app(scope, receive, send)


@asynccontextmanager
async def remote_server(token: str | None = TOKEN, *, legacy_only: bool = False) -> AsyncIterator[Remote]:
    """The test's remote server; `token`: the bearer it requires (None: none); `legacy_only`:
    it offers the handshake era only (`server/discover` answered 404)."""
    port = free_port()
    remote = Remote(f"http://127.0.0.1:{port}")
    mcp_app = _server().streamable_http_app(streamable_http_path="/mcp")
    app = _Gate(mcp_app, remote, port, token, legacy_only=legacy_only)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn signals no event
                await anyio.sleep(0.02)
        yield remote
        server.should_exit = True


def remote_plugin(folder: Path, url: str) -> Path:
    folder.mkdir()
    (folder / "manifest.yaml").write_text(
        f"""id: {PLUGIN}
kind: capability
title: Remote (test)
acl: always
visitor_tools: [hello, morph, reserve]
config:
  - {{key: token, type: string, secret: true, description: "Bearer …"}}
transport:
  kind: http
  url: {url}
  allowed_hosts: [127.0.0.1]
  headers: {{X-Plugin: remote-test}}
  headers_from_config: {{Authorization: token}}
  timeout_s: 10
"""
    )
    return folder


async def entry(owner: Any) -> dict[str, Any]:
    return await entry_of(owner, PLUGIN)


async def entry_of(owner: Any, plugin_id: str) -> dict[str, Any]:
    _, listed = await call(owner, "capabilities_list")
    return dict(next(c for c in listed["capabilities"] if c["id"] == plugin_id))


@pytest.mark.parametrize("remote_era", ["2026-07-28", "2025-11-25"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_remote_server_is_a_plugin_with_its_token_from_sealed_config(
    tmp_path: Path, database_url: str, mode: str, remote_era: str
) -> None:
    async with remote_server(legacy_only=remote_era != "2026-07-28") as remote:
        settings = host_settings(tmp_path, database_url, [], pin_tools=True)
        settings = settings.model_copy(update={"plugins": [remote_plugin(tmp_path / "remote", f"{remote.url}/mcp")]})
        async with running_host(settings) as running:
            pins = running.host.pins
            assert pins is not None
            session = await running.new_session()
            async with owner_client(running) as owner, running.client(session, mode=mode) as visitor:
                # No token yet: the server answers 401; the catalogue says unconfigured, and why.
                unset = await visitor.call_tool("hello", {"name": "x"})
                unconfigured = await entry(owner)
                set_ = await call(
                    owner, "config_set", capability=PLUGIN, scope="owner", values={"token": f"Bearer {TOKEN}"}
                )
                hidden = (await visitor.list_tools()).tools
                pending = sorted(p.tool for p in await pins.pending())
                await pins.approve(PLUGIN, "hello")
                await pins.approve(PLUGIN, "morph")
                listed = sorted(t.name for t in (await visitor.list_tools()).tools)
                said = await visitor.call_tool("hello", {"name": "ann"})
                healthy = await entry(owner)
                morphed = await visitor.call_tool("morph", {})
                after = [t.name for t in (await visitor.list_tools()).tools]
                waiting = [(p.plugin_id, p.tool) for p in await pins.pending()]
                trail = await call(owner, "audit_list", limit=100)

    assert refusal(unset) is not None and unset.is_error
    assert unconfigured["status"] == "unconfigured"
    assert "HTTP 401" in unconfigured["cause"]
    assert set_[0] is False and set_[1]["values"]["token"] == {"set": True}
    assert hidden == [] and pending == ["hello", "morph", "reserve"]
    assert listed == ["hello", "morph"]
    assert said.is_error is not True and said.structured_content == {"result": "hello ann"}
    assert healthy["status"] == "healthy"
    assert morphed.is_error is not True
    # The remote tool changed: it is pending the owner's approval again, and hidden meanwhile.
    assert after == ["morph"]
    assert sorted(waiting) == [(PLUGIN, "hello"), (PLUGIN, "reserve")]  # reserve was never approved
    assert TOKEN not in json.dumps(trail[1])
    # Every request carried the manifest's headers; the visitor's bearer reached it never.
    authorized = [h for h in remote.seen if h.get("authorization") == f"Bearer {TOKEN}"]
    assert authorized and all(h.get("x-plugin") == "remote-test" for h in remote.seen)
    assert all(session["token"] not in json.dumps(h) for h in remote.seen)
    # The host spoke the era the server offers; in the handshake era, the owner's listing and the
    # visitor's calls went through MCP sessions of their own.
    spoken = {h.get("mcp-protocol-version") for h in authorized if h.get("mcp-method") != "server/discover"}
    assert spoken - {None} == {remote_era}
    if remote_era == "2025-11-25":
        assert len({h["mcp-session-id"] for h in authorized if "mcp-session-id" in h}) >= 2


async def test_a_redirect_to_a_host_not_allowed_is_refused(tmp_path: Path, database_url: str) -> None:
    async with remote_server() as remote:
        settings = host_settings(tmp_path, database_url, [])
        plugin = remote_plugin(tmp_path / "remote", f"{remote.url}/away/mcp")
        settings = settings.model_copy(update={"plugins": [plugin]})
        async with running_host(settings) as running:
            session = await running.new_session()
            async with owner_client(running) as owner, running.client(session) as visitor:
                await call(owner, "config_set", capability=PLUGIN, scope="owner", values={"token": f"Bearer {TOKEN}"})
                refused = await visitor.call_tool("hello", {"name": "x"})
                failing = await entry(owner)

    assert refused.is_error
    assert failing["status"] == "failing"
    assert "localhost" not in json.dumps(failing)  # nothing of the redirect's target is echoed
    # The redirect was answered, and nothing reached the server at the host it named.
    assert [h[":path"] for h in remote.seen if h[":path"] != "/away/mcp"] == []
    assert all(h["host"].startswith("127.0.0.1:") for h in remote.seen)


@pytest.mark.parametrize(
    ("url", "allowed", "named", "why"),
    [
        (
            "http://other.example/mcp",
            {"a.example"},
            {"a.example"},
            "other.example is not in the plugin's allowed_hosts",
        ),
        (
            "http://127.0.0.1:9/mcp",
            {"127.0.0.1"},
            set(),
            "a non-public address is reached only when allowed_hosts names it",
        ),
        ("http://[::1]:9/mcp", {"[::1]"}, set(), "a non-public address is reached only when allowed_hosts names it"),
        ("http://localhost:9/mcp", {"localhost"}, set(), "localhost is reached only when allowed_hosts names it"),
    ],
)
async def test_the_guard_answers_421_for_a_host_not_allowed_or_an_address_not_named(
    url: str, allowed: set[str], named: set[str], why: str
) -> None:
    guard = _Guard(frozenset(allowed), frozenset(named))
    response = await guard.handle_async_request(httpx2.Request("POST", url))
    await guard.aclose()
    assert (response.status_code, guard.refused) == (421, why)


async def test_the_owner_door_adds_a_remote_server_by_its_url_and_lists_its_tools_for_review(
    tmp_path: Path, database_url: str
) -> None:
    async with remote_server(token=None) as remote:
        settings = host_settings(tmp_path, database_url, [], pin_tools=True)
        async with running_host(settings) as running, owner_client(running) as owner:
            added = await owner.call_tool("plugin_add", {"source": f"{remote.url}/mcp"})
            refused = await owner.call_tool("plugin_add", {"source": "http://mcp.example.com/mcp"})
            listed = await entry_of(owner, "ip_127_0_0_1")

    assert added.is_error is not True, added
    answer = added.structured_content or {}
    assert (answer["capability"], answer["pending_tools"]) == ("ip_127_0_0_1", ["hello", "morph", "reserve"])
    assert [f["key"] for f in answer["config_to_set"]] == ["authorization"]
    assert listed["status"] == "healthy"
    assert refusal(refused) == {
        "code": "invalid_arguments",
        "message": "an http:// source must be a loopback host (127.0.0.1, [::1], localhost); use https://",
    }
    folder = settings.data_dir / "plugins" / "ip_127_0_0_1"
    assert f"url: {remote.url}/mcp" in (folder / "manifest.yaml").read_text()


@pytest.mark.parametrize("remote_era", ["2026-07-28", "2025-11-25"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_remote_servers_question_reaches_the_calling_visitor(
    tmp_path: Path, database_url: str, mode: str, remote_era: str
) -> None:
    asked: list[str] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"copies": 3})

    async with remote_server(token=None, legacy_only=remote_era != "2026-07-28") as remote:
        settings = host_settings(tmp_path, database_url, [])
        settings = settings.model_copy(update={"plugins": [remote_plugin(tmp_path / "remote", f"{remote.url}/mcp")]})
        async with running_host(settings) as running:
            session = await running.new_session()
            async with running.client(session, mode=mode, elicitation_callback=answer) as visitor:
                result = await visitor.call_tool("reserve", {"title": "Dune"})

    assert result.is_error is not True, result
    assert result.structured_content == {"result": "reserved 3 x Dune"}
    assert asked == ["How many copies?"]
