"""Console sessions: the cookie a browser gets for the owner token, kept in PostgreSQL.

Above: `app` (sign-in makes one, every request reads one, sign-out ends one). Below:
`mcp_host.store`'s pool (migration 014, `mcp_host.console_sessions`).

The cookie's value is 32 random bytes (URL-safe base64); only its sha256 is stored, with the
owner it signs in and an expiry. Every replica reads the same rows, so a console request may
reach any of them, and signing out deletes the row: the cookie is refused everywhere at once.
`MemoryConsoleSessions` is the in-memory twin for unit tests of the console's logic.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from starlette.requests import Request

from mcp_host.store import PgPool

from .guard import COOKIE_NAME

__all__ = [
    "COOKIE_MAX_CHARS",
    "ConsoleSessions",
    "MemoryConsoleSessions",
    "PostgresConsoleSessions",
    "cookie_owner",
    "new_cookie",
]

COOKIE_MAX_CHARS = 64
"""Longer cookie values are refused before any lookup (ours are 43 characters)."""


def new_cookie() -> str:
    return secrets.token_urlsafe(32)


def _digest(cookie: str) -> bytes | None:
    if not cookie or len(cookie) > COOKIE_MAX_CHARS or not cookie.isascii():
        return None
    return hashlib.sha256(cookie.encode("ascii")).digest()


class ConsoleSessions(Protocol):
    """Where console sessions live (PostgreSQL; in memory for unit tests)."""

    async def open(self, owner_id: str) -> str:
        """A new session of `owner_id`: the cookie's value (the only copy of it)."""
        ...

    async def owner_of(self, cookie: str) -> str | None:
        """The owner whose live, unexpired session this cookie is; None otherwise."""
        ...

    async def end(self, cookie: str) -> bool:
        """End the session (sign-out); False when there was none."""
        ...


class PostgresConsoleSessions:
    """Console sessions in `mcp_host.console_sessions`, shared by every replica."""

    def __init__(self, pool: PgPool, ttl: timedelta) -> None:
        self._pool = pool
        self._ttl = ttl

    async def open(self, owner_id: str) -> str:
        cookie = new_cookie()
        async with self._pool.acquire() as conn, conn.transaction():
            # Sign-ins are rare: sweeping expired rows here keeps the table small.
            await conn.execute("DELETE FROM mcp_host.console_sessions WHERE expires_at < now()")
            await conn.execute(
                "INSERT INTO mcp_host.console_sessions (cookie_sha256, owner_id, expires_at) "
                "VALUES ($1, $2, now() + $3::interval)",
                _digest(cookie),
                owner_id,
                self._ttl,
            )
        return cookie

    async def owner_of(self, cookie: str) -> str | None:
        digest = _digest(cookie)
        if digest is None:
            return None
        owner: str | None = await self._pool.fetchval(
            "SELECT owner_id FROM mcp_host.console_sessions WHERE cookie_sha256 = $1 AND expires_at > now()",
            digest,
        )
        return owner

    async def end(self, cookie: str) -> bool:
        digest = _digest(cookie)
        if digest is None:
            return False
        gone = await self._pool.fetchval(
            "DELETE FROM mcp_host.console_sessions WHERE cookie_sha256 = $1 RETURNING 1", digest
        )
        return gone is not None


class MemoryConsoleSessions:
    """The in-memory twin: the same contract, a dict of digests, a clock the test moves."""

    def __init__(self, ttl: timedelta, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._ttl = ttl
        self._clock = clock
        self._rows: dict[bytes, tuple[str, datetime]] = {}

    @property
    def stored(self) -> list[bytes]:
        """The stored digests (a test checks no cookie value is kept)."""
        return list(self._rows)

    async def open(self, owner_id: str) -> str:
        cookie = new_cookie()
        digest = _digest(cookie)
        assert digest is not None
        self._rows[digest] = (owner_id, self._clock() + self._ttl)
        return cookie

    async def owner_of(self, cookie: str) -> str | None:
        digest = _digest(cookie)
        row = self._rows.get(digest) if digest is not None else None
        if row is None or row[1] <= self._clock():
            return None
        return row[0]

    async def end(self, cookie: str) -> bool:
        digest = _digest(cookie)
        return digest is not None and self._rows.pop(digest, None) is not None


async def cookie_owner(sessions: ConsoleSessions, request: Request) -> str | None:
    """The owner whose live console session `request`'s cookie is; None without one (the front
    desk's owner sign-in reads it: a browser sends the cookie only under `COOKIE_PATH`)."""
    return await sessions.owner_of(request.cookies.get(COOKIE_NAME, ""))
