"""A short-lived cache of verified session tokens, in front of any `SessionStore`.

Above: the visitor endpoint, which authenticates every request (2026-07-28 clients send one
HTTP request per MCP request). Below: the real store (Postgres).

Why: the token check was ~12% of the host's CPU per forwarded call (a pool round trip per
request). Only successful checks are cached, keyed on the session id and the token's hash
(never the token), for `ttl_s` seconds; failures always reach the store, so a wrong token is
never "remembered" as right. Ending a session on this replica drops its entry at once; on
another replica an ended session can be served for at most `ttl_s` (default 1 s) — the price
of the cache, and why it is short. `ttl_s = 0` turns it off. Likewise revoking an access code
or API key on this replica drops the entries of its sessions at once (`forget_subject`, called
by the revoking path through the composition root), so their next request reads the
revocation; another replica may serve the stale "live" answer for at most `ttl_s`.

During a database outage (the store raises a connection failure, `database.as_unavailable`),
a token this replica verified within the last `outage_grace_s` is still accepted, so a known
visitor keeps reaching tools that do not need the database and gets `unavailable` from those
that do; any other token's check fails (HTTP 503). What this risks: a session ended or a
credential revoked on *another* replica during the outage stays usable here for at most the
grace (ending or revoking on this replica drops the entry at once, before the database is asked).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

from mcp_host.store import as_unavailable

from .sessions import RoleSnapshot, Session, SessionMode, SessionStore, Subject, Visitor

__all__ = ["CachedSessionStore"]


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
        self._max = max_entries
        # (session id, token digest) -> (when it was verified, the session)
        self._hits: OrderedDict[tuple[str, bytes], tuple[float, Session]] = OrderedDict()

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
        key = (session_id, hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest())
        now = self._clock()
        hit = self._hits.get(key)
        if hit is not None and now < hit[0] + self._ttl_s:
            return hit[1]
        try:
            session = await self._store.authenticate(session_id, token)
        except Exception as exc:
            if hit is not None and now < hit[0] + self._grace_s and as_unavailable(exc) is not None:
                return hit[1]  # the database is away: trust this replica's recent check a while
            raise
        if session is None:
            self._hits.pop(key, None)
            return None
        self._hits[key] = (now, session)
        self._hits.move_to_end(key)
        while len(self._hits) > self._max:
            self._hits.popitem(last=False)
        return session

    async def get(self, session_id: str) -> Session | None:
        return await self._store.get(session_id)

    async def end(self, session_id: str) -> bool:
        for key in [k for k in self._hits if k[0] == session_id]:
            del self._hits[key]
        return await self._store.end(session_id)

    async def list_live(self, owner_id: str, *, limit: int = 500) -> list[Session]:
        return await self._store.list_live(owner_id, limit=limit)

    def forget_subject(self, owner_id: str, subject: Subject) -> None:
        """Drop the cached authentications of every session of `subject` (its credential was
        revoked): their next request asks the store."""
        stale = [k for k, (_, s) in self._hits.items() if s.subject == subject and s.owner_id == owner_id]
        for key in stale:
            del self._hits[key]
