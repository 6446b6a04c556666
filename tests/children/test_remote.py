"""Remote plugins (`transport.kind: http`) through a real host: an SDK streamable-HTTP server
started here on loopback, requiring a bearer token, reached by visitor sessions of both eras;
the token from the owner's sealed config, a 401 shown `unconfigured` in the catalogue, a
changed remote tool pending again, a redirect off the allowed hosts refused, and a visitor's
own Authorization never forwarded (the server records every request's headers).

The guard (`children.remote_guard`) over real loopback connections: a rebinding DNS answer never
gets a connection to loopback (a server counts the connections it accepts), a name is connected
at the address checked with its Host header, and over TLS with its SNI and its certificate; a
loopback server is reached only when `transport.allow_private` names it, a link-local or
metadata address only when named itself, and `plugin_add` refuses a metadata server outright."""

from __future__ import annotations

import functools
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx2
import mcp.types as types
import pytest
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSListener
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel

from mcp_host.children.remote_guard import MemoryResolver, RemoteGuard
from mcp_host.plugins import Address, PrivateReach
from tests.certificates import tls_pair
from tests.hosting import free_port, host_settings, refusal, running_host, serving
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
    async with serving(app, port):
        yield remote


def remote_plugin(folder: Path, url: str, *, allow_private: str = "[127.0.0.1]") -> Path:
    """The test plugin's folder; `allow_private`: the manifest's list ("" leaves it out)."""
    folder.mkdir()
    private = f"\n  allow_private: {allow_private}" if allow_private else ""
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
  allowed_hosts: [127.0.0.1]{private}
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
            pins = running.pins
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


PUBLIC = "93.184.215.14"  # a public address the tests never reach (`_refuse_outside`)


class _Outside(Exception):
    """Raised where a connection to a public address would start: the tests reach nothing outside."""


async def _refuse_outside(tried: list[str], event: str, info: dict[str, Any]) -> None:
    """An httpx `trace` hook: notes each address a connection starts to, and stops one to `PUBLIC`."""
    if event == "connection.connect_tcp.started":
        tried.append(info["host"])
        if info["host"] == PUBLIC:
            raise _Outside


class _Rebinding:
    """A hostile DNS server: a public address to the first lookup, loopback to every later one."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> list[Address]:
        self.asked.append(host)
        return [ipaddress.ip_address(PUBLIC if len(self.asked) == 1 else "127.0.0.1")]


@dataclass
class Counting:
    """A loopback HTTP server that counts the connections it accepts and keeps each request's head."""

    port: int
    accepted: int = 0
    heads: list[bytes] = field(default_factory=list)
    server_names: list[str | None] = field(default_factory=list)
    """Over TLS: the name each client asked for (SNI)."""


@asynccontextmanager
async def counting_server(tls: ssl.SSLContext | None = None) -> AsyncIterator[Counting]:
    """`Counting` on loopback, answering each request `200 ok` and closing; over TLS with `tls`."""
    listener: Any = await anyio.create_tcp_listener(local_host="127.0.0.1")
    server = Counting(listener.extra(SocketAttribute.local_port))
    if tls is not None:
        tls.sni_callback = lambda sock, name, context: server.server_names.append(name)
        listener = TLSListener(listener, tls, standard_compatible=False)

    async def serve(stream: Any) -> None:
        server.accepted += 1
        async with stream:
            head = b""
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive()
                server.heads.append(head)
                await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield server
        tg.cancel_scope.cancel()


async def test_a_rebinding_dns_answer_never_gets_a_connection_to_loopback() -> None:
    # `localhost` is what the machine's resolver answers with 127.0.0.1: a guard that checked one
    # answer and let the connection look the name up again would reach the server here.
    resolver, tried = _Rebinding(), list[str]()
    guard = RemoteGuard(frozenset({"localhost"}), PrivateReach(), resolver)
    async with counting_server() as server:
        url = f"http://localhost:{server.port}/mcp"
        trace = functools.partial(_refuse_outside, tried)
        async with httpx2.AsyncClient(transport=guard) as http:
            with pytest.raises(_Outside):  # checked public: connected to that very address
                await http.post(url, json={}, extensions={"trace": trace})
            second = await http.post(url, json={}, extensions={"trace": trace})  # now loopback: refused

    assert (resolver.asked, tried) == (["localhost", "localhost"], [PUBLIC])
    assert (second.status_code, server.accepted) == (421, 0)


