"""The authorization server of `mcp_host.oauth` on real PostgreSQL, its routes served in
process, and a front desk that lets the test decide."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp.server.auth.provider import AuthorizationParams
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from starlette.applications import Starlette

from mcp_host.oauth import AuthorizationServer, PendingAuthorization, oauth_routes
from mcp_host.store import PgPool, SecretBox

ISSUER = "http://127.0.0.1:8931"
DOOR = f"{ISSUER}/mcp"
OWNER_DOOR = f"{ISSUER}/owner/mcp"
REDIRECT = "http://127.0.0.1:5173/callback"


@dataclass
class DecidingDesk:
    """A front desk whose page is never shown: the test reads what waits and decides."""

    waiting: list[PendingAuthorization] = field(default_factory=list)

    async def page_for(self, pending: PendingAuthorization) -> str:
        self.waiting.append(pending)
        return f"https://desk.test/decide?request={pending.request_id}"


@pytest.fixture
def desk() -> DecidingDesk:
    return DecidingDesk()


@pytest.fixture
def server(pool: PgPool, desk: DecidingDesk) -> AuthorizationServer:
    return AuthorizationServer(
        pool, SecretBox(secrets.token_bytes(32)), issuer=ISSUER, resources=[DOOR, OWNER_DOOR], desk=desk
    )


@pytest.fixture
async def http(server: AuthorizationServer) -> AsyncIterator[httpx2.AsyncClient]:
    app = Starlette(routes=oauth_routes(server))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=ISSUER) as client:
        yield client


def pkce() -> tuple[str, str]:
    """A code verifier and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def query(location: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


async def register(http: httpx2.AsyncClient, **metadata: Any) -> dict[str, Any]:
    body = {"redirect_uris": [REDIRECT], "client_name": "Test client", **metadata}
    response = await http.post("/register", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def authorize(
    http: httpx2.AsyncClient, client: dict[str, Any], challenge: str, **overrides: str | None
) -> httpx2.Response:
    """GET /authorize as a client would; an override of None leaves that parameter out."""
    params = {
        "response_type": "code",
        "client_id": client["client_id"],
        "redirect_uri": REDIRECT,
        "state": "st-1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": DOOR,
        **overrides,
    }
    return await http.get("/authorize", params={k: v for k, v in params.items() if v is not None})


def client_auth(client: dict[str, Any]) -> dict[str, str]:
    """The form fields that authenticate `client` at /token and /revoke (client_secret_post)."""
    fields = {"client_id": client["client_id"]}
    if client.get("client_secret"):
        fields["client_secret"] = client["client_secret"]
    return fields


async def redeem(
    http: httpx2.AsyncClient, client: dict[str, Any], code: str, verifier: str, redirect_uri: str = REDIRECT
) -> httpx2.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "redirect_uri": redirect_uri,
        **client_auth(client),
    }
    return await http.post("/token", data=form)


async def refresh(http: httpx2.AsyncClient, client: dict[str, Any], refresh_token: str) -> httpx2.Response:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, **client_auth(client)}
    return await http.post("/token", data=form)


async def code_for(
    http: httpx2.AsyncClient,
    server: AuthorizationServer,
    desk: DecidingDesk,
    client: dict[str, Any],
    challenge: str,
    subject: str = "session-1",
    **overrides: str,
) -> str:
    """Authorize, let the desk approve for `subject`: the code the client's redirect carries."""
    response = await authorize(http, client, challenge, **overrides)
    assert response.status_code == 302, response.text
    back = await server.approve(desk.waiting[-1].request_id, subject)
    assert back is not None
    return query(back)["code"]


async def signed_in(
    http: httpx2.AsyncClient,
    server: AuthorizationServer,
    desk: DecidingDesk,
    client: dict[str, Any],
    subject: str = "session-1",
    **overrides: str,
) -> dict[str, Any]:
    """The token response of a whole sign-in."""
    verifier, challenge = pkce()
    code = await code_for(http, server, desk, client, challenge, subject, **overrides)
    response = await redeem(http, client, code, verifier)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def granted(
    server: AuthorizationServer, subject: str, *, resource: str | None = None, client_name: str = "Test client"
) -> OAuthToken:
    """A whole sign-in through the server's own methods (no routes: for a running host's server,
    whose desk page is not the test's): a public client registered, its request approved for
    `subject` at `resource` (default: the least of its resources, the visitor door `/mcp`), its code
    redeemed."""
    client = OAuthClientInformationFull(
        client_id=secrets.token_hex(8),
        client_name=client_name,
        redirect_uris=[AnyUrl(REDIRECT)],
        token_endpoint_auth_method="none",
    )
    await server.register_client(client)
    verifier, challenge = pkce()
    params = AuthorizationParams(
        state="st-1",
        scopes=[],
        code_challenge=challenge,
        redirect_uri=AnyUrl(REDIRECT),
        redirect_uri_provided_explicitly=True,
        resource=resource or min(server.resources),
    )
    page = await server.authorize(client, params)
    back = await server.approve(query(page)["request"], subject)
    assert back is not None
    code = await server.load_authorization_code(client, query(back)["code"])
    assert code is not None and verifier
    return await server.exchange_authorization_code(client, code)
