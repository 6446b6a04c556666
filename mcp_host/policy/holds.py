"""Holds: a visitor's call that a policy rule parked for the owner to approve or deny
(docs/design.md "hold"; docs/security.md E11 toxic flows, E16 hold for a person).

Above: `visitor.door`, which asks `admit` before it forwards a call to a tool `needs_hold`
marks, and the owner door (`holds_list`, `hold_decide`). Below: asyncpg (`mcp_host.holds`,
migration 007).

The rule (setting `hold_destructive_tools`): a visitor's call to a tool whose live definition
says `destructiveHint: true`, and not `readOnlyHint: true`, is held. Owner-context calls never
come here.

A hold is bound to its owner, session, capability, tool and the sha256 of the call's
arguments as canonical JSON (sorted keys, no whitespace). The first call records a `pending`
hold and is answered `held`; the child is not called. A repeat of the same call in the same
session: with an approved, unexpired hold, it uses it up — one UPDATE from `approved` to
`used`, so of any number of concurrent repeats exactly one runs — and goes on; with the hold
still pending it is `held` again (no new row); denied, `denied`. A pending or approved hold
past its TTL (`hold_ttl_s` from creation) is expired, and the repeat records a new pending
hold (fail closed). Changed arguments or another session match no hold and record a new one.
Only the owner door decides; the state lives server-side, so a visitor holds no token it
could replay or alter.

How many calls may wait at once is capped (`HoldCaps`, issue 26 defect 8): per session, and
per principal (`principal_of(session_id)`: the access code, API key or client address asking
for the session, recorded on the hold). A call that would make one more pending hold past
either is refused `Unavailable` with a retry hint (when the soonest of those holds expires),
and nothing is recorded; a repeat of a call already pending is answered `held` as before. The
count and the insert run under the session's and the principal's locks, so concurrent calls
cannot pass the cap together. How long decided and expired holds are kept: `store.retention`.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol

import mcp.types as types

from mcp_host.errors import Denied, Held, InvalidArguments, Unavailable, UnknownTool

from .pins import definition_hash

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = [
    "MAX_SHOWN_ARGUMENTS_BYTES",
    "Hold",
    "HoldBook",
    "HoldCaps",
    "HoldStatus",
    "Holds",
    "MemoryHolds",
    "arguments_hash",
    "needs_hold",
]

HoldStatus = Literal["pending", "approved", "denied", "used", "expired"]
# What the owner can read of a call's arguments; larger ones are stored as a note (the hash
# still binds the hold to them).
MAX_SHOWN_ARGUMENTS_BYTES = 16 * 1024
_MAX_LISTED = 500
_ID = re.compile(r"^h_[0-9a-f]{16}$")
# A concurrent first call may take the pending slot between our look and our insert: look again.
_ATTEMPTS = 3


def needs_hold(tool: types.Tool) -> bool:
    """Whether a visitor's call to `tool` waits for the owner: its own annotations say it is
    destructive and do not say it is read-only."""
    hints = tool.annotations
    return hints is not None and hints.destructive_hint is True and hints.read_only_hint is not True


def arguments_hash(arguments: Mapping[str, Any]) -> bytes:
    """sha256 of `arguments` as canonical JSON (the same canonical form as tool pins).

    Raises `InvalidArguments` for values JSON cannot carry (NaN, lone surrogates)."""
    try:
        return definition_hash(arguments)
    except ValueError:
        raise InvalidArguments("the arguments are not plain JSON (NaN, Infinity or a lone surrogate)") from None


def _shown(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """What the owner reads of the arguments: themselves, or a note when too big (or holding
    a NUL character, which jsonb cannot store)."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode("utf-8"))
    if size > MAX_SHOWN_ARGUMENTS_BYTES:
        return {"_note": f"the arguments are too large to show ({size} bytes); the hold is bound to their hash"}
    if "\\u0000" in text:
        return {"_note": "the arguments hold a NUL character and cannot be shown; the hold is bound to their hash"}
    return dict(arguments)


