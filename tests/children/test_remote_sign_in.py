"""The host signs in to a remote MCP server that wants OAuth, with a server nobody here wrote:
`oidc-provider` (OpenID-certified) as its authorization server and the TypeScript SDK's MCP
server behind `requireBearerAuth` (tests/fixtures/oauth_upstream/server.mjs, installed pinned by
scripts/install-oauth-upstream). The test plays the owner's browser: it opens the URL
`remote_connect` returns, fills the server's own sign-in and consent forms, and follows the
redirect back to the host's `/oauth/callback`.

Proves: a plugin that needs a sign-in is `unconfigured` with the cause and shows
`needs_sign_in`; after the owner connects, visitors' calls carry the host's token (the server
names the account); the token is refreshed before it expires (short lifetimes here); when the
server's refresh token expires the plugin needs a sign-in again, calls are `unconfigured`, and a
new sign-in works; signing out revokes the refresh token at the server and deletes the row; the
tokens are stored sealed, never in clear. A plugin that signs in per visitor
(`transport.sign_in: per_visitor`) asks each visitor session, by a URL elicitation, to sign in
with its own account: two visitors' calls name their own accounts, one who declines gets the
question and no data, and a session's sign-in goes when the session ends.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client

from mcp_host.children.remote_sign_in import VISITOR_NEEDS, visitor_key
from mcp_host.store import SecretBox, SignInStore, load_host_key
from mcp_host_kit.contract import codes
from tests.hosting import REPO, RunningHost, free_port, host_settings, refusal, running_host
from tests.owner_facade.test_door import call, owner_client, owner_token

pytestmark = pytest.mark.anyio

UPSTREAM = REPO / ".cache" / "oauth-upstream"
PLUGIN = "test.signin"


@dataclass
class Upstream:
    mcp_url: str
    auth_url: str

    async def stats(self) -> dict[str, Any]:
        async with httpx2.AsyncClient() as http:
            response = await http.get(self.mcp_url.removesuffix("/mcp") + "/stats")
            return dict(response.json())


@asynccontextmanager
async def upstream(access_ttl: int, refresh_ttl: int) -> AsyncIterator[Upstream]:
    """The OAuth-protected server, on two loopback ports, until the block ends."""
    if not (UPSTREAM / "server.mjs").exists() or not (UPSTREAM / "node_modules" / "oidc-provider").exists():
        pytest.skip("the OAuth upstream is not installed: run scripts/install-oauth-upstream (needs node and npm)")
    auth_port, mcp_port = free_port(), free_port()
    env = {
        **os.environ,
        "AUTH_PORT": str(auth_port),
        "MCP_PORT": str(mcp_port),
        "ACCESS_TTL": str(access_ttl),
        "REFRESH_TTL": str(refresh_ttl),
    }
    process = await anyio.open_process(["node", "server.mjs"], cwd=UPSTREAM, env=env, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        with anyio.fail_after(20):
            said = b""
            while b"ready" not in said:
                said += await process.stdout.receive()
        yield Upstream(f"http://127.0.0.1:{mcp_port}/mcp", f"http://127.0.0.1:{auth_port}")
    finally:
        process.terminate()
        with anyio.move_on_after(5):
            await process.wait()
        await process.aclose()


def signin_plugin(
    folder: Path, url: str, instances: str = "shared", private: str = "[127.0.0.1]", sign_in: str = "owner"
) -> Path:
    folder.mkdir()
    (folder / "manifest.yaml").write_text(
        f"""id: {PLUGIN}
kind: capability
title: Signed-in remote (test)
acl: always
instances: {instances}
visitor_tools: [whoami, echo]
transport:
  kind: http
  url: {url}
  allowed_hosts: [127.0.0.1]
  allow_private: {private}
  timeout_s: 10
  sign_in: {sign_in}
"""
    )
    return folder


class _Form(HTMLParser):
    """The first form of a page: its action and its inputs' names and values."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = found.get("action") or ""
        elif tag == "input" and self.action is not None and found.get("name"):
            self.fields[str(found["name"])] = found.get("value") or ""


