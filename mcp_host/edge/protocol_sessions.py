"""Caps on 2025-11-25 protocol sessions (`Mcp-Session-Id`) per credential, per principal and per
endpoint.

Above: the visitor, owner and node MCP endpoints (`visitor.http.VisitorMCPEndpoint`,
`owner_facade.http.OwnerMCPEndpoint`), which authenticate a request and put its credential in
`scope["user"]` before handing it here; the visitor endpoint also says who is asking for the
session (`principal.Asking`). Below: the next ASGI callable — the JSON-RPC edge (`jsonrpc.py`),
then the SDK's `StreamableHTTPSessionManager.handle_request`.

The SDK keeps every protocol session until its client deletes it or it has had no request in
flight for the manager's `session_idle_timeout`, under one cap for the whole manager (503 past
it): one caller that keeps sending `initialize` fills it and locks every other 2025-11-25
client out (issue 11, defect 2). Here each credential (a visitor session, the owner, a node
grant) may hold `per_session` protocol sessions, and each principal (`principal.Principal`: the
visitor session's access code or API key, else the address of the request that opens it; on
the owner's and a node's door, the credential) `per_principal`. A new one past either cap
closes one of its own least recently used idle sessions (the credential's, the principal's
first; the principal's, the credential's first), never another principal's: a client whose
session is closed gets 404, from which the SDKs' clients do not recover (issue 26, defect 6).
When every one of them has a request in flight (an open GET stream counts), the new one is
refused: HTTP 429 with a JSON-RPC error and Retry-After. The endpoint holds at most `host` in
all, and its last quarter goes only to a principal holding fewer than `per_session`; a
principal that would grow past that is refused 503 (`unavailable`, Retry-After) unless it
closes an idle one of its own. 2026-07-28 requests have no protocol session and pass untouched.

What is known comes from the wire only, as the SDK shows it to any client:

- a session is born when a request without `Mcp-Session-Id` is answered below 400 with an
  `Mcp-Session-Id` header (exactly when the SDK keeps it);
- it ends when a DELETE of it is answered 2xx or a request for it is answered 404, or when it
  had no request in flight for `idle_s` — the manager is given the same number, so by then the
  SDK has dropped it too;
- to close one, a DELETE for it is sent through the next callable with the credential and
  Host of the request that opened it, as its client would.

Adoption (issue 16, several replicas): neither SDK client opens a new session on the 404 the
protocol prescribes for an id its replica does not know, so a client whose replica died would
fail. With `records` (a `SessionRecords`, backed by the database) each session born here is
recorded — the sha256 of its id, the credential, the endpoint path and the initialize request's
params (the opening body is kept only when it is at most 64 KiB). A request whose id this
replica does not know, for which a live record exists with the same credential and path, is
served by a session opened here as its client would (the stored initialize, then
`notifications/initialized`, with the request's credential and Host); from then on that
client's id is renamed on the way in (its id -> the new one) and out (the `Mcp-Session-Id`
response header, the new one -> its id). A DELETE of it forgets the record; records of open
sessions are kept alive by `keep_records`, the others expire after `idle_s`. A request whose id
is known here pays one dict lookup more at most.

Resting (issue 26, defect 7): an open session costs the SDK ~40 KB (its server task, streams
and task groups), however long its client stays away. A recorded session that had no request in
flight for `rest_s` is ended in the SDK (a DELETE as above) and rests here: it keeps its place
under every cap, its record stays alive, and its next request wakes it — opened again from its
record as an adopted one is (the stored initialize, then `notifications/initialized`), its
client's id renamed to the new one. A resting session costs a few hundred bytes. A session with
an open GET stream is never idle, so a connected SDK client never rests. What its client cannot
see across a rest: the SDK's per-connection state (the host's servers keep none there: logging
levels and resource subscriptions are kept per visitor session), and a task's status
notifications, which go to the connection that made the task (its client polls `tasks/get`).
Waking reads the record: when it cannot be read the request is answered 503 (`unavailable`,
Retry-After) and the session keeps resting. `on_ended` is told each time a session ends in the
SDK (closed, deleted, expired or resting), so what is kept per connection above (the visitor's
change feed) goes with it.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_host.errors import INTERNAL_ERROR, INVALID_REQUEST, Unavailable
from mcp_host.principal import Asking, Principal
from mcp_host.store import SessionRecord, record_key

from .credential import credential_of

__all__ = ["ProtocolSessionLimits", "ProtocolSessions", "SessionRecords"]

logger = logging.getLogger(__name__)

_SESSION_HEADER = b"mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"
_HANDSHAKE_VERSIONS = frozenset(v.encode("latin-1") for v in HANDSHAKE_PROTOCOL_VERSIONS)
MAX_KEPT_INITIALIZE = 64 * 1024
"""The largest opening body kept to record its initialize (a larger one opens a session that
only its own replica serves)."""
_INITIALIZE_KEYS = ("protocolVersion", "capabilities", "clientInfo")
_INTERNAL_TIMEOUT_S = 10.0
_BUSY = "too many protocol sessions open and in use for this visitor (its session, access code, API key or address); end one (DELETE) or retry later"  # noqa: E501
_FULL = "the host holds as many protocol sessions as it may; retry later"
_WAKING = "this protocol session cannot be resumed now; retry later"


class SessionRecords(Protocol):
    """Where the protocol sessions born on any replica are recorded, by `record_key` of their id."""

    async def record(self, key: bytes, record: SessionRecord) -> None:
        """Record a session just born."""

    async def lookup(self, key: bytes) -> SessionRecord | None:
        """The live record (used within the idle timeout), if any."""

    async def forget(self, key: bytes) -> None:
        """The client ended it (DELETE) or it was closed to make room."""

    async def touch(self, keys: Collection[bytes]) -> None:
        """Keep the records of sessions open here alive; let every record idle too long go."""

    def closed(self) -> bool:
        """Whether the records are gone for good (their pool closed): keeping them alive ends."""


@dataclass(frozen=True)
class ProtocolSessionLimits:
    """The caps (settings `session_max_protocol_sessions`, `principal_max_protocol_sessions`,
    `protocol_sessions_max`, `protocol_session_idle_s`), and when an idle session rests
    (`protocol_session_rest_s`; at or past `idle_s`, none does)."""

    per_session: int = 16
    per_principal: int = 256
    host: int = 10_000
    idle_s: float = 300.0
    rest_s: float = 60.0

    @property
    def retry_after_s(self) -> int:
        """The retry hint of a refusal: a tenth of the idle time, by which some may have expired."""
        return max(1, math.ceil(self.idle_s / 10))


_Refusal = Literal["busy", "full"]
"""Why an opening found no room: every session it could close is busy, or the endpoint is full."""


@dataclass(eq=False, slots=True)
class _Open:
    """One protocol session the SDK holds (or held, while it rests), and what closing it takes."""

    session_id: bytes
    credential: str
    principal: Principal
    user: Any
    """The `scope["user"]` that opened it: the SDK serves it to that credential only (None
    while it rests, and `host` and `path` empty: nothing of it is left in the SDK to close)."""
    host: bytes
    path: str
    last_used: float
    in_flight: int = 0
    alias: bytes | None = None
    """The id its client uses, when it was adopted (opened here for a session born elsewhere)
    or woken (opened here again after it rested)."""
    recorded: bool = False
    """Its record is stored: it may rest, to be opened again from the record."""
    resting: bool = False
    waking: anyio.Event | None = None
    """Set while a request opens it again (the others that come meanwhile wait for it)."""

    @property
    def key(self) -> bytes:
        """Its record's key: of the id its client uses."""
        return record_key(self.alias if self.alias is not None else self.session_id)


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
        self._on_ended = on_ended
        self._limits = limits
        self._records = records
        self._principal_of: Callable[[str], Principal] = (
            (lambda credential: Principal("session", credential)) if asking is None else asking.of
        )
        self._open: dict[bytes, _Open] = {}
        self._adopted: dict[bytes, bytes] = {}
        """A client's id -> the id of the session opened here for it."""
        self._adopting: dict[bytes, anyio.Event] = {}
        # A list, not a dict, per credential: most hold one session, and a dict of one costs
        # 240 bytes (a credential holds at most `per_session`, 16 by default).
        self._by_credential: dict[str, list[_Open]] = {}
        self._by_principal: dict[Principal, dict[bytes, _Open]] = {}
        self._principals: dict[Principal, Principal] = {}
        """One object for each principal holding sessions, shared by its records."""
        # Opening requests admitted and not answered yet, so concurrent ones count too.
        self._opening_credential: Counter[str] = Counter()
        self._opening_principal: Counter[Principal] = Counter()
        self._opening = 0
        self._next_sweep = 0.0
        self._keeping = anyio.CancelScope()
        self._resting = anyio.CancelScope()

    def count(self, *, principal: Principal | None = None, credential: str | None = None) -> int:
        """Protocol sessions open (for one principal or one credential, else in all)."""
        if principal is not None:
            return len(self._by_principal.get(principal, {}))
        if credential is not None:
            return len(self._by_credential.get(credential, ()))
        return len(self._open)

    async def keep_records(self) -> None:
        """Run for the host's life (until `stop_keeping`, or the records' pool closes): every
        quarter of `idle_s`, keep the records of the sessions open here alive (and let the others
        expire). A failure is said once per run of failures of one kind, not every round."""
        records = self._records
        if records is None:
            return
        failing: type[BaseException] | None = None
        with self._keeping:
            while True:
                await anyio.sleep(self._limits.idle_s / 4)
                keys = [record.key for record in self._open.values()]
                try:
                    await records.touch(keys)
                except Exception as exc:  # the database may be away for a while; the next round tries again
                    if records.closed():
                        logger.debug("the protocol session records' pool is closed: no longer kept alive")
                        return
                    if type(exc) is not failing:
                        logger.warning("keeping the protocol session records alive failed", exc_info=True)
                    else:
                        logger.debug("keeping the protocol session records alive failed again")
                    failing = type(exc)
                else:
                    failing = None

    def stop_keeping(self) -> None:
        """End `keep_records` and `rest_idle` (the host stops; its database closes next)."""
        self._keeping.cancel()
        self._resting.cancel()

    async def rest_idle(self) -> None:
        """Run for the host's life (until `stop_keeping`): every quarter of `rest_s`, let each
        recorded session idle that long rest (without records, or with `rest_s >= idle_s`, none
        does and this returns)."""
        if self._records is None or self._limits.rest_s >= self._limits.idle_s:
            return
        with self._resting:
            while True:
                await anyio.sleep(self._limits.rest_s / 4)
                for record in [r for r in self._open.values() if self._may_rest(r, anyio.current_time())]:
                    if self._may_rest(record, anyio.current_time()):  # no request came while others rested
                        await self._rest(record)

    def resting(self) -> int:
        """How many of the sessions open rest."""
        return sum(record.resting for record in self._open.values())

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
        credential = credential_of(scope)
        principal = self._principal_of(credential)
        now = anyio.current_time()
        self._sweep(now)
        victims, refusal = self._make_room(credential, principal, now)
        if refusal is None:
            # The place is this opening's from now, before any await: another opening that runs
            # while this one closes its victim must not count the same freed place again.
            self._opening_credential[credential] += 1
            self._opening_principal[principal] += 1
            self._opening += 1
        try:
            for victim in victims:
                await self._close(victim)
        except BaseException:
            if refusal is None:
                self._release(credential, principal)
            raise
        if refusal is not None:
            await self._refuse(refusal, credential, principal, send)
            return
        opened: _Open | None = None
        counted = True  # the place is counted as an opening until its answer starts
        body: list[bytes] | None = [] if self._records is not None else None

        def release() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._release(credential, principal)

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
                new_id = _response_header(message, _SESSION_HEADER)
                if message["status"] < 400 and new_id is not None:
                    opened = self._register(new_id, credential, principal, scope, now)
                    opened.in_flight = 1
                    if body is not None:
                        opened.recorded = await self._record(opened, b"".join(body))
            await send(message)

        try:
            await self._app(scope, receive if body is None else keep, watch)
        finally:
            if opened is None:
                release()
            else:
                opened.in_flight -= 1
                opened.last_used = anyio.current_time()

    def _release(self, credential: str, principal: Principal) -> None:
        """An admitted opening was answered (or failed): its place is counted as open, or free."""
        self._opening -= 1
        self._opening_credential[credential] -= 1
        if self._opening_credential[credential] <= 0:
            del self._opening_credential[credential]
        self._opening_principal[principal] -= 1
        if self._opening_principal[principal] <= 0:
            del self._opening_principal[principal]

    def _make_room(self, credential: str, principal: Principal, now: float) -> tuple[list[_Open], _Refusal | None]:
        """Forget the sessions that must close for one more to open; why there is no room then,
        if there is none.

        Past the credential's or the principal's cap, one of its own idle sessions closes; a new
        place on a full endpoint (or in its reserve, for a principal holding `per_session` or
        more) is taken only from the principal's own idle ones. The victims are forgotten here,
        before any await, so concurrent openings never pick the same one twice or count a
        session already on its way out.
        """
        victims: list[_Open] = []
        by_credential = self._by_credential.get(credential, [])
        by_principal = self._by_principal.get(principal, {})
        caps: tuple[tuple[Collection[_Open], int, int, Callable[[_Open], bool]], ...] = (
            (by_credential, self._opening_credential[credential], self._limits.per_session, _of(principal)),
            (by_principal.values(), self._opening_principal[principal], self._limits.per_principal, _by(credential)),
        )
        for members, opening, cap, first in caps:
            for record in list(members):
                if self._expired(record, now):
                    self._forget(record)
            while len(members) + opening >= cap:
                victim = _least_recently_used_idle(members, first)
                if victim is None:
                    return victims, "busy"
                self._forget(victim)
                victims.append(victim)
        if victims or self._may_grow(principal, len(by_principal) + self._opening_principal[principal]):
            return victims, None  # a place of its own freed, or the endpoint has room for it
        victim = _least_recently_used_idle(by_principal.values(), _by(credential))
        if victim is None:
            return victims, "full"
        self._forget(victim)
        return [victim], None

    def _may_grow(self, principal: Principal, held: int) -> bool:
        """Whether a principal holding `held` may take one more place of the endpoint's: below
        the last quarter of its cap anyone may, within it only one holding fewer than one
        credential may, past it no one."""
        taken = len(self._open) + self._opening
        if taken >= self._limits.host:
            return False
        return taken < self._limits.host - self._limits.host // 4 or held < self._limits.per_session

    async def _refuse(self, refusal: _Refusal, credential: str, principal: Principal, send: Send) -> None:
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
        await self._error(status, error, send)

    async def _error(self, status: int, error: dict[str, Any], send: Send) -> None:
        """Answer a JSON-RPC `error` (no id) with HTTP `status` and a Retry-After."""
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(self._limits.retry_after_s).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _register(
        self,
        session_id: bytes,
        credential: str,
        principal: Principal,
        scope: Scope,
        now: float,
        alias: bytes | None = None,
    ) -> _Open:
        record = _Open(
            session_id=session_id,
            credential=credential,
            principal=principal,
            user=scope.get("user"),
            host=_header(scope, b"host") or b"",
            path=str(scope.get("path", "/")),
            last_used=now,
            alias=alias,
        )
        self._link(record)
        return record

    def _link(self, record: _Open) -> None:
        """Put `record` in every table, by the id the SDK knows it by."""
        record.principal = self._principals.setdefault(record.principal, record.principal)
        session_id = record.session_id
        self._open[session_id] = record
        if record.alias is not None:
            self._adopted[record.alias] = session_id
        held = self._by_credential.get(record.credential)
        if held is None:
            self._by_credential[record.credential] = [record]  # no room kept for more: most hold one
        else:
            held.append(record)
        self._by_principal.setdefault(record.principal, {})[session_id] = record

    async def _record(self, opened: _Open, body: bytes) -> bool:
        """Record a session born here, so another replica can adopt it (never fails the opening);
        whether it is recorded."""
        assert self._records is not None
        initialize = _initialize_params(body)
        if initialize is None:
            return False
        try:
            await self._records.record(opened.key, SessionRecord(opened.credential, opened.path, initialize))
        except Exception:  # the session works here without it; only adoption elsewhere (and rest) is lost
            logger.exception("recording a protocol session of %s failed", opened.principal)
            return False
        return True

    async def _forget_record(self, record: _Open) -> None:
        if self._records is None:
            return
        try:
            await self._records.forget(record.key)
        except Exception:  # it expires with the idle timeout anyway
            logger.exception("forgetting the record of a protocol session of %s failed", record.principal)

    async def _close(self, victim: _Open) -> None:
        """End `victim` in the SDK: DELETE it as its own client would (and its record: a client
        closed to make room must not be adopted back). A resting one has nothing left there."""
        await self._forget_record(victim)
        if victim.resting:
            return
        status = await self._delete_in_sdk(victim.session_id, victim.user, victim.host, victim.path)
        if status is None:
            return
        logger.info(
            "closed the least recently used idle protocol session of %s (%s) to make room for its own (%s)",
            victim.principal,
            victim.credential,
            status or "no answer",
        )

    async def _rest(self, record: _Open) -> None:
        """End `record` in the SDK and keep it here, resting, until its next request wakes it."""
        in_sdk = (record.session_id, record.user, record.host, record.path)
        record.resting = True
        record.user, record.host, record.path = None, b"", ""
        self._ended(record.credential, record.session_id)
        status = await self._delete_in_sdk(*in_sdk)
        logger.debug("a protocol session of %s (%s) rests (%s)", record.principal, record.credential, status)

    async def _delete_in_sdk(self, session_id: bytes, user: Any, host: bytes, path: str) -> int | None:
        """DELETE a session through the next callable as its client would (with the `user` and
        Host that opened it, at its `path`): the status it was answered (0: none), or None when
        that failed (logged)."""
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode("latin-1", "replace"),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", host), (_SESSION_HEADER, session_id)],
            "client": None,
            "server": None,
            "user": user,
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
            logger.exception("closing a protocol session failed")
            return None
        return status[0] if status else 0

    # -- using ---------------------------------------------------------------------------

    async def _use(self, session_id: bytes, scope: Scope, receive: Receive, send: Send) -> None:
        record = self._open.get(session_id)
        credential = credential_of(scope)
        if record is None and self._records is not None:
            record = await self._adopted_or_adopt(session_id, credential, scope)
        if record is not None and record.credential != credential:
            # Someone else's session id: the SDK answers 404 as if it did not exist, and
            # nothing here may change because of it.
            await self._app(scope, receive, send)
            return
        if record is not None and record.resting:
            woken = await self._woken(record, scope)
            if woken is None:
                error = {"code": INTERNAL_ERROR, "message": _WAKING, "data": {"code": Unavailable.code}}
                await self._error(503, error, send)
                return
            record = record if woken else None  # gone: the SDK answers 404 to the id it no longer knows
        status: int | None = None
        if record is not None and record.alias is not None:
            scope = _with_session(scope, record.session_id)
            send = _renaming(send, record.session_id, record.alias)

        ended = False

        async def watch(message: Message) -> None:
            nonlocal status, ended
            if message["type"] == "http.response.start" and status is None:
                status = int(message["status"])
                if record is not None and status < 300 and scope["method"] == "DELETE":
                    # Forgotten before its client hears it ended: a request it sends next must
                    # not find the record and adopt the session back.
                    ended = True
                    self._forget(record)
                    with anyio.CancelScope(shield=True):
                        await self._forget_record(record)
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
                    self._forget(record)
                    if status != 404:
                        with anyio.CancelScope(shield=True):
                            await self._forget_record(record)
            elif record is None and status is not None and status < 400:
                # The SDK still serves a session this table had already let go (expired a
                # moment before the SDK's own timer fired): count it again.
                self._register(session_id, credential, self._principal_of(credential), scope, now)

    # -- resting and waking --------------------------------------------------------------

    def _may_rest(self, record: _Open, now: float) -> bool:
        return (
            record.recorded
            and not record.resting
            and record.in_flight == 0
            and now - record.last_used >= self._limits.rest_s
        )

    async def _woken(self, record: _Open, scope: Scope) -> bool | None:
        """Open `record`, which rests, in the SDK again (one request does; the others that come
        meanwhile wait for it): True once it is open, False when it is gone (its record expired
        or is not for this path: it is forgotten), None when it cannot be opened now (its record
        could not be read, or the SDK did not open it: it keeps resting)."""
        waking = record.waking
        if waking is None:
            record.waking = waking = anyio.Event()
            record.in_flight += 1  # never picked to make room while it wakes
            try:
                await self._wake(record, scope)
            finally:
                record.in_flight -= 1
                record.waking = None
                waking.set()
        else:
            await waking.wait()
        if not record.resting:
            return True
        return None if self._open.get(record.session_id) is record else False

    async def _wake(self, record: _Open, scope: Scope) -> None:
        assert self._records is not None
        client_id = record.alias if record.alias is not None else record.session_id
        if anyio.current_time() - record.last_used >= self._limits.idle_s:  # it expired while resting
            self._forget(record)
            await self._forget_record(record)
            return
        try:
            stored = await self._records.lookup(record.key)
        except Exception:  # the database may be away a while: the client may retry
            logger.exception("looking up the record of a resting protocol session of %s failed", record.principal)
            return
        if stored is None or stored.principal != record.credential or stored.path != scope.get("path"):
            logger.info("a resting protocol session of %s ended: its record is gone", record.principal)
            self._forget(record)
            return
        new_id = await self._open_as_client(stored, scope)
        if new_id is None:
            return
        self._forget(record)  # linked again at once, under its new id (resting: no one is told)
        record.session_id, record.alias = new_id, client_id
        record.user, record.host, record.path = scope.get("user"), _header(scope, b"host") or b"", str(scope["path"])
        record.resting = False
        self._link(record)
        logger.debug("a resting protocol session of %s woke", record.principal)

    # -- adopting ------------------------------------------------------------------------

    async def _adopted_or_adopt(self, session_id: bytes, credential: str, scope: Scope) -> _Open | None:
        """The session opened here for a client's id born elsewhere, opening it if there is a
        record of it for this credential and path (one opening per id at a time)."""
        new_id = self._adopted.get(session_id)
        if new_id is not None:
            return self._open.get(new_id)
        pending = self._adopting.get(session_id)
        if pending is not None:
            await pending.wait()
            new_id = self._adopted.get(session_id)
            return self._open.get(new_id) if new_id is not None else None
        done = self._adopting[session_id] = anyio.Event()
        try:
            return await self._adopt(session_id, credential, scope)
        finally:
            del self._adopting[session_id]
            done.set()

    async def _adopt(self, session_id: bytes, credential: str, scope: Scope) -> _Open | None:
        assert self._records is not None
        try:
            stored = await self._records.lookup(record_key(session_id))
        except Exception:  # without the record the request gets the SDK's 404, as before
            logger.exception("looking up a protocol session record failed")
            return None
        if stored is None or stored.principal != credential or stored.path != scope.get("path"):
            return None
        principal, now = self._principal_of(credential), anyio.current_time()
        victims, refusal = self._make_room(credential, principal, now)
        for victim in victims:
            await self._close(victim)
        if refusal is not None:
            logger.info("did not adopt a protocol session of %s: no room (%s)", principal, refusal)
            return None
        new_id = await self._open_as_client(stored, scope)
        if new_id is None:
            return None
        logger.info("adopted a protocol session of %s opened on another replica", principal)
        adopted = self._register(new_id, credential, principal, scope, now, alias=session_id)
        adopted.recorded = True
        return adopted

    async def _open_as_client(self, stored: SessionRecord, scope: Scope) -> bytes | None:
        """Open a session through the next callable as its client would: the stored initialize,
        then `notifications/initialized`, with the request's credential and Host."""
        initialize = {"jsonrpc": "2.0", "id": "mcp-host-adopt", "method": "initialize", "params": stored.initialize}
        status, headers = await self._internal(scope, "POST", [], json.dumps(initialize).encode())
        new_id = _response_header({"headers": headers}, _SESSION_HEADER)
        if status >= 400 or new_id is None:
            logger.warning("adopting a protocol session failed: initialize answered %s", status)
            return None
        extra = [(_SESSION_HEADER, new_id)]
        version = _header(scope, _VERSION_HEADER)
        if version is not None:
            extra.append((_VERSION_HEADER, version))
        notice = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        status, _ = await self._internal(scope, "POST", extra, json.dumps(notice).encode())
        if status >= 400:
            logger.warning("adopting a protocol session failed: notifications/initialized answered %s", status)
            return None
        return new_id

    async def _internal(
        self, scope: Scope, method: str, extra: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]]]:
        """One request through the next callable with `scope`'s credential, path and Host; its
        status and headers (0 when it gave none). The body is read to its end."""
        headers = [
            (b"host", _header(scope, b"host") or b""),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *extra,
        ]
        inner = {**scope, "method": method, "headers": headers, "query_string": b""}
        started: list[Message] = []
        finished = anyio.Event()
        asked = False

        async def receive() -> Message:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": body, "more_body": False}
            await finished.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.append(message)
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished.set()

        try:
            with anyio.fail_after(_INTERNAL_TIMEOUT_S):
                await self._app(inner, receive, send)
        except Exception:
            logger.exception("a request opening a protocol session failed")
            return 0, []
        finally:
            finished.set()
        if not started:
            return 0, []
        return int(started[0]["status"]), [(bytes(k).lower(), bytes(v)) for k, v in started[0].get("headers", ())]

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
        if not record.resting and self._open.get(record.session_id) is record:
            self._ended(record.credential, record.session_id)
        self._open.pop(record.session_id, None)
        if record.alias is not None and self._adopted.get(record.alias) == record.session_id:
            del self._adopted[record.alias]
        by_credential = self._by_credential.get(record.credential)
        if by_credential is not None:
            if record in by_credential:
                by_credential.remove(record)
            if not by_credential:
                del self._by_credential[record.credential]
        by_principal = self._by_principal.get(record.principal)
        if by_principal is not None:
            by_principal.pop(record.session_id, None)
            if not by_principal:
                del self._by_principal[record.principal]
                self._principals.pop(record.principal, None)

    def _ended(self, credential: str, session_id: bytes) -> None:
        """A session ended in the SDK: tell `on_ended` (which must not fail)."""
        if self._on_ended is not None:
            self._on_ended(credential, session_id)


