"""Caps on 2025-11-25 protocol sessions (`Mcp-Session-Id`) per principal and per client address.

Above: the visitor and owner MCP endpoints (`visitor_http.VisitorMCPEndpoint`,
`owner_facade.http.OwnerMCPEndpoint`), which authenticate a request and put its principal in
`scope["user"]` before handing it here. Below: the next ASGI callable — the JSON-RPC edge
(`jsonrpc.py`), then the SDK's `StreamableHTTPSessionManager.handle_request`.

The SDK keeps every protocol session until its client deletes it or it has had no request in
flight for the manager's `session_idle_timeout`, under one cap for the whole manager (503 past
it): one caller that keeps sending `initialize` fills it and locks every other 2025-11-25
client out (issue 11, defect 2). Here each principal (a visitor session, or the owner) may hold
`per_principal` protocol sessions and each client address `per_client`. A new one past either
cap closes that principal's (or address's) least recently used idle session first; when every
one of them has a request in flight (an open GET stream counts), it is refused: HTTP 429 with a
JSON-RPC error. 2026-07-28 requests have no protocol session and pass untouched.

What is known comes from the wire only, as the SDK shows it to any client:

- a session is born when a request without `Mcp-Session-Id` is answered below 400 with an
  `Mcp-Session-Id` header (exactly when the SDK keeps it);
- it ends when a DELETE of it is answered 2xx or a request for it is answered 404, or when it
  had no request in flight for `idle_s` — the manager is given the same number, so by then the
  SDK has dropped it too;
- to close one, a DELETE for it is sent through the next callable with the credential and
  Host of the request that opened it, as its client would.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import anyio
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.errors import INVALID_REQUEST

__all__ = ["ProtocolSessionLimits", "ProtocolSessions"]

logger = logging.getLogger(__name__)

_SESSION_HEADER = b"mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"
_HANDSHAKE_VERSIONS = frozenset(v.encode("latin-1") for v in HANDSHAKE_PROTOCOL_VERSIONS)


@dataclass(frozen=True)
class ProtocolSessionLimits:
    """The caps (settings `protocol_sessions_per_principal`, `…_per_client`, `protocol_session_idle_s`)."""

    per_principal: int = 16
    per_client: int = 256
    idle_s: float = 300.0


@dataclass(eq=False)
class _Open:
    """One protocol session the SDK holds, and what closing it takes."""

    session_id: bytes
    principal: str
    client: str
    user: Any
    """The `scope["user"]` that opened it: the SDK serves it to that credential only."""
    host: bytes
    path: str
    last_used: float
    in_flight: int = 0


class ProtocolSessions:
    """ASGI wrapper: keep each principal's and each address's protocol sessions under their caps."""

    def __init__(self, app: ASGIApp, limits: ProtocolSessionLimits) -> None:
        self._app = app
        self._limits = limits
        self._open: dict[bytes, _Open] = {}
        self._by_principal: dict[str, dict[bytes, _Open]] = {}
        self._by_client: dict[str, dict[bytes, _Open]] = {}
        # Opening requests admitted and not answered yet, so concurrent ones count too.
        self._opening_principal: Counter[str] = Counter()
        self._opening_client: Counter[str] = Counter()
        self._next_sweep = 0.0

    def count(self, *, principal: str | None = None, client: str | None = None) -> int:
        """Protocol sessions open (for one principal or one client address, else in all)."""
        if principal is not None:
            return len(self._by_principal.get(principal, {}))
        if client is not None:
            return len(self._by_client.get(client, {}))
        return len(self._open)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        session_id = _header(scope, _SESSION_HEADER)
        if session_id is not None:
            await self._use(session_id, scope, receive, send)
            return
        version = _header(scope, _VERSION_HEADER)
        if scope["method"] != "POST" or (version is not None and version not in _HANDSHAKE_VERSIONS):
            # A 2026-07-28 request has no protocol session; a GET or DELETE without one
            # cannot open one (the SDK answers it 400).
            await self._app(scope, receive, send)
            return
        await self._open_new(scope, receive, send)

    # -- opening -------------------------------------------------------------------------

    async def _open_new(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal, client = _principal(scope), _client(scope)
        now = anyio.current_time()
        self._sweep(now)
        victims, room = self._make_room(principal, client, now)
        for victim in victims:
            await self._close(victim)
        if not room:
            logger.info("refused a new protocol session: %s at %s has its cap open and busy", principal, client)
            await _refuse(send)
            return
        self._opening_principal[principal] += 1
        self._opening_client[client] += 1
        opened: _Open | None = None

        async def watch(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and opened is None:
                self._release(principal, client)
                new_id = _response_header(message, _SESSION_HEADER)
                if message["status"] < 400 and new_id is not None:
                    opened = self._register(new_id, principal, client, scope, now)
                    opened.in_flight = 1
            await send(message)

        try:
            await self._app(scope, receive, watch)
        finally:
            if opened is None:
                self._release(principal, client)
            else:
                opened.in_flight -= 1
                opened.last_used = anyio.current_time()

    def _release(self, principal: str, client: str) -> None:
        for counter, key in ((self._opening_principal, principal), (self._opening_client, client)):
            if counter[key] > 0:
                counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]

    def _make_room(self, principal: str, client: str, now: float) -> tuple[list[_Open], bool]:
        """Forget the sessions that must close for one more to open; whether there is room then.

        The victims are forgotten here, before any await, so concurrent openings never pick
        the same one twice or count a session already on its way out.
        """
        victims: list[_Open] = []
        groups = (
            (self._by_principal, principal, self._limits.per_principal, self._opening_principal),
            (self._by_client, client, self._limits.per_client, self._opening_client),
        )
        for index, key, cap, opening in groups:
            members = index.get(key, {})
            for record in list(members.values()):
                if self._expired(record, now):
                    self._forget(record)
            while len(members) + opening[key] >= cap:
                idle = [r for r in members.values() if r.in_flight == 0]
                if not idle:
                    return victims, False
                victim = min(idle, key=lambda r: r.last_used)
                self._forget(victim)
                victims.append(victim)
        return victims, True

    def _register(self, session_id: bytes, principal: str, client: str, scope: Scope, now: float) -> _Open:
        record = _Open(
            session_id=session_id,
            principal=principal,
            client=client,
            user=scope.get("user"),
            host=_header(scope, b"host") or b"",
            path=str(scope.get("path", "/")),
            last_used=now,
        )
        self._open[session_id] = record
        self._by_principal.setdefault(principal, {})[session_id] = record
        self._by_client.setdefault(client, {})[session_id] = record
        return record

    async def _close(self, victim: _Open) -> None:
        """End `victim` in the SDK: DELETE it as its own client would."""
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": victim.path,
            "raw_path": victim.path.encode("latin-1", "replace"),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", victim.host), (_SESSION_HEADER, victim.session_id)],
            "client": None,
            "server": None,
            "user": victim.user,
        }
        status: list[int] = []
        asked = False

        async def receive() -> Message:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))

        try:
            await self._app(scope, receive, send)
        except Exception:  # closing a session must never fail the request that made room
            logger.exception("closing protocol session of %s failed", victim.principal)
            return
        logger.info(
            "closed the least recently used protocol session of %s at %s to make room (%s)",
            victim.principal,
            victim.client,
            status[0] if status else "no answer",
        )

    # -- using ---------------------------------------------------------------------------

    async def _use(self, session_id: bytes, scope: Scope, receive: Receive, send: Send) -> None:
        record = self._open.get(session_id)
        principal = _principal(scope)
        if record is not None and record.principal != principal:
            # Someone else's session id: the SDK answers 404 as if it did not exist, and
            # nothing here may change because of it.
            await self._app(scope, receive, send)
            return
        status: int | None = None

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start" and status is None:
                status = int(message["status"])
            await send(message)

        if record is not None:
            record.in_flight += 1
            record.last_used = anyio.current_time()
        try:
            await self._app(scope, receive, watch)
        finally:
            now = anyio.current_time()
            if record is not None:
                record.in_flight -= 1
                record.last_used = now
            if status == 404 or (status is not None and status < 300 and scope["method"] == "DELETE"):
                if record is not None:
                    self._forget(record)
            elif record is None and status is not None and status < 400:
                # The SDK still serves a session this table had already let go (expired a
                # moment before the SDK's own timer fired): count it again.
                self._register(session_id, principal, _client(scope), scope, now)

    # -- forgetting ----------------------------------------------------------------------

    def _expired(self, record: _Open, now: float) -> bool:
        return record.in_flight == 0 and now - record.last_used >= self._limits.idle_s

    def _sweep(self, now: float) -> None:
        """Forget every session idle past `idle_s` (at most every quarter of it)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._limits.idle_s / 4
        for record in [r for r in self._open.values() if self._expired(r, now)]:
            self._forget(record)

    def _forget(self, record: _Open) -> None:
        self._open.pop(record.session_id, None)
        for index, key in ((self._by_principal, record.principal), (self._by_client, record.client)):
            members = index.get(key)
            if members is not None:
                members.pop(record.session_id, None)
                if not members:
                    del index[key]


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def _response_header(message: Message, name: bytes) -> bytes | None:
    for key, value in message.get("headers", ()):
        if bytes(key).lower() == name:
            return bytes(value)
    return None


def _principal(scope: Scope) -> str:
    """Who the endpoint authenticated (the SDK binds a session to the same credential)."""
    user = scope.get("user")
    client_id = getattr(getattr(user, "access_token", None), "client_id", None)
    return str(client_id) if client_id is not None else ""


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


async def _refuse(send: Send) -> None:
    message = (
        "too many protocol sessions open and in use for this credential or address; end one (DELETE) or retry later"
    )
    payload = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}})
    body = payload.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