async def sign_in_as_a_browser(url: str, account: str) -> httpx2.Response:
    """What a browser does with the authorization URL: the server's sign-in form (any account
    and password pass oidc-provider's development pages), its consent form, then the redirect
    back to the host's callback; the callback's page."""
    async with httpx2.AsyncClient(follow_redirects=True, timeout=20) as browser:
        page = await browser.get(url)
        for _ in range(4):
            if page.url.path == "/oauth/callback":
                return page
            form = _Form()
            form.feed(page.text)
            assert form.action is not None, page.text[:500]
            fields = form.fields | ({"login": account, "password": "any"} if "login" in form.fields else {})
            page = await browser.post(page.url.join(form.action), data=fields)
        raise AssertionError(f"the sign-in did not come back to the host: {page.url}")


async def connect(owner: Client, account: str) -> tuple[dict[str, Any], httpx2.Response, dict[str, Any]]:
    """The owner connects the plugin: `remote_connect`'s answer, the callback page, `remote_status`."""
    error, started = await call(owner, "remote_connect", capability=PLUGIN)
    assert error is False, started
    page = await sign_in_as_a_browser(started["url"], account)
    _, status = await call(owner, "remote_status", capability=PLUGIN)
    return started, page, status


async def entry(owner: Client) -> dict[str, Any]:
    _, listed = await call(owner, "capabilities_list")
    return dict(next(c for c in listed["capabilities"] if c["id"] == PLUGIN))


def text_of(result: Any) -> str:
    return str(result.content[0].text) if result.content else ""


def sign_ins(running: RunningHost) -> SignInStore:
    box = SecretBox(load_host_key(running.settings.data_dir, None))
    return SignInStore(running.sql, box)


async def past_expiry(store: SignInStore, by_s: float, key: str = PLUGIN) -> None:
    """Wait until `by_s` after the stored access token's expiry (a wall-clock time: the token's
    lifetime is the server's, nothing here can signal it)."""
    record = await store.read(key)
    assert record is not None and record.expires_at is not None
    assert record.expires_at - time.time() < 30  # the test's short lifetimes
    await anyio.sleep(max(0.0, record.expires_at + by_s - time.time()))


@dataclass
class Scene:
    server: Upstream
    running: RunningHost
    owner: Client
    visitor: Client


@asynccontextmanager
async def scene(
    tmp_path: Path,
    database_url: str,
    access_ttl: int,
    refresh_ttl: int,
    instances: str = "shared",
    *,
    installed: bool = False,
) -> AsyncIterator[Scene]:
    """The upstream server (tokens of those lifetimes), a host with it as a remote plugin (with
    `installed`, in the data folder's plugins, as `plugin_add` puts one), the owner's client and
    a visitor session's client."""
    async with upstream(access_ttl, refresh_ttl) as server:
        settings = host_settings(tmp_path, database_url, [])
        if installed:
            (settings.data_dir / "plugins").mkdir(parents=True)
            signin_plugin(settings.data_dir / "plugins" / PLUGIN, server.mcp_url, instances)
        else:
            plugin = signin_plugin(tmp_path / "signin", server.mcp_url, instances)
            settings = settings.model_copy(update={"plugins": [plugin]})
        async with running_host(settings) as running:
            session = await running.new_session()
            async with owner_client(running) as owner, running.client(session) as visitor:
                yield Scene(server, running, owner, visitor)


