"""Visitor sessions: who is talking (mode, subject, visitor), under which frozen role, and the
bearer token that proves it.

Below: asyncpg (`PostgresSessionStore`, table `mcp_host.sessions`) or a dict
(`InMemorySessionStore`, for unit tests of logic). Above: the REST handler that opens
sessions, the visitor MCP endpoint that authenticates every request, and the owner's
`sessions_list` / `session_end`.

A session id is 32 lowercase hex characters; its token is 256 bits from `secrets` (docs/security.md
E5). Only the token's sha256 digest is stored, and it is compared in constant time. A
malformed id is answered before any query, so junk never reaches the database.

Authenticating a code or API-key session also reads its credential's row (migration 003) in
the same query: a revoked credential gives `credential_revoked = True`, and so does one whose
row cannot be found (fail closed; credential rows are never deleted).

A public session expires after `public_idle_s` without a request (issue 26, defect 5): from
then on its token is refused exactly as an ended session's, and `store.retention`'s sweep marks
it ended. A request's authentication is its activity: it moves `last_seen_at` forward, written
at most once a minute per session, so a busy session costs one UPDATE a minute,
not one per request. Code and API-key sessions do not expire; the owner ends them or revokes
their credential.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio.lowlevel
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    import asyncpg

    from mcp_host.store import PgPool

__all__ = [
    "InMemorySessionStore",
    "PostgresSessionStore",
    "RoleSnapshot",
    "Session",
    "SessionMode",
    "SessionStore",
    "Subject",
    "Visitor",
    "is_session_id",
    "public_role",
]

SessionMode = Literal["public", "code", "api_key"]

_SESSION_ID = re.compile(r"[0-9a-f]{32}")
# A token is issued as 43 URL-safe characters; anything far longer is not one of ours.
_TOKEN_MAX_CHARS = 256
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s.]+(?:\.[^@\s.]+)*")
# Bidirectional overrides and isolates reorder what the owner reads (Trojan Source).
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") or ch in _BIDI_CONTROLS for ch in text)


class Visitor(BaseModel):
    """What a visitor said about themselves; unverified, shown to the owner as given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1, max_length=200)
    email: str | None = Field(default=None, max_length=320)

    @field_validator("name")
    @classmethod
    def _name_printable(cls, value: str | None) -> str | None:
        if value is not None and _has_control(value):
            raise ValueError("name contains control characters")
        return value

    @field_validator("email")
    @classmethod
    def _email_shape(cls, value: str | None) -> str | None:
        if value is not None and (_EMAIL.fullmatch(value) is None or _has_control(value)):
            raise ValueError("email is not of the form local@domain")
        return value


class Subject(BaseModel):
    """The credential a non-public session was opened with: an access code or an API key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["code", "api_key"]
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class RoleSnapshot(BaseModel):
    """The role as it was when the session opened: allowed capabilities and their role_config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    capabilities: tuple[str, ...]
    config: dict[str, dict[str, Any]]


def public_role() -> RoleSnapshot:
    """The snapshot a public session gets until roles exist: no role_granted capability."""
    return RoleSnapshot(id="public", capabilities=(), config={})


class Session(BaseModel):
    """One visitor session. `ended_at` is set once it has been ended; it never reopens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[0-9a-f]{32}$")
    owner_id: str
    mode: SessionMode
    subject: Subject | None
    visitor: Visitor | None
    role: RoleSnapshot
    created_at: datetime
    ended_at: datetime | None = None
    # The access code or API key it was opened with has been revoked since: the session
    # stays authenticated but may use nothing (the visitor door shows it no tool).
    credential_revoked: bool = False

    @model_validator(mode="after")
    def _subject_matches_mode(self) -> Session:
        _check_mode(self.mode, self.subject)
        return self


class SessionStore(Protocol):
    """Where sessions live. Every method answers "no such session" for a malformed id."""

    async def open(
        self,
        *,
        owner_id: str,
        mode: SessionMode,
        visitor: Visitor | None,
        subject: Subject | None = None,
        role: RoleSnapshot,
    ) -> tuple[Session, str]:
        """Create a live session; return it and its bearer token (shown once, never stored).

        Raises `ValueError` when `subject` does not fit `mode` (public: none; code and
        api_key: a subject of that kind).
        """
        ...

    async def authenticate(self, session_id: str, token: str) -> Session | None:
        """The live session `session_id` if `token` is its token; otherwise None.

        The session says whether its credential has been revoked (`credential_revoked`).
        """
        ...

    async def get(self, session_id: str) -> Session | None:
        """The session `session_id`, live or ended, with `credential_revoked`; None if none."""
        ...

    async def by_token(self, token: str) -> Session | None:
        """The live session whose bearer token `token` is, without its id (the one visitor URL);
        like `authenticate`, a request's activity."""
        ...

    async def live(self, session_id: str) -> Session | None:
        """The live session `session_id`, for a request whose credential was checked elsewhere
        (an OAuth grant that stands for the session); like `authenticate`, its activity."""
        ...

    async def live_of(self, owner_id: str, subject: Subject) -> Session | None:
        """The oldest live session opened with `subject` and no visitor fields (the session an
        API key uses at the one visitor URL); None when there is none."""
        ...

    async def end(self, session_id: str) -> bool:
        """End a live session; True if this call ended it, False if unknown or already ended."""
        ...

    async def list_live(self, owner_id: str, *, limit: int = 500) -> list[Session]:
        """`owner_id`'s live sessions, newest first, at most `limit`."""
        ...