def _refuse(hold_id: str, status: str) -> NoReturn:
    if status == "denied":
        raise Denied(f"the owner declined this call (hold {hold_id})")
    raise Held(
        f"waiting for the owner's approval (hold {hold_id}); call again with the same arguments once it is given"
    )


def _new_id() -> str:
    return f"h_{secrets.token_hex(8)}"


def _by_session(session_id: str) -> str:
    return f"session:{session_id}"


@dataclass(frozen=True)
class HoldCaps:
    """Pending holds at once (settings: `PrincipalSettings`)."""

    per_session: int = 20
    per_principal: int = 100

    def check(self, session: int, principal: int, retry_s: float) -> None:
        """Raises Unavailable when a session holding `session` pending holds, or a principal
        holding `principal`, may not make one more; the soonest expires in `retry_s`."""
        wait = max(1, math.ceil(retry_s))
        if session >= self.per_session:
            raise Unavailable(
                f"{session} calls of this session already wait for the owner's approval, the most one"
                f" session may; retry once the owner has decided one, or in {wait} s"
            )
        if principal >= self.per_principal:
            raise Unavailable(
                f"{principal} calls of this visitor (its access code, API key or address) already wait"
                f" for the owner's approval, the most one may; retry once the owner has decided one,"
                f" or in {wait} s"
            )


@dataclass(frozen=True)
class Hold:
    """One hold as the owner sees it; `status` reads `expired` once past `expires_at`."""

    id: str
    owner_id: str
    session_id: str
    capability: str
    tool: str
    arguments: dict[str, Any]
    status: HoldStatus
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    used_at: datetime | None = None

    def shown(self) -> dict[str, Any]:
        """The owner tools' view (JSON): the visitor-authored arguments with where they came from."""
        return {
            "id": self.id,
            "capability": self.capability,
            "tool": self.tool,
            "session_id": self.session_id,
            "arguments": self.arguments,
            "status": self.status,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "decided_at": None if self.decided_at is None else self.decided_at.isoformat(),
        }


class HoldBook(Protocol):
    """The holds as the visitor door and the owner door use them."""

    async def admit(
        self, owner_id: str, session_id: str, capability: str, tool: str, arguments: Mapping[str, Any]
    ) -> str:
        """Let a held call through: the id of the approved hold it used up.

        Raises `Held` (a pending hold, recorded now or before), `Denied` (the owner declined
        this call), `Unavailable` (its session or principal has as many calls waiting as it
        may: nothing recorded) or `InvalidArguments` (arguments JSON cannot carry)."""
        ...

    async def of_owner(self, owner_id: str, *, everything: bool = False) -> list[Hold]:
        """The owner's holds, newest first (at most 500): pending and unexpired ones, or all."""
        ...

    async def decide(self, owner_id: str, hold_id: str, approve: bool) -> Hold:
        """Approve or deny the owner's pending, unexpired hold; the hold as decided.

        Raises `UnknownTool` (no such hold of this owner) or `InvalidArguments` (not pending)."""
        ...


def _not_pending(hold_id: str, status: str) -> InvalidArguments:
    if status == "expired":
        return InvalidArguments(f"hold {hold_id} has expired; the visitor's next call makes a new one")
    return InvalidArguments(f"hold {hold_id} is {status}, not pending")


def _unknown(hold_id: str) -> UnknownTool:
    return UnknownTool(f"no hold {hold_id[:64]!r}")


_KEY = "owner_id = $1 AND session_id = $2 AND capability = $3 AND tool = $4 AND args_hash = $5"

# The approval is used in one statement: concurrent repeats all pick the same row, the first
# UPDATE wins and the others, re-checking the row after its lock, find it `used`.
_USE = f"""
UPDATE mcp_host.holds SET status = 'used', used_at = now()
WHERE id = (
    SELECT id FROM mcp_host.holds
    WHERE {_KEY} AND status = 'approved' AND used_at IS NULL AND expires_at > now()
    ORDER BY created_at LIMIT 1
) AND status = 'approved' AND used_at IS NULL AND expires_at > now()
RETURNING id
"""

_LIVE = f"""
SELECT id, status FROM mcp_host.holds
WHERE {_KEY} AND status IN ('pending', 'denied') AND expires_at > now()
ORDER BY created_at DESC LIMIT 1
"""

