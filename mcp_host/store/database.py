"""The host's PostgreSQL: one asyncpg pool, checked for durability, migrated, with timeouts.

Below: asyncpg; `embedded_postgres` when no database URL is configured; `migrations`.
Above: every store (sessions, owners, later store/config/quota), which receives
`Database.pool`, and the composition root, which opens the database once per process.

Every pooled connection carries `statement_timeout`, `lock_timeout` and
`idle_in_transaction_session_timeout` (docs/security.md B10: a transaction a caller leaves open is
ended by the server, releasing its locks), and decodes `jsonb` to Python values. A
connection the server dropped (restart, failover) is discarded by the pool and replaced on a
later acquire; the query that met the broken connection fails and is not retried here.

Outages: while the database is open, a `DatabaseWatch` (`database_watch.py`) restarts the
embedded server when it dies and logs each outage once. A connect that fails is raised as
`DatabaseUnavailable` (and tells the watch); the doors pass any other exception through
`errors.as_unavailable`, the one place that decides what counts as the database being away
(asyncpg's connection classes: SQLSTATE class 08, 57P01-57P05, a closed connection), and
answer it as `unavailable` (HTTP: 503) without a traceback.
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import parse_qs, urlsplit

import anyio
import asyncpg

from mcp_host.errors import DatabaseUnavailable, InternalError, is_connection_failure

from .database_watch import DatabaseWatch, RecoveryLimits
from .embedded_postgres import EmbeddedPostgres, embedded_server
from .migrations import apply_migrations

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    from mcp_host.settings import Settings

# asyncpg's classes are generic only in its stubs, hence the quoted aliases.
PgPool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
PgConnection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"

__all__ = [
    "Database",
    "DatabaseLimits",
    "PgConnection",
    "PgPool",
    "UnsafeDatabaseSettings",
    "check_durability",
    "open_database",
]

_logger = logging.getLogger("mcp_host.store.database")

# How long closing the pool waits for borrowed connections before cutting them.
_POOL_CLOSE_GRACE_S = 10.0


class UnsafeDatabaseSettings(InternalError):
    """The server is configured so that a committed write may not survive a crash.

    Raised at start only (docs/security.md F1); the host refuses to serve on such a server.
    """


@dataclass(frozen=True)
class DatabaseLimits:
    """Per-connection server limits and pool size; the defaults suit one host replica."""

    statement_timeout_s: float = 30.0
    lock_timeout_s: float = 5.0
    idle_in_transaction_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    min_connections: int = 1
    max_connections: int = 10

    def server_settings(self) -> dict[str, str]:
        """The settings sent in each connection's startup packet (values in ms)."""
        return {
            "application_name": "mcp-host",
            "statement_timeout": str(int(self.statement_timeout_s * 1000)),
            "lock_timeout": str(int(self.lock_timeout_s * 1000)),
            "idle_in_transaction_session_timeout": str(int(self.idle_in_transaction_timeout_s * 1000)),
        }


class Database:
    """An open, checked and migrated database. Stores share `pool`; `watch` recovers outages."""

    def __init__(self, pool: PgPool, *, server: EmbeddedPostgres | None = None) -> None:
        self._pool = pool
        self.server = server
        """The embedded server, when no database URL is configured."""
        self.watch: DatabaseWatch | None = None
        """Set by `open_database` while the watch runs."""
        self._probing: anyio.Event | None = None
        self._answered = False

    @property
    def pool(self) -> PgPool:
        return self._pool

    async def answers(self, timeout_s: float) -> bool:
        """Whether the database answers `SELECT 1` through the pool within `timeout_s`.

        One probe at a time: callers arriving while one runs share its answer, so a flood of
        `/readyz` holds at most one pooled connection.
        """
        if self._probing is not None:
            await self._probing.wait()
            return self._answered
        self._probing = probing = anyio.Event()
        try:
            self._answered = await self._select_one(timeout_s)
        finally:
            self._probing = None
            probing.set()
        return self._answered

    async def _select_one(self, timeout_s: float) -> bool:
        with anyio.move_on_after(timeout_s):
            try:
                return bool(await self._pool.fetchval("SELECT 1") == 1)
            except Exception as exc:  # any failure means "not now"; the watch says why, once
                _logger.debug("database probe failed: %s", type(exc).__name__)
                return False
        return False


