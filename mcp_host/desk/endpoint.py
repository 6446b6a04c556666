"""The front desk: where an OAuth client's browser is sent to be let in (`GET /oauth/desk`),
and where the person decides (`POST /oauth/desk`).

Above: `app` (the route, and `DeskAddress` given to the `AuthorizationServer` as its
`oauth.FrontDesk`). Below: `oauth.AuthorizationServer` (`pending`, `approve`, `deny`),
`visitor.SessionOpener` (the one `POST /v1/sessions` uses: same role resolution, frozen
snapshot, code use counted once, the same throttle of wrong codes and pace of public sessions),
`access` (the owner and the host's offer), `edge` (Host and Origin rules) and `page` (the HTML).

A request for the visitor door (`/mcp`) asks a name, an email (as the owner's `desk_email`
says: not, optionally or as a must) and an access code (required
while the owner allows no public session); "allow" opens the visitor session and approves the
request with the session id as the grant's subject. The session's own bearer token is never
handed out: the OAuth tokens are the client's credential for it, and refreshing keeps it.
A request for the owner door asks the owner token (or finds the console's session cookie, when
the browser sends it) and approves with subject `owner:<owner id>`. "deny" answers the client
`access_denied`. Each ends with a 302 to the client's redirect URI.

Hostile input: the request id is single use (`approve`/`deny` take it; two decisions of one
request at once on this replica are refused); an unknown, decided or expired one gets a page
saying to start again from the client; a POST must come from this host's own page (Host, and
Origin or `Sec-Fetch-Site`); every answer forbids framing, caching and referrers; wrong codes
and owner tokens are throttled by address and logged without what was typed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from urllib.parse import parse_qs, urlencode

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import Receive, Scope, Send

from mcp_host.access import Access, HostSettings, OwnerStore, Visitor
from mcp_host.edge import FailureThrottle, TooFast, Unauthorized, client_address, read_body
from mcp_host.oauth import AuthorizationServer, PendingAuthorization, canonical_resource
from mcp_host.plugins import Plugin
from mcp_host.visitor import SessionOpener

from .page import CSP, DeskView, desk_page, notice_page, shown_target

__all__ = ["DESK_PATH", "OWNER_CONSENT_PATH", "ConsoleOwner", "DeskAddress", "FrontDeskEndpoint"]

logger = logging.getLogger(__name__)

DESK_PATH = "/oauth/desk"
OWNER_CONSENT_PATH = "/owner/consent"
"""The owner door's requests wait here: under the console's cookie path (`/owner/`), so a
browser signed in to the console sends its cookie, and the owner need not type the token."""
_MAX_FORM_BYTES = 16 * 1024
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
_START_AGAIN = "This sign-in is unknown, already decided or expired. Start again from your application."

ConsoleOwner = Callable[[Request], Awaitable[str | None]]
"""The owner whose console session the request's cookie is, if any."""


@dataclass(frozen=True)
class DeskAddress:
    """The `oauth.FrontDesk` of the host: the page of a request is `DESK_PATH` under `base_url`,
    or `OWNER_CONSENT_PATH` for a request for `owner_door`."""

    base_url: str
    owner_door: str

    async def page_for(self, pending: PendingAuthorization) -> str:
        owner = canonical_resource(pending.resource) == canonical_resource(self.owner_door)
        path = OWNER_CONSENT_PATH if owner else DESK_PATH
        return f"{self.base_url}{path}?{urlencode({'request': pending.request_id})}"


