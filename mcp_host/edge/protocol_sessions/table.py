"""The protocol sessions one endpoint holds, and their caps.

Above: `asgi.ProtocolSessions` (which admits openings and registers, uses and forgets sessions),
`adoption` and `resting`. Below: `principal.Principal`, `store.record_key`.

Each credential may hold `per_session` sessions and each principal `per_principal`. A new one
past either cap closes one of its own least recently used idle sessions (the credential's, the
principal's first; the principal's, the credential's first), never another principal's: a
client whose session is closed gets 404, from which the SDKs' clients do not recover (issue 26,
defect 6). When every one of them has a request in flight (an open GET stream counts), there is
no room (`busy`). The endpoint holds at most `host` in all, and its last quarter goes only to a
principal holding fewer than `per_session`; a principal that would grow past that finds no room
(`full`) unless it closes an idle one of its own. Nothing here awaits: the table changes only
between awaits of its callers, so concurrent openings never pick the same victim twice.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from mcp_host.principal import Principal
from mcp_host.store import record_key

__all__ = ["OpenSession", "ProtocolSessionLimits", "Refusal", "SessionTable"]


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


Refusal = Literal["busy", "full"]
"""Why an opening found no room: every session it could close is busy, or the endpoint is full."""


@dataclass(eq=False, slots=True)
class OpenSession:
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


class SessionTable:
    """The sessions open on one endpoint, by the id the SDK knows each by, by credential and by
    principal, and the openings admitted but not answered yet."""

    def __init__(
        self,
        limits: ProtocolSessionLimits,
        principal_of: Callable[[str], Principal],
        on_ended: Callable[[str, bytes], None] | None,
    ) -> None:
        self.limits = limits
        self.principal_of = principal_of
        """Who is asking for a credential's sessions now."""
        self._on_ended = on_ended
        self.open: dict[bytes, OpenSession] = {}
        self.adopted: dict[bytes, bytes] = {}
        """A client's id -> the id of the session opened here for it."""
        # A list, not a dict, per credential: most hold one session, and a dict of one costs
        # 240 bytes (a credential holds at most `per_session`, 16 by default).
        self._by_credential: dict[str, list[OpenSession]] = {}
        self._by_principal: dict[Principal, dict[bytes, OpenSession]] = {}
        self._principals: dict[Principal, Principal] = {}
        """One object for each principal holding sessions, shared by its records."""
        # Opening requests admitted and not answered yet, so concurrent ones count too.
        self._opening_credential: Counter[str] = Counter()
        self._opening_principal: Counter[Principal] = Counter()
        self._opening = 0
        self._next_sweep = 0.0

    def count(self, *, principal: Principal | None = None, credential: str | None = None) -> int:
        """Protocol sessions open (for one principal or one credential, else in all)."""
        if principal is not None:
            return len(self._by_principal.get(principal, {}))
        if credential is not None:
            return len(self._by_credential.get(credential, ()))
        return len(self.open)

    # -- room ----------------------------------------------------------------------------

    def admit(self, credential: str, principal: Principal) -> None:
        """An opening found room: the place is its own until `release`."""
        self._opening_credential[credential] += 1
        self._opening_principal[principal] += 1
        self._opening += 1

    def release(self, credential: str, principal: Principal) -> None:
        """An admitted opening was answered (or failed): its place is counted as open, or free."""
        self._opening -= 1
        self._opening_credential[credential] -= 1
        if self._opening_credential[credential] <= 0:
            del self._opening_credential[credential]
        self._opening_principal[principal] -= 1
        if self._opening_principal[principal] <= 0:
            del self._opening_principal[principal]

    def make_room(self, credential: str, principal: Principal, now: float) -> tuple[list[OpenSession], Refusal | None]:
        """Forget the sessions that must close for one more to open; why there is no room then,
        if there is none.

        Past the credential's or the principal's cap, one of its own idle sessions closes; a new
        place on a full endpoint (or in its reserve, for a principal holding `per_session` or
        more) is taken only from the principal's own idle ones. The victims are forgotten here,
        before any await, so concurrent openings never pick the same one twice or count a
        session already on its way out.
        """
        victims: list[OpenSession] = []
        by_credential = self._by_credential.get(credential, [])
        by_principal = self._by_principal.get(principal, {})
        caps: tuple[tuple[Collection[OpenSession], int, int, Callable[[OpenSession], bool]], ...] = (
            (by_credential, self._opening_credential[credential], self.limits.per_session, _of(principal)),
            (by_principal.values(), self._opening_principal[principal], self.limits.per_principal, _by(credential)),
        )
        for members, opening, cap, first in caps:
            for record in list(members):
                if self.expired(record, now):
                    self.forget(record)
            while len(members) + opening >= cap:
                victim = _least_recently_used_idle(members, first)
                if victim is None:
                    return victims, "busy"
                self.forget(victim)
                victims.append(victim)
        if victims or self._may_grow(principal, len(by_principal) + self._opening_principal[principal]):
            return victims, None  # a place of its own freed, or the endpoint has room for it
        victim = _least_recently_used_idle(by_principal.values(), _by(credential))
        if victim is None:
            return victims, "full"
        self.forget(victim)
        return [victim], None

    def _may_grow(self, principal: Principal, held: int) -> bool:
        """Whether a principal holding `held` may take one more place of the endpoint's: below
        the last quarter of its cap anyone may, within it only one holding fewer than one
        credential may, past it no one."""
        taken = len(self.open) + self._opening
        if taken >= self.limits.host:
            return False
        return taken < self.limits.host - self.limits.host // 4 or held < self.limits.per_session

    # -- keeping -------------------------------------------------------------------------

    def register(
        self,
        session_id: bytes,
        credential: str,
        principal: Principal,
        opened_by: tuple[Any, bytes, str],
        now: float,
        alias: bytes | None = None,
    ) -> OpenSession:
        """A session the SDK opened, by the request whose user, Host and path `opened_by` are."""
        user, host, path = opened_by
        record = OpenSession(session_id, credential, principal, user, host, path, last_used=now, alias=alias)
        self.link(record)
        return record

    def link(self, record: OpenSession) -> None:
        """Put `record` in every table, by the id the SDK knows it by."""
        record.principal = self._principals.setdefault(record.principal, record.principal)
        session_id = record.session_id
        self.open[session_id] = record
        if record.alias is not None:
            self.adopted[record.alias] = session_id
        held = self._by_credential.get(record.credential)
        if held is None:
            self._by_credential[record.credential] = [record]  # no room kept for more: most hold one
        else:
            held.append(record)
        self._by_principal.setdefault(record.principal, {})[session_id] = record

    # -- forgetting ----------------------------------------------------------------------

    def expired(self, record: OpenSession, now: float) -> bool:
        return record.in_flight == 0 and now - record.last_used >= self.limits.idle_s

    def sweep(self, now: float) -> None:
        """Forget every session idle past `idle_s` (at most every quarter of it)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.limits.idle_s / 4
        for record in [r for r in self.open.values() if self.expired(r, now)]:
            self.forget(record)

    def forget(self, record: OpenSession) -> None:
        if not record.resting and self.open.get(record.session_id) is record:
            self.ended(record.credential, record.session_id)
        self.open.pop(record.session_id, None)
        if record.alias is not None and self.adopted.get(record.alias) == record.session_id:
            del self.adopted[record.alias]
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

    def ended(self, credential: str, session_id: bytes) -> None:
        """A session ended in the SDK: tell `on_ended` (which must not fail)."""
        if self._on_ended is not None:
            self._on_ended(credential, session_id)


def _least_recently_used_idle(
    members: Iterable[OpenSession], first: Callable[[OpenSession], bool]
) -> OpenSession | None:
    """The idle session of `members` to close: the least recently used of those `first` picks,
    else of the others."""
    idle = [r for r in members if r.in_flight == 0]
    return min(idle, key=lambda r: (not first(r), r.last_used), default=None)


def _of(principal: Principal) -> Callable[[OpenSession], bool]:
    return lambda record: record.principal == principal


def _by(credential: str) -> Callable[[OpenSession], bool]:
    return lambda record: record.credential == credential