@asynccontextmanager
async def open_database(settings: Settings, *, limits: DatabaseLimits | None = None) -> AsyncIterator[Database]:
    """Open the configured server (or start the embedded one), check it, migrate it.

    With `settings.database.url` set, that server is used; otherwise an embedded PostgreSQL
    runs under `settings.data_dir / "postgres"` until the context exits. Raises
    `UnsafeDatabaseSettings` for a server with `fsync` off and `MigrationError` for a schema
    this host cannot run on; asyncpg's connection errors pass through.

    While the context is open, the database watch runs (recovery limits from `settings`):
    an embedded server that dies is restarted, and one that cannot be restarted ends the
    context with `DatabaseLost` (in an exception group).
    """
    recovery = RecoveryLimits(
        attempts=settings.database.restart_attempts,
        backoff_s=settings.database.restart_backoff_s,
        backoff_max_s=settings.database.restart_backoff_max_s,
        probe_timeout_s=settings.database.readiness_timeout_s,
    )
    limits = limits or DatabaseLimits()
    async with AsyncExitStack() as stack:
        server: EmbeddedPostgres | None = None
        if settings.database.url is not None:
            dsn = settings.database.url.get_secret_value()
            _logger.info("using the PostgreSQL server at %s", _describe(dsn))
        else:
            server = await stack.enter_async_context(embedded_server(settings.data_dir / "postgres"))
            dsn = server.dsn
        connector = _Connector()
        pool = await asyncpg.create_pool(
            dsn,
            min_size=limits.min_connections,
            max_size=limits.max_connections,
            timeout=limits.connect_timeout_s,
            server_settings=limits.server_settings(),
            connect=connector,
            init=_init_connection,
            reset=_reset_connection,
        )
        stack.push_async_callback(_close_pool, pool)
        async with pool.acquire() as conn:
            await check_durability(conn)
            await apply_migrations(conn)
            if server is not None:
                await _quicker_crash_recovery(conn)
        database = Database(pool, server=server)
        database.watch = connector.watch = DatabaseWatch(
            lambda: database.answers(recovery.probe_timeout_s), server=server, limits=recovery
        )
        # asyncpg keeps the pool's floor of connections itself, logging each failed retry with a
        # traceback; during an outage the watch has said it once already.
        pool_logger, quiet = logging.getLogger("asyncpg.pool"), functools.partial(_quiet_outages)
        pool_logger.addFilter(quiet)  # a filter of this database's own, removed when it closes
        stack.callback(pool_logger.removeFilter, quiet)
        watching = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(watching.cancel_scope.cancel)  # runs first on exit: the watch ends before the pool
        watching.start_soon(database.watch.run)
        yield database


def _quiet_outages(record: logging.LogRecord) -> bool:
    """A log filter: drop records about a `DatabaseUnavailable` (the watch logs outages)."""
    return not (record.exc_info and isinstance(record.exc_info[1], DatabaseUnavailable))


class _Connector:
    """The pool's connect hook: once the database is open, a failed connect is an outage —
    raised as `DatabaseUnavailable`, and told to the watch. At start, errors pass through."""

    watch: DatabaseWatch | None = None

    async def __call__(self, dsn: str | None = None, **kwargs: Any) -> asyncpg.Connection[asyncpg.Record]:
        try:
            connection: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(dsn, **kwargs)
        except Exception as exc:
            if self.watch is None or not (isinstance(exc, OSError) or is_connection_failure(exc)):
                raise
            self.watch.suspect()
            raise DatabaseUnavailable() from exc
        return connection


async def check_durability(conn: PgConnection) -> None:
    """Refuse a server where a commit may not be durable; warn where recent ones may be lost.

    Raises `UnsafeDatabaseSettings` when `fsync` is off (a crash can corrupt the database).
    `synchronous_commit = off` keeps the database consistent but may lose the last commits
    after a crash, so it is logged as a warning and allowed (docs/security.md F1).
    """
    row = await conn.fetchrow("SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sync")
    assert row is not None  # a SELECT without FROM returns one row
    if row["fsync"] != "on":
        raise UnsafeDatabaseSettings(
            "PostgreSQL runs with fsync = off: a crash can lose or corrupt committed data; set fsync = on"
        )
    if row["sync"] == "off":
        _logger.warning(
            "PostgreSQL runs with synchronous_commit = off: the last commits before a crash "
            "may be lost, so a receipt may outlive its row; set synchronous_commit = on"
        )


async def _quicker_crash_recovery(conn: PgConnection) -> None:
    """Have the embedded server sync its data directory with one `syncfs` before crash recovery.

    Before replaying its WAL after a crash, PostgreSQL fsyncs every file of the data directory
    (`recovery_init_sync_method = fsync`): 1.4-2.5 s of a restart after `kill -9` here, against
    0.2 s with `syncfs`. syncfs reports write errors only from Linux 5.8 on, so older kernels
    and other systems keep the default. Takes effect at the server's next start.
    """
    release = tuple(int(part) for part in re.findall(r"\d+", platform.release())[:2])
    if platform.system() != "Linux" or release < (5, 8):
        return
    if await conn.fetchval("SELECT current_setting('recovery_init_sync_method')") != "syncfs":
        await conn.execute("ALTER SYSTEM SET recovery_init_sync_method = 'syncfs'")


async def _reset_connection(conn: PgConnection) -> None:
    """Run when a connection goes back to the pool: roll back a transaction left open.

    asyncpg's default reset also runs `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL` — one more round trip on every acquire, on the hot path of every visitor
    request. The host holds no session-level state on pooled connections (no LISTEN, no SET,
    no cursors; the migration lock is taken and released on its own connection), so only an
    open transaction needs undoing.
    """
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    await conn.set_type_codec("jsonb", schema="pg_catalog", encoder=json.dumps, decoder=json.loads, format="text")


async def _close_pool(pool: PgPool) -> None:
    with anyio.move_on_after(_POOL_CLOSE_GRACE_S, shield=True) as scope:
        await pool.close()
    if scope.cancelled_caught:
        _logger.warning("database pool did not close in %s s; terminating it", _POOL_CLOSE_GRACE_S)
        pool.terminate()


def _describe(dsn: str) -> str:
    """Where a DSN points, without credentials: `host:port/database`."""
    try:
        parts = urlsplit(dsn)
        query = parse_qs(parts.query)
        host = parts.hostname or (query.get("host") or ["localhost"])[0]
        port = parts.port or 5432
    except ValueError:  # several hosts, or a port that is not a number: asyncpg will say
        return "(a DSN this log does not parse)"
    database = parts.path.lstrip("/") or (query.get("dbname") or ["(default)"])[0]
    return f"{host}:{port}/{database}"
