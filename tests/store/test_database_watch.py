"""Losing PostgreSQL (issue 11, defect 4): what counts as an outage, the watch that restarts
the embedded server and says so once, the embedded server's restart after `kill -9`, and a
real host through a real outage — liveness stays up, readiness goes down, visitors get
`unavailable` and 503s (never a 500 or a traceback), the host restarts its database by
itself and nothing acknowledged is lost; with a database URL, nothing is restarted."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import asyncpg
import asyncpg.exceptions
import pytest
from inline_snapshot import snapshot

from mcp_host.errors import DatabaseUnavailable, Unavailable, as_unavailable, is_connection_failure
from mcp_host.settings import Settings
from mcp_host.store.database import Database, open_database
from mcp_host.store.database_watch import DatabaseLost, DatabaseWatch, RecoveryLimits
from mcp_host.store.embedded_postgres import embedded_server
from tests.hosting import RunningHost, free_port, host_settings, running_host, wait_serving, wait_until

pytestmark = pytest.mark.anyio

OUTAGE_MESSAGE = "the database is unavailable; try again shortly"


# -- what counts as an outage ---------------------------------------------------------------

CONNECTION_FAILURES = [
    DatabaseUnavailable(),
    asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.exceptions.ConnectionFailureError("connection failure"),
    asyncpg.exceptions.ProtocolViolationError("protocol violation"),
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.exceptions.CrashShutdownError("terminating connection because of crash of another server process"),
    asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
    asyncpg.exceptions.DatabaseDroppedError("database dropped"),
    asyncpg.InterfaceError("connection is closed"),
    asyncpg.InterfaceError("pool is closing"),
    asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    ExceptionGroup("calls", [asyncpg.InterfaceError("connection is closed"), DatabaseUnavailable()]),
]
NOT_OUTAGES = [
    asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout"),  # 57014
    asyncpg.exceptions.UniqueViolationError("duplicate key"),
    asyncpg.exceptions.UndefinedTableError("relation does not exist"),
    asyncpg.exceptions.DataError("invalid input"),  # SQLSTATE 22000
    asyncpg.exceptions._base.DataError("invalid input for query argument $1"),  # the caller's value
    asyncpg.exceptions.UnsupportedClientFeatureError("not supported"),
    asyncpg.exceptions.OutdatedSchemaCacheError("cached statement plan is invalid"),
    OSError("a pipe broke"),  # outside a connect it could be anything
    ValueError("bug"),
    Unavailable("a child is down"),
    ExceptionGroup("calls", [asyncpg.InterfaceError("connection is closed"), ValueError("bug")]),
]


@pytest.mark.parametrize("exc", CONNECTION_FAILURES, ids=lambda e: type(e).__name__)
def test_connection_class_failures_are_answered_as_unavailable(exc: Exception) -> None:
    assert is_connection_failure(exc)
    outage = as_unavailable(exc)
    assert outage is not None
    assert (outage.code, outage.message) == ("unavailable", OUTAGE_MESSAGE)
    assert isinstance(outage, Unavailable)
    assert outage is exc or outage.__cause__ is exc


@pytest.mark.parametrize("exc", NOT_OUTAGES, ids=lambda e: type(e).__name__)
def test_other_failures_are_no_outage(exc: Exception) -> None:
    assert not is_connection_failure(exc)
    assert as_unavailable(exc) is None


# -- the watch, with a twin of the embedded server ---------------------------------------------


class TwinServer:
    """A restartable server whose death and failed restarts the test decides."""

    def __init__(self, *, failing_restarts: int = 0) -> None:
        self.alive = True
        self.failing_restarts = failing_restarts
        self.restart_calls = 0
        self._exited = anyio.Event()

    def running(self) -> bool:
        return self.alive

    async def wait_exit(self) -> None:
        await self._exited.wait()

    def die(self) -> None:
        self.alive = False
        self._exited.set()

    async def restart(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.restart_calls += 1
        if self.failing_restarts:
            self.failing_restarts -= 1
            raise RuntimeError("pg_ctl: could not start server")
        self.alive = True
        self._exited = anyio.Event()


FAST = RecoveryLimits(attempts=3, backoff_s=0.01, backoff_max_s=0.02)
RESTARTING = (
    "database outage: the embedded server exited, restarting it; calls that need it get `unavailable` meanwhile"
)


def _said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """What the watch logged, without the outage's length."""
    return [
        (r.levelname, r.getMessage().split(" after ")[0]) for r in caplog.records if r.name == "mcp_host.store.database"
    ]