async def test_the_owner_signs_the_host_in_and_visitors_call_with_a_refreshed_token(
    tmp_path: Path, database_url: str
) -> None:
    async with scene(tmp_path, database_url, access_ttl=3, refresh_ttl=600) as at:
        server, running, owner, visitor = at.server, at.running, at.owner, at.visitor
        before = await visitor.call_tool("whoami", {})
        unsigned = await entry(owner)
        started, page, status = await connect(owner, "alice")
        first = await visitor.call_tool("whoami", {})
        signed = await entry(owner)
        store = sign_ins(running)
        record = await store.read(PLUGIN)
        raw = await running.sql.fetchrow("SELECT * FROM mcp_host.remote_sign_ins")
        await past_expiry(store, by_s=0.5)
        later = await visitor.call_tool("whoami", {})
        refreshed = await store.read(PLUGIN)
        grants = (await server.stats())["grants"]

    # Never signed in, the host could not list the server's tools: a visitor is shown none.
    assert refusal(before) == {"code": codes.UNKNOWN, "message": "no tool named 'whoami' is available in this session"}
    assert (unsigned["status"], unsigned["sign_in"]) == ("unconfigured", "needs_sign_in")
    needs = "the remote server needs the owner's sign-in: connect it with the owner tool remote_connect"
    assert unsigned["cause"] == f"left out of tool lists: {needs}"
    assert started["url"].startswith(server.auth_url + "/auth?")
    assert started["callback"] == f"{running.url}/oauth/callback"
    assert page.status_code == 200 and "Signed in" in page.text
    assert (status["sign_in"], status["last"]) == (
        "connected",
        {"capability": PLUGIN, "connected": True, "cause": None},
    )
    assert text_of(first) == "signed in as alice"
    assert (signed["status"], signed["sign_in"]) == ("healthy", "connected")
    # Sealed: neither token is in the row in clear; the server's metadata is kept beside it.
    assert record is not None and record.tokens is not None and raw is not None
    assert record.tokens["access_token"] not in json.dumps(dict(raw), default=str)
    assert record.tokens["refresh_token"] not in json.dumps(dict(raw), default=str)
    assert raw["metadata"]["server"]["issuer"] == server.auth_url
    # Past the access token's expiry the call still works: the host refreshed it (rotated).
    assert text_of(later) == "signed in as alice"
    assert refreshed is not None and refreshed.tokens is not None
    assert refreshed.tokens["refresh_token"] != record.tokens["refresh_token"]
    assert grants.get("refresh_token", 0) >= 1 and grants["authorization_code"] == 1


async def test_a_token_one_child_refreshed_is_the_one_every_other_child_uses(tmp_path: Path, database_url: str) -> None:
    """Two children holding the same sign-in (here one per visitor session; on a cluster, one per
    replica): the refresh token rotates when the first refreshes, and the second reads the new
    token from the store instead of refreshing with the used one (which the server refuses)."""
    async with scene(tmp_path, database_url, access_ttl=3, refresh_ttl=600, instances="per_session") as at:
        running, owner, first = at.running, at.owner, at.visitor
        await connect(owner, "alice")
        async with running.client(await running.new_session()) as second:
            before = [await v.call_tool("whoami", {}) for v in (first, second)]
            await past_expiry(sign_ins(running), by_s=0.5)
            after = [await v.call_tool("whoami", {}) for v in (first, second)]
        grants = (await at.server.stats())["grants"]

    assert [text_of(r) for r in before + after] == ["signed in as alice"] * 4
    assert grants == {"authorization_code": 1, "refresh_token": 1}


async def test_a_token_the_server_refuses_before_its_expiry_is_refreshed_not_signed_in_again(
    tmp_path: Path, database_url: str
) -> None:
    """The server's clock (or a revocation there) refuses a token the host still holds valid:
    the host refreshes once before it would ask the owner for a new sign-in."""
    async with scene(tmp_path, database_url, access_ttl=2, refresh_ttl=600) as at:
        running, owner, visitor = at.running, at.owner, at.visitor
        await connect(owner, "alice")
        store = sign_ins(running)
        await past_expiry(store, by_s=0.5)
        # The host now thinks the expired token has an hour left.
        await running.sql.execute("UPDATE mcp_host.remote_sign_ins SET expires_at = now() + interval '1 hour'")
        called = await visitor.call_tool("whoami", {})
        grants = (await at.server.stats())["grants"]

    assert text_of(called) == "signed in as alice"
    assert grants == {"authorization_code": 1, "refresh_token": 1}


