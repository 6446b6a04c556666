"""The 2025-11-25 protocol sessions born on any replica: what adopting one elsewhere takes.

Above: `edge.ProtocolSessions` (through its `SessionRecords` protocol, given by wiring). Below:
asyncpg and the `mcp_host.protocol_sessions` table (migration 011).

A row is keyed by the sha256 of the session id (`record_key`), so the table never holds an
id a reader could present. It lives while some replica has the session open (`touch`, every
quarter of the idle timeout) and `idle_s` after that; a DELETE of the session removes it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from .database import PgPool

__all__ = ["ProtocolSessionRecords", "SessionRecord", "record_key"]


@dataclass(frozen=True)
class SessionRecord:
    """What opening a client's protocol session again on another replica takes."""

    principal: str
    """The credential that opened it (`scope["user"]`'s client id): only that one may adopt it."""
    path: str
    initialize: dict[str, Any]
    """The initialize request's params (protocolVersion, capabilities, clientInfo)."""


def record_key(session_id: bytes) -> bytes:
    """A record's key: the sha256 of the session id (the id itself is never stored)."""
    return hashlib.sha256(session_id).digest()


class ProtocolSessionRecords:
    """`edge.SessionRecords` on the database."""

    def __init__(self, pool: PgPool, *, idle_s: float) -> None:
        self._pool = pool
        self._idle_s = idle_s

    async def record(self, key: bytes, record: SessionRecord) -> None:
        await self._pool.execute(
            "INSERT INTO mcp_host.protocol_sessions (key, principal, path, initialize) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT (key) DO UPDATE SET principal = EXCLUDED.principal, path = EXCLUDED.path,"
            " initialize = EXCLUDED.initialize, touched_at = now()",
            key,
            record.principal,
            record.path,
            record.initialize,  # the pool encodes jsonb
        )

    async def lookup(self, key: bytes) -> SessionRecord | None:
        row = await self._pool.fetchrow(
            "SELECT principal, path, initialize FROM mcp_host.protocol_sessions"
            " WHERE key = $1 AND touched_at >= now() - make_interval(secs => $2)",
            key,
            self._idle_s,
        )
        if row is None:
            return None
        initialize: Any = row["initialize"]
        if not isinstance(initialize, dict):
            return None
        return SessionRecord(principal=str(row["principal"]), path=str(row["path"]), initialize=initialize)

    async def forget(self, key: bytes) -> None:
        await self._pool.execute("DELETE FROM mcp_host.protocol_sessions WHERE key = $1", key)

    def closed(self) -> bool:
        return self._pool.is_closing()

    async def touch(self, keys: Collection[bytes]) -> None:
        async with self._pool.acquire() as conn:
            if keys:
                await conn.execute(
                    "UPDATE mcp_host.protocol_sessions SET touched_at = now() WHERE key = ANY($1::bytea[])",
                    list(keys),
                )
            await conn.execute(
                "DELETE FROM mcp_host.protocol_sessions WHERE touched_at < now() - make_interval(secs => $1)",
                self._idle_s,
            )
