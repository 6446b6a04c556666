"""Retention: how long the host's own tables keep what visitors and the owner leave in them.

Above: the lifespan (`app.lifespan`), which runs `Retention.run` in a task group of its own
while the database is open. Below: asyncpg; the tables of migrations 001 (sessions), 006
(audit), 007 (holds) and 008 (turns, receipts), found through the indexes of migration 017.

One sweep (`sweep`), every `interval_s` on each replica: public sessions idle for
`public_session_idle_s` are marked ended (at the moment they expired; their tokens were refused
from then on already: `access.sessions`), then rows older than their retention are deleted —
turns by when they were opened (their receipts go with them), receipts by when they were
written, audit rows by when the owner's call was made, holds by when they expired, and ended
sessions by when they ended (with whatever turns they still have). Each step works in batches
of `batch` rows, at most `max_batches` per sweep (the next sweep goes on), each batch one
statement that locks only the rows it takes (`FOR UPDATE SKIP LOCKED`): replicas sweeping at
once share the work instead of waiting on each other. A retention of 0 keeps rows for ever.

Tables of the layers above `store` are swept by their own code, handed over by the composition
root (`also`: the OAuth grants, codes and tokens, `oauth.AuthorizationServer.sweep`); each runs
after the steps above, and one that fails does not stop the others.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from mcp_host.errors import is_connection_failure
from mcp_host.settings import RetentionSettings

from .database import PgPool

__all__ = ["Retention", "RetentionPolicy", "Swept"]

logger = logging.getLogger(__name__)

_DAY_S = 86_400.0

# Each statement takes $1, the cutoff (rows at or before it go), and $2, the batch size.
_EXPIRE = """
UPDATE mcp_host.sessions SET ended_at = least(now(), coalesce(last_seen_at, created_at) + make_interval(secs => $3))
WHERE id IN (
    SELECT id FROM mcp_host.sessions
    WHERE mode = 'public' AND ended_at IS NULL AND coalesce(last_seen_at, created_at) <= $1
    LIMIT $2 FOR UPDATE SKIP LOCKED
)
"""

# Each table the sweep deletes from: its key columns, and the column a row's age is read from.
_AGED: Mapping[str, tuple[str, str]] = {
    "turns": ("session_id, n", "created_at"),
    "receipts": ("id", "at"),
    "audit": ("id", "at"),
    "holds": ("id", "expires_at"),
    "sessions": ("id", "ended_at"),
}
_DELETE: Mapping[str, str] = {
    table: f"""
DELETE FROM mcp_host.{table} WHERE ({key}) IN (
    SELECT {key} FROM mcp_host.{table} WHERE {age} <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED
)"""
    for table, (key, age) in _AGED.items()
}


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each kind of row is kept, in seconds (None: for ever), and how the sweep batches."""

    public_session_idle_s: float | None = _DAY_S
    turns_s: float | None = 30 * _DAY_S
    receipts_s: float | None = 30 * _DAY_S
    audit_s: float | None = 365 * _DAY_S
    holds_s: float | None = 30 * _DAY_S
    sessions_s: float | None = 30 * _DAY_S
    batch: int = 5000
    max_batches: int = 100

    @classmethod
    def of(cls, settings: RetentionSettings) -> RetentionPolicy:
        """The settings' retention (days; 0: for ever)."""

        def days(value: float) -> float | None:
            return value * _DAY_S if value > 0 else None

        return cls(
            public_session_idle_s=settings.public_session_idle_s,
            turns_s=days(settings.turn_days),
            receipts_s=days(settings.receipt_days),
            audit_s=days(settings.audit_days),
            holds_s=days(settings.hold_days),
            sessions_s=days(settings.session_days),
            batch=settings.sweep_batch,
        )

    def kept_s(self, table: str) -> float | None:
        """How long rows of `table` (a key of the sweep's deletes) are kept."""
        kept: float | None = getattr(self, f"{table}_s")
        return kept


