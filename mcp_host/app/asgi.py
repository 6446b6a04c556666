"""The host's ASGI app: the routes, and the visitor MCP fast path that skips Starlette's router.

Above: uvicorn (`mcp-host serve`, `tests/hosting.py`). Below: `lifespan` (which puts the
running host in `app.state.host`; None while it starts or stops, answered 503 here), the
doors `wiring` built (`doors.Doors`; their Host and Origin rules, `early.security`), `health`
(the health routes and the answer to a database outage) and `edge.HostOriginGuard` (the MCP
endpoints' Host and Origin rules on the plain routes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_host.children import CALLBACK_PATH, CLIENT_DOCUMENT_PATH, VISITOR_PATH
from mcp_host.desk import DESK_PATH, OWNER_CONSENT_PATH
from mcp_host.edge import REST_ERRORS, HostOriginGuard, Unauthorized, rest_response
from mcp_host.errors import Unavailable
from mcp_host.oauth import OAUTH_PATHS, RESOURCE_METADATA_PREFIX
from mcp_host.plugins import Installer
from mcp_host.settings import Settings
from mcp_host.store import EgressGrants
from mcp_host.visitor import ONE_URL_PATH

from .doors import Doors
from .drain import Drain
from .early import security
from .health import OutageGuard, answer_outages, healthz, readyz
from .host_metrics import metrics
from .lifespan import host_lifespan
from .sign_in_routes import client_document, sign_in_callback, visitor_sign_in
from .wiring import NODE_PATH, OWNER_PATH, Host

__all__ = ["HostApp", "create_app"]


def _starting() -> Response:
    return rest_response(Unavailable("the host is starting or stopping; retry shortly"))


def _running(app: Starlette) -> Host | None:
    host: Host | None = app.state.host
    return host


class _ToDoor:
    """An ASGI endpoint that forwards to one of the running host's doors."""

    def __init__(self, app: Starlette, door: Callable[[Doors], ASGIApp]) -> None:
        self._app = app
        self._door = door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = _running(self._app)
        if host is None:
            await _starting()(scope, receive, send)
            return
        await self._door(host.doors)(scope, receive, send)