async def test_the_watch_restarts_a_dead_server_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    server = TwinServer(failing_restarts=1)

    async def probe() -> bool:
        return server.alive

    watch = DatabaseWatch(probe, server=server, limits=FAST)
    with caplog.at_level(logging.INFO, logger="mcp_host.store.database"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run)
            for outages in (1, 2):
                server.die()

                def back_up(n: int = outages) -> bool:
                    return watch.outages == n and watch.down_since is None

                await wait_until(back_up)
            tg.cancel_scope.cancel()
    assert (watch.outages, watch.restarts, server.restart_calls) == (2, 2, 3)
    assert _said(caplog) == snapshot(
        [
            ("WARNING", RESTARTING),
            ("WARNING", "embedded PostgreSQL: restart 1 of 3 failed (RuntimeError)"),
            ("INFO", "database outage over"),
            ("WARNING", RESTARTING),
            ("INFO", "database outage over"),
        ]
    )


async def test_the_watch_gives_up_after_its_restart_attempts() -> None:
    server = TwinServer(failing_restarts=10)

    async def probe() -> bool:
        return server.alive

    watch = DatabaseWatch(probe, server=server, limits=FAST)
    server.die()
    with anyio.fail_after(5), pytest.raises(DatabaseLost) as lost:
        await watch.run()
    assert str(lost.value) == snapshot("the embedded database did not restart after 3 attempts; stopping the host")
    assert server.restart_calls == 3


async def test_a_server_reached_by_url_is_waited_for_not_restarted(caplog: pytest.LogCaptureFixture) -> None:
    answers = False
    probes = 0

    async def probe() -> bool:
        nonlocal probes
        probes += 1
        return answers

    watch = DatabaseWatch(probe, limits=FAST)
    with caplog.at_level(logging.INFO, logger="mcp_host.store.database"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run)
            watch.suspect()  # a connect failed
            await wait_until(lambda: watch.down_since is not None and probes >= 3)
            answers = True
            await wait_until(lambda: watch.down_since is None)
            tg.cancel_scope.cancel()
    assert watch.restarts == 0
    assert _said(caplog) == snapshot(
        [
            ("WARNING", "database outage: no answer, waiting for it; calls that need it get `unavailable` meanwhile"),
            ("INFO", "database outage over"),
        ]
    )


async def test_a_cut_connection_with_the_database_answering_is_no_outage(caplog: pytest.LogCaptureFixture) -> None:
    probes = 0

    async def probe() -> bool:
        nonlocal probes
        probes += 1
        return True

    watch = DatabaseWatch(probe, server=TwinServer(), limits=FAST)
    with caplog.at_level(logging.DEBUG, logger="mcp_host.store.database"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run)
            watch.suspect()
            await wait_until(lambda: probes == 1)
            tg.cancel_scope.cancel()
    assert (watch.outages, _said(caplog)) == (0, [])


def test_recovery_defaults_are_pinned(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert {
        "attempts": settings.database.restart_attempts,
        "backoff_s": settings.database.restart_backoff_s,
        "backoff_max_s": settings.database.restart_backoff_max_s,
        "retry_after_s": settings.database.retry_after_s,
        "readiness_timeout_s": settings.database.readiness_timeout_s,
        "auth_outage_grace_s": settings.access.auth_outage_grace_s,
    } == snapshot(
        {
            "attempts": 5,
            "backoff_s": 0.25,
            "backoff_max_s": 5.0,
            "retry_after_s": 2,
            "readiness_timeout_s": 1.0,
            "auth_outage_grace_s": 60.0,
        }
    )
    assert RecoveryLimits() == RecoveryLimits(
        attempts=settings.database.restart_attempts,
        backoff_s=settings.database.restart_backoff_s,
        backoff_max_s=settings.database.restart_backoff_max_s,
        probe_timeout_s=settings.database.readiness_timeout_s,
    )


async def test_concurrent_readiness_probes_share_one_query(database: Database) -> None:
    answers: list[bool] = []

    async def probe() -> None:
        answers.append(await database.answers(timeout_s=5))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(probe)
    assert answers == [True] * 20
    assert database.pool.get_size() == 1  # one probe ran; the others waited for its answer


# -- the embedded server ------------------------------------------------------------------------


def _postmaster_pid(pgdata: Path) -> int:
    """The postmaster's pid, as pgserver (PostgreSQL) writes it: line 1 of postmaster.pid."""
    return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])


