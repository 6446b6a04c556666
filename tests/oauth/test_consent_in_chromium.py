"""The front desk's consent pages in a real headless Chromium (the console's Selenium set-up,
tests/owner_console/browser.py), against a real host (issue 28, "Proof with clients nobody here
wrote"): a visitor with an access code, a public visitor, and the owner letting a client in
at the owner door. A client registered at `/register`, with a callback page of its own on
loopback, sends Chromium to `/authorize`; the person fills the desk's form and lets it in;
Chromium lands on the callback with the code, which the client redeems and uses at the door.

Each page's screenshot goes to `$MCP_HOST_ARTIFACTS` (default `.artifacts/console/`, not
committed), named `desk-*.png`.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from owner_facade import OWNER_PATH
from tests.ecosystem.support import owner_call, owner_client, owner_token
from tests.hosting import RunningHost, free_port, host_fixture, serving
from tests.oauth.proof_clients import access_code, session_of
from tests.owner_console.browser import Browser, needs_chromium
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_chromium, needs_bwrap]

host = host_fixture(["echo"], scope="module")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with Browser.window() as browser:
        yield browser


@pytest.fixture
async def browser(chromium: Browser, host: RunningHost) -> Browser:
    chromium.base_url = host.url
    await chromium.get("/healthz")
    await chromium.sign_out_everything()
    return chromium


async def _landed(request: Any) -> HTMLResponse:
    return HTMLResponse('<!doctype html><title>Signed in</title><p id="landed">Signed in. Back to the app.</p>')


@dataclass(frozen=True)
class _Client:
    """A client with a callback page on loopback, registered at the host (a public client)."""

    client_id: str
    redirect_uri: str

    def authorize_url(self, issuer: str, resource: str) -> tuple[str, str, str]:
        """The URL a client opens, its PKCE verifier and its state."""
        verifier, state = secrets.token_urlsafe(48), secrets.token_urlsafe(16)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        params = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": resource,
        }
        return f"{issuer}/authorize?{urlencode(params)}", verifier, state


@pytest.fixture
async def client(host: RunningHost) -> AsyncIterator[_Client]:
    port = free_port()
    redirect_uri = f"http://127.0.0.1:{port}/callback"
    async with serving(Starlette(routes=[Route("/callback", _landed)]), port, lifespan="off"):
        body = {"redirect_uris": [redirect_uri], "client_name": "Chromium proof", "token_endpoint_auth_method": "none"}
        registered = await host.http.post(f"{host.url}/register", json=body)
        assert registered.status_code == 201, registered.text
        yield _Client(registered.json()["client_id"], redirect_uri)


@dataclass(frozen=True)
class _AtTheDesk:
    """A client's authorize URL opened in Chromium, the desk's page shown."""

    client: _Client
    verifier: str
    state: str


async def _open_desk(browser: Browser, client: _Client, resource: str) -> _AtTheDesk:
    url, verifier, state = client.authorize_url(browser.base_url, resource)
    await browser.get(url)
    await browser.wait_for("form button[name='decision'][value='allow']")
    page = (
        "/owner/consent" if resource.endswith(OWNER_PATH) else "/oauth/desk"
    )  # the owner's under the console's cookie path
    assert (await browser.path()).startswith(f"{page}?request=")
    return _AtTheDesk(client, verifier, state)


async def _let_in(browser: Browser, desk: _AtTheDesk, shot: str, fields: dict[str, str]) -> str:
    """Fill `fields`, screenshot, let it in: the code Chromium lands with on the client's
    callback (its state and `iss` checked)."""
    for name, text in fields.items():
        await browser.fill(f"input[name='{name}']", text)
    await browser.screenshot(shot)
    await browser.click("button[name='decision'][value='allow']")
    await browser.wait_for("#landed")
    landed = urlsplit(await browser.run(lambda: browser.driver.current_url))
    found = {key: values[0] for key, values in parse_qs(landed.query).items()}
    assert f"{landed.scheme}://{landed.netloc}{landed.path}" == desk.client.redirect_uri
    assert (found["state"], found["iss"]) == (desk.state, browser.base_url)
    return f"{found['code']} {desk.verifier}"


async def _redeem(host: RunningHost, client: _Client, code_and_verifier: str) -> str:
    code, verifier = code_and_verifier.split(" ")
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "redirect_uri": client.redirect_uri,
        "client_id": client.client_id,
    }
    answer = await host.http.post(f"{host.url}/token", data=form)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


async def _tools(door: str, token: str) -> list[str]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with Client(streamable_http_client(door, http_client=http), cache=None) as session:
            return [tool.name for tool in (await session.list_tools()).tools]


async def test_a_visitor_with_an_access_code_lets_a_client_in_from_chromium(
    browser: Browser, host: RunningHost, client: _Client
) -> None:
    name = f"Chromium visitor {secrets.token_hex(3)}"
    fields = {"name": name, "email": "ada@example.org", "code": await access_code(host, "friends")}

    desk = await _open_desk(browser, client, f"{host.url}/mcp")
    landed = await _let_in(browser, desk, "desk-01-visitor-with-code", fields)
    await browser.screenshot("desk-02-back-at-the-client")
    token = await _redeem(host, client, landed)

    assert "echo" in await _tools(f"{host.url}/mcp", token)
    session = await session_of(host, name)
    assert (session["role"], session["visitor"]["email"]) == ("friends", "ada@example.org")


async def test_a_public_visitor_lets_a_client_in_from_chromium_with_no_code(
    browser: Browser, host: RunningHost, client: _Client
) -> None:
    name = f"Chromium public {secrets.token_hex(3)}"
    desk = await _open_desk(browser, client, f"{host.url}/mcp")
    code_required = await browser.script("return document.querySelector(\"input[name='code']\").required")
    async with browser.phone():
        await browser.screenshot("desk-03-public-visitor-phone")

    landed = await _let_in(browser, desk, "desk-04-public-visitor", {"name": name})
    token = await _redeem(host, client, landed)

    assert code_required is False  # public sessions are on: a code is optional
    assert "echo" in await _tools(f"{host.url}/mcp", token)
    assert (await session_of(host, name))["role"] == "public"


async def test_the_owner_lets_a_client_in_at_the_owner_door_from_chromium(
    browser: Browser, host: RunningHost, client: _Client
) -> None:
    door = f"{host.url}{OWNER_PATH}"

    desk = await _open_desk(browser, client, door)
    landed = await _let_in(browser, desk, "desk-05-owner", {"owner_token": owner_token(host)})
    token = await _redeem(host, client, landed)

    assert {"roles_list", "sessions_list"} <= set(await _tools(door, token))


async def test_a_wrong_access_code_in_chromium_shows_the_desk_again_and_lets_nothing_in(
    browser: Browser, host: RunningHost, client: _Client
) -> None:
    name = f"Chromium wrong code {secrets.token_hex(3)}"
    await _open_desk(browser, client, f"{host.url}/mcp")
    await browser.fill("input[name='name']", name)
    await browser.fill("input[name='code']", "not-a-code")
    await browser.click("button[name='decision'][value='allow']")
    await browser.wait_for("p.error")
    error = await browser.text("p.error")
    await browser.screenshot("desk-08-wrong-code")
    still_at_the_desk = await browser.path()
    async with owner_client(host) as owner:
        _, listed = await owner_call(owner, "sessions_list")

    assert error == "That access code was not accepted."  # and the form is there to try again
    assert still_at_the_desk.startswith("/oauth/desk") and await browser.count("input[name='code']") == 1
    assert all((s.get("visitor") or {}).get("name") != name for s in listed["sessions"])


async def test_the_owner_signed_in_to_the_console_lets_a_client_in_without_typing_the_token(
    browser: Browser, host: RunningHost, client: _Client
) -> None:
    door = f"{host.url}{OWNER_PATH}"
    await browser.get("/owner/login")
    await browser.fill("#token", owner_token(host))
    await browser.click("#login button")
    await browser.wait_for("#catalogue")

    desk = await _open_desk(browser, client, door)
    asked = await browser.count("input[name='owner_token']")
    shown = await browser.text("form")
    await browser.screenshot("desk-06-owner-signed-in-to-the-console")
    assert (asked, "You are signed in to the console as the owner." in shown) == (0, True), shown
    landed = await _let_in(browser, desk, "desk-07-owner-signed-in-to-the-console-filled", {})
    token = await _redeem(host, client, landed)

    assert {"roles_list", "sessions_list"} <= set(await _tools(door, token))
