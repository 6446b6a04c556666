"""The OAuth routes: the SDK's authorization-server routes and a protected-resource metadata
document per door, with what the SDK leaves out added here.

Above: the composition root (`app.doors` builds the routes, `app.asgi` routes `OAUTH_PATHS`
and `RESOURCE_METADATA_PREFIX` to them). Below:
`server.AuthorizationServer`, the SDK's `create_auth_routes` (RFC 8414 metadata,
`/authorize`, `/token`, `/register` (RFC 7591), `/revoke` (RFC 7009)) and
`create_protected_resource_routes` (RFC 9728).

Where the SDK stops, and what this module does about it:
- RFC 9207: the SDK's metadata does not say `authorization_response_iss_parameter_supported`,
  and its `/authorize` redirects an error to the client without `iss`. The metadata route is
  rebuilt with the flag set, and `/authorize` is wrapped so an error redirect carries `iss`
  (the success redirect is built by `AuthorizationServer.approve`, with `iss`).
- The SDK's metadata does not say `client_id_metadata_document_supported`; a client id that is
  an https URL is its metadata document's (`client_documents`), so the rebuilt metadata does.
- The SDK's metadata lists `client_secret_post` and `client_secret_basic` only, while its
  registration accepts public clients (`none`, what native and browser clients register
  with); the rebuilt metadata lists `none` too.
- `/register` has no limit in the SDK: here each address may register `free_failures` clients
  within the window of its `FailureThrottle` (each registration counts as one "failure"); past
  that, each earns a growing delay and one still inside it is answered 429 with `Retry-After`,
  before the body is read. Per replica, like the host's other throttles.
- A database outage is a 500 with a traceback in the SDK's handlers; here it is a 503
  `temporarily_unavailable` with `Retry-After`, as at the host's other doors.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from urllib.parse import parse_qsl, urlsplit

from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.provider import construct_redirect_uri
from mcp.server.auth.routes import (
    AUTHORIZATION_PATH,
    REGISTRATION_PATH,
    REVOCATION_PATH,
    TOKEN_PATH,
    build_metadata,
    build_resource_metadata_url,
    cors_middleware,
    create_auth_routes,
    create_protected_resource_routes,
)
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from pydantic import AnyHttpUrl
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.edge import FailureThrottle, ThrottleLimits
from mcp_host.errors import as_unavailable

from .server import AuthorizationServer

__all__ = [
    "METADATA_PATH",
    "OAUTH_PATHS",
    "REGISTRATION_LIMITS",
    "RESOURCE_METADATA_PREFIX",
    "oauth_routes",
    "peer_address",
    "resource_metadata_url",
]

_logger = logging.getLogger("mcp_host.oauth.routes")

METADATA_PATH = "/.well-known/oauth-authorization-server"
OAUTH_PATHS = (METADATA_PATH, AUTHORIZATION_PATH, TOKEN_PATH, REGISTRATION_PATH, REVOCATION_PATH)
"""The authorization server's paths (its issuer having no path), for an app to route to `oauth_routes`."""
RESOURCE_METADATA_PREFIX = "/.well-known/oauth-protected-resource"
"""Each door's protected-resource metadata is this followed by the door's path (RFC 9728 §3.1)."""
_OUTAGE_RETRY_S = 5.0
_AUTH_METHODS = ["client_secret_post", "client_secret_basic", "none"]
# A client registers once per install; 20 an hour from one address is generous, and past that
# one per 10 minutes at the slowest.
REGISTRATION_LIMITS = ThrottleLimits(free_failures=20, window_s=3600.0, base_delay_s=30.0, max_delay_s=600.0)


def peer_address(scope: Scope) -> str:
    """The address of the connection's peer (the host's doors will pass their own, which knows
    the trusted proxies)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def resource_metadata_url(resource: str) -> str:
    """Where a door's protected-resource metadata is (RFC 9728 §3.1), for `WWW-Authenticate`."""
    return str(build_resource_metadata_url(AnyHttpUrl(resource)))