def is_session_id(value: object) -> bool:
    """Whether `value` has the grammar of a session id (32 lowercase hex characters)."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None


def _check_mode(mode: str, subject: Subject | None) -> None:
    kind = None if subject is None else subject.kind
    if mode == "public" and kind is not None:
        raise ValueError("a public session has no subject")
    if mode != "public" and kind != mode:
        raise ValueError(f"a {mode} session needs a subject of kind {mode}")


def _touch_interval_s(public_idle_s: float | None) -> float:
    """How stale `last_seen_at` may get before a request writes it: a minute, or a quarter of
    the idle timeout when that is shorter (a session in use never looks idle)."""
    return 60.0 if public_idle_s is None else min(60.0, public_idle_s / 4)


def _token_hash(token: str) -> bytes | None:
    """sha256 of a plausible token; None for a value that cannot be one of ours."""
    if not isinstance(token, str) or not token or len(token) > _TOKEN_MAX_CHARS or not token.isascii():
        return None
    return hashlib.sha256(token.encode("ascii")).digest()


def _new_credentials() -> tuple[str, str, bytes]:
    token = secrets.token_urlsafe(32)
    return secrets.token_hex(16), token, hashlib.sha256(token.encode("ascii")).digest()


_COLUMNS = "id, owner_id, mode, subject, visitor, role, created_at, ended_at"
# Whether the code or key session `s` was opened with is no longer live: revoked, or gone
# (fail closed: a subject whose credential row cannot be found counts as revoked).
_REVOKED = """
    CASE s.mode
        WHEN 'code' THEN NOT EXISTS (SELECT 1 FROM mcp_host.access_codes c
            WHERE c.id = s.subject ->> 'id' AND c.owner_id = s.owner_id AND c.revoked_at IS NULL)
        WHEN 'api_key' THEN NOT EXISTS (SELECT 1 FROM mcp_host.api_keys k
            WHERE k.id = s.subject ->> 'id' AND k.owner_id = s.owner_id AND k.revoked_at IS NULL)
        ELSE false
    END AS credential_revoked"""
# Live: not ended, and not a public session idle for $idle seconds (NULL: public sessions never expire).
_LIVE = """s.ended_at IS NULL AND ({idle}::float8 IS NULL OR s.mode <> 'public'
    OR coalesce(s.last_seen_at, s.created_at) > now() - make_interval(secs => {idle}))"""


class PostgresSessionStore:
    """Sessions in `mcp_host.sessions`; they outlive the host process and are shared by replicas."""

    def __init__(
        self,
        pool: PgPool,
        *,
        on_ended: Callable[[str], None] = lambda session_id: None,
        public_idle_s: float | None = None,
    ) -> None:
        """`on_ended(session_id)`: told when `end` ends a live session on this replica (its
        per-session child instances stop; the composition root wires it). `public_idle_s`: a
        public session's idle timeout (None: public sessions never expire)."""
        self._pool = pool
        self._on_ended = on_ended
        self._idle_s = public_idle_s
        self._touch_s = _touch_interval_s(public_idle_s)

    async def open(
        self,
        *,
        owner_id: str,
        mode: SessionMode,
        visitor: Visitor | None,
        subject: Subject | None = None,
        role: RoleSnapshot,
    ) -> tuple[Session, str]:
        _check_mode(mode, subject)
        session_id, token, digest = _new_credentials()
        row = await self._pool.fetchrow(
            f"""
            INSERT INTO mcp_host.sessions (id, owner_id, token_hash, mode, subject, visitor, role)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            RETURNING {_COLUMNS}, token_hash
            """,
            session_id,
            owner_id,
            digest,
            mode,
            None if subject is None else subject.model_dump(mode="json"),
            None if visitor is None else visitor.model_dump(mode="json"),
            role.model_dump(mode="json"),
        )
        assert row is not None  # INSERT … RETURNING of one row
        return _session_from_row(row), token

    async def authenticate(self, session_id: str, token: str) -> Session | None:
        digest = _token_hash(token)
        if digest is None or not is_session_id(session_id):
            return None
        row = await self._live_row("id = $3", session_id)
        if row is None or not hmac.compare_digest(row["token_hash"], digest):
            return None
        return await self._seen(row)

    async def by_token(self, token: str) -> Session | None:
        digest = _token_hash(token)
        row = None if digest is None else await self._live_row("token_hash = $3", digest)
        return None if row is None else await self._seen(row)

    async def live(self, session_id: str) -> Session | None:
        row = await self._live_row("id = $3", session_id) if is_session_id(session_id) else None
        return None if row is None else await self._seen(row)

    async def live_of(self, owner_id: str, subject: Subject) -> Session | None:
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS}, {_REVOKED} FROM mcp_host.sessions s"
            " WHERE owner_id = $1 AND subject ->> 'id' = $2 AND subject ->> 'kind' = $3 AND visitor IS NULL"
            " AND ended_at IS NULL ORDER BY created_at, id LIMIT 1",
            owner_id,
            subject.id,
            subject.kind,
        )
        return None if row is None else _session_from_row(row)

    async def _live_row(self, where: str, key: object) -> asyncpg.Record | None:
        """The live session's row where `where` (on `$3`, `key`) holds, with its token's digest
        and whether its activity is stale."""
        return await self._pool.fetchrow(
            f"SELECT {_COLUMNS}, token_hash, {_REVOKED},"
            " coalesce(s.last_seen_at, s.created_at) <= now() - make_interval(secs => $2) AS stale"
            f" FROM mcp_host.sessions s WHERE {where} AND {_LIVE.format(idle='$1')}",
            self._idle_s,
            self._touch_s,
            key,
        )

    async def _seen(self, row: asyncpg.Record) -> Session:
        """The session of `row`, its activity written when stale."""
        if row["stale"]:
            await self._pool.execute(
                "UPDATE mcp_host.sessions SET last_seen_at = now() WHERE id = $1 AND ended_at IS NULL", row["id"]
            )
        return _session_from_row(row)

    async def get(self, session_id: str) -> Session | None:
        if not is_session_id(session_id):
            return None
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS}, {_REVOKED} FROM mcp_host.sessions s WHERE id = $1", session_id
        )
        return None if row is None else _session_from_row(row)

    async def end(self, session_id: str) -> bool:
        if not is_session_id(session_id):
            return False
        status = await self._pool.execute(
            "UPDATE mcp_host.sessions SET ended_at = now() WHERE id = $1 AND ended_at IS NULL",
            session_id,
        )
        if status != "UPDATE 1":
            return False
        self._on_ended(session_id)
        return True

    async def list_live(self, owner_id: str, *, limit: int = 500) -> list[Session]:
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS}, {_REVOKED} FROM mcp_host.sessions s "
            f"WHERE owner_id = $1 AND {_LIVE.format(idle='$3')} ORDER BY created_at DESC, id LIMIT $2",
            owner_id,
            limit,
            self._idle_s,
        )
        return [_session_from_row(row) for row in rows]