async def test_an_expired_refresh_token_needs_a_new_sign_in_and_reconnecting_works(
    tmp_path: Path, database_url: str
) -> None:
    async with scene(tmp_path, database_url, access_ttl=2, refresh_ttl=8) as at:
        running, owner, visitor = at.running, at.owner, at.visitor
        await connect(owner, "alice")
        signed = await visitor.call_tool("whoami", {})
        await past_expiry(sign_ins(running), by_s=7)  # past the refresh token's lifetime too
        expired = await visitor.call_tool("whoami", {})
        listed = [t.name for t in (await visitor.list_tools()).tools]
        needing = await entry(owner)
        _, status = await call(owner, "remote_status", capability=PLUGIN)
        await connect(owner, "bob")
        again = await visitor.call_tool("whoami", {})

    assert text_of(signed) == "signed in as alice"
    assert refusal(expired) == {
        "code": codes.UNCONFIGURED,
        "message": "the remote server's sign-in expired or was refused: the owner signs in again with remote_connect",
    }
    assert listed == []  # its tools are left out until the owner signs in again (the catalogue says why)
    assert (needing["status"], needing["sign_in"]) == ("unconfigured", "needs_sign_in")
    assert status["sign_in"] == "needs_sign_in"
    assert text_of(again) == "signed in as bob"


@pytest.mark.parametrize("how", ["remote_disconnect", "plugin_remove"])
async def test_signing_out_or_removing_revokes_the_refresh_token_at_the_server_and_deletes_the_row(
    tmp_path: Path, database_url: str, how: str
) -> None:
    async with scene(tmp_path, database_url, access_ttl=60, refresh_ttl=600, installed=True) as at:
        running, owner = at.running, at.owner
        await connect(owner, "alice")
        store = sign_ins(running)
        record = await store.read(PLUGIN)
        assert record is not None and record.tokens is not None and record.client is not None
        arguments = {"capability": PLUGIN} if how == "remote_disconnect" else {"id": PLUGIN}
        _, out = await call(owner, how, **arguments)
        row = await store.read(PLUGIN)
        async with httpx2.AsyncClient() as http:
            reused = await http.post(
                record.metadata["server"]["token_endpoint"],
                data={"grant_type": "refresh_token", "refresh_token": record.tokens["refresh_token"]},
                auth=(record.client["client_id"], record.client["client_secret"]),
            )

    assert out["signed_out"] is True and row is None
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"


async def console_session(running: RunningHost) -> tuple[dict[str, str], str]:
    """The owner signed in to the console: the cookie header, and the CSRF token of its pages."""
    signed = await running.http.post(f"{running.url}/owner/login", data={"token": owner_token(running)})
    cookie = signed.headers["set-cookie"].split(";", 1)[0]
    running.http.cookies.clear()
    headers = {"Cookie": cookie}
    page = await running.http.get(f"{running.url}/owner/", headers=headers)
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]{64})">', page.text)
    assert found is not None
    return headers, found.group(1)


async def test_the_consoles_connect_takes_the_owner_to_the_servers_sign_in_and_back(
    tmp_path: Path, database_url: str
) -> None:
    async with scene(tmp_path, database_url, access_ttl=60, refresh_ttl=600) as at:
        running, visitor = at.running, at.visitor
        await visitor.call_tool("whoami", {})  # the host learns the server wants a sign-in
        headers, csrf = await console_session(running)
        before = await running.http.get(f"{running.url}/owner/", headers=headers)
        went = await running.http.post(
            f"{running.url}/owner/remote/connect", headers=headers, data={"capability": PLUGIN, "csrf": csrf}
        )
        page = await sign_in_as_a_browser(went.headers["location"], "carol")
        after = await running.http.get(f"{running.url}/owner/", headers=headers)
        called = await visitor.call_tool("whoami", {})

    assert "sign-in: needs sign in" in before.text and 'action="/owner/remote/connect"' in before.text
    assert went.status_code == 303 and went.headers["location"].startswith(at.server.auth_url + "/auth?")
    assert page.status_code == 200 and 'href="/owner/"' in page.text
    assert "sign-in: connected" in after.text
    assert text_of(called) == "signed in as carol"


