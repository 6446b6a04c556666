"""The visitor face over HTTP: `POST /v1/sessions` and each session's MCP endpoint.

Above: `app` (the composition root mounts these routes) and `one_url` (`/mcp`, which serves
a session through `VisitorMCPEndpoint.serve`). Below: `visitor.door` (what a session may list
and call), `sessions` (who a bearer token is) and `opening` (which credential opens which
session, wrong ones throttled).

`POST /v1/sessions` takes `{code?, visitor?}` and an optional `Authorization: Bearer <API
key>`: a code opens a code session, a key an API-key session, neither a public session while
the owner allows them. A wrong, expired, used-up or revoked code or key gets one fixed 401
that does not say which; a client that keeps failing waits longer and longer for it.

One low-level MCP `Server` serves every session; the session is known per request from the
bearer token, checked before the SDK sees the request (a session URL is a name, never proof:
docs/security.md §0.1). Both protocol eras are served by one `StreamableHTTPSessionManager`:
2025-11-25 clients get an `Mcp-Session-Id` bound to the visitor session that opened it (the
SDK answers 404 to any other credential); 2026-07-28 requests are each authenticated on their
own. Tool lists are per session, so they are marked `cacheScope: private` with no TTL.

Turns (`TurnsEndpoint`, same bearer token as the session's MCP endpoint):
`POST /v1/sessions/{id}/turns {message}` opens the session's next turn (201 `{turn}`);
`POST /v1/sessions/{id}/turns/{n}/answer {text}` stores the agent's answer and judges it
against the claim gates of the capabilities the session can see: `{ok: true}`, or
`{ok: false, violations: [{capability, tool, phrase}]}` (docs/security.md E12).

Refusals are raised as `HostError`s and answered by the app's one REST error handler
(`edge.REST_ERRORS`): `{error, message}` in docs/design.md's codes — 401 `denied` (with the bearer
challenge), 400 or 413 `invalid_arguments` (413 also for a turn over its size cap), 404
`unknown`, 405 `unknown`, 429 `quota_exhausted` (a session that holds all the turns it may:
`policy.turns.TurnCaps`). The MCP endpoint,
served outside Starlette, answers its 401 with the same `edge.rest_response`.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_host.access import Session, SessionStore, Visitor, principal_of
from mcp_host.edge import (
    MethodNotAllowed,
    PrincipalPace,
    PrincipalRate,
    TooFast,
    TooLarge,
    Unauthorized,
    authenticated,
    drain_limit,
    read_body,
    rest_response,
)
from mcp_host.errors import InvalidArguments, UnknownTool
from mcp_host.policy import TurnStore, TurnTooLarge, UnknownTurn, judge
from mcp_host.principal import Asking

from . import opening
from .door import VisitorDoor
from .opening import SessionOpener
from .server import SCOPE_KEY

__all__ = [
    "bearer_token",
    "NO_CREDENTIAL",
    "REFUSED",
    "SessionsEndpoint",
    "TurnsEndpoint",
    "VisitorMCPEndpoint",
    "security_settings",
]

logger = logging.getLogger(__name__)

# The one answer to a code or key that was not accepted, whatever was wrong with it (its 401 body).
REFUSED = {"error": Unauthorized.code, "message": opening.REFUSED}
NO_CREDENTIAL = {"error": Unauthorized.code, "message": opening.NO_CREDENTIAL}
_WRONG_TOKEN = "unknown session or wrong bearer token"
_TOO_FAST = "too many requests from this visitor (its access code, API key or address)"


def security_settings(host: str, port: int, extra_hosts: list[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection: only our own Host values, no foreign browser Origins."""
    names = {host, "127.0.0.1", "localhost", "[::1]", *extra_hosts}
    hosts = sorted({f"{n}:{port}" for n in names} | set(extra_hosts))
    origins = sorted({f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")})
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def bearer_token(scope: Scope) -> str | None:
    """The bearer token of an ASGI request's `Authorization` header, or None."""
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if hmac.compare_digest(scheme.lower(), "bearer") and token.strip():
                return str(token.strip())
    return None


class VisitorMCPEndpoint:
    """ASGI endpoint of `/v1/sessions/{session_id}/mcp`: authenticate, then hand to the SDK."""

    def __init__(
        self,
        sessions: SessionStore,
        mcp_app: ASGIApp,
        asking: Asking | None = None,
        pace: PrincipalPace | None = None,
    ) -> None:
        """`asking`: told who is asking for the session around each request (`access.principal_of`),
        so what the request starts for its session (a per-session instance) counts to that
        principal's share; None tells no one. `pace`: how fast one principal's requests are
        served (past it they wait, then are refused 429); None: as fast as they come."""
        self._sessions = sessions
        self._mcp_app = mcp_app
        """The SDK's session manager behind the JSON-RPC edge (`app.wiring` composes them)."""
        self._asking = Asking() if asking is None else asking
        self._pace = pace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = str(scope.get("path_params", {}).get("session_id", ""))
        token = bearer_token(scope)
        session = await self._sessions.authenticate(session_id, token) if token else None
        if session is None:  # outside Starlette (the app's fast path): answered here, in the same words
            await rest_response(Unauthorized(_WRONG_TOKEN))(scope, receive, send)
            return
        await self.serve(session, scope, receive, send)

    async def serve(self, session: Session, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request of `session`, authenticated by the caller (this endpoint, or the one
        visitor URL `/mcp`): the principal's pace, who is asking, then the SDK."""
        scope[SCOPE_KEY] = session
        # The SDK binds a 2025-11-25 Mcp-Session-Id to this principal: another visitor
        # session presenting it gets 404. The token itself never goes into the scope.
        authenticated(scope, session.id)
        principal = principal_of(session, scope.get("client"))
        if self._pace is not None:
            wait = self._pace.turn(principal)
            if wait is None:
                refused = TooFast(_TOO_FAST, self._pace.retry_after_s())
                await rest_response(refused)(scope, receive, send)
                return
            if wait > 0:
                await anyio.sleep(wait)  # its turn: the principal's own requests wait, nobody else's
        with self._asking.request(session.id, principal):
            await self._mcp_app(scope, receive, send)


class _NewSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str | None = Field(default=None, min_length=1, max_length=256)
    visitor: Visitor | None = None


class SessionsEndpoint:
    """`POST /v1/sessions`: open a code, API-key or public visitor session."""

    def __init__(self, opener: SessionOpener, base_url: str, max_body_bytes: int) -> None:
        """`opener`: shared with the front desk (one throttle of wrong codes, one public pace)."""
        self._opener = opener
        self._base_url = base_url
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refusals are raised as `HostError`s, answered by the app's `REST_ERRORS` handler."""
        request = Request(scope, receive)
        response = await self._handle(request)
        await response(scope, receive, send)

    async def _handle(self, request: Request) -> Response:
        if request.method != "POST":
            raise MethodNotAllowed("POST")
        payload = _parse(await _read_capped(request, self._max_body_bytes), _NewSession)
        has_key = "authorization" in request.headers
        if has_key and payload.code is not None:
            raise InvalidArguments("give an access code or an API key, not both")
        key = (bearer_token(request.scope) or "") if has_key else None
        session, token = await self._opener.open(request.scope, payload.visitor, code=payload.code, key=key)
        return JSONResponse(
            {
                "session_id": session.id,
                "mcp_url": f"{self._base_url}/v1/sessions/{session.id}/mcp",
                "token": token,
            },
            status_code=201,
            headers={"Cache-Control": "no-store"},
        )


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains NUL")
    return value


class _NewTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    message: Annotated[str, AfterValidator(_no_nul)]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    text: Annotated[str, AfterValidator(_no_nul)]


_MAX_TURN = 2**31 - 1
M = TypeVar("M", bound=BaseModel)


class TurnsEndpoint:
    """`POST /v1/sessions/{id}/turns` and `POST /v1/sessions/{id}/turns/{n}/answer`, and the
    same at the one URL (`/mcp/turns`, `/mcp/turns/{n}/answer`) for a client that knows its
    credential but not its session's id (one let in through the front desk)."""

    def __init__(
        self,
        sessions: SessionStore,
        turns: TurnStore,
        door: VisitorDoor,
        max_body_bytes: int,
        turn_rate: PrincipalRate | None = None,
        by_credential: Callable[[str], Awaitable[Session | None]] | None = None,
    ) -> None:
        """`turn_rate`: how fast one principal opens turns, over all its sessions (None: no
        limit). A session's own caps bound what it stores; this bounds what a principal adds
        a minute however many sessions it opens. `by_credential`: the session a bearer
        credential stands for at the one URL (`OneURLEndpoint.session_of`); None: no route
        without a session id."""
        self._by_credential = by_credential
        self._sessions = sessions
        self._turns = turns
        self._door = door
        self._max_body_bytes = max_body_bytes
        self._turn_rate = turn_rate

    async def open_turn(self, request: Request) -> Response:
        """Refusals are raised as `HostError`s, answered by the app's `REST_ERRORS` handler."""
        session = await self._authenticate(request)
        payload = _parse(await _read_capped(request, self._max_body_bytes), _NewTurn)
        if self._turn_rate is not None:
            principal = principal_of(session, request.scope.get("client"))
            wait = self._turn_rate.wait(principal)
            if wait > 0:
                logger.info("turn refused: %s opens turns faster than its share", principal)
                raise TooFast("this visitor opens turns faster than the host allows", wait)
        try:
            n = await self._turns.open_turn(session.id, payload.message)
        except TurnTooLarge as exc:
            raise TooLarge(exc.message) from None
        return JSONResponse({"turn": n}, status_code=201, headers={"Cache-Control": "no-store"})

    async def answer(self, request: Request) -> Response:
        """Refusals are raised as `HostError`s, answered by the app's `REST_ERRORS` handler."""
        session = await self._authenticate(request)
        payload = _parse(await _read_capped(request, self._max_body_bytes), _Answer)
        raw = str(request.path_params.get("n", ""))
        n = int(raw) if raw.isdigit() and len(raw) <= 10 else 0
        try:
            if not 1 <= n <= _MAX_TURN:
                raise UnknownTurn(raw)
            receipts = await self._turns.receipts(session.id, n)
            violations = judge(payload.text, self._door.claim_gates(session), receipts)
            await self._turns.answer(session.id, n, payload.text)
        except UnknownTurn:
            raise UnknownTool("this session has no such turn") from None
        except TurnTooLarge as exc:
            raise TooLarge(exc.message) from None
        if violations:
            logger.info("session %s: turn %d answer claims work without a receipt: %s", session.id, n, violations)
            body: dict[str, Any] = {
                "ok": False,
                "violations": [{"capability": v.capability, "tool": v.tool, "phrase": v.phrase} for v in violations],
            }
        else:
            body = {"ok": True}
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    async def _authenticate(self, request: Request) -> Session:
        token = bearer_token(request.scope)
        if "session_id" not in request.path_params:  # the one URL's: the credential names it
            by_credential = self._by_credential
            session = await by_credential(token) if token and by_credential is not None else None
            if session is None:
                raise Unauthorized(_WRONG_TOKEN)
            return session
        session_id = str(request.path_params.get("session_id", ""))
        session = await self._sessions.authenticate(session_id, token) if token else None
        if session is None:
            raise Unauthorized(_WRONG_TOKEN)
        return session


def _parse(body: bytes, model: type[M]) -> M:
    """`body` (empty: `{}`) as `model`; `InvalidArguments` naming the first problems."""
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5]]
        raise InvalidArguments("; ".join(problems)) from None


async def _read_capped(request: Request, cap: int) -> bytes:
    """The body; `TooLarge` when it is over `cap` bytes (drained a little first: `rpc_edge.read_body`)."""
    declared = request.headers.get("content-length")
    body = None
    if declared is None or not declared.isdigit() or int(declared) <= drain_limit(cap):
        body, _ = await read_body(request.receive, cap)
    if body is None:
        raise TooLarge(f"body over {cap} bytes")
    return body
