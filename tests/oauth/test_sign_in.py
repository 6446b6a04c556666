"""End to end: the MCP Python SDK's own `OAuthClientProvider` signs in headlessly to a door
guarded by the SDK's bearer middleware and these routes, served by uvicorn on loopback, then
calls it; the token it got is refused at the other door."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio
import httpx2
import pytest
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl
from starlette.applications import Starlette
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mcp_host.oauth import (
    AuthorizationServer,
    DoorTokenVerifier,
    PendingAuthorization,
    oauth_routes,
    resource_metadata_url,
)
from mcp_host.store import PgPool, SecretBox
from tests.desk.walk_in import MemoryTokens
from tests.hosting import free_port, serving

from .conftest import query

pytestmark = pytest.mark.anyio

SUBJECT = "visitor-session-7"
CALLBACK = "http://127.0.0.1:5173/callback"


@dataclass
class PageDesk:
    """A front desk with a page at `/desk` that approves every request for `SUBJECT`."""

    issuer: str
    server: AuthorizationServer | None = None

    async def page_for(self, pending: PendingAuthorization) -> str:
        return f"{self.issuer}/desk?request={pending.request_id}"

    async def page(self, request: Request) -> Response:
        assert self.server is not None
        back = await self.server.approve(request.query_params["request"], SUBJECT)
        return RedirectResponse(back, 302) if back else Response("start again", 400)


async def _whoami(scope: Scope, receive: Receive, send: Send) -> None:
    token = get_access_token()
    assert token is not None
    await JSONResponse({"subject": token.subject, "resource": token.resource})(scope, receive, send)


class _DoorAuth:
    """The SDK's bearer check for one door: `BearerAuthBackend` over that door's verifier."""

    def __init__(self, server: AuthorizationServer, door: str) -> None:
        backend = BearerAuthBackend(DoorTokenVerifier(server, door))
        guarded = RequireAuthMiddleware(AuthContextMiddleware(_whoami), [], resource_metadata_url(door))  # type: ignore[arg-type]
        self._app = AuthenticationMiddleware(guarded, backend=backend)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


@asynccontextmanager
async def _served(pool: PgPool) -> AsyncIterator[tuple[str, AuthorizationServer]]:
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    desk = PageDesk(issuer)
    doors = [f"{issuer}/mcp", f"{issuer}/owner/mcp"]
    server = AuthorizationServer(pool, SecretBox(secrets.token_bytes(32)), issuer=issuer, resources=doors, desk=desk)
    desk.server = server
    routes = [
        *oauth_routes(server, names={doors[0]: "Visitors"}),
        Route("/desk", desk.page),
        *(Route(door.removeprefix(issuer), _DoorAuth(server, door)) for door in doors),
    ]
    async with serving(Starlette(routes=routes), port, lifespan="off"):
        yield issuer, server


@dataclass
class _Browser:
    """The person's browser: follows the authorize URL through the desk to the callback."""

    landed: list[str] = field(default_factory=list)

    async def open(self, url: str) -> None:
        async with httpx2.AsyncClient(timeout=10) as http:
            with anyio.fail_after(10):
                while not url.startswith(CALLBACK):
                    response = await http.get(url)
                    assert response.status_code == 302, response.text
                    url = response.headers["location"]
        self.landed.append(url)

    async def callback(self) -> AuthorizationCodeResult:
        found = query(self.landed[-1])
        return AuthorizationCodeResult(code=found["code"], state=found.get("state"), iss=found.get("iss"))


def _client(
    door: str, storage: MemoryTokens, browser: _Browser, method: Literal["none", "client_secret_post"] | None = None
) -> OAuthClientProvider:
    """The SDK's client; `method`: the token endpoint auth method it registers (None: the
    server's choice, `client_secret_post`)."""
    metadata = OAuthClientMetadata(
        client_name="SDK test client", redirect_uris=[AnyUrl(CALLBACK)], token_endpoint_auth_method=method
    )
    return OAuthClientProvider(door, metadata, storage, browser.open, browser.callback)


@pytest.mark.parametrize("method", [None, "none"], ids=["confidential", "public"])
async def test_the_sdk_client_signs_in_headlessly_and_calls_the_door(
    pool: PgPool, method: Literal["none"] | None
) -> None:
    async with _served(pool) as (issuer, server):
        storage, browser = MemoryTokens(), _Browser()
        async with httpx2.AsyncClient(auth=_client(f"{issuer}/mcp", storage, browser, method), timeout=30) as http:
            response = await http.get(f"{issuer}/mcp")
        assert storage.client is not None
        assert (storage.client.token_endpoint_auth_method, bool(storage.client.client_secret)) == (
            method or "client_secret_post",
            method is None,
        )
        assert (response.status_code, response.json()) == (200, {"subject": SUBJECT, "resource": f"{issuer}/mcp"})
        assert len(browser.landed) == 1 and query(browser.landed[0])["iss"] == issuer
        assert storage.tokens is not None and storage.tokens.refresh_token

        async with httpx2.AsyncClient(timeout=10) as plain:
            bearer = {"Authorization": f"Bearer {storage.tokens.access_token}"}
            assert (await plain.get(f"{issuer}/mcp", headers=bearer)).status_code == 200
            refused = await plain.get(f"{issuer}/owner/mcp", headers=bearer)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].endswith(
                f'resource_metadata="{issuer}/.well-known/oauth-protected-resource/owner/mcp"'
            )
            anonymous = await plain.get(f"{issuer}/mcp")
            assert anonymous.status_code == 401
            assert (
                f'resource_metadata="{issuer}/.well-known/oauth-protected-resource/mcp"'
                in (anonymous.headers["www-authenticate"])
            )


async def test_the_sdk_client_refreshes_an_expired_token_and_keeps_the_session(pool: PgPool) -> None:
    async with _served(pool) as (issuer, server):
        storage, browser = MemoryTokens(), _Browser()
        provider = _client(f"{issuer}/mcp", storage, browser)
        async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
            assert (await http.get(f"{issuer}/mcp")).status_code == 200
            first = storage.tokens
            assert first is not None
            provider.context.token_expiry_time = 1.0  # the client believes its token has expired
            response = await http.get(f"{issuer}/mcp")
        assert (response.status_code, response.json()["subject"]) == (200, SUBJECT)
        assert storage.tokens is not None and storage.tokens.access_token != first.access_token
        assert len(browser.landed) == 1  # refreshed, not signed in again
        assert await server.load_access_token(first.access_token) is None
