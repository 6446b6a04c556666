"""A short-lived cache of verified session tokens, in front of any `SessionStore`.

Above: the visitor endpoint, which authenticates every request (2026-07-28 clients send one
HTTP request per MCP request). Below: the real store (Postgres).

Why: the token check was ~12% of the host's CPU per forwarded call (a pool round trip per
request). Only successful checks are cached, keyed on the session id with the token's hash
(never the token), for `ttl_s` seconds; failures always reach the store, so a wrong token is
never "remembered" as right, and never drops the right one's entry either. Ending a session on
this replica drops its entry at once; on another replica an ended session can be served for at
most `ttl_s` (default 1 s) — the price of the cache, and why it is short. `ttl_s = 0` turns it
off. Likewise revoking an access code or API key on this replica drops the entries of its
sessions at once (`forget_subject`, called by the revoking path through the composition root),
so their next request reads the revocation; another replica may serve the stale "live" answer
for at most `ttl_s`.

`by_token`, `live` and `live_of` (the one visitor URL `/mcp`: a token without its session id,
a session an OAuth grant stands for, an API key's kept session) pass through uncached.

During a database outage (the store raises a connection failure, `errors.as_unavailable`),
a token this replica verified within the last `outage_grace_s` is still accepted, so a known
visitor keeps reaching tools that do not need the database and gets `unavailable` from those
that do; any other token's check fails (HTTP 503). What this risks: a session ended or a
credential revoked on *another* replica during the outage stays usable here for at most the
grace (ending or revoking on this replica drops the entry at once, before the database is asked).

What an abandoned session costs here (issue 26, defect 7): its entry is kept `max(ttl_s,
outage_grace_s)` after its last check (`expire`, run for the host's life, drops the older ones;
at most `max_entries` are kept in all), and holds the session's fields, not a `Session`: its
role snapshot, owner id, mode and subject shared with every other entry that has the same. A
hit makes the `Session` again (`model_construct`, ~3 µs). ~0.45 KB per entry, against ~2 KB
for the `Session` pydantic builds with its own dict and fields set.
"""

from __future__ import annotations

import hashlib
import hmac
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import anyio

from mcp_host.errors import as_unavailable

from .sessions import RoleSnapshot, Session, SessionMode, SessionStore, Subject, Visitor

__all__ = ["CachedSessionStore"]

_FIELDS = set(Session.model_fields)
"""The fields set of every session made from the cache: pydantic keeps the set `model_construct`
is given as it is, and a frozen model never changes it, so one serves all."""
_MAX_SHARED = 1024
"""Distinct role snapshots (and subjects) shared at most: each role edit, or credential, adds one."""
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(slots=True)
class _Verified:
    """One successful check: when, of which token (its sha256), and the session's fields but its
    id (the entry's key)."""

    at: float
    digest: bytes
    owner_id: str
    mode: str
    subject: Subject | None
    visitor: Visitor | None
    role: RoleSnapshot
    created_at: datetime
    ended_at: datetime | None
    credential_revoked: bool

    def session(self, session_id: str) -> Session:
        """The session it proved (as the store made it: the same fields, already validated)."""
        return Session.model_construct(
            _FIELDS,
            id=session_id,
            owner_id=self.owner_id,
            mode=self.mode,
            subject=self.subject,
            visitor=self.visitor,
            role=self.role,
            created_at=self.created_at,
            ended_at=self.ended_at,
            credential_revoked=self.credential_revoked,
        )


