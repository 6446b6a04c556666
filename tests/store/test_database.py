"""The database layer: migrations (once, in order, atomic, under concurrency), the pool's
session settings, the durability check, and the embedded server's start, restart and
recovery from a host that was killed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import asyncpg
import psutil
import pytest
from inline_snapshot import snapshot
from pydantic import SecretStr

from mcp_host.settings import Settings
from mcp_host.store.database import (
    Database,
    DatabaseLimits,
    UnsafeDatabaseSettings,
    open_database,
)
from mcp_host.store.embedded_postgres import EmbeddedPostgresError, embedded_postgres
from mcp_host.store.migrations import MIGRATIONS_LOCK_ID, MigrationError, apply_migrations, load_migrations
from tests.hosting import wait_until

pytestmark = pytest.mark.anyio

# Every migration this host ships, as `schema_migrations` records them.
MIGRATED = [
    (1, "core"),
    (2, "config"),
    (3, "access"),
    (4, "connections"),
    (5, "pins"),
    (6, "audit"),
    (7, "holds"),
    (8, "turns"),
    (9, "owner_profile"),
    (10, "replicas"),
    (11, "protocol_sessions"),
    (12, "rules"),
    (13, "node_grants"),
    (14, "console_sessions"),
    (15, "rule_notices"),
    (16, "tool_search"),
    (17, "caps_and_retention"),
    (18, "oauth"),
    (19, "session_token_lookup"),
    (20, "oauth_grants_seen"),
    (21, "remote_sign_ins"),
    (22, "desk_email"),
    (23, "plugin_egress"),
    (24, "app_contents"),
]


def _settings(data_dir: Path, dsn: str | None = None) -> Settings:
    return Settings(data_dir=data_dir, database_url=None if dsn is None else SecretStr(dsn))


async def _waiters(conn: asyncpg.Connection, locktype: str) -> int:
    count = await conn.fetchval(
        """
        SELECT count(*) FROM pg_locks
        WHERE locktype = $1 AND NOT granted
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        """,
        locktype,
    )
    assert isinstance(count, int)
    return count


async def _wait_for_waiters(conn: asyncpg.Connection, locktype: str, count: int) -> None:
    """Poll until `count` backends of this database wait for a lock of `locktype`."""
    with anyio.fail_after(10):
        while True:
            if await _waiters(conn, locktype) >= count:
                return
            await anyio.sleep(0.01)


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


# -- migrations ---------------------------------------------------------------------------


async def test_migrations_are_applied_once_and_recorded(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        assert await apply_migrations(conn) == [v for v, _ in MIGRATED]
        assert await apply_migrations(conn) == []
        recorded = await conn.fetch("SELECT version, name FROM mcp_host.schema_migrations")
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'mcp_host' ORDER BY 1"
        )
    finally:
        await conn.close()
    assert [tuple(r) for r in recorded] == MIGRATED
    assert [r["table_name"] for r in tables] == snapshot(
        [
            "access_codes",
            "api_keys",
            "app_contents",
            "audit",
            "config_values",
            "connections",
            "console_sessions",
            "holds",
            "host_settings",
            "node_grants",
            "oauth_clients",
            "oauth_codes",
            "oauth_grants",
            "oauth_requests",
            "oauth_tokens",
            "owner_tokens",
            "owners",
            "plugin_egress",
            "protocol_sessions",
            "receipts",
            "remote_sign_ins",
            "replicas",
            "roles",
            "rule_calls",
            "rule_sets",
            "schema_migrations",
            "sessions",
            "tool_pins",
            "turns",
        ]
    )


async def test_open_database_migrates_and_a_second_start_applies_nothing(
    empty_database_url: str, tmp_path: Path
) -> None:
    query = "SELECT version, name, applied_at FROM mcp_host.schema_migrations"
    async with open_database(_settings(tmp_path, empty_database_url)) as db:
        first = [tuple(r) for r in await db.pool.fetch(query)]
    async with open_database(_settings(tmp_path, empty_database_url)) as db:
        second = [tuple(r) for r in await db.pool.fetch(query)]
    assert [row[:2] for row in first] == MIGRATED
    assert second == first


async def test_later_migration_files_are_applied_in_order_on_a_later_start(
    empty_database_url: str, tmp_path: Path
) -> None:
    folder = _write(
        tmp_path / "m",
        {
            "001_first.sql": "CREATE TABLE mcp_host.t (v int); INSERT INTO mcp_host.t VALUES (1);",
            "README.txt": "not a migration",
        },
    )
    conn = await asyncpg.connect(empty_database_url)
    try:
        assert await apply_migrations(conn, load_migrations(folder)) == [1]
        _write(folder, {"002_second.sql": "INSERT INTO mcp_host.t VALUES (2);"})
        assert await apply_migrations(conn, load_migrations(folder)) == [2]
        values = [r["v"] for r in await conn.fetch("SELECT v FROM mcp_host.t ORDER BY v")]
        recorded = [tuple(r) for r in await conn.fetch("SELECT version, name FROM mcp_host.schema_migrations")]
    finally:
        await conn.close()
    assert values == [1, 2]
    assert sorted(recorded) == [(1, "first"), (2, "second")]


async def test_a_failing_migration_leaves_no_trace_of_itself(empty_database_url: str, tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "m",
        {
            "001_first.sql": "CREATE TABLE mcp_host.a (v int);",
            "002_broken.sql": "CREATE TABLE mcp_host.b (v int); SELECT 1 / 0;",
        },
    )
    conn = await asyncpg.connect(empty_database_url)
    try:
        with pytest.raises(asyncpg.DivisionByZeroError):
            await apply_migrations(conn, load_migrations(folder))
        recorded = [tuple(r) for r in await conn.fetch("SELECT version, name FROM mcp_host.schema_migrations")]
        tables = [r[0] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'mcp_host'")]
        # The connection's session settings are back to what they were before the run.
        lock_timeout = await conn.fetchval("SELECT current_setting('lock_timeout')")
    finally:
        await conn.close()
    assert recorded == [(1, "first")]
    assert sorted(tables) == ["a", "schema_migrations"]
    assert lock_timeout == "0"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"001_a.sql": "", "003_c.sql": ""},
            "migration versions must run 1..n without gaps or repeats: [1, 3]",
        ),
        ({"002_b.sql": ""}, "migration versions must run 1..n without gaps or repeats: [2]"),
        (
            {"001_a.sql": "", "001_b.sql": ""},
            "migration versions must run 1..n without gaps or repeats: [1, 1]",
        ),
        ({"1_a.sql": ""}, "1_a.sql: a migration file is named NNN_lower_words.sql"),
        ({"001_Add-Table.sql": ""}, "001_Add-Table.sql: a migration file is named NNN_lower_words.sql"),
    ],
)
def test_migration_files_out_of_grammar_are_refused(tmp_path: Path, files: dict[str, str], message: str) -> None:
    with pytest.raises(MigrationError) as caught:
        load_migrations(_write(tmp_path / "m", files))
    assert str(caught.value) == message


async def test_a_recorded_migration_under_another_name_is_refused(empty_database_url: str, tmp_path: Path) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        await apply_migrations(conn, load_migrations(_write(tmp_path / "a", {"001_first.sql": ""})))
        with pytest.raises(MigrationError) as caught:
            await apply_migrations(conn, load_migrations(_write(tmp_path / "b", {"001_other.sql": ""})))
    finally:
        await conn.close()
    assert str(caught.value) == "database recorded migration 001 as 'first', this host has 'other'"


async def test_concurrent_migration_runs_apply_each_file_once(empty_database_url: str) -> None:
    holder, first, second = [await asyncpg.connect(empty_database_url) for _ in range(3)]
    results: dict[str, list[int]] = {}

    async def run(name: str, conn: asyncpg.Connection) -> None:
        results[name] = await apply_migrations(conn)

    try:
        # Hold the migration lock so that both runs are queued before either starts.
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATIONS_LOCK_ID)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "first", first)
                tg.start_soon(run, "second", second)
                await _wait_for_waiters(holder, "advisory", 2)
                await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATIONS_LOCK_ID)
        recorded = [tuple(r) for r in await holder.fetch("SELECT version, name FROM mcp_host.schema_migrations")]
    finally:
        for conn in (holder, first, second):
            await conn.close()
    assert sorted(results.values()) == [[], [v for v, _ in MIGRATED]]
    assert recorded == MIGRATED


# -- the pool -----------------------------------------------------------------------------


async def test_pool_connections_carry_timeouts_and_decode_jsonb(database_url: str, tmp_path: Path) -> None:
    # One connection: the one that ran the migrations (which change and restore these
    # settings) is the one the query gets.
    async with open_database(_settings(tmp_path, database_url), limits=DatabaseLimits(max_connections=1)) as db:
        row = await db.pool.fetchrow(
            """
            SELECT current_setting('statement_timeout') AS statement_timeout,
                   current_setting('lock_timeout') AS lock_timeout,
                   current_setting('idle_in_transaction_session_timeout') AS idle_in_transaction,
                   current_setting('application_name') AS application_name,
                   $1::jsonb AS doc
            """,
            {"a": [1, "x", None], "big": 2**60},
        )
    assert row is not None
    assert dict(row) == snapshot(
        {
            "statement_timeout": "30s",
            "lock_timeout": "5s",
            "idle_in_transaction": "10s",
            "application_name": "mcp-host",
            "doc": {"a": [1, "x", None], "big": 1152921504606846976},
        }
    )


async def test_a_transaction_left_idle_is_ended_and_its_locks_released(database_url: str, tmp_path: Path) -> None:
    limits = DatabaseLimits(idle_in_transaction_timeout_s=0.2)
    async with open_database(_settings(tmp_path, database_url), limits=limits) as db:
        stuck = await db.pool.acquire()
        cut = anyio.Event()
        stuck.add_termination_listener(lambda _conn: cut.set())
        try:
            await stuck.execute("BEGIN; SELECT pg_advisory_xact_lock(42)")
            # A second claimer waits for the lock; the server ends the idle holder's session
            # and the waiter proceeds, well within the pool's lock_timeout.
            with anyio.fail_after(5):
                async with db.pool.acquire() as other, other.transaction():
                    await other.execute("SELECT pg_advisory_xact_lock(42)")
                await cut.wait()
        finally:
            await db.pool.release(stuck)  # a no-op once the pool has dropped the cut connection
        assert await db.pool.fetchval("SELECT 1") == 1


async def test_synchronous_commit_off_is_allowed_with_a_warning(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        name = await conn.fetchval("SELECT current_database()")
        await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    finally:
        await conn.close()
    with caplog.at_level(logging.WARNING, logger="mcp_host.store.database"):
        async with open_database(_settings(tmp_path, database_url)) as db:
            assert await db.pool.fetchval("SHOW synchronous_commit") == "off"
    assert [r.getMessage() for r in caplog.records if r.name == "mcp_host.store.database"] == snapshot(
        [
            "PostgreSQL runs with synchronous_commit = off: the last commits before a crash may be lost, "
            "so a receipt may outlive its row; set synchronous_commit = on"
        ]
    )


async def test_fsync_off_is_refused(postgres_dir: Path) -> None:
    async with embedded_postgres(postgres_dir / "pg") as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("ALTER SYSTEM SET fsync = off")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()
        with anyio.fail_after(10):  # the reload reaches the postmaster asynchronously
            while True:
                if await _fresh_setting(dsn, "fsync") == "off":
                    break
                await anyio.sleep(0.01)
        with pytest.raises(UnsafeDatabaseSettings) as caught:
            async with open_database(_settings(postgres_dir, dsn)):
                pass
    assert str(caught.value) == snapshot(
        "PostgreSQL runs with fsync = off: a crash can lose or corrupt committed data; set fsync = on"
    )


async def _fresh_setting(dsn: str, name: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        value = await conn.fetchval("SELECT current_setting($1)", name)
    finally:
        await conn.close()
    assert isinstance(value, str)
    return value


# -- the embedded server ------------------------------------------------------------------


async def test_without_a_url_the_embedded_server_runs_under_the_data_dir(
    postgres_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="mcp_host.store.database"):
        async with open_database(_settings(postgres_dir)) as db:
            data_directory = await db.pool.fetchval("SHOW data_directory")
            recorded = [tuple(r) for r in await db.pool.fetch("SELECT version, name FROM mcp_host.schema_migrations")]
    pgdata = (postgres_dir / "postgres").resolve()
    assert data_directory == str(pgdata)
    assert recorded == MIGRATED
    assert not (pgdata / "postmaster.pid").exists()  # stopped on exit
    assert any(f"data in {pgdata}" in r.getMessage() for r in caplog.records)


async def test_a_stale_postmaster_pid_file_does_not_block_the_next_start(postgres_dir: Path) -> None:
    pgdata = postgres_dir / "pg"
    async with embedded_postgres(pgdata) as dsn:
        pid_file = (pgdata / "postmaster.pid").read_text()
    # As after a container restart: the pid in the file now names an unrelated live process.
    (pgdata / "postmaster.pid").write_text(f"{os.getpid()}\n" + pid_file.split("\n", 1)[1])
    async with embedded_postgres(pgdata) as again:
        assert again == dsn
        assert await _fresh_setting(again, "data_directory") == str(pgdata.resolve())


async def test_a_server_left_running_by_a_killed_host_is_adopted_then_stopped(postgres_dir: Path) -> None:
    pgdata = postgres_dir / "pg"
    script = (
        "import sys, anyio\n"
        "from pathlib import Path\n"
        "from mcp_host.store.embedded_postgres import embedded_postgres\n"
        "async def main():\n"
        "    async with embedded_postgres(Path(sys.argv[1])) as dsn:\n"
        "        sys.stdout.write(dsn + '\\n'); sys.stdout.flush()\n"
        "        await anyio.sleep_forever()\n"
        "anyio.run(main)\n"
    )
    with anyio.fail_after(60):
        async with await anyio.open_process(
            [sys.executable, "-W", "ignore", "-c", script, str(pgdata)], stdout=subprocess.PIPE
        ) as host:
            assert host.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await host.stdout.receive()
            host.kill()  # SIGKILL: no cleanup runs in the host
            await host.wait()
        dsn = line.decode().strip()
        postmaster = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        assert _running(postmaster)
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == [host.pid]

        async with embedded_postgres(pgdata) as adopted:
            assert adopted == dsn
            assert int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0]) == postmaster
            assert await _fresh_setting(adopted, "data_directory") == str(pgdata.resolve())
        # `pg_ctl -w stop` returns once the postmaster removed its pid file, a moment before
        # the process is gone (seen on a loaded machine).
        await wait_until(lambda: not _running(postmaster), within_s=10)


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)  # psutil is untyped: Any otherwise
    except psutil.NoSuchProcess:
        return False


async def test_a_data_dir_too_long_for_a_private_socket_is_refused(tmp_path: Path) -> None:
    pgdata = tmp_path / ("d" * 120)
    with pytest.raises(EmbeddedPostgresError) as caught:
        async with embedded_postgres(pgdata):
            pass
    assert str(caught.value) == (
        f"{pgdata}: path too long for the database's unix socket ({pgdata}/.s.PGSQL.5432); "
        "choose a shorter data directory"
    )
    assert not pgdata.exists()


async def test_the_pool_recovers_after_the_server_restarts(postgres_dir: Path) -> None:
    pgdata = postgres_dir / "pg"
    async with AsyncExitStack() as stack:
        server = AsyncExitStack()
        stack.push_async_callback(lambda: server.aclose())  # whichever server runs by then
        dsn = await server.enter_async_context(embedded_postgres(pgdata))
        db = await stack.enter_async_context(open_database(_settings(postgres_dir, dsn)))
        session = await db.pool.fetchval("SELECT pg_backend_pid()")

        with anyio.fail_after(30):
            await server.aclose()  # pg_ctl stop: the pool's connections are cut
            server = AsyncExitStack()
            assert await server.enter_async_context(embedded_postgres(pgdata)) == dsn
            attempts, pid = await _query_with_retry(db)
    assert pid != session
    assert attempts <= 2


async def _query_with_retry(db: Database) -> tuple[int, int]:
    """The first query after a restart may meet a connection the server cut: retry, bounded."""
    for attempt in range(1, 4):
        try:
            pid = await db.pool.fetchval("SELECT pg_backend_pid()")
        except (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.AdminShutdownError, OSError):
            if attempt == 3:
                raise
            continue
        assert isinstance(pid, int)
        return attempt, pid
    raise AssertionError("unreachable")
