"""The owner's rules as stored, and the counts of each subject's recent calls they may read.

Above: `policy.rules` (checks, compiles and evaluates them). Below: asyncpg, the tables
`mcp_host.rule_sets` and `mcp_host.rule_calls` (migration 012), and the notices on
`RULES_CHANNEL` that their triggers send (migration 015) through `replicas.ChangeChannel`.

A rule set is one row per owner: the ordered rules as JSON and a version that every set raises
by one. A call asks `state` (the version and the owner's timezone). While `listen` hears the
channel, each owner's state is kept in memory and dropped when a notice names the owner: a
trigger sends one at the commit of any write to the rule set or the timezone (this host's,
another replica's, SQL by hand), so another replica sees a set once its notice arrives, and
this replica at once (`put` drops its own copy before it returns). While not listening
(before the first connection, in an outage, until it listens again) every call reads the row,
as without the cache, and the cache is emptied whenever listening (re)starts: notices sent
meanwhile were missed. A read that a notice overtook is not kept (`_epoch`).

Counts are exact across replicas: `counting` takes a transaction-scoped advisory lock on the
(owner, subject) pair, so the count read, the rules evaluated and the call recorded happen as
one step; two concurrent calls of one subject are counted one after the other. Only calls
admitted while some rule reads the counts are recorded (the caller decides), and rows older
than an hour are deleted as new ones are written, so a subject's rows stay few.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from .database import PgConnection, PgPool
from .replicas import ChangeChannel

__all__ = ["RULES_CHANNEL", "CallCounter", "RuleState", "RuleStore"]

logger = logging.getLogger(__name__)

WINDOWS = ("minute", "hour")
RULES_CHANNEL = "mcp_host_rules"
"""Where migration 015's triggers say an owner's rule set or timezone changed (payload: the
owner's id; '' for every owner)."""
_MAX_CACHED = 1024

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
    """The rule sets and call counts in Postgres; each owner's `RuleState` cached while `listen`
    hears every change."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool
        self._channel = ChangeChannel(pool, channel=RULES_CHANNEL)
        self._states: dict[str, RuleState] = {}
        self._listening = False
        self._epoch = 0
        """Raised by every change the cache hears of: a read is kept only if none came meanwhile."""
        self._scope = anyio.CancelScope()

    async def state(self, owner_id: str) -> RuleState:
        """The owner's rule-set version and timezone: from memory while listening, else read."""
        if self._listening:
            known = self._states.get(owner_id)
            if known is not None:
                return known
        epoch = self._epoch
        row = await self._pool.fetchrow(_STATE, owner_id)
        state = RuleState(0, None) if row is None else RuleState(int(row["version"]), row["timezone"])
        if self._listening and epoch == self._epoch:
            if len(self._states) >= _MAX_CACHED:
                self._states.clear()
            self._states[owner_id] = state
        return state

    @property
    def listening(self) -> bool:
        """Whether the cache is in use: a connection hears the channel."""
        return self._listening

    def forget(self, owner_id: str | None = None) -> None:
        """Drop the cached state of `owner_id` (None or '': every owner's)."""
        self._epoch += 1
        if owner_id:
            self._states.pop(owner_id, None)
        else:
            self._states.clear()

    async def listen(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Hear `RULES_CHANNEL` until `stop` (or the pool closes); the cache is used only while
        a connection listens. For `TaskGroup.start`: returns once it listens (or the database
        was down at that moment: calls read until it listens)."""
        with self._scope:
            await self._channel.listen(
                self.forget, on_listening=self._listen_started, on_lost=self._listen_ended, task_status=task_status
            )

    def stop(self) -> None:
        """No more listening: every later call reads."""
        self._scope.cancel()
        self._listen_ended()

    def _listen_started(self) -> None:
        self.forget()  # notices sent before this connection listened were missed
        self._listening = True

    def _listen_ended(self) -> None:
        self._listening = False
        self.forget()

    async def load(self, owner_id: str) -> tuple[int, list[dict[str, Any]]]:
        """The owner's rules as set and their version; `(0, [])` when never set."""
        row = await self._pool.fetchrow("SELECT version, rules FROM mcp_host.rule_sets WHERE owner_id = $1", owner_id)
        if row is None:
            return 0, []
        return int(row["version"]), list(row["rules"])

    async def put(self, owner_id: str, rules: list[dict[str, Any]]) -> int:
        """Replace the owner's rules; the new version. This replica's cached state of the owner
        is dropped before it returns (other replicas' when the trigger's notice reaches them)."""
        try:
            return int(await self._pool.fetchval(_PUT, owner_id, rules))
        finally:
            self.forget(owner_id)  # also when the outcome is unknown (a connection lost at commit)

    @asynccontextmanager
    async def counting(self, owner_id: str, subject: str) -> AsyncIterator[CallCounter]:
        """A transaction holding the (owner, subject) lock until the block ends: counts read and
        a call added inside it are exact against every other replica's."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK, f"rules/{owner_id}/{subject}")
            yield CallCounter(conn, owner_id, subject)