def _session_from_row(row: asyncpg.Record) -> Session:
    return Session(
        id=row["id"],
        owner_id=row["owner_id"],
        mode=row["mode"],
        subject=None if row["subject"] is None else Subject.model_validate(row["subject"]),
        visitor=None if row["visitor"] is None else Visitor.model_validate(row["visitor"]),
        role=RoleSnapshot.model_validate(row["role"]),
        created_at=row["created_at"],
        ended_at=row["ended_at"],
        credential_revoked=row.get("credential_revoked", False),
    )


@dataclass
class _Entry:
    session: Session
    token_hash: bytes
    seen: datetime


class InMemorySessionStore:
    """Sessions in a dict, for unit tests of logic; same contract as `PostgresSessionStore`."""

    def __init__(
        self,
        *,
        on_ended: Callable[[str], None] = lambda session_id: None,
        public_idle_s: float | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._on_ended = on_ended
        self._idle = None if public_idle_s is None else timedelta(seconds=public_idle_s)
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        # The twin of a credential row's `revoked_at`: (owner id, subject) revoked.
        self._revoked: set[tuple[str, Subject]] = set()

    def revoke_subject(self, owner_id: str, subject: Subject) -> None:
        """Mark `subject`'s credential revoked, as revoking its row does in Postgres."""
        self._revoked.add((owner_id, subject))

    def _as_stored(self, session: Session) -> Session:
        if session.subject is None or (session.owner_id, session.subject) not in self._revoked:
            return session
        return session.model_copy(update={"credential_revoked": True})

    async def open(
        self,
        *,
        owner_id: str,
        mode: SessionMode,
        visitor: Visitor | None,
        subject: Subject | None = None,
        role: RoleSnapshot,
    ) -> tuple[Session, str]:
        await anyio.lowlevel.checkpoint()
        _check_mode(mode, subject)
        session_id, token, digest = _new_credentials()
        # Through JSON, as Postgres stores it: the snapshot shares nothing with the caller's
        # objects, and a value jsonb could not hold fails here too.
        session = Session.model_validate(
            {
                "id": session_id,
                "owner_id": owner_id,
                "mode": mode,
                "subject": None if subject is None else subject.model_dump(mode="json"),
                "visitor": None if visitor is None else visitor.model_dump(mode="json"),
                "role": json.loads(json.dumps(role.model_dump(mode="json"))),
                "created_at": self._clock(),
            }
        )
        self._entries[session_id] = _Entry(session, digest, session.created_at)
        return session, token

    def _live(self, entry: _Entry) -> bool:
        if entry.session.ended_at is not None:
            return False
        return self._idle is None or entry.session.mode != "public" or entry.seen > self._clock() - self._idle

    async def authenticate(self, session_id: str, token: str) -> Session | None:
        await anyio.lowlevel.checkpoint()
        digest = _token_hash(token)
        if digest is None or not is_session_id(session_id):
            return None
        entry = self._entries.get(session_id)
        if entry is None or not self._live(entry) or not hmac.compare_digest(entry.token_hash, digest):
            return None
        entry.seen = self._clock()
        return self._as_stored(entry.session)

    async def by_token(self, token: str) -> Session | None:
        await anyio.lowlevel.checkpoint()
        digest = _token_hash(token)
        found = [e for e in self._entries.values() if digest is not None and hmac.compare_digest(e.token_hash, digest)]
        return await self.live(found[0].session.id) if found else None

    async def live(self, session_id: str) -> Session | None:
        await anyio.lowlevel.checkpoint()
        entry = self._entries.get(session_id) if is_session_id(session_id) else None
        if entry is None or not self._live(entry):
            return None
        entry.seen = self._clock()
        return self._as_stored(entry.session)

    async def live_of(self, owner_id: str, subject: Subject) -> Session | None:
        await anyio.lowlevel.checkpoint()
        live = [
            e.session
            for e in self._entries.values()
            if e.session.owner_id == owner_id
            and e.session.subject == subject
            and e.session.visitor is None
            and e.session.ended_at is None
        ]
        return self._as_stored(min(live, key=lambda s: (s.created_at, s.id))) if live else None

    async def get(self, session_id: str) -> Session | None:
        await anyio.lowlevel.checkpoint()
        entry = self._entries.get(session_id) if is_session_id(session_id) else None
        return None if entry is None else self._as_stored(entry.session)

    async def end(self, session_id: str) -> bool:
        await anyio.lowlevel.checkpoint()
        entry = self._entries.get(session_id) if is_session_id(session_id) else None
        if entry is None or entry.session.ended_at is not None:
            return False
        entry.session = entry.session.model_copy(update={"ended_at": datetime.now(UTC)})
        self._on_ended(session_id)
        return True

    async def list_live(self, owner_id: str, *, limit: int = 500) -> list[Session]:
        await anyio.lowlevel.checkpoint()
        live = [
            self._as_stored(e.session)
            for e in self._entries.values()
            if e.session.owner_id == owner_id and self._live(e)
        ]
        return sorted(live, key=lambda s: s.created_at, reverse=True)[:limit]