def _least_recently_used_idle(members: Iterable[_Open], first: Callable[[_Open], bool]) -> _Open | None:
    """The idle session of `members` to close: the least recently used of those `first` picks,
    else of the others."""
    idle = [r for r in members if r.in_flight == 0]
    return min(idle, key=lambda r: (not first(r), r.last_used), default=None)


def _of(principal: Principal) -> Callable[[_Open], bool]:
    return lambda record: record.principal == principal


def _by(credential: str) -> Callable[[_Open], bool]:
    return lambda record: record.credential == credential


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


def _with_session(scope: Scope, session_id: bytes) -> Scope:
    """`scope` with its `Mcp-Session-Id` replaced."""
    headers = [(k, session_id if k == _SESSION_HEADER else v) for k, v in scope.get("headers", ())]
    return {**scope, "headers": headers}


def _renaming(send: Send, ours: bytes, theirs: bytes) -> Send:
    """`send` with the response's `Mcp-Session-Id` `ours` shown as `theirs`."""

    async def renamed(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (k, theirs if bytes(k).lower() == _SESSION_HEADER and bytes(v) == ours else v)
                for k, v in message.get("headers", ())
            ]
            message = {**message, "headers": headers}
        await send(message)

    return renamed


def _initialize_params(body: bytes) -> dict[str, Any] | None:
    """The params of an initialize request body (what adopting its session needs), if it is one."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict) or request.get("method") != "initialize":
        return None
    params = request.get("params")
    if not isinstance(params, dict):
        return None
    return {key: params[key] for key in _INITIALIZE_KEYS if key in params}