async def test_a_declined_sign_in_is_told_once_and_echoes_nothing_the_browser_brought(
    tmp_path: Path, database_url: str
) -> None:
    async with scene(tmp_path, database_url, access_ttl=60, refresh_ttl=600) as at:
        running, owner = at.running, at.owner
        callback = f"{running.url}/oauth/callback"
        _, first = await call(owner, "remote_connect", capability=PLUGIN)
        state = parse_qs(urlparse(first["url"]).query)["state"][0]
        declined = await running.http.get(callback, params={"error": "access_denied", "state": state})
        again = await running.http.get(callback, params={"code": "stolen", "state": state})
        _, told = await call(owner, "remote_status", capability=PLUGIN)
        _, second = await call(owner, "remote_connect", capability=PLUGIN)
        state = parse_qs(urlparse(second["url"]).query)["state"][0]
        hostile = await running.http.get(callback, params={"error": "<script>x</script>", "state": state})

    assert declined.status_code == 400 and "the server&#x27;s sign-in ended without a code (access_denied)" in (
        declined.text
    )
    assert again.status_code == 400 and "no sign-in is waiting for this answer" in again.text
    assert told["sign_in"] == "needs_sign_in" and told["last"] == {
        "capability": PLUGIN,
        "connected": False,
        "cause": "the server's sign-in ended without a code (access_denied)",
    }
    assert hostile.status_code == 400 and "<script>" not in hostile.text and "(no code)" in hostile.text


async def test_a_sign_in_reaches_no_address_the_manifest_does_not_permit(tmp_path: Path, database_url: str) -> None:
    plugin = signin_plugin(tmp_path / "signin", f"http://127.0.0.1:{free_port()}/mcp", private="[]")
    settings = host_settings(tmp_path, database_url, []).model_copy(update={"plugins": [plugin]})
    async with running_host(settings) as running, owner_client(running) as owner:
        refused = await owner.call_tool("remote_connect", {"capability": PLUGIN})
        _, status = await call(owner, "remote_status", capability=PLUGIN)

    assert refusal(refused) == {
        "code": codes.INVALID_ARGUMENTS,
        "message": "capability: a request of the sign-in was refused: 127.0.0.1 is a loopback or private address; "
        "name 127.0.0.1 in transport.allow_private to reach it",
    }
    assert status["sign_in"] is None and status["last"]["connected"] is False


async def test_the_client_document_and_a_callback_nobody_waits_for(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, [])) as running:
        document = await running.http.get(f"{running.url}/oauth/client.json")
        stray = await running.http.get(f"{running.url}/oauth/callback", params={"code": "x", "state": "nobody"})

    assert document.json() == {
        "client_id": f"{running.url}/oauth/client.json",
        "redirect_uris": [f"{running.url}/oauth/callback"],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "client_name": f"mcp-host at {running.url}",
        "client_uri": f"{running.url}/",
        "application_type": "web",
    }
    assert stray.status_code == 400
    assert "no sign-in is waiting for this answer on this replica; start it again" in stray.text
    assert stray.headers["x-frame-options"] == "DENY" and stray.headers["cache-control"] == "no-store"


@dataclass
class Visitor:
    """A visitor session whose client answers the host's sign-in question: as a browser signing
    in as `account`, or (None) declining."""

    account: str | None
    session: dict[str, Any]
    asked: list[types.ElicitRequestParams]

    async def answer(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        if self.account is None or not isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="decline")
        page = await sign_in_as_a_browser(params.url, self.account)
        assert page.status_code == 200, page.text
        return types.ElicitResult(action="accept")


