"""Access codes and API keys: the credentials a visitor opens a non-public session with.

Above: `access` (the owner's `code_create` / `api_key_create` / … and the session opener).
Below: asyncpg (tables `mcp_host.access_codes`, `mcp_host.api_keys`, migration 003), `config`
(code config at scope `code`, key config at scope `key`, scope_id = the credential's id) and
`roles` (a credential opens sessions under one role).

A credential has a secret text, shown once when it is created, of which only the sha256
digest is stored, and a public id that is the session's subject id and its config scope id:
an access code is 22 URL-safe characters (128 bits) with id `c_` + 16 hex; an API key is
`mcphk_` + 43 URL-safe characters (256 bits) with id `k_` + 16 hex. A code may expire and may
have a number of uses; redeeming one is one UPDATE that counts the use only while the code is
live, so concurrent redemptions never pass `max_uses`. Both are revoked, never deleted.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

import asyncpg
from pydantic import BaseModel, ConfigDict

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import Plugin, Registry
from mcp_host.store import ConfigBackend

from .roles import CapabilityConfig, RoleBook, check_capability_config, write_capability_config

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = [
    "AccessCode",
    "ApiKey",
    "CredentialBook",
    "Redeemed",
    "is_code_id",
    "is_key_id",
    "looks_like_api_key",
]

_CODE_ID = re.compile(r"\Ac_[0-9a-f]{16}\Z")
_KEY_ID = re.compile(r"\Ak_[0-9a-f]{16}\Z")
_KEY_PREFIX = "mcphk_"
# Issued texts are 22 (code) and 49 (key) characters; anything far longer is not one of ours.
_TEXT_MAX_CHARS = 256
_INT4_MAX = 2**31 - 1

CodeStatus = Literal["live", "revoked", "expired", "used_up"]
KeyStatus = Literal["live", "revoked"]


def is_code_id(value: object) -> bool:
    return isinstance(value, str) and _CODE_ID.match(value) is not None


def is_key_id(value: object) -> bool:
    return isinstance(value, str) and _KEY_ID.match(value) is not None


def looks_like_api_key(text: str) -> bool:
    """Whether `text` has an API key's prefix (what a key is, only `verify_api_key` says)."""
    return text.startswith(_KEY_PREFIX)


def _digest(text: str) -> bytes | None:
    """sha256 of a plausible credential text; None for a value that cannot be one of ours."""
    if not isinstance(text, str) or not text or len(text) > _TEXT_MAX_CHARS or not text.isascii():
        return None
    return hashlib.sha256(text.encode("ascii")).digest()


class AccessCode(BaseModel):
    """An access code as the owner sees it (never its text)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    role: str
    expires_at: datetime | None
    max_uses: int | None
    uses: int
    status: CodeStatus
    created_at: datetime
    revoked_at: datetime | None


class ApiKey(BaseModel):
    """An API key as the owner sees it (never its text)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    role: str
    status: KeyStatus
    created_at: datetime
    revoked_at: datetime | None