def oauth_routes(
    server: AuthorizationServer,
    *,
    names: Mapping[str, str] | None = None,
    registrations: FailureThrottle | None = None,
    address_of: Callable[[Scope], str] = peer_address,
) -> list[Route]:
    """The authorization server's routes, and a protected-resource metadata route for each of
    `server.resources` (`names`: a door's human-readable name, by resource). `registrations`
    counts `/register` calls by `address_of` (default: a throttle of `REGISTRATION_LIMITS`)."""
    throttle = registrations or FailureThrottle(REGISTRATION_LIMITS)
    registration = ClientRegistrationOptions(enabled=True)
    revocation = RevocationOptions(enabled=True)
    routes: list[Route] = []
    for route in create_auth_routes(
        server, server.issuer, client_registration_options=registration, revocation_options=revocation
    ):
        if route.path == METADATA_PATH:
            routes.append(_metadata_route(server, registration, revocation))
            continue
        app: ASGIApp = _OutagesAs503(route.app)  # every other route reads the database
        if route.path == AUTHORIZATION_PATH:
            app = _IssOnErrorRedirects(app, server.issuer_id)
        elif route.path == REGISTRATION_PATH:
            app = _Throttled(app, throttle, address_of)
        routes.append(Route(route.path, endpoint=app, methods=sorted(route.methods or ())))
    for resource in sorted(server.resources):
        routes += create_protected_resource_routes(
            AnyHttpUrl(resource), [server.issuer], resource_name=(names or {}).get(resource)
        )
    return routes


def _metadata_route(
    server: AuthorizationServer, registration: ClientRegistrationOptions, revocation: RevocationOptions
) -> Route:
    metadata = build_metadata(server.issuer, None, registration, revocation)
    metadata.authorization_response_iss_parameter_supported = True
    metadata.client_id_metadata_document_supported = server.client_documents  # client_documents
    metadata.token_endpoint_auth_methods_supported = _AUTH_METHODS
    return Route(
        METADATA_PATH,
        endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]),
        methods=["GET", "OPTIONS"],
    )


def _with_iss(location: str, issuer_id: str) -> str:
    """`location` with `iss` added when it is an error answer to the client that lacks one."""
    keys = {key for key, _ in parse_qsl(urlsplit(location).query, keep_blank_values=True)}
    return construct_redirect_uri(location, iss=issuer_id) if "error" in keys and "iss" not in keys else location


class _IssOnErrorRedirects:
    """ASGI wrapper of `/authorize`: an error redirect to the client carries `iss` (RFC 9207 §2)."""

    def __init__(self, app: ASGIApp, issuer_id: str) -> None:
        self._app = app
        self._issuer_id = issuer_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_iss(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (302, 303):
                headers = [
                    (name, _with_iss(value.decode("latin-1"), self._issuer_id).encode("latin-1"))
                    if name.lower() == b"location"
                    else (name, value)
                    for name, value in message["headers"]
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, send_with_iss)


class _Throttled:
    """ASGI wrapper of `/register`: 429 to an address still inside its delay; each POST counts."""

    def __init__(self, app: ASGIApp, throttle: FailureThrottle, address_of: Callable[[Scope], str]) -> None:
        self._app = app
        self._throttle = throttle
        self._address_of = address_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":  # CORS preflight
            await self._app(scope, receive, send)
            return
        address = self._address_of(scope)
        wait = self._throttle.retry_after(address)
        if wait > 0:
            await _oauth_error(send, 429, "too many registrations from this address", wait)
            return
        self._throttle.failed(address)
        await self._app(scope, receive, send)


async def _oauth_error(send: Send, status: int, description: str, retry_after_s: float) -> None:
    """An OAuth-shaped JSON error (`temporarily_unavailable`), to be tried again later."""
    body = json.dumps({"error": "temporarily_unavailable", "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(math.ceil(retry_after_s)).encode()),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _OutagesAs503:
    """ASGI wrapper of a route that reads the database: while it is away, 503 and
    `temporarily_unavailable` instead of the SDK's 500 and a traceback (`errors.as_unavailable`
    decides what counts as away)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._app(scope, receive, tracking)
        except Exception as exc:
            if started or as_unavailable(exc) is None:
                raise
            _logger.warning("OAuth %s answered 503: the database is away", scope.get("path"))
            await _oauth_error(send, 503, "the host's database is away; try again shortly", _OUTAGE_RETRY_S)