async def test_a_name_is_connected_at_the_address_checked_and_keeps_its_host_header() -> None:
    resolver = MemoryResolver({"mcp.internal.test": ["127.0.0.1"]})  # the machine cannot resolve it
    guard = RemoteGuard(frozenset({"mcp.internal.test"}), PrivateReach.of(["mcp.internal.test"]), resolver)
    async with counting_server() as server, httpx2.AsyncClient(transport=guard) as http:
        response = await http.get(f"http://mcp.internal.test:{server.port}/mcp")

    assert (response.status_code, response.text, resolver.asked, server.accepted) == (
        200,
        "ok",
        ["mcp.internal.test"],
        1,
    )
    assert f"host: mcp.internal.test:{server.port}\r\n".encode() in server.heads[0].lower()


@pytest.mark.parametrize("certified", ["mcp.tls.test", "other.test"])
async def test_over_tls_the_name_is_sent_as_sni_and_the_certificate_checked_against_it(certified: str) -> None:
    pair = tls_pair(certified)
    server_tls, client_tls = pair.server, pair.client
    resolver = MemoryResolver({"mcp.tls.test": ["127.0.0.1"]})
    reach = PrivateReach.of(["mcp.tls.test"])
    guard = RemoteGuard(frozenset({"mcp.tls.test"}), reach, resolver, ssl_context=client_tls)
    async with counting_server(server_tls) as server, httpx2.AsyncClient(transport=guard) as http:
        url = f"https://mcp.tls.test:{server.port}/mcp"
        if certified == "mcp.tls.test":
            answered = (await http.get(url)).text
        else:
            with pytest.raises(httpx2.ConnectError, match="certificate verify failed"):
                await http.get(url)
            answered = None

    assert server.server_names == ["mcp.tls.test"]
    assert answered == ("ok" if certified == "mcp.tls.test" else None)


@pytest.mark.parametrize(
    ("url", "allowed", "private", "why"),
    [
        ("http://other.example/mcp", {"a.example"}, [], "other.example is not in the plugin's allowed_hosts"),
        (
            "http://127.0.0.1:9/mcp",
            {"127.0.0.1"},
            [],
            "127.0.0.1 is a loopback or private address; name 127.0.0.1 in transport.allow_private to reach it",
        ),
        (
            "http://[::1]:9/mcp",
            {"[::1]"},
            ["localhost"],
            "[::1] is a loopback or private address; name [::1] in transport.allow_private to reach it",
        ),
        (
            "http://localhost:9/mcp",
            {"localhost"},
            [],
            "localhost resolves to 127.0.0.1, a loopback or private address; name localhost or 127.0.0.1 in"
            " transport.allow_private to reach it",
        ),
        (
            "http://mixed.test/mcp",  # one public answer does not make another one reachable
            {"mixed.test"},
            [],
            "mixed.test resolves to 10.0.0.7, a loopback or private address; name mixed.test or 10.0.0.7 in"
            " transport.allow_private to reach it",
        ),
        (
            "http://169.254.169.254/latest/meta-data/",
            {"169.254.169.254"},
            ["169.254.169.253"],
            "169.254.169.254 is a link-local or cloud-metadata address; it is reached only when"
            " transport.allow_private names that address itself",
        ),
        (
            "http://meta.test/computeMetadata/v1/",  # naming the host is not enough for metadata
            {"meta.test"},
            ["meta.test"],
            "meta.test resolves to 169.254.169.254, a link-local or cloud-metadata address; it is reached only"
            " when transport.allow_private names that address itself",
        ),
        (
            "http://[fd00:ec2::254]/latest/",
            {"[fd00:ec2::254]"},
            ["meta.test"],
            "[fd00:ec2::254] is a link-local or cloud-metadata address; it is reached only when"
            " transport.allow_private names that address itself",
        ),
        (
            "http://[::ffff:127.0.0.1]:9/mcp",
            {"[::ffff:127.0.0.1]"},
            ["127.0.0.2"],
            "[::ffff:127.0.0.1] is a loopback or private address; name [::ffff:127.0.0.1] in"
            " transport.allow_private to reach it",
        ),
    ],
)
async def test_the_guard_answers_421_for_a_host_not_allowed_or_an_address_not_permitted(
    url: str, allowed: set[str], private: list[str], why: str
) -> None:
    resolver = MemoryResolver(
        {"localhost": ["127.0.0.1"], "mixed.test": [PUBLIC, "10.0.0.7"], "meta.test": ["169.254.169.254"]}
    )
    guard = RemoteGuard(frozenset(allowed), PrivateReach.of(private), resolver)
    response = await guard.handle_async_request(httpx2.Request("POST", url))
    await guard.aclose()
    assert (response.status_code, guard.refused) == (421, why)


