"""The host's sign-ins to remote plugins' servers, in PostgreSQL (table
`mcp_host.remote_sign_ins`, migration 021): per plugin, the client registration and the tokens
the server's authorization server gave the host, sealed with the host key, and whether the
server now wants the owner to sign in again.

Above: `children.remote_sign_in` (the SDK's `TokenStorage` over these rows, and the owner's
connect flow). Below: asyncpg and `secrets_box.SecretBox`.

Values go in and out as JSON objects (the SDK's `OAuthClientInformationFull` and `OAuthToken`
dumped); this module knows nothing of OAuth beyond that a token has an `expires_in`, an
optional `refresh_token`, and an access token. A sealed value is bound to its plugin and column,
so a row's tokens copied to another plugin's row do not open. Every replica reads the same row:
a token one replica refreshed is the one the next start anywhere uses.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from .secrets_box import SealError, SecretBox

if TYPE_CHECKING:
    from .database import PgPool

__all__ = ["SignInRecord", "SignInState", "SignInStore"]

SignInState = Literal["connected", "expired", "needs_sign_in"]
"""What the catalogue shows of a remote plugin's sign-in: `connected` (a token that works or
refreshes), `expired` (a token past its expiry with no refresh token), `needs_sign_in` (the
server asked, and the host holds no token it accepts)."""


@dataclass(frozen=True)
class SignInRecord:
    """One plugin's row, opened."""

    client: dict[str, Any] | None
    tokens: dict[str, Any] | None
    expires_at: float | None
    """When the access token expires (epoch seconds); None: it did not say."""
    metadata: dict[str, Any]
    needs_sign_in: str | None

    def state(self, now: float) -> SignInState:
        held = self.tokens is not None
        return _state(held, self.expires_at, held and bool(self.tokens and self.tokens.get("refresh_token")), now)


def _state(held: bool, expires_at: float | None, refreshable: bool, now: float) -> SignInState:
    if not held:
        return "needs_sign_in"
    if expires_at is not None and expires_at <= now and not refreshable:
        return "expired"
    return "connected"


def _bound(plugin_id: str, column: str) -> str:
    return f"remote-sign-in/{plugin_id}/{column}"


class SignInStore:
    """The rows of `mcp_host.remote_sign_ins`, their secrets sealed under `box`."""

    def __init__(self, pool: PgPool, box: SecretBox) -> None:
        self._pool = pool
        self._box = box

    async def read(self, plugin_id: str) -> SignInRecord | None:
        """`plugin_id`'s row, opened; None for none. A sealed value that does not open (the host
        key changed) reads as absent: the owner signs in again."""
        row = await self._pool.fetchrow(
            "SELECT client, tokens, expires_at, metadata, needs_sign_in FROM mcp_host.remote_sign_ins"
            " WHERE plugin_id = $1",
            plugin_id,
        )
        if row is None:
            return None
        expires: datetime | None = row["expires_at"]
        return SignInRecord(
            client=self._open(row["client"], plugin_id, "client"),
            tokens=self._open(row["tokens"], plugin_id, "tokens"),
            expires_at=expires.timestamp() if expires is not None else None,
            metadata=dict(row["metadata"]),
            needs_sign_in=row["needs_sign_in"],
        )

    async def states(self) -> dict[str, SignInState]:
        """Every plugin with a row, and its state (tokens are not opened)."""
        rows = await self._pool.fetch(
            "SELECT plugin_id, tokens IS NOT NULL AS held, expires_at, refreshable FROM mcp_host.remote_sign_ins"
        )
        now = time.time()
        return {
            row["plugin_id"]: _state(
                row["held"], row["expires_at"].timestamp() if row["expires_at"] else None, row["refreshable"], now
            )
            for row in rows
        }

    async def set_client(self, plugin_id: str, client: dict[str, Any]) -> None:
        await self._pool.execute(
            "INSERT INTO mcp_host.remote_sign_ins (plugin_id, client) VALUES ($1, $2)"
            " ON CONFLICT (plugin_id) DO UPDATE SET client = EXCLUDED.client, updated_at = now()",
            plugin_id,
            self._box.seal(client, bound_to=_bound(plugin_id, "client")),
        )

    async def set_tokens(self, plugin_id: str, tokens: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        """Keep `tokens` (the server's token answer) for `plugin_id`, with `metadata` when given;
        the plugin no longer needs a sign-in."""
        expires_in = tokens.get("expires_in")
        expires_at = datetime.fromtimestamp(time.time() + int(expires_in), UTC) if expires_in is not None else None
        await self._pool.execute(
            "INSERT INTO mcp_host.remote_sign_ins (plugin_id, tokens, expires_at, refreshable, metadata)"
            " VALUES ($1, $2, $3, $4, COALESCE($5::jsonb, '{}'))"
            " ON CONFLICT (plugin_id) DO UPDATE SET tokens = EXCLUDED.tokens, expires_at = EXCLUDED.expires_at,"
            " refreshable = EXCLUDED.refreshable, needs_sign_in = NULL, updated_at = now(),"
            " metadata = COALESCE($5::jsonb, mcp_host.remote_sign_ins.metadata)",
            plugin_id,
            self._box.seal(tokens, bound_to=_bound(plugin_id, "tokens")),
            expires_at,
            bool(tokens.get("refresh_token")),
            metadata,
        )

    async def need_sign_in(self, plugin_id: str, cause: str) -> None:
        """The server wants the owner to sign in: the tokens go (the registration stays)."""
        await self._pool.execute(
            "INSERT INTO mcp_host.remote_sign_ins (plugin_id, needs_sign_in) VALUES ($1, $2)"
            " ON CONFLICT (plugin_id) DO UPDATE SET tokens = NULL, expires_at = NULL, refreshable = false,"
            " needs_sign_in = EXCLUDED.needs_sign_in, updated_at = now()",
            plugin_id,
            cause,
        )

    @asynccontextmanager
    async def refreshing(self, plugin_id: str) -> AsyncIterator[None]:
        """Held while one holder of `plugin_id`'s sign-in reads and refreshes its token: on every
        replica, the others wait, then read the refreshed token instead of refreshing with the
        rotated one (which the server refuses, and may answer by revoking the whole grant). A
        session advisory lock on a connection of its own, so it spans the refresh request."""
        key = _bound(plugin_id, "refresh")
        async with self._pool.acquire() as conn:
            await conn.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", key)
            try:
                yield
            finally:
                await conn.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)

    async def forget(self, plugin_id: str) -> SignInRecord | None:
        """Delete `plugin_id`'s row; the row as it was (to revoke its tokens), None for none."""
        record = await self.read(plugin_id)
        await self._pool.execute("DELETE FROM mcp_host.remote_sign_ins WHERE plugin_id = $1", plugin_id)
        return record

    async def forget_keyed(self, *, prefix: str = "", suffix: str = "") -> None:
        """Delete every row whose key starts with `prefix` and ends with `suffix` (a visitor
        session's own sign-ins when it ends; a plugin's visitors' when it goes)."""
        await self._pool.execute(
            "DELETE FROM mcp_host.remote_sign_ins WHERE left(plugin_id, $2) = $1 AND right(plugin_id, $4) = $3",
            prefix,
            len(prefix),
            suffix,
            len(suffix),
        )

    def _open(self, sealed: str | None, plugin_id: str, column: str) -> dict[str, Any] | None:
        if sealed is None:
            return None
        try:
            value = self._box.open(sealed, bound_to=_bound(plugin_id, column))
        except SealError:
            return None
        return value if isinstance(value, dict) else None