class CachedSessionStore:
    """A `SessionStore` that remembers successful `authenticate` answers briefly."""

    def __init__(
        self,
        store: SessionStore,
        *,
        ttl_s: float,
        outage_grace_s: float = 0.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl_s = ttl_s
        self._grace_s = outage_grace_s
        self._keep_s = max(ttl_s, outage_grace_s)
        self._max = max_entries
        # session id -> its last successful check, least recently checked first
        self._hits: OrderedDict[str, _Verified] = OrderedDict()
        self._roles: dict[str, RoleSnapshot] = {}
        self._subjects: dict[Subject, Subject] = {}

    async def open(
        self,
        *,
        owner_id: str,
        mode: SessionMode,
        visitor: Visitor | None,
        subject: Subject | None = None,
        role: RoleSnapshot,
    ) -> tuple[Session, str]:
        return await self._store.open(owner_id=owner_id, mode=mode, visitor=visitor, subject=subject, role=role)

    async def authenticate(self, session_id: str, token: str) -> Session | None:
        if self._ttl_s <= 0:
            return await self._store.authenticate(session_id, token)
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        now = self._clock()
        hit = self._hits.get(session_id)
        if hit is not None and not hmac.compare_digest(hit.digest, digest):
            hit = None  # another token than the one verified: the store decides, the entry stays
        if hit is not None and now < hit.at + self._ttl_s:
            return hit.session(session_id)
        try:
            session = await self._store.authenticate(session_id, token)
        except Exception as exc:
            if hit is not None and now < hit.at + self._grace_s and as_unavailable(exc) is not None:
                return hit.session(session_id)  # the database is away: trust this replica's recent check a while
            raise
        if session is None:
            if hit is not None:  # the token verified before is refused now (ended, expired)
                self._hits.pop(session_id, None)
            return None
        self._remember(now, digest, session)
        return session

    async def expire(self, every_s: float = 10.0) -> None:
        """Run for the host's life: every `every_s`, drop the entries no check may use any more
        (checked `max(ttl_s, outage_grace_s)` ago or longer), so an abandoned session costs
        nothing here once its grace is over, even when no other check comes to drop it."""
        while True:
            await anyio.sleep(every_s)
            self._drop_stale(self._clock())

    def _remember(self, now: float, digest: bytes, session: Session) -> None:
        self._hits.pop(session.id, None)
        self._hits[session.id] = _Verified(
            now,
            digest,
            sys.intern(session.owner_id),
            sys.intern(session.mode),
            None if session.subject is None else _shared(self._subjects, session.subject, session.subject),
            session.visitor,
            _shared(self._roles, session.role.model_dump_json(), session.role),
            session.created_at,
            session.ended_at,
            session.credential_revoked,
        )
        self._drop_stale(now)

    def _drop_stale(self, now: float) -> None:
        """Drop the entries past `max_entries` and those no check may use any more."""
        while self._hits:
            oldest = next(iter(self._hits.values()))
            if len(self._hits) <= self._max and now < oldest.at + self._keep_s:
                return
            self._hits.popitem(last=False)

    def __len__(self) -> int:
        """How many verified tokens are kept."""
        return len(self._hits)

    async def get(self, session_id: str) -> Session | None:
        return await self._store.get(session_id)

    async def by_token(self, token: str) -> Session | None:
        return await self._store.by_token(token)

    async def live(self, session_id: str) -> Session | None:
        return await self._store.live(session_id)

    async def live_of(self, owner_id: str, subject: Subject) -> Session | None:
        return await self._store.live_of(owner_id, subject)

    async def end(self, session_id: str) -> bool:
        self._hits.pop(session_id, None)
        return await self._store.end(session_id)

    async def list_live(self, owner_id: str, *, limit: int = 500) -> list[Session]:
        return await self._store.list_live(owner_id, limit=limit)

    def forget_subject(self, owner_id: str, subject: Subject) -> None:
        """Drop the cached authentications of every session of `subject` (its credential was
        revoked): their next request asks the store."""
        stale = [k for k, v in self._hits.items() if v.subject == subject and v.owner_id == owner_id]
        for key in stale:
            del self._hits[key]


def _shared(table: dict[_K, _V], key: _K, value: _V) -> _V:
    """The value kept for `key` in `table`, `value` if none is (a table past `_MAX_SHARED`
    starts again: what entries already share stays shared)."""
    if key not in table and len(table) >= _MAX_SHARED:
        table.clear()
    return table.setdefault(key, value)
