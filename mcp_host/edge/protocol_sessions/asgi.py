"""`ProtocolSessions`: the ASGI wrapper that keeps each credential's, each principal's and the
endpoint's 2025-11-25 protocol sessions under their caps.

Above: the MCP endpoints (see the package's docstring). Below: the next ASGI callable; the
table (`table`), the records (`records`), adoption and resting.

An opening with no room is refused: HTTP 429 with a JSON-RPC error and Retry-After when the
credential's or the principal's own sessions are all busy, 503 (`unavailable`, Retry-After)
when the endpoint has no place for it. 2026-07-28 requests have no protocol session and pass
untouched. A session is forgotten before the 2xx of its DELETE leaves, so a request its client
sends next cannot find the record and adopt it back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.errors import INTERNAL_ERROR, INVALID_REQUEST, Unavailable
from mcp_host.principal import Asking, Principal

from ..credential import credential_of
from .adoption import Adoption
from .as_client import delete_in_sdk
from .messages import (
    HANDSHAKE_VERSIONS,
    SESSION_HEADER,
    VERSION_HEADER,
    header,
    json_error,
    opened_by,
    renaming,
    response_header,
    with_session,
)
from .records import MAX_KEPT_INITIALIZE, SessionRecords, forget_record, keep_alive, record_opened
from .resting import Resting
from .table import OpenSession, ProtocolSessionLimits, Refusal, SessionTable

__all__ = ["ProtocolSessions"]

logger = logging.getLogger(__package__)  # every part of the protocol sessions logs under one name

_BUSY = "too many protocol sessions open and in use for this visitor (its session, access code, API key or address); end one (DELETE) or retry later"  # noqa: E501
_FULL = "the host holds as many protocol sessions as it may; retry later"
_WAKING = "this protocol session cannot be resumed now; retry later"


class ProtocolSessions:
    """ASGI wrapper: keep each credential's, each principal's and the endpoint's protocol
    sessions under their caps."""

    def __init__(
        self,
        app: ASGIApp,
        limits: ProtocolSessionLimits,
        records: SessionRecords | None = None,
        asking: Asking | None = None,
        on_ended: Callable[[str, bytes], None] | None = None,
    ) -> None:
        """`asking`: who is asking for each visitor session (the visitor endpoint says so around
        each request); None (the owner's and a node's door), each credential is its own principal.
        `on_ended(credential, session_id)`: told when a session ends in the SDK, with the id the
        SDK knew it by (the `Mcp-Session-Id` its requests reached the SDK with)."""
        self._app = app
        self._limits = limits
        self._records = records
        principal_of: Callable[[str], Principal] = (
            (lambda credential: Principal("session", credential)) if asking is None else asking.of
        )
        self._table = SessionTable(limits, principal_of, on_ended)
        self._adoption = Adoption(app, self._table, records, self._close) if records is not None else None
        self._resting = Resting(app, self._table, records)
        self._keeping = anyio.CancelScope()

    def count(self, *, principal: Principal | None = None, credential: str | None = None) -> int:
        """Protocol sessions open (for one principal or one credential, else in all)."""
        return self._table.count(principal=principal, credential=credential)

    def resting(self) -> int:
        """How many of the sessions open rest."""
        return self._resting.count()

    async def keep_records(self) -> None:
        """Run for the host's life (until `stop_keeping`, or the records' pool closes): every
        quarter of `idle_s`, keep the records of the sessions open here alive (and let the others
        expire)."""
        if self._records is None:
            return

        def keys() -> list[bytes]:
            return [record.key for record in self._table.open.values()]

        with self._keeping:
            await keep_alive(self._records, keys, self._limits.idle_s / 4)

    async def rest_idle(self) -> None:
        """Run for the host's life (until `stop_keeping`): let each recorded session idle for
        `rest_s` rest (`resting.Resting.run`)."""
        await self._resting.run()

    def stop_keeping(self) -> None:
        """End `keep_records` and `rest_idle` (the host stops; its database closes next)."""
        self._keeping.cancel()
        self._resting.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        session_id = header(scope, SESSION_HEADER)
        if session_id is not None:
            await self._use(session_id, scope, receive, send)
            return
        version = header(scope, VERSION_HEADER)
        if scope["method"] != "POST" or (version is not None and version not in HANDSHAKE_VERSIONS):
            # A 2026-07-28 request has no protocol session; a GET or DELETE without one
            # cannot open one (the SDK answers it 400).
            await self._app(scope, receive, send)
            return
        await self._open_new(scope, receive, send)

    # -- opening -------------------------------------------------------------------------

    async def _open_new(self, scope: Scope, receive: Receive, send: Send) -> None:
        table = self._table
        credential = credential_of(scope)
        principal = table.principal_of(credential)
        now = anyio.current_time()
        table.sweep(now)
        victims, refusal = table.make_room(credential, principal, now)
        if refusal is None:
            # The place is this opening's from now, before any await: another opening that runs
            # while this one closes its victim must not count the same freed place again.
            table.admit(credential, principal)
        try:
            for victim in victims:
                await self._close(victim)
        except BaseException:
            if refusal is None:
                table.release(credential, principal)
            raise
        if refusal is not None:
            await self._refuse(refusal, credential, principal, send)
            return
        opened: OpenSession | None = None
        counted = True  # the place is counted as an opening until its answer starts
        body: list[bytes] | None = [] if self._records is not None else None

        def release() -> None:
            nonlocal counted
            if counted:
                counted = False
                table.release(credential, principal)

        async def keep() -> Message:
            nonlocal body
            message = await receive()
            if body is not None and message["type"] == "http.request":
                body.append(message.get("body", b""))
                if sum(map(len, body)) > MAX_KEPT_INITIALIZE:
                    body = None
            return message

        async def watch(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and opened is None:
                release()
                new_id = response_header(message, SESSION_HEADER)
                if message["status"] < 400 and new_id is not None:
                    opened = table.register(new_id, credential, principal, opened_by(scope), now)
                    opened.in_flight = 1
                    if body is not None and self._records is not None:
                        opened.recorded = await record_opened(self._records, opened, b"".join(body))
            await send(message)

        try:
            await self._app(scope, receive if body is None else keep, watch)
        finally:
            if opened is None:
                release()
            else:
                opened.in_flight -= 1
                opened.last_used = anyio.current_time()

    async def _refuse(self, refusal: Refusal, credential: str, principal: Principal, send: Send) -> None:
        """Answer an opening that found no room: 429 when the credential's or the principal's
        own sessions are all busy, 503 `unavailable` when the endpoint has no place for it."""
        error: dict[str, Any]
        if refusal == "busy":
            logger.info("refused a new protocol session: %s (%s) has its cap open and busy", principal, credential)
            status, error = 429, {"code": INVALID_REQUEST, "message": _BUSY}
        else:
            logger.info(
                "refused a new protocol session of %s: no place left for it of the endpoint's %d, none of its own idle",
                principal,
                self._limits.host,
            )
            status, error = 503, {"code": INTERNAL_ERROR, "message": _FULL, "data": {"code": Unavailable.code}}
        await json_error(send, status, error, self._limits.retry_after_s)

    async def _close(self, victim: OpenSession) -> None:
        """End `victim` in the SDK: DELETE it as its own client would (and its record: a client
        closed to make room must not be adopted back). A resting one has nothing left there."""
        await forget_record(self._records, victim)
        if victim.resting:
            return
        status = await delete_in_sdk(self._app, victim.session_id, victim.user, victim.host, victim.path)
        if status is None:
            return
        logger.info(
            "closed the least recently used idle protocol session of %s (%s) to make room for its own (%s)",
            victim.principal,
            victim.credential,
            status or "no answer",
        )

    # -- using ---------------------------------------------------------------------------

    async def _use(self, session_id: bytes, scope: Scope, receive: Receive, send: Send) -> None:
        table = self._table
        record = table.open.get(session_id)
        credential = credential_of(scope)
        if record is None and self._adoption is not None:
            record = await self._adoption.adopted_or_adopt(session_id, credential, scope)
        if record is not None and record.credential != credential:
            # Someone else's session id: the SDK answers 404 as if it did not exist, and
            # nothing here may change because of it.
            await self._app(scope, receive, send)
            return
        if record is not None and record.resting:
            woken = await self._resting.woken(record, scope)
            if woken is None:
                error = {"code": INTERNAL_ERROR, "message": _WAKING, "data": {"code": Unavailable.code}}
                await json_error(send, 503, error, self._limits.retry_after_s)
                return
            record = record if woken else None  # gone: the SDK answers 404 to the id it no longer knows
        status: int | None = None
        if record is not None and record.alias is not None:
            scope = with_session(scope, record.session_id)
            send = renaming(send, record.session_id, record.alias)

        ended = False

        async def watch(message: Message) -> None:
            nonlocal status, ended
            if message["type"] == "http.response.start" and status is None:
                status = int(message["status"])
                if record is not None and status < 300 and scope["method"] == "DELETE":
                    # Forgotten before its client hears it ended: a request it sends next must
                    # not find the record and adopt the session back.
                    ended = True
                    table.forget(record)
                    with anyio.CancelScope(shield=True):
                        await forget_record(self._records, record)
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
            if ended:
                pass  # forgotten as its answer left
            elif status == 404 or (status is not None and status < 300 and scope["method"] == "DELETE"):
                if record is not None:
                    table.forget(record)
                    if status != 404:
                        with anyio.CancelScope(shield=True):
                            await forget_record(self._records, record)
            elif record is None and status is not None and status < 400:
                # The SDK still serves a session this table had already let go (expired a
                # moment before the SDK's own timer fired): count it again.
                table.register(session_id, credential, table.principal_of(credential), opened_by(scope), now)
