"""Owners (the tenants the host works for), their profile, and the bearer tokens of the owner
endpoint.

Below: asyncpg (tables `mcp_host.owners`, `mcp_host.owner_tokens`) and the data directory,
where the owner's token file lives. Above: the composition root, which makes sure at start
that the single owner and its token exist, the owner endpoint, which verifies the token on
every request, the owner door's `owner_profile_get`/`owner_profile_set` (which the CLI's
`mcp-host owner profile` calls), the host op `owner.meta` (plugins read the profile there),
and the CLI's `mcp-host owner token [--rotate]`.

The profile is the owner's name, email address and IANA timezone, each unset (None) until the
owner sets it. `check_profile` is the one rule for a value: a one-line name of at most
`NAME_MAX_CHARS`, one plain address by the plugin kit's own `is_email` (so an address the
owner could set is never one a plugin then refuses), a zone name `zoneinfo` knows.

An owner has at most one live token; issuing one revokes the others (rotation) and ends every
console session of the owner in the same transaction (`mcp_host.console_sessions`, which
`owner_console` writes: each was signed in with a token that no longer works), so a cookie of
the old token is refused on every replica at once. The same transaction ends the OAuth grants
of the owner door's clients, through the `on_token_rotated` hook the composition root wires
(the grants' tables belong to `oauth`, a layer above). Only the token's sha256 digest is stored.
The token file `<data_dir>/owner-token` is created with mode 0600 and replaced atomically.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import zoneinfo
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import anyio.to_thread
from pydantic import BaseModel, ConfigDict

from mcp_host.errors import InternalError, InvalidArguments
from mcp_host.plugins import shown, text_problem
from mcp_host_kit.addresses import is_email

if TYPE_CHECKING:
    import asyncpg

    from mcp_host.store import PgConnection, PgPool

__all__ = [
    "EMAIL_MAX_CHARS",
    "NAME_MAX_CHARS",
    "OWNER_TOKEN_FILE",
    "PROFILE_FIELDS",
    "TIMEZONE_MAX_CHARS",
    "Owner",
    "OwnerError",
    "OwnerStore",
    "ProfileField",
    "check_profile",
    "ensure_owner_token",
    "write_owner_token_file",
]

_logger = logging.getLogger("mcp_host.access.owners")

OWNER_TOKEN_FILE = "owner-token"
_TOKEN_MAX_CHARS = 256
_OWNER_COLUMNS = "id, name, email, timezone, created_at"

ProfileField = Literal["name", "email", "timezone"]
PROFILE_FIELDS: tuple[ProfileField, ...] = get_args(ProfileField)
# The same bounds are CHECK constraints of mcp_host.owners (migration 009), the backstop.
NAME_MAX_CHARS = 128
EMAIL_MAX_CHARS = 254  # RFC 5321's longest forward path, less its angle brackets
TIMEZONE_MAX_CHARS = 64
# Names zoneinfo finds on a system that are not zones of the IANA database.
_NOT_IANA = frozenset({"localtime", "posixrules", "Factory"})


class OwnerError(InternalError):
    """The owners table is not what this call expects (an unknown owner, several owners)."""


class Owner(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str | None
    email: str | None
    timezone: str | None
    created_at: datetime

    def profile(self) -> dict[str, str | None]:
        """The owner's profile: `{name, email, timezone}`, None where unset."""
        return {field: getattr(self, field) for field in PROFILE_FIELDS}