def _with_host(handler: Callable[[Host, Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """A route handler given the running host; 503 while it starts or stops."""

    async def route(request: Request) -> Response:
        host = _running(request.app)
        if host is None:
            return _starting()
        return await handler(host, request)

    return route


async def _catalogue(host: Host, request: Request) -> Response:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token or await host.owners.verify_token(token.strip()) is None:
        raise Unauthorized("the catalogue needs the owner token")
    owner_egress = await EgressGrants(host.database.pool).all()
    entries = [e.model_dump() for e in host.catalogue.entries(owner_egress)]
    return JSONResponse({"capabilities": entries}, headers={"Cache-Control": "no-store"})


async def _open_turn(host: Host, request: Request) -> Response:
    return await host.doors.turns.open_turn(request)


async def _answer_turn(host: Host, request: Request) -> Response:
    return await host.doors.turns.answer(request)


class HostApp:
    """The outermost ASGI app.

    Visitor MCP requests — the hot path, one per MCP message, at `/v1/sessions/{id}/mcp` or
    the one visitor URL `/mcp` — go straight to their endpoint; everything else goes through
    Starlette's router and middleware.
    """

    _PREFIX = "/v1/sessions/"
    _SUFFIX = "/mcp"

    def __init__(self, inner: Starlette, drain: Drain, *, retry_after_s: int = 2) -> None:
        self.inner = inner
        self.state = inner.state
        self.drain = drain
        self._retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # Counted, or refused once the replica drains (drain.py).
            await self.drain.run(self._route, scope, receive, send)
            return
        await self.inner(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        host: Host | None = self.state.host
        if host is not None and path == ONE_URL_PATH:
            await answer_outages(host.doors.one_url, scope, receive, send, self._retry_after_s)
            return
        if host is not None and path.startswith(self._PREFIX) and path.endswith(self._SUFFIX):
            session_id = path[len(self._PREFIX) : -len(self._SUFFIX)]
            if session_id and "/" not in session_id:
                scope["path_params"] = {"session_id": session_id}
                # Outside Starlette's middleware: a database outage is answered 503 here.
                await answer_outages(host.doors.visitor, scope, receive, send, self._retry_after_s)
                return
        await self.inner(scope, receive, send)


def create_app(
    settings: Settings, *, on_fatal: Callable[[], None] | None = None, installer: Installer | None = None
) -> HostApp:
    """The host's ASGI app; its lifespan runs `lifespan.running_host`. `installer` installs the
    plugins the owner door adds (None: the real one; tests pass one that installs offline).

    `on_fatal` is called when the running host ends by itself (a part of it failed): the
    server should then exit, non-zero, so that a supervisor restarts it, rather than keep a
    listening process that answers 503 to everything.
    """
    rules = security(settings)
    # A database outage met by any route is answered 503 with Retry-After (health.py).
    outages = Middleware(OutageGuard, retry_after_s=settings.database.retry_after_s)
    # Every REST refusal is a `HostError`, answered by the one handler (edge.rest_errors).
    app = Starlette(
        lifespan=host_lifespan(settings, rules, on_fatal, installer),
        middleware=[outages],
        exception_handlers=REST_ERRORS,
    )
    app.state.host = None
    # SIGTERM drains (drain.py): `cli._serve` starts it, `/readyz` reads it.
    drain = Drain(
        settings.http.drain_timeout_s,
        retry_after_s=settings.database.retry_after_s,
        parked=lambda: _parked(_running(app)),
    )
    app.state.drain = drain
    app.router.routes.extend(_routes(app, rules))
    return HostApp(app, drain, retry_after_s=settings.database.retry_after_s)


def _routes(app: Starlette, rules: TransportSecuritySettings) -> list[BaseRoute]:
    """The plain routes; every door's endpoint is the running host's (503 while it starts or stops)."""
    # The MCP endpoints' Host and Origin rules (the SDK checks those) on the plain routes too.
    same_site = [Middleware(HostOriginGuard, security=rules)]
    oauth = _ToDoor(app, lambda d: d.oauth)
    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        # The operator's; a bearer token, no Host check, like /readyz (host_metrics.py).
        Route("/metrics", _with_host(metrics), methods=["GET"]),
        Route("/v1/catalogue", _with_host(_catalogue), methods=["GET"], middleware=same_site),
        Route("/v1/sessions", _ToDoor(app, lambda d: d.sessions), methods=["POST"], middleware=same_site),
        Route("/v1/sessions/{session_id}/turns", _with_host(_open_turn), methods=["POST"], middleware=same_site),
        Route(
            "/v1/sessions/{session_id}/turns/{n}/answer",
            _with_host(_answer_turn),
            methods=["POST"],
            middleware=same_site,
        ),
        # The same at the one URL, for a client whose credential names its session (OAuth).
        Route(ONE_URL_PATH + "/turns", _with_host(_open_turn), methods=["POST"], middleware=same_site),
        Route(ONE_URL_PATH + "/turns/{n}/answer", _with_host(_answer_turn), methods=["POST"], middleware=same_site),
        Route(OWNER_PATH, _ToDoor(app, lambda d: d.owner), methods=["GET", "POST", "DELETE"]),
        # The owner's web console (owner_console): its own Host/Origin, session and CSRF checks.
        # The owner door's consent page, under the console's cookie path (before the console's route).
        Route(OWNER_CONSENT_PATH, _ToDoor(app, lambda d: d.desk), methods=["GET", "POST"]),
        Route("/owner{path:path}", _ToDoor(app, _console_door), methods=["GET", "POST"]),
        # A node's calls under a node grant (visitor/node.py); its own bearer, like the owner's.
        Route(NODE_PATH, _ToDoor(app, _node_door), methods=["GET", "POST", "DELETE"]),
        Route(NODE_PATH + "/{capability}", _ToDoor(app, _node_door), methods=["GET", "POST", "DELETE"]),
        Route("/v1/sessions/{session_id}/mcp", _ToDoor(app, lambda d: d.visitor), methods=["GET", "POST", "DELETE"]),
        # The one visitor URL (served by `HostApp`'s fast path once the host runs).
        Route(ONE_URL_PATH, _ToDoor(app, lambda d: d.one_url), methods=["GET", "POST", "DELETE"]),
        # OAuth: the front desk (its own Host/Origin checks), the authorization server, the
        # doors' protected-resource metadata (`oauth.routes`, `desk`).
        Route(DESK_PATH, _ToDoor(app, lambda d: d.desk), methods=["GET", "POST"]),
        *(Route(path, oauth, methods=["GET", "POST", "OPTIONS"]) for path in OAUTH_PATHS),
        Route(RESOURCE_METADATA_PREFIX + "/{door:path}", oauth, methods=["GET", "OPTIONS"]),
        # The host as an OAuth client of remote servers (sign_in_routes.py).
        Route(CLIENT_DOCUMENT_PATH, _with_host(client_document), methods=["GET"]),
        Route(CALLBACK_PATH, _with_host(sign_in_callback), methods=["GET"]),
        Route(VISITOR_PATH, _with_host(visitor_sign_in), methods=["GET"]),
    ]


def _console_door(doors: Doors) -> ASGIApp:
    assert doors.console is not None  # wiring always builds it
    return doors.console


def _node_door(doors: Doors) -> ASGIApp:
    assert doors.node is not None  # wiring always builds it
    return doors.node


def _parked(host: Host | None) -> int:
    return host.rounds.parked_count() if host is not None else 0
