"""Any MCP client walks in by URL, through a real host: the MCP Python SDK's own
`OAuthClientProvider` signs in to the one visitor URL `/mcp` at the front desk (with an access
code, and as a public visitor), then lists and calls in both protocol eras; the owner lets a
client in at the owner door. The desk's page is driven as a browser would (`walk_in`)."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from base64 import urlsafe_b64encode
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from inline_snapshot import snapshot
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.children.test_remote import remote_plugin, remote_server
from tests.hosting import RunningHost, host_settings, running_host

from .walk_in import CALLBACK, DeskBrowser, read_form, walked_in

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]
OWNER_PATH = "/v1/owner/mcp"
PUBLIC_TOOLS = ["die", "echo", "sleep", "whoami"]
STAFF_TOOLS = ["die", "echo", "guarded_hello", "guarded_scope", "sleep", "whoami"]


def _settings(tmp_path: Path, database_url: str, **overrides: Any) -> Any:
    return host_settings(tmp_path, database_url, ["echo", "guarded"], **overrides)


def _door(running: RunningHost) -> str:
    return f"{running.url}/mcp"


async def _scope(client: Client) -> dict[str, Any]:
    """The trusted session scope the host sent a child with a call (`guarded_scope`)."""
    result = await client.call_tool("guarded_scope", {})
    assert result.is_error is not True, result
    assert result.structured_content is not None
    return dict(result.structured_content["scope"])


async def _staff_code(running: RunningHost, **limits: Any) -> tuple[str, str]:
    access, owner = running.access, running.owner_id
    await access.put_role(owner, "staff", ["test.guarded"], {"test.guarded": {"greeting": "hi"}})
    code, issued = await access.create_code(owner, "staff", **limits)
    return code, issued.id


async def _pending(running: RunningHost, resource: str | None, client_name: str = "Test client") -> str:
    """A client registered and its authorization request waiting at the desk: the desk's URL
    (`resource` None: the request names none)."""
    registered = await running.http.post(
        f"{running.url}/register",
        json={"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none", "client_name": client_name},
    )
    assert registered.status_code == 201, registered.text
    verifier = secrets.token_urlsafe(48)
    challenge = urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    query = {
        "response_type": "code",
        "client_id": registered.json()["client_id"],
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st4te",
        **({} if resource is None else {"resource": resource}),
    }
    authorize = await running.http.get(f"{running.url}/authorize?{urlencode(query)}")
    assert authorize.status_code == 302, authorize.text
    return str(authorize.headers["location"])


def _request_id(page: httpx2.Response) -> str:
    return read_form(page.text).inputs["request"][1]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_visitor_walks_in_with_an_access_code_and_gets_its_role(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        code, code_id = await _staff_code(running, max_uses=5)
        browser = DeskBrowser({"code": code, "name": "Ada", "email": "ada@example.org"})
        async with walked_in(_door(running), browser, mode=mode) as (client, _, tokens):
            names = sorted(t.name for t in (await client.list_tools()).tools)
            hello = await client.call_tool("guarded_hello", {"name": "Bob"})
            scope = await _scope(client)
            assert tokens.tokens is not None
            bearer = {"Authorization": f"Bearer {tokens.tokens.access_token}"}
            at_owner_door = await running.http.post(f"{running.url}{OWNER_PATH}", headers=bearer, json={})
        live = await running.sessions.list_live(running.owner_id)
        uses = {c.id: c.uses for c in await running.access.list_codes(running.owner_id)}

    assert names == STAFF_TOOLS
    assert hello.structured_content == {"hello": "Bob"}
    assert [s.id for s in live] == [scope["session_id"]]
    scope.pop("session_id")
    assert scope == snapshot(
        {
            "owner_id": scope["owner_id"],
            "mode": "code",
            "subject": {"kind": "code", "id": code_id},
            "visitor": {"name": "Ada", "email": "ada@example.org"},
            "role": "staff",
        }
    )
    assert uses[code_id] == 1  # counted once: the sign-in, not each request
    assert tokens.tokens is not None and tokens.tokens.refresh_token
    assert at_owner_door.status_code == 401  # a token for `/mcp` is refused at the owner door
    assert len(browser.landed) == 1


@pytest.mark.parametrize("mode", ERAS)
async def test_a_public_visitor_walks_in_without_a_code(tmp_path: Path, database_url: str, mode: str) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        browser = DeskBrowser({"name": "Grace"})
        async with walked_in(_door(running), browser, mode=mode) as (client, _, _tokens):
            names = sorted(t.name for t in (await client.list_tools()).tools)
            echoed = await client.call_tool("echo", {"text": "hi"})
            listed = [t.name for t in (await client.list_tools()).tools]
        page = browser.pages[0].text

    assert names == PUBLIC_TOOLS and "guarded_scope" not in listed
    assert echoed.is_error is not True, echoed
    assert "Echo (test)" in page and "Guarded (test)" not in page  # what a public visitor may use, no more


async def test_refreshing_keeps_the_session_and_an_ended_session_ends_its_grant(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        code, _ = await _staff_code(running)
        browser = DeskBrowser({"code": code})
        async with walked_in(_door(running), browser, mode="2026-07-28") as (client, provider, tokens):
            before = await _scope(client)
            first = tokens.tokens
            provider.context.token_expiry_time = 1.0  # the client believes its token has expired
            after = await _scope(client)
            second = tokens.tokens
            assert first is not None and second is not None
            await running.sessions.end(after["session_id"])
            bearer = {"Authorization": f"Bearer {second.access_token}"}
            ended = await running.http.post(_door(running), headers=bearer, json={})
            assert tokens.client is not None
            refresh = {
                "grant_type": "refresh_token",
                "refresh_token": second.refresh_token or "",
                "client_id": tokens.client.client_id,
            }
            refreshed = await running.http.post(f"{running.url}/token", data=refresh)

    assert after["session_id"] == before["session_id"]
    assert second.access_token != first.access_token and len(browser.landed) == 1
    assert (refreshed.status_code, refreshed.json()["error"]) == (400, "invalid_grant")  # the grant went with it
    assert ended.status_code == 401
    assert ended.json() == {
        "error": "denied",
        "message": "this door needs a sign-in (OAuth), a visitor session's bearer token or an API key",
    }


async def test_each_door_without_a_credential_answers_401_naming_its_metadata(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        url = running.url
        answers = [await running.http.post(f"{url}{path}", json={}) for path in ("/mcp", OWNER_PATH)]
        documents = [
            (await running.http.get(f"{url}/.well-known/oauth-protected-resource{path}")).json()
            for path in ("/mcp", OWNER_PATH)
        ]
        server = (await running.http.get(f"{url}/.well-known/oauth-authorization-server")).json()

    metadata = f"{url}/.well-known/oauth-protected-resource"
    assert [(a.status_code, a.headers["www-authenticate"]) for a in answers] == [
        (401, f'Bearer realm="mcp-host", resource_metadata="{metadata}/mcp"'),
        (401, f'Bearer realm="mcp-host-owner", resource_metadata="{metadata}{OWNER_PATH}"'),
    ]
    assert answers[1].json() == {"error": "denied", "message": "the owner endpoint needs the owner token"}
    assert [(d["resource"], d["authorization_servers"]) for d in documents] == [
        (f"{url}/mcp", [url]),
        (f"{url}{OWNER_PATH}", [url]),
    ]
    assert (server["issuer"], server["authorization_endpoint"], server["code_challenge_methods_supported"]) == (
        url,
        f"{url}/authorize",
        ["S256"],
    )


async def test_a_sessions_own_token_and_an_api_key_work_at_the_one_url(tmp_path: Path, database_url: str) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        access, owner = running.access, running.owner_id
        await _staff_code(running)
        key, api_key = await access.create_api_key(owner, "staff")
        session = await running.new_session({"visitor": {"name": "Scripted"}})
        scopes = []
        for bearer, mode in [(session["token"], "legacy"), (key, "legacy"), (key, "2026-07-28")]:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30) as http:
                async with Client(streamable_http_client(_door(running), http_client=http), mode=mode) as client:
                    scopes.append(await _scope(client) if bearer == key else {"session_id": None})
                    names = sorted(t.name for t in (await client.list_tools()).tools)
                    assert names == (STAFF_TOOLS if bearer == key else PUBLIC_TOOLS)
        live = await running.sessions.list_live(owner)

    key_sessions = [s for s in live if s.mode == "api_key"]
    assert [s.id for s in key_sessions] == [scopes[1]["session_id"]] == [scopes[2]["session_id"]]
    assert key_sessions[0].subject is not None and key_sessions[0].subject.id == api_key.id


async def test_the_desk_page_shows_hostile_names_escaped_and_forbids_framing(tmp_path: Path, database_url: str) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        await running.owners.set_profile(running.owner_id, {"name": "Ann <script>"})
        desk = await _pending(running, _door(running), client_name='<img src=x onerror="alert(1)">')
        page = await running.http.get(desk)
        foreign = await running.http.post(
            page.url.copy_with(query=None),
            data={"request": _request_id(page), "decision": "allow"},
            headers={"Origin": "https://evil.example"},
        )
        cross_site = await running.http.post(
            page.url.copy_with(query=None),
            data={"request": _request_id(page), "decision": "allow"},
            headers={"Sec-Fetch-Site": "cross-site"},
        )
        declined = await running.http.post(
            page.url.copy_with(query=None),
            data={"request": _request_id(page), "decision": "deny"},
            headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"},  # a no-referrer page's own post
        )
        again = await running.http.post(
            page.url.copy_with(query=None), data={"request": _request_id(page), "decision": "allow"}
        )
        unknown = await running.http.get(f"{running.url}/oauth/desk?request=nope")

    assert page.status_code == 200
    assert {k: page.headers[k] for k in ("x-frame-options", "cache-control", "referrer-policy")} == {
        "x-frame-options": "DENY",
        "cache-control": "no-store",
        "referrer-policy": "no-referrer",
    }
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "<script>" not in page.text and "<img" not in page.text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page.text
    assert "the name it gives itself; the host has not checked it" in page.text
    assert "Ann &lt;script&gt;&#x27;s MCP host" in page.text and "http://127.0.0.1:5173" in page.text
    assert read_form(page.text).decisions == ["allow", "deny"]
    assert set(read_form(page.text).inputs) == {"request", "name", "email", "code"}
    assert (foreign.status_code, cross_site.status_code) == (403, 403)
    assert declined.status_code == 302
    assert declined.headers["location"].startswith(f"{CALLBACK}?error=access_denied&state=st4te")
    assert (again.status_code, unknown.status_code) == (400, 400)  # a request id is single use
    assert "Start again from your application" in again.text and "Start again" in unknown.text


async def test_wrong_codes_at_the_desk_are_throttled_with_post_sessions_and_logged(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(
        tmp_path, database_url, access_failures_free=2, access_failure_delay_s=0.3, access_failure_delay_max_s=1.0
    )
    async with running_host(settings) as running:
        await running.access.set_host_settings(running.owner_id, public_sessions=False)
        desk = await _pending(running, _door(running))
        page = await running.http.get(desk)
        wrong = [f"wrong-code-{n}-{secrets.token_hex(4)}" for n in range(3)]
        with caplog.at_level(logging.INFO):
            answers = [
                await running.http.post(
                    page.url.copy_with(query=None), data={"request": _request_id(page), "decision": "allow", "code": w}
                )
                for w in wrong[:2]
            ]
            throttled = await running.http.post(f"{running.url}/v1/sessions", json={"code": wrong[2]})
            still = await running.http.get(desk)

    assert [a.status_code for a in answers] == [401, 401]
    assert all("That access code was not accepted." in a.text for a in answers)
    assert set(read_form(page.text).inputs) == {"request", "name", "email", "code"}
    assert 'name="code" maxlength="256" autocomplete="off" required' in page.text  # no public sessions
    assert "Echo (test)" not in page.text  # nothing of the tools shown before a code
    assert throttled.status_code == 401 and throttled.elapsed.total_seconds() >= 0.3  # the third failure waits
    assert still.status_code == 200  # a wrong code does not spend the request
    refusals = [r.getMessage() for r in caplog.records if "was not accepted" in r.getMessage()]
    assert len(refusals) == 3
    assert not [r for r in caplog.records if any(w in r.getMessage() for w in wrong)]  # no code in the log


async def test_the_owner_lets_a_client_in_at_the_owner_door_until_the_token_rotates(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        token = await running.owners.issue_token(running.owner_id)
        refused = DeskBrowser({"owner_token": "not-the-token"})
        with pytest.raises(AssertionError):
            await refused.open(await _pending(running, f"{running.url}{OWNER_PATH}"))
        browser = DeskBrowser({"owner_token": token})
        owner_door = f"{running.url}{OWNER_PATH}"
        async with walked_in(owner_door, browser, mode="2026-07-28") as (client, _, tokens):
            tools = {t.name for t in (await client.list_tools()).tools}
            listed = await client.call_tool("capabilities_list", {})
        assert tokens.tokens is not None
        bearer = {"Authorization": f"Bearer {tokens.tokens.access_token}"}
        at_visitor_door = await running.http.post(_door(running), headers=bearer, json={})
        await running.owners.issue_token(running.owner_id)  # rotation ends what the old token let in
        after_rotation = await running.http.post(owner_door, headers=bearer, json={})
        another = await running.http.get(await _pending(running, owner_door), follow_redirects=True)
        form = {"request": _request_id(another), "decision": "allow", "owner_token": "wrong"}
        desk = another.url.copy_with(query=None)
        guesses = [(await running.http.post(desk, data=form)).status_code for _ in range(6)]

    page = browser.pages[0].text
    assert set(read_form(page).inputs) == {"request", "owner_token"}
    assert "asks to connect to the owner door" in page
    assert refused.pages[-1].status_code == 401 and "That is not the owner token." in refused.pages[-1].text
    assert "capabilities_list" in tools and listed.is_error is not True
    assert at_visitor_door.status_code == 401
    assert after_rotation.status_code == 401
    # The console's sign-in throttle: 5 wrong tokens free (the first was `refused`'s), then a wait.
    assert guesses == [401, 401, 401, 401, 401, 429]


async def test_the_hosts_oauth_tokens_reach_no_child_and_no_remote_server(tmp_path: Path, database_url: str) -> None:
    async with remote_server(token=None) as remote:
        plugin = remote_plugin(tmp_path / "remote", f"{remote.url}/mcp")
        settings = host_settings(tmp_path, database_url, ["echo"])
        settings = settings.model_copy(update={"plugins": [*settings.plugins, plugin]})
        async with running_host(settings) as running:
            browser = DeskBrowser({"name": "Lin"})
            async with walked_in(_door(running), browser, mode="legacy") as (client, provider, tokens):
                said = await client.call_tool("hello", {"name": "lin"})
                seen_by_child = await client.call_tool("whoami", {})
                first = tokens.tokens
                assert first is not None
                provider.context.token_expiry_time = 1.0  # a refreshed token, too
                await client.call_tool("hello", {"name": "again"})
                assert tokens.tokens is not None
                latest = tokens.tokens

    assert said.structured_content == {"result": "hello lin"}
    secrets_issued = [first.access_token, latest.access_token, latest.refresh_token or "-"]
    child = json.dumps(seen_by_child.model_dump(mode="json"))
    headers = json.dumps(remote.seen)
    assert len(remote.seen) >= 2 and "authorization" not in {k for h in remote.seen for k in h}
    assert [s for s in secrets_issued if s in child or s in headers] == []


async def test_registrations_are_counted_by_the_address_every_throttle_uses(tmp_path: Path, database_url: str) -> None:
    """Behind a proxy the host trusts (uvicorn's default: loopback), the forwarded address, an
    IPv6 one by its /64, as the host's other throttles count it."""

    async def register(address: str) -> int:
        body = {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
        headers = {"X-Forwarded-For": address}
        return (await running.http.post(f"{running.url}/register", json=body, headers=headers)).status_code

    async with running_host(_settings(tmp_path, database_url)) as running:
        first = [await register("2001:db8:0:1::1") for _ in range(21)]  # 20 free, the 21st earns a delay
        same_64 = await register("2001:db8:0:1::2")
        other_64 = await register("2001:db8:0:2::1")

    assert (set(first), same_64, other_64) == ({201}, 429, 201)


async def test_a_request_naming_no_door_is_for_the_visitor_door_never_the_owners(
    tmp_path: Path, database_url: str
) -> None:
    """Clients older than MCP's resource-indicator rule send no `resource`: the desk shows them
    the visitor's form (name, email, code), and the token they get opens `/mcp` only."""
    async with running_host(_settings(tmp_path, database_url)) as running:
        desk = await _pending(running, None)
        page = await running.http.get(desk)
    assert desk.startswith(f"{running.url}/oauth/desk?request="), desk
    fields = read_form(page.text).inputs
    assert "owner_token" not in fields and {"name", "code"} <= set(fields), fields


async def test_an_offline_host_offers_no_client_documents_and_knows_no_client_by_one(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`MCP_HOST_OAUTH_CLIENT_DOCUMENTS=false`: the metadata does not offer CIMD, and a client id
    that is a document's URL is unknown at once, nothing fetched (clients register instead)."""
    query = {
        "response_type": "code",
        "client_id": "https://client.example/oauth/metadata.json",
        "redirect_uri": CALLBACK,
        "code_challenge": "x" * 43,
        "code_challenge_method": "S256",
        "resource": "",
    }
    settings = _settings(tmp_path, database_url, oauth_client_documents=False)
    with caplog.at_level(logging.INFO, "mcp_host.oauth.client_documents"):
        async with running_host(settings) as running:
            server = (await running.http.get(f"{running.url}/.well-known/oauth-authorization-server")).json()
            query["resource"] = _door(running)
            authorize = await running.http.get(f"{running.url}/authorize?{urlencode(query)}")
    assert server["client_id_metadata_document_supported"] is False
    assert authorize.status_code == 400 and "client" in authorize.text.lower(), authorize.text
    assert [r for r in caplog.records if r.name == "mcp_host.oauth.client_documents"] == []


async def test_a_client_let_in_at_the_desk_reports_its_turns_at_the_one_url_and_meets_the_claim_gate(
    tmp_path: Path, database_url: str
) -> None:
    """The claim gate for a client that knows its token, not its session's id: `/mcp/turns`
    takes the same credentials as `/mcp`; an answer claiming a booking no call made is caught."""
    async with running_host(host_settings(tmp_path, database_url, ["booker"])) as running:
        async with walked_in(_door(running), DeskBrowser({"name": "Ada"})) as (client, _, tokens):
            assert tokens.tokens is not None
            bearer = {"Authorization": f"Bearer {tokens.tokens.access_token}"}
            turns = f"{running.url}/mcp/turns"
            opened = await running.http.post(turns, json={"message": "book it"}, headers=bearer)
            booked = await client.call_tool("book_it", {})
            kept = await running.http.post(f"{turns}/1/answer", json={"text": "I've booked it"}, headers=bearer)
            await running.http.post(turns, json={"message": "again"}, headers=bearer)
            claimed = await running.http.post(f"{turns}/2/answer", json={"text": "I've booked it"}, headers=bearer)
            stranger = await running.http.post(turns, json={"message": "x"}, headers={"Authorization": "Bearer nope"})

    assert (opened.status_code, opened.json()) == (201, {"turn": 1})
    assert booked.structured_content == {"ok": True}
    assert (kept.status_code, kept.json()) == (200, {"ok": True})
    assert claimed.json() == {
        "ok": False,
        "violations": [{"capability": "booker", "tool": "book_it", "phrase": "i've booked"}],
    }
    assert stranger.status_code == 401


async def test_the_desk_asks_the_email_as_the_owner_wants_it(tmp_path: Path, database_url: str) -> None:
    """`desk_email`: optional (the default) shows the field; required refuses an empty one and
    keeps the request usable; off shows none and keeps none a client slips in."""
    async with running_host(_settings(tmp_path, database_url)) as running:
        owner = running.owner_id
        shown: dict[str, dict[str, tuple[str, str]]] = {}
        for asked in ("optional", "required", "off"):
            await running.access.set_host_settings(owner, desk_email=asked)
            shown[asked] = read_form((await running.http.get(await _pending(running, _door(running)))).text).inputs
        await running.access.set_host_settings(owner, desk_email="required")
        desk = await _pending(running, _door(running))
        request_id = _request_id(await running.http.get(desk))
        form = {"request": request_id, "name": "Ada", "decision": "allow"}
        origin = {"Origin": running.url}
        empty = await running.http.post(f"{running.url}/oauth/desk", data=form, headers=origin)
        given = await running.http.post(
            f"{running.url}/oauth/desk", data={**form, "email": "ada@example.com"}, headers=origin
        )
        await running.access.set_host_settings(owner, desk_email="off")
        request_id = _request_id(await running.http.get(await _pending(running, _door(running))))
        slipped = await running.http.post(
            f"{running.url}/oauth/desk",
            data={"request": request_id, "name": "Bo", "email": "bo@example.com", "decision": "allow"},
            headers=origin,
        )
        visitors = {s.visitor.name: s.visitor.email for s in await running.sessions.list_live(owner) if s.visitor}

    assert shown["optional"]["email"] == ("email", "") and "email" in shown["required"] and "email" not in shown["off"]
    assert empty.status_code == 400 and "The owner asks for your email." in empty.text
    assert given.status_code == 302 and slipped.status_code == 302
    assert visitors == {"Ada": "ada@example.com", "Bo": None}