@contextmanager
def _no_access(folder: Path) -> Iterator[None]:
    """While open, PostgreSQL (its own system user, or ours) cannot enter `folder`: a restart fails."""
    mode = folder.stat().st_mode & 0o7777
    folder.chmod(0)
    try:
        yield
    finally:
        folder.chmod(mode)


async def test_a_killed_embedded_server_is_seen_to_exit_and_restarts_with_its_data(postgres_dir: Path) -> None:
    pgdata = postgres_dir / "pg"
    async with embedded_server(pgdata) as server:
        conn = await asyncpg.connect(server.dsn)
        try:
            await conn.execute("CREATE TABLE kept (n int); INSERT INTO kept SELECT generate_series(1, 100)")
        finally:
            await conn.close()
        killed = _postmaster_pid(pgdata)
        assert server.pid == killed and server.running()
        with anyio.fail_after(30):
            os.kill(killed, signal.SIGKILL)
            await server.wait_exit()
            assert not server.running()
            # Its zombie still holds the lock files' pid: the restart must not take it for a server.
            assert (pgdata / "postmaster.pid").exists() and (pgdata / ".s.PGSQL.5432.lock").exists()
            await server.restart()
        assert server.running() and server.pid == _postmaster_pid(pgdata) != killed
        conn = await asyncpg.connect(server.dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM kept") == 100
        finally:
            await conn.close()


async def test_an_embedded_server_that_cannot_be_restarted_ends_the_open_database(postgres_dir: Path) -> None:
    settings = Settings(
        data_dir=postgres_dir,
        database_restart_attempts=2,
        database_restart_backoff_s=0.01,
        database_restart_backoff_max_s=0.02,
    )
    pgdata = postgres_dir / "postgres"
    with pytest.raises(ExceptionGroup) as ended:
        async with open_database(settings):
            with _no_access(pgdata), anyio.fail_after(30):
                os.kill(_postmaster_pid(pgdata), signal.SIGKILL)
                await anyio.sleep_forever()  # the host's life, until the watch gives up
    assert ended.group_contains(DatabaseLost, match="did not restart after 2 attempts")


# -- a real host --------------------------------------------------------------------------------


async def _wait_ready(running: RunningHost, within_s: float = 30.0) -> None:
    with anyio.fail_after(within_s):
        while (await running.http.get(f"{running.url}/readyz")).status_code != 200:  # noqa: ASYNC110 - another server's state
            await anyio.sleep(0.05)


def _host_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("mcp_host", "owner_facade", "uvicorn", "asyncpg"))]


async def test_the_host_restarts_its_killed_database_and_refuses_calls_cleanly_meanwhile(
    postgres_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = host_settings(
        postgres_dir,
        None,  # no URL: the host runs its own embedded PostgreSQL
        ["notes"],
        database_restart_attempts=1000,
        database_restart_backoff_s=0.05,
        database_restart_backoff_max_s=0.2,
    )
    pgdata = settings.data_dir / "postgres"
    caplog.set_level(logging.INFO)
    async with running_host(settings) as running:
        owner_token = (settings.data_dir / "owner-token").read_text().strip()
        owner = {"Authorization": f"Bearer {owner_token}"}
        session = await running.new_session()
        visitor = {"Authorization": f"Bearer {session['token']}"}
        ready = await running.http.get(f"{running.url}/readyz")
        assert (ready.status_code, ready.json()) == (
            200,
            {"ready": True, "failed": [], "checks": {"database": "ok", "children": "ok", "lists": "ok"}},
        )
        async with running.client(session) as client:
            for i in range(5):
                added = await client.call_tool("note_add", {"text": f"before {i}"})
                assert not added.is_error, added

            # The host runs in this event loop: nothing of it runs between these two lines, so
            # the postmaster is dead and cannot be restarted until the test lets it.
            os.kill(_postmaster_pid(pgdata), signal.SIGKILL)
            with _no_access(pgdata):
                watch = running.database_watch
                assert watch is not None
                await wait_until(lambda: watch.down_since is not None)
                outage_began = len(caplog.records)

                health = await running.http.get(f"{running.url}/healthz")
                assert (health.status_code, health.json()) == (200, {"ok": True})
                ready = await running.http.get(f"{running.url}/readyz")
                assert (ready.status_code, ready.json()) == (
                    503,
                    {
                        "ready": False,
                        "failed": ["database"],
                        "checks": {"database": "unavailable", "children": "ok", "lists": "ok"},
                    },
                )
                refused = await client.call_tool("note_add", {"text": "during"})
                assert (refused.is_error, refused.structured_content) == (
                    True,
                    {"code": "unavailable", "message": OUTAGE_MESSAGE},
                )
                turns = f"{running.url}/v1/sessions/{session['session_id']}/turns"
                for response in (
                    await running.http.post(f"{running.url}/v1/sessions", json={}),
                    await running.http.post(turns, json={"message": "hi"}, headers=visitor),
                    await running.http.get(f"{running.url}/v1/catalogue", headers=owner),
                ):
                    assert (response.status_code, response.headers.get("retry-after"), response.json()) == (
                        503,
                        "2",
                        {"error": "unavailable", "message": OUTAGE_MESSAGE},
                    )
                outage_records = _host_records(caplog)[outage_began:]
                assert [r for r in outage_records if r.exc_info or r.levelno >= logging.ERROR] == []
                assert not any(r.name.startswith("uvicorn") for r in outage_records)  # no 500, no traceback

            await _wait_ready(running)  # restarted by the host: nothing here starts it
            added = await client.call_tool("note_add", {"text": "after"})
            assert not added.is_error, added
            listed = await client.call_tool("note_list", {})
            assert [n["text"] for n in (listed.structured_content or {})["notes"]] == [
                *(f"before {i}" for i in range(5)),
                "after",
            ]
        assert (await running.http.post(f"{running.url}/v1/sessions", json={})).status_code == 201
        assert (await running.http.get(f"{running.url}/v1/catalogue", headers=owner)).status_code == 200
        await wait_until(lambda: watch.down_since is None, within_s=30)  # its restart may outlast readiness
        assert (watch.outages, watch.restarts) == (1, 1)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.getMessage().startswith("database outage")]
    assert [level for level, _ in said] == ["WARNING", "INFO"]