class Redeemed(BaseModel):
    """A credential that was accepted: its id (the session's subject id) and its role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    role: str


_CODE_COLUMNS = """id, role_id AS role, expires_at, max_uses, uses, created_at, revoked_at,
    CASE WHEN revoked_at IS NOT NULL THEN 'revoked'
         WHEN expires_at IS NOT NULL AND expires_at <= now() THEN 'expired'
         WHEN max_uses IS NOT NULL AND uses >= max_uses THEN 'used_up'
         ELSE 'live' END AS status"""
_KEY_COLUMNS = """id, role_id AS role, created_at, revoked_at,
    CASE WHEN revoked_at IS NOT NULL THEN 'revoked' ELSE 'live' END AS status"""


class CredentialBook:
    """Access codes and API keys of every owner, in Postgres."""

    def __init__(self, pool: PgPool, config: ConfigBackend, plugins: Sequence[Plugin], roles: RoleBook) -> None:
        self._pool = pool
        self._config = config
        # live when `plugins` is the registry: a plugin installed while the host runs is known
        self._plugins: Mapping[str, Plugin] = (
            plugins.by_id if isinstance(plugins, Registry) else {p.manifest.id: p for p in plugins}
        )
        self._roles = roles

    # -- access codes -----------------------------------------------------------------------

    async def create_code(
        self,
        owner_id: str,
        role: str,
        config: CapabilityConfig | None = None,
        *,
        expires_at: datetime | None = None,
        max_uses: int | None = None,
    ) -> tuple[str, AccessCode]:
        """A new code for `role`; return its text (shown once, never stored) and the code.

        Raises `InvalidArguments` naming the field, capability or key at fault (an unknown
        role, an `expires_at` without a time zone or in the past, a `max_uses` below 1, config
        values that do not fit `code_config`); then nothing is stored.
        """
        _check_expiry(expires_at)
        if max_uses is not None and (type(max_uses) is not int or not 1 <= max_uses <= _INT4_MAX):
            raise InvalidArguments(f"max_uses: must be an integer from 1 to {_INT4_MAX}, got {max_uses!r:.40}")
        checked = check_capability_config(self._plugins, "code", config or {})
        await self._require_role(owner_id, role)
        code_id, text = f"c_{secrets.token_hex(8)}", secrets.token_urlsafe(16)
        # Config first: once the row exists the code can be redeemed, and its limits must hold.
        await write_capability_config(self._config, self._plugins, owner_id, "code", code_id, checked)
        row = await self._insert(
            f"""
            INSERT INTO mcp_host.access_codes (id, owner_id, role_id, code_hash, expires_at, max_uses)
            VALUES ($1, $2, $3, $4, $5, $6) RETURNING {_CODE_COLUMNS}
            """,
            role,
            code_id,
            owner_id,
            role,
            _digest(text),
            expires_at,
            max_uses,
        )
        return text, AccessCode.model_validate(dict(row))

    async def list_codes(self, owner_id: str) -> list[AccessCode]:
        """Every code of `owner_id`, oldest first, revoked ones included."""
        rows = await self._pool.fetch(
            f"SELECT {_CODE_COLUMNS} FROM mcp_host.access_codes WHERE owner_id = $1 ORDER BY created_at, id",
            owner_id,
        )
        return [AccessCode.model_validate(dict(row)) for row in rows]

    async def code_id(self, owner_id: str, code: str) -> str | None:
        """The id of the code `code` (its text as issued, or its id), live or not; None if none."""
        by_id, digest = self._code_key(code)
        found: str | None = await self._pool.fetchval(
            "SELECT id FROM mcp_host.access_codes WHERE owner_id = $1 AND (id = $2 OR code_hash = $3)",
            owner_id,
            by_id,
            digest,
        )
        return found

    async def revoke_code(self, owner_id: str, code: str) -> str | None:
        """Revoke the code `code` (its text as issued, or its id); return its id if this call
        revoked it, None if there is no such live code."""
        by_id, digest = self._code_key(code)
        revoked: str | None = await self._pool.fetchval(
            "UPDATE mcp_host.access_codes SET revoked_at = now() "
            "WHERE owner_id = $1 AND (id = $2 OR code_hash = $3) AND revoked_at IS NULL RETURNING id",
            owner_id,
            by_id,
            digest,
        )
        return revoked

    async def redeem_code(self, owner_id: str, code: str) -> Redeemed | None:
        """Count one use of the live code `code`; None when it is unknown, revoked, expired
        or used up (the caller does not learn which)."""
        digest = _digest(code)
        if digest is None:
            return None
        # One statement: concurrent redeemers queue on the row lock and each re-checks
        # `uses < max_uses` against the committed count, so at most max_uses succeed.
        row = await self._pool.fetchrow(
            """
            UPDATE mcp_host.access_codes SET uses = uses + 1
            WHERE code_hash = $1 AND owner_id = $2 AND revoked_at IS NULL
              AND (expires_at IS NULL OR expires_at > now())
              AND (max_uses IS NULL OR uses < max_uses)
            RETURNING id, role_id AS role
            """,
            digest,
            owner_id,
        )
        return None if row is None else Redeemed.model_validate(dict(row))

    async def give_back(self, code_id: str) -> None:
        """Undo one counted use of `code_id` (its session could not be opened after all)."""
        await self._pool.execute("UPDATE mcp_host.access_codes SET uses = uses - 1 WHERE id = $1 AND uses > 0", code_id)

    # -- API keys ---------------------------------------------------------------------------

    async def create_api_key(
        self, owner_id: str, role: str, config: CapabilityConfig | None = None
    ) -> tuple[str, ApiKey]:
        """A new API key for `role`; return its text (shown once, never stored) and the key.

        Raises `InvalidArguments` as `create_code` does (config checked against `key_config`).
        """
        checked = check_capability_config(self._plugins, "key", config or {})
        await self._require_role(owner_id, role)
        key_id, text = f"k_{secrets.token_hex(8)}", _KEY_PREFIX + secrets.token_urlsafe(32)
        await write_capability_config(self._config, self._plugins, owner_id, "key", key_id, checked)
        row = await self._insert(
            f"INSERT INTO mcp_host.api_keys (id, owner_id, role_id, key_hash) VALUES ($1, $2, $3, $4) "
            f"RETURNING {_KEY_COLUMNS}",
            role,
            key_id,
            owner_id,
            role,
            _digest(text),
        )
        return text, ApiKey.model_validate(dict(row))

    async def list_api_keys(self, owner_id: str) -> list[ApiKey]:
        """Every API key of `owner_id`, oldest first, revoked ones included."""
        rows = await self._pool.fetch(
            f"SELECT {_KEY_COLUMNS} FROM mcp_host.api_keys WHERE owner_id = $1 ORDER BY created_at, id", owner_id
        )
        return [ApiKey.model_validate(dict(row)) for row in rows]

    async def revoke_api_key(self, owner_id: str, key_id: str) -> bool:
        """Revoke the key `key_id`; True if this call revoked it, False if no such live key."""
        if not is_key_id(key_id):
            return False
        status = await self._pool.execute(
            "UPDATE mcp_host.api_keys SET revoked_at = now() WHERE owner_id = $1 AND id = $2 AND revoked_at IS NULL",
            owner_id,
            key_id,
        )
        return bool(status == "UPDATE 1")

    async def verify_api_key(self, owner_id: str, key: str) -> Redeemed | None:
        """The live key whose text is `key`; None otherwise (the caller does not learn why)."""
        digest = _digest(key)
        if digest is None:
            return None
        row = await self._pool.fetchrow(
            "SELECT id, role_id AS role FROM mcp_host.api_keys "
            "WHERE key_hash = $1 AND owner_id = $2 AND revoked_at IS NULL",
            digest,
            owner_id,
        )
        return None if row is None else Redeemed.model_validate(dict(row))

    # -- shared -----------------------------------------------------------------------------

    def _code_key(self, code: str) -> tuple[str | None, bytes | None]:
        """(id, None) for a code id, (None, digest) for a code text; a code text is never
        18 characters long, so the two cannot be confused."""
        return (code, None) if is_code_id(code) else (None, _digest(code))

    async def _require_role(self, owner_id: str, role: str) -> None:
        if not await self._roles.exists(owner_id, role):
            raise InvalidArguments(f"role: no role {role!r:.80}")

    async def _insert(self, sql: str, role: str, *args: object) -> asyncpg.Record:
        try:
            row = await self._pool.fetchrow(sql, *args)
        except asyncpg.ForeignKeyViolationError:  # the role went away since `_require_role`
            raise InvalidArguments(f"role: no role {role!r:.80}") from None
        assert row is not None  # INSERT … RETURNING of one row
        return row


def _check_expiry(expires_at: datetime | None) -> None:
    if expires_at is None:
        return
    if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
        raise InvalidArguments("expires_at: must be a date and time with a time zone (ISO 8601)")
    if expires_at <= datetime.now(UTC):
        raise InvalidArguments("expires_at: is in the past")
