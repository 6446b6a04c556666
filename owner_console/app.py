"""The owner's web console at `/owner/`: sign-in, the session and CSRF checks, the routes.

Above: `mcp_host.app.asgi` (one route, `/owner…`, to the running host's console) and the
composition root `mcp_host.app.wiring`, which builds it with the owner door. Below: `pages`
(GET), `actions` (POST), `guard` (cookie, CSRF, headers), `sessions` (where sessions live),
`mcp_host.edge.HostOriginGuard` (the owner door's Host and Origin rules).

Every request passes the Host/Origin check and gets the security headers. Signing in trades
the owner token (checked by `OwnerStore.verify_token`, as the owner door does) for a session
cookie; every other route needs a live session, and every POST also its CSRF token from a
same-origin page. Rotating the owner token ends every session (`OwnerStore.issue_token`).
Wrong tokens are throttled per client address (`mcp_host.edge.FailureThrottle`,
`SIGN_IN_THROTTLE`): past the free ones, a sign-in inside the delay the last one earned is
answered 429 with `Retry-After` before its token is looked at, only one sign-in per address is
checked at a time, and each burst is logged once as a warning. The console reads and changes
nothing itself: each page and each change is one or more owner tool calls through
`OwnerDoor.call_tool` — the door's handlers, checks and audit rows.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs

from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from mcp_host.access import OwnerStore
from mcp_host.edge import FailureThrottle, HostOriginGuard, ThrottleLimits
from mcp_host.errors import InvalidArguments
from owner_facade import OwnerDoor

from .actions import ACTIONS, DONE, Action
from .guard import (
    COOKIE_NAME,
    CSRF_FIELD,
    CSRF_HEADER,
    PREVIEW_PATH,
    SecurityHeaders,
    cleared_cookie,
    cross_site,
    csrf_ok,
    csrf_token,
    is_secure,
    session_cookie,
)
from .pages import PAGES, Page, holds_json
from .render import Asker, Templates, Visit
from .sessions import ConsoleSessions

__all__ = ["CONSOLE_PATH", "SESSION_TTL", "SIGN_IN_THROTTLE", "OwnerConsole"]

logger = logging.getLogger("owner_console")

CONSOLE_PATH = "/owner"
SESSION_TTL = timedelta(hours=12)
SIGN_IN_THROTTLE = ThrottleLimits(free_failures=5, window_s=300.0, base_delay_s=1.0, max_delay_s=60.0)
"""Wrong sign-ins per client address: 5 free within 5 minutes, then 1 s, doubling up to 60 s
between tries. The owner token has 256 bits, so this is a brake and an alarm, not the lock."""
MAX_FORM_BYTES = 256 * 1024
"""A console form is small (the largest is the rules' JSON); a bigger body is refused, 413."""
_STATIC = Path(__file__).resolve().parent / "static"


class _TooLarge(InvalidArguments):
    """A form past `MAX_FORM_BYTES` (answered 413 here, never raised further)."""


async def _read_form(request: Request) -> tuple[dict[str, str], dict[str, list[str]]]:
    """A URL-encoded form, at most `MAX_FORM_BYTES` (read in chunks, so a body without a
    Content-Length is bounded too); anything else reads as an empty form."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}, {}
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise _TooLarge("the form is too large")
    many = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=1000)
    return {k: v[-1] for k, v in many.items()}, many


class OwnerConsole:
    """The ASGI app of `/owner…`."""

    def __init__(
        self,
        door: OwnerDoor,
        owners: OwnerStore,
        sessions: ConsoleSessions,
        security: TransportSecuritySettings,
        *,
        ttl: timedelta = SESSION_TTL,
        throttle: FailureThrottle | None = None,
    ) -> None:
        """`throttle`: wrong sign-ins by client address (default: `SIGN_IN_THROTTLE`'s)."""
        self._ask = Asker(door)
        self._owners = owners
        self._sessions = sessions
        self._throttle = throttle or FailureThrottle(SIGN_IN_THROTTLE)
        self._signing_in: set[str] = set()  # client addresses with a sign-in being checked
        self._ttl_s = int(ttl.total_seconds())
        self._templates = Templates()
        routes: list[BaseRoute] = [
            Route(CONSOLE_PATH, self._to_console, methods=["GET"]),
            Route(f"{CONSOLE_PATH}/login", self._login_page, methods=["GET"]),
            Route(f"{CONSOLE_PATH}/login", self._login, methods=["POST"]),
            Route(f"{CONSOLE_PATH}/logout", self._signed_in(self._logout), methods=["POST"]),
            Route(f"{CONSOLE_PATH}/holds.json", self._signed_in(self._holds_json), methods=["GET"]),
            Route(PREVIEW_PATH + "{capability}/{sha256}", self._signed_in(self._app_preview), methods=["GET"]),
            Mount(f"{CONSOLE_PATH}/static", app=StaticFiles(directory=_STATIC), name="static"),
        ]
        routes += [Route(path, self._signed_in(self._page(page)), methods=["GET"]) for path, page in PAGES.items()]
        routes += [Route(path, self._signed_in(self._action(act)), methods=["POST"]) for path, act in ACTIONS.items()]
        self._app = SecurityHeaders(HostOriginGuard(Router(routes), security))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    # -- signing in and out --------------------------------------------------------------------

    async def _to_console(self, request: Request) -> Response:
        return RedirectResponse(f"{CONSOLE_PATH}/", status_code=308)

    async def _login_page(self, request: Request) -> Response:
        return self._templates.page("login.html", nav=())

    async def _login(self, request: Request) -> Response:
        if cross_site(request.headers):
            return self._refused(403, "This request came from another site.")
        client = request.client.host if request.client else "unknown"
        wait = self._throttle.retry_after(client)
        if wait > 0 or client in self._signing_in:
            return self._too_many(max(wait, 1.0))
        self._signing_in.add(client)
        try:
            return await self._sign_in(request, client)
        finally:
            self._signing_in.discard(client)

    async def _sign_in(self, request: Request, client: str) -> Response:
        try:
            form, _ = await _read_form(request)
        except _TooLarge:
            return self._refused(413, "This form is too large.")
        token = form.get("token", "").strip()
        owner = await self._owners.verify_token(token)
        if owner is None:
            return self._wrong_token(client)
        cookie = await self._sessions.open(owner.id)
        if await self._owners.verify_token(token) is None:
            # Rotated while the session was stored: the rotation may not have seen it, so it
            # ends here (see `OwnerStore.issue_token`).
            await self._sessions.end(cookie)
            return self._wrong_token(client)
        response = RedirectResponse(f"{CONSOLE_PATH}/", status_code=303)
        response.headers.append(
            "set-cookie", session_cookie(cookie, secure=is_secure(request.scope), max_age_s=self._ttl_s)
        )
        return response

    def _wrong_token(self, client: str) -> Response:
        before = self._throttle.failures(client)
        delay = self._throttle.failed(client)
        failures = self._throttle.failures(client)
        limits = self._throttle.limits
        if before <= limits.free_failures < failures:  # once per burst: the first failure it slows down
            logger.warning(
                "console: %d wrong owner tokens from %s within %.0f s;"
                " its sign-ins now wait %.0f s, doubling up to %.0f s",
                failures,
                client,
                limits.window_s,
                delay,
                limits.max_delay_s,
            )
        else:
            logger.info("console: a sign-in with a wrong token from %s was refused", client)
        return self._templates.page("login.html", 401, nav=(), error="That is not the owner token.")

    def _too_many(self, wait_s: float) -> Response:
        seconds = math.ceil(wait_s)
        response = self._refused(429, f"Too many sign-ins from this address: try again in {seconds} s.")
        response.headers["retry-after"] = str(seconds)
        return response

    async def _logout(self, request: Request, visit: Visit) -> Response:
        await self._sessions.end(request.cookies.get(COOKIE_NAME, ""))
        response = RedirectResponse(f"{CONSOLE_PATH}/login", status_code=303)
        response.headers.append("set-cookie", cleared_cookie(secure=is_secure(request.scope)))
        return response

    # -- the checks every other route passes --------------------------------------------------

    def _refused(self, status: int, why: str) -> Response:
        return self._templates.page("refused.html", status, nav=(), error=why)

    def _signed_in(
        self, handler: Callable[[Request, Visit], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """`handler` behind the session check, and for a POST the CSRF check."""

        async def endpoint(request: Request) -> Response:
            cookie = request.cookies.get(COOKIE_NAME, "")
            owner_id = await self._sessions.owner_of(cookie) if cookie else None
            if owner_id is None:
                if request.method == "GET" and not request.url.path.endswith(".json"):
                    return RedirectResponse(f"{CONSOLE_PATH}/login", status_code=303)
                return self._refused(401, "Sign in again: this console session has ended.")
            form: dict[str, str] = {}
            many: dict[str, list[str]] = {}
            if request.method != "GET":
                try:
                    form, many = await _read_form(request)
                except _TooLarge:
                    return self._refused(413, "This form is too large.")
                given = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
                if cross_site(request.headers) or not csrf_ok(cookie, given):
                    logger.info(
                        "console: a %s to %s without its CSRF token was refused", request.method, request.url.path
                    )
                    return self._refused(403, "This form is stale or did not come from this console; reload the page.")
            query = dict(request.query_params)
            done = DONE.get(query.pop("done", ""))
            visit = Visit(owner_id, csrf_token(cookie), query, form, many, done)
            return await handler(request, visit)

        return endpoint

    def _page(self, page: Page) -> Callable[[Request, Visit], Awaitable[Response]]:
        async def handler(request: Request, visit: Visit) -> Response:
            return await page(self._ask, self._templates, visit)

        return handler

    def _action(self, action: Action) -> Callable[[Request, Visit], Awaitable[Response]]:
        async def handler(request: Request, visit: Visit) -> Response:
            return await action(self._ask, self._templates, visit)

        return handler

    async def _holds_json(self, request: Request, visit: Visit) -> Response:
        return JSONResponse(await holds_json(self._ask, visit))

    async def _app_preview(self, request: Request, visit: Visit) -> Response:
        """One kept version of an app, as HTML to render in the tools page's sandboxed frame
        (`SecurityHeaders` gives it `PREVIEW_HEADERS`: no network, no same-origin)."""
        capability, sha256 = request.path_params["capability"], request.path_params["sha256"]
        reply = await self._ask(visit.owner_id, "app_contents", capability=capability, sha256=sha256)
        if reply.refusal is not None:
            return self._refused(404, reply.error or "no such app")
        return HTMLResponse(str(reply.data.get("html", "")))