@pytest.mark.parametrize("allow_private", ["", "[127.0.0.1]"])
async def test_a_loopback_remote_server_is_reached_only_when_allow_private_names_it(
    tmp_path: Path, database_url: str, allow_private: str
) -> None:
    async with remote_server(token=None) as remote:
        plugin = remote_plugin(tmp_path / "remote", f"{remote.url}/mcp", allow_private=allow_private)
        settings = host_settings(tmp_path, database_url, []).model_copy(update={"plugins": [plugin]})
        async with running_host(settings) as running:
            session = await running.new_session()
            async with owner_client(running) as owner, running.client(session) as visitor:
                said = await visitor.call_tool("hello", {"name": "ann"})
                listed = await entry(owner)

    if allow_private:
        assert (said.structured_content, listed["status"]) == ({"result": "hello ann"}, "healthy")
        assert remote.seen
        return
    assert said.is_error and refusal(said) is not None
    assert (listed["status"], listed["cause"]) == (
        "failing",
        "left out of tool lists: the remote server refused to start a session: 127.0.0.1 is a loopback or private"
        " address; name 127.0.0.1 in transport.allow_private to reach it",
    )
    assert remote.seen == []  # nothing reached it


async def test_the_owner_door_refuses_a_link_local_or_metadata_server_and_installs_nothing(
    tmp_path: Path, database_url: str
) -> None:
    sources = [
        "http://169.254.169.254/latest/meta-data/",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://[fd00:ec2::254]/latest/",
        "https://2852039166/",  # 169.254.169.254 as one number
    ]
    settings = host_settings(tmp_path, database_url, [])
    async with running_host(settings) as running, owner_client(running) as owner:
        answers = [refusal(await owner.call_tool("plugin_add", {"source": s})) for s in sources]
        _, listed = await call(owner, "capabilities_list")

    assert answers == [
        {
            "code": "invalid_arguments",
            "message": f"{host} is a link-local or cloud-metadata address; a remote plugin cannot be added there",
        }
        for host in ("169.254.169.254", "metadata.google.internal", "fd00:ec2::254", "2852039166")
    ]
    assert listed["capabilities"] == []
    plugins = settings.data_dir / "plugins"
    assert not plugins.exists() or list(plugins.iterdir()) == []


async def test_the_owner_door_adds_a_remote_server_by_its_url_reaching_loopback_only_once_allowed(
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
    # Installed, but a loopback address is reached only once the manifest's allow_private names it.
    assert (answer["capability"], answer["pending_tools"]) == ("ip_127_0_0_1", [])
    assert [f["key"] for f in answer["config_to_set"]] == ["authorization"]
    assert listed["status"] == "failing"
    assert "127.0.0.1 is a loopback or private address; name 127.0.0.1 in transport.allow_private" in listed["cause"]
    assert remote.seen == []
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
