"""The owner's rules as stored, and the counts of each subject's recent calls they may read.

Above: `policy.rules` (checks, compiles and evaluates them). Below: asyncpg, the tables
`mcp_host.rule_sets` and `mcp_host.rule_calls` (migration 012).

A rule set is one row per owner: the ordered rules as JSON and a version that every set raises
by one. A replica keeps its compiled copy and asks `state` on each call (the version and the
owner's timezone in one indexed read), so a set on any replica is seen by the next call on
every replica: exact, without a notification channel.

Counts are exact across replicas: `counting` takes a transaction-scoped advisory lock on the
(owner, subject) pair, so the count read, the rules evaluated and the call recorded happen as
one step; two concurrent calls of one subject are counted one after the other. Only calls
admitted while some rule reads the counts are recorded (the caller decides), and rows older
than an hour are deleted as new ones are written, so a subject's rows stay few.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from .database import PgConnection, PgPool

__all__ = ["CallCounter", "RuleState", "RuleStore"]

WINDOWS = ("minute", "hour")

_STATE = """
SELECT o.timezone, coalesce(r.version, 0) AS version
FROM mcp_host.owners o LEFT JOIN mcp_host.rule_sets r ON r.owner_id = o.id
WHERE o.id = $1
"""

_PUT = """
INSERT INTO mcp_host.rule_sets (owner_id, rules, version) VALUES ($1, $2, 1)
ON CONFLICT (owner_id) DO UPDATE SET rules = EXCLUDED.rules, version = mcp_host.rule_sets.version + 1, set_at = now()
RETURNING version
"""

_COUNTS = """
SELECT capability,
       count(*) FILTER (WHERE at > now() - interval '1 minute') AS minute,
       count(*) AS hour
FROM mcp_host.rule_calls
WHERE owner_id = $1 AND subject = $2 AND at > now() - interval '1 hour'
GROUP BY capability
"""

# The subject's lock until the transaction ends. The commit does not wait for the WAL flush: a
# count lost to a crash in its last instant is not worth a disk flush per call.
_LOCK = "SELECT set_config('synchronous_commit', 'off', true), pg_advisory_xact_lock(hashtextextended($1, 1712))"

_ADD = """
WITH pruned AS (
    DELETE FROM mcp_host.rule_calls WHERE owner_id = $1 AND subject = $2 AND at <= now() - interval '1 hour'
)
INSERT INTO mcp_host.rule_calls (owner_id, subject, capability) VALUES ($1, $2, $3)
"""


@dataclass(frozen=True)
class RuleState:
    """What a call needs to know before evaluating: the rule set's version (0: never set) and
    the owner's IANA timezone (None: unset)."""

    version: int
    timezone: str | None


class CallCounter:
    """One subject's recent calls, read and written under the subject's lock (`RuleStore.counting`)."""

    def __init__(self, conn: PgConnection, owner_id: str, subject: str) -> None:
        self._conn = conn
        self._owner_id = owner_id
        self._subject = subject

    async def counts(self) -> dict[str, dict[str, int]]:
        """`{window: {capability: calls}}` for the windows `minute` and `hour` (capabilities
        with no call left out)."""
        rows = await self._conn.fetch(_COUNTS, self._owner_id, self._subject)
        return {w: {row["capability"]: int(row[w]) for row in rows} for w in WINDOWS}

    async def add(self, capability: str) -> None:
        """Record one admitted call of the subject to `capability`; drop its rows past the hour."""
        await self._conn.execute(_ADD, self._owner_id, self._subject, capability)


class RuleStore:
    """The rule sets and call counts in Postgres."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def state(self, owner_id: str) -> RuleState:
        row = await self._pool.fetchrow(_STATE, owner_id)
        if row is None:
            return RuleState(0, None)
        return RuleState(int(row["version"]), row["timezone"])

    async def load(self, owner_id: str) -> tuple[int, list[dict[str, Any]]]:
        """The owner's rules as set and their version; `(0, [])` when never set."""
        row = await self._pool.fetchrow("SELECT version, rules FROM mcp_host.rule_sets WHERE owner_id = $1", owner_id)
        if row is None:
            return 0, []
        return int(row["version"]), list(row["rules"])

    async def put(self, owner_id: str, rules: list[dict[str, Any]]) -> int:
        """Replace the owner's rules; the new version."""
        return int(await self._pool.fetchval(_PUT, owner_id, rules))

    @asynccontextmanager
    async def counting(self, owner_id: str, subject: str) -> AsyncIterator[CallCounter]:
        """A transaction holding the (owner, subject) lock until the block ends: counts read and
        a call added inside it are exact against every other replica's."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK, f"rules/{owner_id}/{subject}")
            yield CallCounter(conn, owner_id, subject)