async def test_with_a_database_url_the_host_waits_for_the_server_and_restarts_nothing(
    postgres_dir: Path, tmp_path: Path
) -> None:
    pgdata = postgres_dir / "pg"
    async with embedded_server(pgdata) as server:
        settings = host_settings(tmp_path, server.dsn, ["notes"])
        async with running_host(settings) as running:
            session = await running.new_session()
            async with running.client(session) as client:
                assert not (await client.call_tool("note_add", {"text": "kept"})).is_error
                os.kill(_postmaster_pid(pgdata), signal.SIGKILL)
                with anyio.fail_after(10):
                    await server.wait_exit()
                refused = await client.call_tool("note_add", {"text": "refused"})
                assert refused.structured_content == {"code": "unavailable", "message": OUTAGE_MESSAGE}
                opened = await running.http.post(f"{running.url}/v1/sessions", json={})
                assert (opened.status_code, opened.headers.get("retry-after")) == (503, "2")
                watch = running.database_watch
                assert watch is not None
                await wait_until(lambda: watch.down_since is not None)
                assert (await running.http.get(f"{running.url}/healthz")).status_code == 200
                assert (await running.http.get(f"{running.url}/readyz")).status_code == 503
                assert not server.running()  # the host never starts a server it was given by URL
                await server.restart()  # its operator does
                await _wait_ready(running)
                assert not (await client.call_tool("note_add", {"text": "again"})).is_error
                listed: Any = (await client.call_tool("note_list", {})).structured_content
                assert [n["text"] for n in listed["notes"]] == ["kept", "again"]
            assert watch.restarts == 0


async def test_serve_exits_non_zero_when_the_host_ends_by_itself(postgres_dir: Path) -> None:
    """A host whose database is lost for good stops, and `mcp-host serve` exits 1 for its
    supervisor to restart it — not a live process answering 503 to everything (issue 11)."""
    port = free_port()
    env = {
        **os.environ,
        "MCP_HOST_DATABASE_RESTART_ATTEMPTS": "1",
        "MCP_HOST_DATABASE_RESTART_BACKOFF_S": "0.01",
        "MCP_HOST_PRESTART_CHILDREN": "false",
    }
    command = [
        str(Path(sys.executable).parent / "mcp-host"),
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(postgres_dir),
    ]
    async with await anyio.open_process(command, env=env) as process:
        await wait_serving(f"http://127.0.0.1:{port}", lambda: process.returncode is None, path="/readyz")
        pgdata = postgres_dir / "postgres"
        with _no_access(pgdata), anyio.fail_after(60):
            os.kill(_postmaster_pid(pgdata), signal.SIGKILL)
            assert await process.wait() == 1