def _page(html: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return HTMLResponse(html, status, headers={**_HEADERS, **(headers or {})})


def _notice(status: int, title: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return _page(notice_page(title, message), status, headers)


class FrontDeskEndpoint:
    """ASGI endpoint of `DESK_PATH` and `OWNER_CONSENT_PATH` (GET shows a waiting request, POST
    decides it; the form posts back to the path it was shown at)."""

    def __init__(
        self,
        server: AuthorizationServer,
        opener: SessionOpener,
        access: Access,
        owners: OwnerStore,
        plugins: Sequence[Plugin],
        security: TransportSecuritySettings,
        *,
        base_url: str,
        owner_door: str,
        sign_ins: FailureThrottle,
        console_owner: ConsoleOwner | None = None,
    ) -> None:
        """`owner_door`: the owner door's URL (every other door of `server` is a visitor door);
        `sign_ins`: wrong owner tokens by address; `console_owner`: reads a console session."""
        self._server = server
        self._opener = opener
        self._access = access
        self._owners = owners
        self._plugins = plugins
        self._check = TransportSecurityMiddleware(security)
        self._base_url = base_url
        self._owner_door = canonical_resource(owner_door)
        self._sign_ins = sign_ins
        self._console_owner = console_owner
        self._deciding: set[str] = set()  # request ids with a decision in progress here

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._handle(request)
        await response(scope, receive, send)

    async def _handle(self, request: Request) -> Response:
        if request.method == "GET":
            if await self._check.validate_request(request, is_post=False) is not None:
                return _notice(421, "Wrong address", "This page is not served at this address.")
            return await self._show(request, request.query_params.get("request", ""))
        if request.method != "POST":
            return _notice(405, "Not here", "This page is only shown and posted.", {"Allow": "GET, POST"})
        if not await self._same_origin(request):
            logger.warning("front desk: a decision from another site was refused (%s)", client_address(request.scope))
            return _notice(403, "Refused", "This form must be sent from the host's own page.")
        form = await _read_form(request)
        if form is None:
            return _notice(413, "Too large", "This form is too large.")
        request_id = form.get("request", "")
        if request_id in self._deciding:
            return _notice(409, "Already deciding", "This sign-in is being decided already.")
        self._deciding.add(request_id)
        try:
            return await self._decide(request, request_id, form)
        finally:
            self._deciding.discard(request_id)

    async def _same_origin(self, request: Request) -> bool:
        """Sent by a page of this host: its Host one of ours, its Origin ours — or `null`, what a
        browser sends from a `no-referrer` page, when `Sec-Fetch-Site` says the page was ours."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        scope = request.scope
        if request.headers.get("origin") == "null" and site == "same-origin":
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"origin"]}
        return await self._check.validate_request(Request(scope), is_post=False) is None

    async def _show(self, request: Request, request_id: str) -> Response:
        pending = await self._server.pending(request_id) if request_id else None
        if pending is None:
            return _notice(400, "Start again", _START_AGAIN)
        return _page(desk_page(await self._view(request, pending)))

    async def _view(self, request: Request, pending: PendingAuthorization) -> DeskView:
        owner = await self._owners.get(self._opener.owner_id)
        view = DeskView(
            request_id=pending.request_id,
            action=f"{self._base_url}{request.url.path}",
            owner_name=None if owner is None else owner.name,
            client_name=pending.client_name,
            target=shown_target(pending.redirect_uri),
            owner_door=pending.resource == self._owner_door,
        )
        if view.owner_door:
            return replace(view, signed_in=await self._console_owner_id(request) is not None)
        settings = await self._access.host_settings(self._opener.owner_id)
        offer = await self._public_offer(settings)
        return replace(view, offer=offer, code_required=offer is None, email=settings.desk_email)

    async def _public_offer(self, settings: HostSettings) -> tuple[str, ...] | None:
        """What a public visitor may use (no more than a public session would see); None while
        the owner allows no public session."""
        if not settings.public_sessions:
            return None
        role = await self._access.roles.get(self._opener.owner_id, settings.public_role)
        granted = set(role.capabilities) if role is not None else set()
        return tuple(
            p.manifest.title or p.manifest.id
            for p in self._plugins
            if p.manifest.kind == "capability" and (p.manifest.acl == "always" or p.manifest.id in granted)
        )

    async def _decide(self, request: Request, request_id: str, form: dict[str, str]) -> Response:
        pending = await self._server.pending(request_id) if request_id else None
        if pending is None:
            return _notice(400, "Start again", _START_AGAIN)
        decision = form.get("decision")
        if decision == "deny":
            back = await self._server.deny(request_id)
            logger.info("front desk: the request of OAuth client %s was declined", pending.client_id)
            return RedirectResponse(back, 302, headers=_HEADERS) if back else _notice(400, "Start again", _START_AGAIN)
        if decision != "allow":
            return await self._again(request, pending, 400, "Choose to let it in or to decline.")
        if pending.resource == self._owner_door:
            return await self._let_owner_in(request, pending, form)
        return await self._let_visitor_in(request, pending, form)

    async def _let_visitor_in(self, request: Request, pending: PendingAuthorization, form: dict[str, str]) -> Response:
        asked = (await self._access.host_settings(self._opener.owner_id)).desk_email
        email = form.get("email", "").strip() if asked != "off" else ""  # not asked: not kept
        if asked == "required" and not email:
            return await self._again(request, pending, 400, "The owner asks for your email.")
        try:
            visitor = Visitor(name=form.get("name", "").strip() or None, email=email or None)
        except ValidationError:
            return await self._again(request, pending, 400, "The name or email cannot be used as given.")
        code = form.get("code", "").strip() or None
        try:
            session, _ = await self._opener.open(request.scope, visitor, code=code)  # its own token is not handed out
        except Unauthorized:
            shown = "That access code was not accepted." if code else "This host needs an access code."
            return await self._again(request, pending, 401, shown)
        except TooFast as exc:
            headers = {"Retry-After": str(exc.retry_after_s)}
            return _notice(429, "Too many", f"Too many sign-ins from this address: {exc.message}.", headers)
        back = await self._server.approve(pending.request_id, session.id)
        if back is None:  # decided or expired meanwhile: the session just opened serves no one
            await self._access.withdraw(session)
            return _notice(400, "Start again", _START_AGAIN)
        logger.info("front desk: OAuth client %s let in as visitor session %s", pending.client_id, session.id)
        return RedirectResponse(back, 302, headers=_HEADERS)

    async def _let_owner_in(self, request: Request, pending: PendingAuthorization, form: dict[str, str]) -> Response:
        owner_id = await self._console_owner_id(request)
        if owner_id is None:
            address = client_address(request.scope)
            wait = self._sign_ins.retry_after(address)
            if wait > 0:
                headers = {"Retry-After": str(max(1, round(wait)))}
                return _notice(429, "Too many", "Too many sign-ins from this address: try again later.", headers)
            owner = await self._owners.verify_token(form.get("owner_token", "").strip())
            if owner is None:
                delay = self._sign_ins.failed(address)
                logger.warning("front desk: a wrong owner token from %s (next wait %.0f s)", address, delay)
                return await self._again(request, pending, 401, "That is not the owner token.")
            owner_id = owner.id
        back = await self._server.approve(pending.request_id, f"owner:{owner_id}")
        if back is not None and "owner_token" in form and await self._owners.verify_token(form["owner_token"]) is None:
            # Rotated while the grant was made: the rotation may not have seen it, so it ends
            # here (every grant of the owner's: the new token's holder signs in again).
            await self._server.revoke_subject(f"owner:{owner_id}")
            back = None
        if back is None:
            return _notice(400, "Start again", _START_AGAIN)
        logger.warning("front desk: OAuth client %s let in at the owner door", pending.client_id)
        return RedirectResponse(back, 302, headers=_HEADERS)

    async def _again(self, request: Request, pending: PendingAuthorization, status: int, error: str) -> Response:
        """The request's page once more, saying what was wrong."""
        return _page(desk_page(await self._view(request, pending), error), status)

    async def _console_owner_id(self, request: Request) -> str | None:
        return None if self._console_owner is None else await self._console_owner(request)


async def _read_form(request: Request) -> dict[str, str] | None:
    """The form's fields (the last of each name); None when it is over `_MAX_FORM_BYTES` or
    has more fields than any form of the desk."""
    body, _ = await read_body(request.receive, _MAX_FORM_BYTES)
    if body is None:
        return None
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return None
    return {name: values[-1] for name, values in fields.items()}