_EXPIRE = f"""
UPDATE mcp_host.holds SET status = 'expired'
WHERE {_KEY} AND status IN ('pending', 'approved') AND expires_at <= now()
"""

_INSERT = """
INSERT INTO mcp_host.holds (id, owner_id, session_id, capability, tool, args_hash, arguments, expires_at, principal)
VALUES ($6, $1, $2, $3, $4, $5, $7::jsonb, now() + make_interval(secs => $8), $9)
ON CONFLICT (session_id, capability, tool, args_hash) WHERE status = 'pending' DO NOTHING
RETURNING id
"""

# The session's, then the principal's: every admit takes them in this order.
_LOCK = """
SELECT pg_advisory_xact_lock(hashtextextended('mcp_host.holds:' || $1, 0)),
       pg_advisory_xact_lock(hashtextextended('mcp_host.holds:' || $2, 0))
"""

# The pending holds of the session and of the principal, and when the soonest of them expires.
_PENDING = """
SELECT count(*) FILTER (WHERE session_id = $2) AS session,
       count(*) FILTER (WHERE principal = $3) AS principal,
       coalesce(extract(epoch FROM min(expires_at) - now()), 0)::float8 AS retry_s
FROM mcp_host.holds
WHERE owner_id = $1 AND status = 'pending' AND expires_at > now() AND (session_id = $2 OR principal = $3)
"""

_COLUMNS = """
id, owner_id, session_id, capability, tool, arguments,
CASE WHEN status IN ('pending', 'approved') AND expires_at <= now() THEN 'expired' ELSE status END AS status,
created_at, expires_at, decided_at, decided_by, used_at
"""

_LIST = f"""
SELECT {_COLUMNS} FROM mcp_host.holds
WHERE owner_id = $1 AND ($2 OR (status = 'pending' AND expires_at > now()))
ORDER BY created_at DESC, id LIMIT $3
"""

_DECIDE = f"""
UPDATE mcp_host.holds
SET status = CASE WHEN $3 THEN 'approved' ELSE 'denied' END, decided_at = now(), decided_by = $1
WHERE id = $2 AND owner_id = $1 AND status = 'pending' AND expires_at > now()
RETURNING {_COLUMNS}
"""

_ONE = f"SELECT {_COLUMNS} FROM mcp_host.holds WHERE id = $2 AND owner_id = $1"


class Holds:
    """The holds in Postgres."""

    def __init__(
        self,
        pool: PgPool,
        *,
        ttl_s: float = 3600.0,
        caps: HoldCaps | None = None,
        principal_of: Callable[[str], str] = _by_session,
    ) -> None:
        """`principal_of(session_id)`: who is asking for the session now (the composition root
        wires the visitor endpoint's `Asking`); by default each session is its own principal."""
        self._pool = pool
        self._ttl_s = ttl_s
        self._caps = caps or HoldCaps()
        self._principal_of = principal_of

    async def admit(
        self, owner_id: str, session_id: str, capability: str, tool: str, arguments: Mapping[str, Any]
    ) -> str:
        key = (owner_id, session_id, capability, tool, arguments_hash(arguments))
        principal = self._principal_of(session_id)[:256]
        async with self._pool.acquire() as conn:
            used = await conn.fetchval(_USE, *key)
            if used is not None:
                return str(used)
            for _ in range(_ATTEMPTS):
                live = await conn.fetchrow(_LIVE, *key)
                if live is not None:
                    _refuse(live["id"], live["status"])
                await conn.execute(_EXPIRE, *key)
                async with conn.transaction():
                    await conn.execute(_LOCK, _by_session(session_id), principal)
                    pending = await conn.fetchrow(_PENDING, owner_id, session_id, principal)
                    assert pending is not None  # an aggregate: one row
                    self._caps.check(pending["session"], pending["principal"], pending["retry_s"])
                    hold_id = await conn.fetchval(_INSERT, *key, _new_id(), _shown(arguments), self._ttl_s, principal)
                if hold_id is not None:
                    _refuse(hold_id, "pending")
        raise Unavailable("the call could not be put on hold; try again")

    async def of_owner(self, owner_id: str, *, everything: bool = False) -> list[Hold]:
        rows = await self._pool.fetch(_LIST, owner_id, everything, _MAX_LISTED)
        return [Hold(**dict(row)) for row in rows]

    async def decide(self, owner_id: str, hold_id: str, approve: bool) -> Hold:
        if not _ID.fullmatch(hold_id):
            raise _unknown(hold_id)
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(_DECIDE, owner_id, hold_id, approve)
            if row is not None:
                return Hold(**dict(row))
            row = await conn.fetchrow(_ONE, owner_id, hold_id)
        if row is None:
            raise _unknown(hold_id)
        raise _not_pending(hold_id, row["status"])