class OwnerStore:
    """Owners and owner tokens in Postgres."""

    def __init__(
        self,
        pool: PgPool,
        *,
        on_profile_set: Callable[[str], None] | None = None,
        on_token_rotated: Callable[[PgConnection, str], Awaitable[object]] | None = None,
    ) -> None:
        """`on_profile_set(owner_id)`: after each profile write here (the rules' cached timezone
        is dropped at once on this replica, `store.RuleStore.forget`). `on_token_rotated(conn,
        owner_id)`: inside `issue_token`'s transaction, on its connection, so what it ends
        commits with the rotation or not at all (the composition root ends the owner door's
        OAuth grants there: `oauth.end_owner_grants`, a layer above this one)."""
        self._pool = pool
        self._on_profile_set = on_profile_set
        self._on_token_rotated = on_token_rotated

    async def ensure_single_owner(self) -> Owner:
        """The install's one owner, created on first call; safe when replicas start at once.

        Raises `OwnerError` if the database holds several owners.
        """
        select = f"SELECT {_OWNER_COLUMNS} FROM mcp_host.owners ORDER BY created_at, id LIMIT 2"
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(select)
            if not rows:
                # Creators queue on this lock; the next in line sees the first one's owner.
                await conn.execute("LOCK TABLE mcp_host.owners IN SHARE ROW EXCLUSIVE MODE")
                rows = await conn.fetch(select)
            if not rows:
                row = await conn.fetchrow(
                    f"INSERT INTO mcp_host.owners (id) VALUES ($1) RETURNING {_OWNER_COLUMNS}",
                    secrets.token_hex(8),
                )
                assert row is not None  # INSERT … RETURNING of one row
                _logger.info("created the owner %s", row["id"])
                return _owner_from_row(row)
        if len(rows) > 1:
            raise OwnerError("the database holds several owners; this is not a single-owner install")
        return _owner_from_row(rows[0])

    async def issue_token(self, owner_id: str) -> str:
        """A new token for `owner_id` (rotation): every earlier token of the owner is revoked,
        every console session of the owner ended, and `on_token_rotated` told (the composition
        root ends there every OAuth grant the owner made at the owner door), all in one
        transaction.

        Raises `OwnerError` for an unknown owner.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await _lock_owner(conn, owner_id)
            await conn.execute(
                "UPDATE mcp_host.owner_tokens SET revoked_at = now() WHERE owner_id = $1 AND revoked_at IS NULL",
                owner_id,
            )
            # A sign-in racing this one either committed its row before the owner row's lock
            # was granted (its foreign key holds a share lock on that row), so this sees it, or
            # inserts after the commit and then finds its token revoked (owner_console's sign-in
            # checks the token again once its session is stored).
            ended = await conn.execute("DELETE FROM mcp_host.console_sessions WHERE owner_id = $1", owner_id)
            # What the old token let in goes with it: a client let in at the owner door by
            # whoever held it (`oauth.end_owner_grants`, handed over by the composition root).
            if self._on_token_rotated is not None:
                await self._on_token_rotated(conn, owner_id)
            token = await _insert_token(conn, owner_id)
        _logger.info("the owner token of %s was rotated; %s console session(s) ended", owner_id, ended.split()[-1])
        return token

    async def issue_first_token(self, owner_id: str, *, persist: Callable[[str], Awaitable[None]]) -> str | None:
        """Issue a token only if `owner_id` has no live one; None if it has.

        `persist` receives the new token before the transaction commits, so two replicas that
        start at once cannot both issue one; if `persist` raises, no token is issued.
        Raises `OwnerError` for an unknown owner.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await _lock_owner(conn, owner_id)
            live = await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM mcp_host.owner_tokens WHERE owner_id = $1 AND revoked_at IS NULL)",
                owner_id,
            )
            if live:
                return None
            token = await _insert_token(conn, owner_id)
            await persist(token)
            return token

    async def get(self, owner_id: str) -> Owner | None:
        """The owner `owner_id`, or None."""
        row = await self._pool.fetchrow(f"SELECT {_OWNER_COLUMNS} FROM mcp_host.owners WHERE id = $1", owner_id)
        return None if row is None else _owner_from_row(row)

    async def set_profile(self, owner_id: str, changes: Mapping[str, Any]) -> Owner:
        """Set the profile fields in `changes` (None or "" unsets one); the others are kept.

        Raises `InvalidArguments` for an unknown field or a value `check_profile` refuses
        (nothing is written then), `OwnerError` for an unknown owner.
        """
        checked = check_profile(changes)
        if not checked:
            owner = await self.get(owner_id)
        else:
            # Column names come from PROFILE_FIELDS only (check_profile refused any other key).
            assignments = ", ".join(f"{field} = ${n}" for n, field in enumerate(checked, start=2))
            try:
                owner_row = await self._pool.fetchrow(
                    f"UPDATE mcp_host.owners SET {assignments} WHERE id = $1 RETURNING {_OWNER_COLUMNS}",
                    owner_id,
                    *checked.values(),
                )
            finally:
                if self._on_profile_set is not None:
                    self._on_profile_set(owner_id)
            owner = None if owner_row is None else _owner_from_row(owner_row)
        if owner is None:
            raise OwnerError(f"no owner {owner_id!r}")
        return owner

    async def verify_token(self, token: str) -> Owner | None:
        """The owner whose live token this is; None otherwise.

        The lookup is by sha256 digest, so timing reveals nothing about a stored token.
        """
        if not token or len(token) > _TOKEN_MAX_CHARS or not token.isascii():
            return None
        row = await self._pool.fetchrow(
            "SELECT o.id, o.name, o.email, o.timezone, o.created_at "
            "FROM mcp_host.owner_tokens t JOIN mcp_host.owners o ON o.id = t.owner_id "
            "WHERE t.token_hash = $1 AND t.revoked_at IS NULL",
            _digest(token),
        )
        return None if row is None else _owner_from_row(row)


