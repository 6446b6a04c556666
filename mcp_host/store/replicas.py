"""The replicas serving on this database, and the channel their change notices travel on.

Above: `visitor.fleet` (a retry forwarded to the replica that parked its call; list changes
heard on every replica). Below: asyncpg, the `mcp_host.replicas` table (migration 010) and
PostgreSQL's `LISTEN/NOTIFY`.

Each process registers a row under an id random per start (`new_replica_id`), with the URL
other replicas reach it at, and beats every `heartbeat_s`; a row not beaten for `missed`
heartbeats counts as gone (`url_of` ignores it) and is deleted by the next heartbeat of any
replica. A clean stop deletes its own row.

`ChangeChannel` sends a notice with `pg_notify` through the pool and hears them on one
dedicated connection, opened again (with a doubling wait) whenever it is lost: a database
restart costs the notices sent during the outage, and nothing more. Its channel is
`CHANGES_CHANNEL` unless named (`store.rules` listens on its own); `on_listening` and
`on_lost` tell a listener whose cache is only valid while it hears every notice when that
starts and stops.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

import anyio

from mcp_host.errors import is_connection_failure

from .database import PgPool

__all__ = ["CHANGES_CHANNEL", "ChangeChannel", "MAX_NOTICE_BYTES", "Replicas", "new_replica_id"]

logger = logging.getLogger(__name__)

CHANGES_CHANNEL = "mcp_host_changes"
MAX_NOTICE_BYTES = 7900
"""A notice's payload limit (PostgreSQL's is 8000 bytes), with room to spare."""


def new_replica_id() -> str:
    """A random id for this process: 16 hex digits, no delimiter the host uses."""
    return secrets.token_hex(8)


class Replicas:
    """The `mcp_host.replicas` rows: this process's own, and the lookup of the others'."""

    def __init__(self, pool: PgPool, replica_id: str, url: str, *, heartbeat_s: float = 2.0, missed: int = 3) -> None:
        self._pool = pool
        self.id = replica_id
        self.url = url
        self._heartbeat_s = heartbeat_s
        self._stale_s = heartbeat_s * missed

    async def beat(self) -> None:
        """Register or refresh this replica's row; delete the rows whose heartbeats stopped."""
        async with self._pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO mcp_host.replicas (id, url) VALUES ($1, $2)"
                " ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, heartbeat_at = now()",
                self.id,
                self.url,
            )
            await conn.execute(
                "DELETE FROM mcp_host.replicas WHERE heartbeat_at < now() - make_interval(secs => $1)",
                self._stale_s,
            )

    async def run(self) -> None:
        """Beat every `heartbeat_s` until cancelled or the pool closes; a database outage only
        skips beats, and another failure is said once per run of failures of its kind."""
        said = _SaidOnce()
        while True:
            await anyio.sleep(self._heartbeat_s)
            try:
                await self.beat()
            except Exception as exc:  # a missed beat must not end the host
                if self._pool.is_closing():
                    logger.debug("replica %s: the pool is closed; no more heartbeats", self.id)
                    return
                if is_connection_failure(exc):
                    logger.debug("replica %s: a heartbeat was skipped (the database is unreachable)", self.id)
                elif said.first(exc):
                    logger.warning("replica %s: a heartbeat failed", self.id, exc_info=True)
                else:
                    logger.debug("replica %s: a heartbeat failed again", self.id)
            else:
                said.ended()

    async def remove(self) -> None:
        """Delete this replica's row (a clean stop); an unreachable database leaves it to expire."""
        try:
            with anyio.fail_after(2):
                await self._pool.execute("DELETE FROM mcp_host.replicas WHERE id = $1", self.id)
        except Exception:
            logger.debug("replica %s: its row was left to expire", self.id, exc_info=True)

    async def url_of(self, replica_id: str) -> str | None:
        """The URL of a live replica, or None (gone, never was, or its heartbeats stopped)."""
        row = await self._pool.fetchval(
            "SELECT url FROM mcp_host.replicas WHERE id = $1 AND heartbeat_at >= now() - make_interval(secs => $2)",
            replica_id,
            self._stale_s,
        )
        return None if row is None else str(row)