@dataclass(frozen=True)
class Swept:
    """What one sweep did: sessions expired, and rows deleted per table."""

    expired: int = 0
    turns: int = 0
    receipts: int = 0
    audit: int = 0
    holds: int = 0
    sessions: int = 0
    also: tuple[tuple[str, int], ...] = ()
    """What each sweep of `Retention`'s `also` ended or deleted, by its name (when not 0)."""

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


class Retention:
    """The sweep over the host's tables (module doc)."""

    def __init__(
        self,
        pool: PgPool,
        policy: RetentionPolicy | None = None,
        *,
        interval_s: float = 300.0,
        also: Mapping[str, Callable[[], Awaitable[int]]] | None = None,
    ) -> None:
        """`also`: the sweeps of tables above `store`, by name; each answers how many rows it
        ended or deleted."""
        self._pool = pool
        self._policy = policy or RetentionPolicy()
        self._interval_s = interval_s
        self._also = dict(also or {})

    @classmethod
    def of(
        cls, pool: PgPool, settings: RetentionSettings, also: Mapping[str, Callable[[], Awaitable[int]]] | None = None
    ) -> Retention:
        return cls(pool, RetentionPolicy.of(settings), interval_s=settings.sweep_interval_s, also=also)

    async def sweep(self, now: datetime | None = None) -> Swept:
        """Expire idle public sessions and delete rows past their retention, as of `now` (the
        database's clock when None); what it did. Raises what the database raises."""
        policy = self._policy
        at = now or await self._now()
        done: dict[str, Any] = {}
        if policy.public_session_idle_s is not None:
            cutoff = at - timedelta(seconds=policy.public_session_idle_s)
            done["expired"] = await self._batches(_EXPIRE, cutoff, policy.public_session_idle_s)
        for table, statement in _DELETE.items():
            kept = policy.kept_s(table)
            if kept is not None:
                done[table] = await self._batches(statement, at - timedelta(seconds=kept))
        also = await self._sweep_also()
        swept = Swept(**done, also=also)
        if swept:
            logger.info("retention: %s", ", ".join(f"{k} {v}" for k, v in [*done.items(), *also] if v))
        return swept

    async def _sweep_also(self) -> tuple[tuple[str, int], ...]:
        """Each sweep of `also`; one that fails is logged and the next still runs."""
        counts: list[tuple[str, int]] = []
        for name, sweep in self._also.items():
            try:
                count = await sweep()
            except Exception as exc:
                if is_connection_failure(exc) or self._pool.is_closing():
                    raise  # the database is away: `run` says so once for the whole sweep
                logger.warning("retention: the %s sweep failed", name, exc_info=True)
                continue
            if count:
                counts.append((name, count))
        return tuple(counts)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Sweep now and every `interval_s` until cancelled; a failed sweep is logged and the
        next one tries again. For `TaskGroup.start`."""
        task_status.started()
        while True:
            try:
                await self.sweep()
            except Exception as exc:  # the loop outlives one failure; the next sweep retries
                if is_connection_failure(exc) or self._pool.is_closing():
                    logger.debug("retention sweep skipped: the database is unreachable")
                else:
                    logger.warning("retention sweep failed; next in %.0f s", self._interval_s, exc_info=True)
            await anyio.sleep(self._interval_s)

    async def _now(self) -> datetime:
        found = await self._pool.fetchval("SELECT now()")
        return found if isinstance(found, datetime) else datetime.now(UTC)

    async def _batches(self, statement: str, cutoff: datetime, *extra: Any) -> int:
        """Run `statement` batch after batch until one takes less than a batch; rows taken."""
        total = 0
        for _ in range(self._policy.max_batches):
            status = await self._pool.execute(statement, cutoff, self._policy.batch, *extra)
            taken = int(status.rsplit(" ", 1)[-1])
            total += taken
            if taken < self._policy.batch:
                break
            await anyio.lowlevel.checkpoint()  # let the host's own queries in between batches
        return total