async def twice(running: RunningHost, visitor: Visitor, mode: str) -> list[Any]:
    async with running.client(visitor.session, mode=mode, elicitation_callback=visitor.answer) as client:
        return [await client.call_tool("whoami", {}) for _ in range(2)]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_each_visitor_signs_in_with_its_own_account_and_one_who_has_not_gets_only_the_question(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    async with upstream(access_ttl=60, refresh_ttl=600) as server:
        plugin = signin_plugin(tmp_path / "signin", server.mcp_url, "per_session", sign_in="per_visitor")
        settings = host_settings(tmp_path, database_url, []).model_copy(update={"plugins": [plugin]})
        async with running_host(settings) as running, owner_client(running) as owner:
            await connect(owner, "owner")  # the owner's context lists the tools; no visitor call uses it
            alice, bob, carol = [Visitor(a, await running.new_session(), []) for a in ("alice", "bob", None)]
            answers = {v.account: await twice(running, v, mode) for v in (alice, bob, carol)}
            store = sign_ins(running)
            key = visitor_key(PLUGIN, alice.session["session_id"])
            held = await store.read(key)
            raw = await running.sql.fetchrow("SELECT tokens FROM mcp_host.remote_sign_ins WHERE plugin_id = $1", key)
            link = alice.asked[0]
            assert isinstance(link, types.ElicitRequestURLParams)
            reused = await running.http.get(link.url)
            assert await running.sessions.end(alice.session["session_id"])
            for _ in range(100):  # the session's sign-ins go in the background, at its end
                if (gone := await store.read(key)) is None:
                    break
                await anyio.sleep(0.1)
            kept = await store.read(visitor_key(PLUGIN, bob.session["session_id"]))
            owners = await store.read(PLUGIN)

    assert [text_of(r) for r in answers["alice"]] == ["signed in as alice"] * 2
    assert [text_of(r) for r in answers["bob"]] == ["signed in as bob"] * 2
    # Asked once each: the second call carries the token the first sign-in stored.
    assert [len(v.asked) for v in (alice, bob)] == [1, 1]
    assert link.url.startswith(f"{running.url}/oauth/visitor?ticket=")
    assert (link.elicitation_id is not None) == (mode == "legacy")  # an id is on the wire at 2025-11-25 only
    # Declined: each call is asked again, refused, and reaches no data (never the owner's token).
    assert len(carol.asked) == 2
    for refused in answers[None]:
        assert refusal(refused) == {"code": codes.UNCONFIGURED, "message": VISITOR_NEEDS}
        assert "signed in as" not in str(refused)
    # Sealed, bound to the session's own row; the link works once.
    assert held is not None and held.tokens is not None and raw is not None
    assert held.tokens["access_token"] not in str(raw["tokens"])
    assert reused.status_code == 400 and "unknown, used or expired" in reused.text
    # The ended session's sign-in went; another's and the owner's stay.
    assert gone is None
    assert kept is not None and kept.tokens is not None
    assert owners is not None and owners.tokens is not None


async def test_a_visitors_own_token_is_refreshed_as_the_owners_is_without_asking_again(
    tmp_path: Path, database_url: str
) -> None:
    async with upstream(access_ttl=3, refresh_ttl=600) as server:
        plugin = signin_plugin(tmp_path / "signin", server.mcp_url, "per_session", sign_in="per_visitor")
        settings = host_settings(tmp_path, database_url, []).model_copy(update={"plugins": [plugin]})
        async with running_host(settings) as running, owner_client(running) as owner:
            await connect(owner, "owner")
            dana = Visitor("dana", await running.new_session(), [])
            store = sign_ins(running)
            key = visitor_key(PLUGIN, dana.session["session_id"])
            async with running.client(dana.session, elicitation_callback=dana.answer) as client:
                first = await client.call_tool("whoami", {})
                before = await store.read(key)
                await past_expiry(store, by_s=0.5, key=key)
                later = await client.call_tool("whoami", {})
            after = await store.read(key)
            grants = (await server.stats())["grants"]

    assert [text_of(first), text_of(later)] == ["signed in as dana"] * 2
    assert len(dana.asked) == 1
    assert before is not None and before.tokens is not None and after is not None and after.tokens is not None
    assert after.tokens["refresh_token"] != before.tokens["refresh_token"]  # rotated in the visitor's row
    assert grants.get("refresh_token", 0) >= 1
