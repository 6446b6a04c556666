"""The host's PostgreSQL: one asyncpg pool, checked for durability, migrated, with timeouts.

Below: asyncpg; `embedded_postgres` when no database URL is configured; `migrations`.
Above: every store (sessions, owners, later store/config/quota), which receives
`Database.pool`, and the composition root, which opens the database once per process.

Every pooled connection carries `statement_timeout`, `lock_timeout` and
`idle_in_transaction_session_timeout` (SECURITY B10: a transaction a caller leaves open is
ended by the server, releasing its locks), and decodes `jsonb` to Python values. A
connection the server dropped (restart, failover) is discarded by the pool and replaced on a
later acquire; the query that met the broken connection fails and is not retried here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import parse_qs, urlsplit

import anyio
import asyncpg

from mcp_host.embedded_postgres import embedded_postgres
from mcp_host.migrations import apply_migrations

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

_logger = logging.getLogger("mcp_host.database")

# How long closing the pool waits for borrowed connections before cutting them.
_POOL_CLOSE_GRACE_S = 10.0


class UnsafeDatabaseSettings(Exception):
    """The server is configured so that a committed write may not survive a crash.

    Raised at start only (SECURITY F1); the host refuses to serve on such a server.
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
    """An open, checked and migrated database. Stores share `pool`; nothing else is kept."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    @property
    def pool(self) -> PgPool:
        return self._pool


@asynccontextmanager
async def open_database(
    settings: Settings, *, limits: DatabaseLimits | None = None
) -> AsyncIterator[Database]:
    """Open the configured server (or start the embedded one), check it, migrate it.

    With `settings.database_url` set, that server is used; otherwise an embedded PostgreSQL
    runs under `settings.data_dir / "postgres"` until the context exits. Raises
    `UnsafeDatabaseSettings` for a server with `fsync` off and `MigrationError` for a schema
    this host cannot run on; asyncpg's connection errors pass through.
    """
    limits = limits or DatabaseLimits()
    async with AsyncExitStack() as stack:
        if settings.database_url is not None:
            dsn = settings.database_url.get_secret_value()
            _logger.info("using the PostgreSQL server at %s", _describe(dsn))
        else:
            dsn = await stack.enter_async_context(embedded_postgres(settings.data_dir / "postgres"))
        pool = await asyncpg.create_pool(
            dsn,
            min_size=limits.min_connections,
            max_size=limits.max_connections,
            timeout=limits.connect_timeout_s,
            server_settings=limits.server_settings(),
            init=_init_connection,
            reset=_reset_connection,
        )
        stack.push_async_callback(_close_pool, pool)
        async with pool.acquire() as conn:
            await check_durability(conn)
            await apply_migrations(conn)
        yield Database(pool)


async def check_durability(conn: PgConnection) -> None:
    """Refuse a server where a commit may not be durable; warn where recent ones may be lost.

    Raises `UnsafeDatabaseSettings` when `fsync` is off (a crash can corrupt the database).
    `synchronous_commit = off` keeps the database consistent but may lose the last commits
    after a crash, so it is logged as a warning and allowed (SECURITY F1).
    """
    row = await conn.fetchrow(
        "SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sync"
    )
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
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=json.dumps, decoder=json.loads, format="text"
    )


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