class ChangeChannel:
    """`NOTIFY` and `LISTEN` on one channel (`CHANGES_CHANNEL` unless named)."""

    def __init__(self, pool: PgPool, *, channel: str = CHANGES_CHANNEL, retry_max_s: float = 5.0) -> None:
        self._pool = pool
        self._channel = channel
        self._retry_max_s = retry_max_s

    async def notify(self, payload: str) -> None:
        """Send one notice (at most `MAX_NOTICE_BYTES`: the caller checks); an outage loses it."""
        try:
            await self._pool.execute("SELECT pg_notify($1, $2)", self._channel, payload)
        except Exception as exc:
            if not is_connection_failure(exc):
                raise
            logger.debug("a change notice was not sent (the database is unreachable)")

    async def listen(
        self,
        on_notice: Callable[[str], None],
        *,
        on_listening: Callable[[], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        task_status: Any = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hear every notice until cancelled or the pool closes, on a connection of its own,
        opened again when lost. Started with `TaskGroup.start`: returns once the first
        connection listens (or failed to). `on_listening` runs each time a connection starts
        listening (before any notice it hears), `on_lost` each time it stops (lost, failed or
        cancelled): between the two, no notice is missed."""
        wait = 0.1
        started = anyio.Event()

        def listening() -> None:
            nonlocal wait
            wait = 0.1
            if on_listening is not None:
                on_listening()
            if not started.is_set():
                started.set()
                task_status.started()

        said = _SaidOnce()
        while True:
            try:
                await self._listen_once(on_notice, listening, on_lost)
            except Exception as exc:  # the channel must outlive outages and odd failures alike
                if self._pool.is_closing():
                    logger.debug("the change channel's pool is closed; no longer listening")
                elif is_connection_failure(exc):
                    pass
                elif said.first(exc):
                    logger.warning("the change channel failed", exc_info=True)
                else:
                    logger.debug("the change channel failed again")
            else:
                said.ended()
            if not started.is_set():  # the host does not wait for a database that is down at start
                started.set()
                task_status.started()
            if self._pool.is_closing():
                return
            logger.debug("the change channel's connection was lost; listening again in %.1f s", wait)
            await anyio.sleep(wait)
            wait = min(wait * 2, self._retry_max_s)

    async def _listen_once(
        self, on_notice: Callable[[str], None], listening: Callable[[], None], on_lost: Callable[[], None] | None
    ) -> None:
        """Listen on one pooled connection until it is lost."""
        lost = anyio.Event()

        def heard(_conn: object, _pid: int, _channel: str, payload: object) -> None:
            if not lost.is_set():
                on_notice(str(payload))

        def terminated(_conn: object) -> None:
            if lost.is_set():  # this connection's listening already ended
                return
            lost.set()
            if on_lost is not None:
                on_lost()  # at once: the wait below may only see it a moment later

        async with self._pool.acquire() as conn:
            conn.add_termination_listener(terminated)
            await conn.add_listener(self._channel, heard)
            listening()
            try:
                await _until_lost(conn, lost)
            finally:
                if on_lost is not None and not lost.is_set():
                    on_lost()
                lost.set()
                if not conn.is_closed():
                    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                        await conn.remove_listener(self._channel, heard)


class _SaidOnce:
    """A loop's failures said once per run of failures of one kind: a database dropped under a
    host (or a bad grant) fails every round the same way, and one traceback says it."""

    def __init__(self) -> None:
        self._failing: type[BaseException] | None = None

    def first(self, exc: BaseException) -> bool:
        """Whether `exc` starts a run (the first failure, or one of another kind than the last)."""
        first = type(exc) is not self._failing
        self._failing = type(exc)
        return first

    def ended(self) -> None:
        """A round succeeded: the next failure is said again."""
        self._failing = None


async def _until_lost(conn: Any, lost: anyio.Event) -> None:
    """Return when the connection closes: its termination listener, or a failed probe (a server
    restart is not always seen by an idle connection until it is used)."""
    while not lost.is_set():
        with anyio.move_on_after(5):
            await lost.wait()
        if lost.is_set() or conn.is_closed():
            return
        await conn.fetchval("SELECT 1")