@dataclass
class _Row:
    hold: Hold
    digest: bytes
    principal: str


class MemoryHolds:
    """The holds in memory: `Holds`' rules without a database, for unit tests of logic.
    `clock` gives the current time (tests move it to expire holds)."""

    def __init__(
        self,
        *,
        ttl_s: float = 3600.0,
        clock: Callable[[], datetime] | None = None,
        caps: HoldCaps | None = None,
        principal_of: Callable[[str], str] = _by_session,
    ) -> None:
        self._ttl = timedelta(seconds=ttl_s)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._caps = caps or HoldCaps()
        self._principal_of = principal_of
        self._rows: dict[str, _Row] = {}

    def _current(self, row: _Row) -> Hold:
        hold = row.hold
        if hold.status in ("pending", "approved") and hold.expires_at <= self._clock():
            hold = row.hold = replace(hold, status="expired")
        return hold

    async def admit(
        self, owner_id: str, session_id: str, capability: str, tool: str, arguments: Mapping[str, Any]
    ) -> str:
        digest = arguments_hash(arguments)
        key = (owner_id, session_id, capability, tool)
        mine = sorted(
            (r for r in self._rows.values() if r.digest == digest and self._key(r.hold) == key),
            key=lambda r: r.hold.created_at,
        )
        now = self._clock()
        for row in mine:
            if self._current(row).status == "approved":
                row.hold = replace(row.hold, status="used", used_at=now)
                return row.hold.id
        for row in reversed(mine):
            hold = self._current(row)
            if hold.status in ("pending", "denied") and hold.expires_at > now:
                _refuse(hold.id, hold.status)
        principal = self._principal_of(session_id)[:256]
        waiting = [
            r
            for r in self._rows.values()
            if r.hold.owner_id == owner_id
            and self._current(r).status == "pending"
            and (r.hold.session_id == session_id or r.principal == principal)
        ]
        soonest = min((r.hold.expires_at for r in waiting), default=now)
        self._caps.check(
            sum(r.hold.session_id == session_id for r in waiting),
            sum(r.principal == principal for r in waiting),
            (soonest - now).total_seconds(),
        )
        hold = Hold(_new_id(), *key, _shown(arguments), "pending", now, now + self._ttl)
        self._rows[hold.id] = _Row(hold, digest, principal)
        _refuse(hold.id, "pending")

    @staticmethod
    def _key(hold: Hold) -> tuple[str, str, str, str]:
        return (hold.owner_id, hold.session_id, hold.capability, hold.tool)

    async def of_owner(self, owner_id: str, *, everything: bool = False) -> list[Hold]:
        holds = [self._current(r) for r in self._rows.values() if r.hold.owner_id == owner_id]
        shown = [h for h in holds if everything or h.status == "pending"]
        return sorted(shown, key=lambda h: (h.created_at, h.id), reverse=True)[:_MAX_LISTED]

    async def decide(self, owner_id: str, hold_id: str, approve: bool) -> Hold:
        row = self._rows.get(hold_id)
        if row is None or row.hold.owner_id != owner_id:
            raise _unknown(hold_id)
        hold = self._current(row)
        if hold.status != "pending":
            raise _not_pending(hold_id, hold.status)
        row.hold = replace(
            hold, status="approved" if approve else "denied", decided_at=self._clock(), decided_by=owner_id
        )
        return row.hold