def check_profile(changes: Mapping[str, Any]) -> dict[ProfileField, str | None]:
    """`changes` as the values to store: each stripped, "" as None (unset).

    Raises `InvalidArguments` naming the first field that is unknown or refused: a name that
    is longer than `NAME_MAX_CHARS` or holds a control, bidi or invisible character; an email
    that is not one plain `local@domain` address; a timezone that is not an IANA zone name.
    """
    checked: dict[ProfileField, str | None] = {}
    for key, value in changes.items():
        field = next((f for f in PROFILE_FIELDS if f == key), None)
        if field is None:
            raise InvalidArguments(f"{shown(key)} is not a profile field ({', '.join(PROFILE_FIELDS)})")
        if value is not None and not isinstance(value, str):
            raise InvalidArguments(f"{field}: must be a string or null")
        text = (value or "").strip()
        checked[field] = _PROFILE_CHECKS[field](text) if text else None
    return checked


def _check_name(name: str) -> str:
    problem = text_problem(name, "name", multiline=False)  # names the field and the code point, never the text
    if problem is not None:
        raise InvalidArguments(problem)
    if len(name) > NAME_MAX_CHARS:
        raise InvalidArguments(f"name: at most {NAME_MAX_CHARS} characters, not {len(name)}")
    return name


def _check_email(email: str) -> str:
    if len(email) > EMAIL_MAX_CHARS or not is_email(email):
        raise InvalidArguments(f"email: {shown(email)} is not one plain address such as ada@example.com")
    return email


def _check_timezone(name: str) -> str:
    if len(name) > TIMEZONE_MAX_CHARS or name not in _iana_zones():
        raise InvalidArguments(
            f"timezone: {shown(name)} is not an IANA zone name such as Europe/Berlin, America/New_York or UTC"
        )
    return name


@cache
def _iana_zones() -> frozenset[str]:
    # Read once (about 15 ms: every zone file's header); zones change with the OS's tzdata.
    return frozenset(zoneinfo.available_timezones() - _NOT_IANA)


_PROFILE_CHECKS: dict[ProfileField, Callable[[str], str]] = {
    "name": _check_name,
    "email": _check_email,
    "timezone": _check_timezone,
}


def write_owner_token_file(data_dir: Path, token: str) -> Path:
    """Write `token` to `<data_dir>/owner-token`, created with mode 0600; return the path.

    The file is written under a temporary name and renamed over the old one, so a reader
    sees the old token or the new one, never a torn file or a wider mode.
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / OWNER_TOKEN_FILE
    tmp = data_dir / f".{OWNER_TOKEN_FILE}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(token + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


async def ensure_owner_token(store: OwnerStore, owner: Owner, data_dir: Path) -> Path | None:
    """Make sure the owner can find a working token in `<data_dir>/owner-token`.

    A file holding a live token of `owner` is left alone. When the owner has no live token,
    one is issued and written. When the owner has a live token but the file is missing or
    stale (another replica or `mcp-host owner token --rotate` issued it), nothing is rotated
    behind the owner's back: a warning is logged and None returned.
    """
    path = data_dir / OWNER_TOKEN_FILE
    existing = await anyio.to_thread.run_sync(_read_token_file, path)
    if existing is not None:
        holder = await store.verify_token(existing)
        if holder is not None and holder.id == owner.id:
            return path

    async def persist(token: str) -> None:
        await anyio.to_thread.run_sync(write_owner_token_file, data_dir, token)

    if await store.issue_first_token(owner.id, persist=persist) is not None:
        _logger.info("owner token written to %s", path)
        return path
    _logger.warning(
        "the owner has a live token but %s is %s; run `mcp-host owner token --rotate` for a new one",
        path,
        "missing" if existing is None else "stale",
    )
    return None


def _read_token_file(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


async def _lock_owner(conn: PgConnection, owner_id: str) -> None:
    found = await conn.fetchval("SELECT 1 FROM mcp_host.owners WHERE id = $1 FOR UPDATE", owner_id)
    if found is None:
        raise OwnerError(f"no owner {owner_id!r}")


async def _insert_token(conn: PgConnection, owner_id: str) -> str:
    token = secrets.token_urlsafe(32)
    await conn.execute(
        "INSERT INTO mcp_host.owner_tokens (owner_id, token_hash) VALUES ($1, $2)",
        owner_id,
        _digest(token),
    )
    return token


def _owner_from_row(row: asyncpg.Record) -> Owner:
    return Owner(
        id=row["id"],
        name=row["name"],
        email=row["email"],
        timezone=row["timezone"],
        created_at=row["created_at"],
    )
