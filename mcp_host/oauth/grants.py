"""What the owner sees of each OAuth grant (`OAuthGrant`), and how grants end (`OAuthGrants`,
`end_subject_grants`).

Above: `server.AuthorizationServer` (its `grants`; RFC 7009 revocation and replay detection end
a grant here), the owner door's `oauth_grants_list` / `oauth_grant_revoke` and `session_end`,
and the composition root, which hands `end_owner_grants` to `access.OwnerStore` so that rotating
the owner token ends every owner grant in the rotation's own transaction. Below: asyncpg, the
tables of migrations 018 and 020, and `mcp_host.sessions` (read only: which owner a visitor
session belongs to).

A grant stands for one subject: a visitor session (its id, 32 lowercase hex) or the owner
(`owner:<owner_id>`, `owner_subject`). Ending a grant marks it revoked and deletes its codes
and tokens, so no token of it is accepted or refreshed again, on any replica; the row stays
(for the owner's list) until the retention sweep deletes it (`AuthorizationServer.sweep`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from mcp_host.store import PgConnection, PgPool

if TYPE_CHECKING:
    import asyncpg

__all__ = [
    "OWNER_SUBJECT_PREFIX",
    "OAuthGrant",
    "OAuthGrants",
    "SubjectKind",
    "end_owner_grants",
    "end_subject_grants",
    "owner_subject",
]

SubjectKind = Literal["visitor", "owner"]
OWNER_SUBJECT_PREFIX = "owner:"
_NAME_MAX_CHARS = 200  # a client names itself; the owner's list shows at most this much of it
_LIST_LIMIT = 500


def owner_subject(owner_id: str) -> str:
    """The subject of a grant at the owner door."""
    return f"{OWNER_SUBJECT_PREFIX}{owner_id}"


class OAuthGrant(BaseModel):
    """One grant as the owner sees it. `client_name` is what the client says it is called (its
    registration or its metadata document), not an identity; `client_id` of a client known by
    its metadata document is that document's https URL. `expires_at`: when its live refresh
    token expires (None once revoked, or before its code was redeemed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    client_id: str
    client_name: str | None
    resource: str
    subject_kind: SubjectKind
    session_id: str | None
    """The visitor session a visitor grant stands for; None for an owner grant."""
    visitor_name: str | None
    """The name the visitor gave when the session opened (at the front desk), if any."""
    created_at: datetime
    refreshed_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None


_SELECT = """
SELECT g.id, g.client_id, left(c.metadata->>'client_name', {name_max}) AS client_name, g.resource, g.subject,
       g.created_at, g.refreshed_at, g.revoked_at,
       (SELECT s.visitor->>'name' FROM mcp_host.sessions s WHERE s.id = g.subject) AS visitor_name,
       (SELECT max(t.expires_at) FROM mcp_host.oauth_tokens t
        WHERE t.grant_id = g.id AND t.kind = 'refresh' AND t.used_at IS NULL) AS expires_at
FROM mcp_host.oauth_grants g JOIN mcp_host.oauth_clients c ON c.client_id = g.client_id
WHERE {where}
ORDER BY g.revoked_at IS NOT NULL, g.created_at DESC, g.id
LIMIT {limit}
"""
# $1: the owner's subject, $2: the owner's id. A visitor grant is the owner's when its session is.
_OWNED = "(g.subject = $1 OR g.subject IN (SELECT s.id FROM mcp_host.sessions s WHERE s.owner_id = $2))"


# A visitor grant's subject is a session id (32 lowercase hex); no other subject is a session.
_OF_ENDED_SESSION = """g.subject ~ '^[0-9a-f]{32}$' AND NOT EXISTS (
    SELECT 1 FROM mcp_host.sessions s WHERE s.id = g.subject AND s.ended_at IS NULL)"""


def _select(where: str) -> str:
    return _SELECT.format(name_max=_NAME_MAX_CHARS, where=where, limit=_LIST_LIMIT)


_OF_OWNER = _select(_OWNED)
_ONE_OWNED = _select(f"{_OWNED} AND g.id = $3")
_OF_SESSION = _select("g.subject = $1")


def _grant(row: asyncpg.Record) -> OAuthGrant:
    subject: str = row["subject"]
    owner = subject.startswith(OWNER_SUBJECT_PREFIX)
    return OAuthGrant(
        id=row["id"],
        client_id=row["client_id"],
        client_name=row["client_name"],
        resource=row["resource"],
        subject_kind="owner" if owner else "visitor",
        session_id=None if owner else subject,
        visitor_name=None if owner else row["visitor_name"],
        created_at=row["created_at"],
        refreshed_at=row["refreshed_at"],
        expires_at=None if row["revoked_at"] is not None else row["expires_at"],
        revoked_at=row["revoked_at"],
    )


async def _end(conn: PgConnection, where: str, *args: object) -> list[str]:
    """End the live grants `where` selects (in the caller's transaction): the ids ended."""
    rows = await conn.fetch(
        f"UPDATE mcp_host.oauth_grants g SET revoked_at = now() WHERE g.revoked_at IS NULL AND {where} RETURNING g.id",
        *args,
    )
    ended = [r["id"] for r in rows]
    if ended:
        await conn.execute("DELETE FROM mcp_host.oauth_tokens WHERE grant_id = ANY($1::text[])", ended)
        await conn.execute("DELETE FROM mcp_host.oauth_codes WHERE grant_id = ANY($1::text[])", ended)
    return ended


async def end_subject_grants(conn: PgConnection, subject: str) -> int:
    """End every live grant that stands for `subject`, in `conn`'s transaction; how many."""
    return len(await _end(conn, "g.subject = $1", subject))


async def end_owner_grants(conn: PgConnection, owner_id: str) -> int:
    """End every live grant of the owner door's clients, in `conn`'s transaction (the owner
    token's rotation: `access.OwnerStore(on_token_rotated=…)`); how many."""
    return await end_subject_grants(conn, owner_subject(owner_id))


class OAuthGrants:
    """The grants in PostgreSQL: listed for the owner, ended one by one or by subject."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def of_owner(self, owner_id: str) -> list[OAuthGrant]:
        """The owner's grants (the owner door's clients and the clients of the owner's visitor
        sessions), live ones first, newest first; at most 500."""
        rows = await self._pool.fetch(_OF_OWNER, owner_subject(owner_id), owner_id)
        return [_grant(row) for row in rows]

    async def of_session(self, session_id: str) -> list[OAuthGrant]:
        """The grants that stand for the visitor session `session_id`."""
        return [_grant(row) for row in await self._pool.fetch(_OF_SESSION, session_id)]

    async def revoke(self, grant_id: str) -> bool:
        """End the grant `grant_id`; whether it was live."""
        async with self._pool.acquire() as conn, conn.transaction():
            return bool(await _end(conn, "g.id = $1", grant_id))

    async def revoke_owned(self, owner_id: str, grant_id: str) -> OAuthGrant | None:
        """End the owner's grant `grant_id` (no-op when it has ended already): the grant as it
        is now, or None when the owner has no grant of that id."""
        async with self._pool.acquire() as conn, conn.transaction():
            found = await conn.fetchrow(_ONE_OWNED, owner_subject(owner_id), owner_id, grant_id)
            if found is None:
                return None
            await _end(conn, "g.id = $1", grant_id)
            row = await conn.fetchrow(_ONE_OWNED, owner_subject(owner_id), owner_id, grant_id)
        return None if row is None else _grant(row)

    async def revoke_subject(self, subject: str) -> int:
        """End every live grant that stands for `subject` (a visitor session ended); how many."""
        async with self._pool.acquire() as conn, conn.transaction():
            return await end_subject_grants(conn, subject)

    async def end_of_ended_sessions(self) -> int:
        """End the live grants whose visitor session has ended or is gone (the backstop of
        `revoke_subject`: a public session expired idle, a session ended by a path that did not
        end its grants); how many."""
        async with self._pool.acquire() as conn, conn.transaction():
            return len(await _end(conn, _OF_ENDED_SESSION))
