"""Shared fixtures.

PostgreSQL: one embedded server (pgserver) per test run, started on first use; each test that
asks for `database_url` gets a fresh database on it, already migrated, dropped afterwards
(`empty_database_url`: one without even the host's schema, for the tests of migrating). Set
MCP_HOST_TEST_DATABASE_URL to use another server instead (its user needs CREATEDB).
`postgres_dir` is a directory for a test that runs an embedded server of its own.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest
import sniffio
from anyio import pytest_plugin as anyio_pytest_plugin
from pydantic import SecretStr

from mcp_host.settings import Settings
from mcp_host.store.database import Database, PgPool, open_database
from mcp_host.store.embedded_postgres import embedded_postgres
from mcp_host.store.migrations import apply_migrations
from tests.plugins.installed_once import InstalledOnce, run_folder


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
async def postgres_server() -> AsyncIterator[str]:
    """A DSN for a server where tests may create databases; its own database is left alone."""
    external = os.environ.get("MCP_HOST_TEST_DATABASE_URL")
    if external:
        async with _migrated_template(external):
            yield external
        return
    with _directory_outside_pytest() as parent:
        async with embedded_postgres(parent / "data") as dsn, _migrated_template(dsn):
            yield dsn


# The migrated template of each server `postgres_server` yields: `fresh_database` copies it (as
# fast as making an empty database) instead of every test's host migrating again (~1 s a test).
_MIGRATED_TEMPLATES: dict[str, str] = {}


@asynccontextmanager
async def _migrated_template(server: str) -> AsyncIterator[None]:
    """A database on `server` migrated to this host's schema, named in `_MIGRATED_TEMPLATES`
    while inside, dropped on exit. No one connects to it after: a template must be idle."""
    async with _new_database(server, template=None) as url:
        conn = await asyncpg.connect(url)
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()
        _MIGRATED_TEMPLATES[server] = urlsplit(url).path.lstrip("/")
        try:
            yield
        finally:
            del _MIGRATED_TEMPLATES[server]


@pytest.fixture
def postgres_dir() -> Iterator[Path]:
    """An empty directory for a test's own embedded server (or a data dir that holds one)."""
    with _directory_outside_pytest() as path:
        yield path


@contextmanager
def _directory_outside_pytest() -> Iterator[Path]:
    # Not under pytest's basetemp: run as root, pgserver adds o+rx to every directory above a
    # data directory so that its `pgserver` user can reach it, and any other pytest run on
    # the machine takes those bits off /tmp/pytest-of-<user> again, cutting the server off.
    path = Path(tempfile.mkdtemp(prefix="mcp-host-pg-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def fresh_database(postgres_server: str, *, migrated: bool = True) -> AsyncIterator[str]:
    """A DSN for a new database on `postgres_server`, dropped on exit: a copy of the migrated
    template (what a host finds after its first start's migrations), or empty (`migrated=False`).

    For fixtures wider than one test (a module's shared host); tests take `database_url`.
    """
    template = _MIGRATED_TEMPLATES[postgres_server] if migrated else None
    async with _new_database(postgres_server, template=template) as url:
        yield url


@asynccontextmanager
async def _new_database(server: str, *, template: str | None) -> AsyncIterator[str]:
    name = f"test_{secrets.token_hex(6)}"
    copy = "" if template is None else f' TEMPLATE "{template}"'
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"{copy}')
    finally:
        await admin.close()
    try:
        yield _dsn_with_database(server, name)
    finally:
        admin = await asyncpg.connect(server)
        try:
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def database_url(postgres_server: str) -> AsyncIterator[str]:
    """A DSN for a fresh database of this test alone, migrated to the host's schema."""
    async with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture
async def empty_database_url(postgres_server: str) -> AsyncIterator[str]:
    """A DSN for a fresh database of this test alone without even the host's schema."""
    async with fresh_database(postgres_server, migrated=False) as url:
        yield url


@pytest.fixture
async def database(database_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    """The host's `Database` on this test's database, migrated."""
    settings = Settings(database_url=SecretStr(database_url), data_dir=tmp_path)
    async with open_database(settings) as db:
        yield db


@pytest.fixture
def pool(database: Database) -> PgPool:
    return database.pool


@pytest.fixture(scope="session")
def installed_once(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> InstalledOnce:
    """The test packages installed with pip and npm once in the run, copied into the tests that
    need one installed but do not test its install (`tests/plugins/installed_once.py`)."""
    return InstalledOnce(run_folder(tmp_path_factory, request.config))


def _dsn_with_database(dsn: str, database: str) -> str:
    """`dsn` pointing at another database on the same server."""
    parts = urlsplit(dsn)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("dbname", "database")]
    return urlunsplit(parts._replace(path=f"/{database}", query=urlencode(query, safe="/")))


# -- tiers ------------------------------------------------------------------------------------

# What makes a test end to end: it runs a real PostgreSQL, real bubblewrap or the external MCP
# conformance suite. PostgreSQL: its fixture closure reaches `postgres_server` (as
# `database_url`, `database`, `pool` and so every `running_host` test do) or `postgres_dir` (a
# server of its own), or it is the "postgres" case of a contract test whose fixture looks the
# pool up at run time (`params=["postgres", "memory"]` with `request.getfixturevalue`, which no
# closure shows). Bubblewrap: it carries `needs_bwrap`. The suite: its closure reaches `suite`
# (tests/test_conformance.py, a node process against a live server). A real host, uvicorn or
# `mcp-host serve` run always has a database, so it falls under the first. A test none of these
# catch may carry `@pytest.mark.e2e` itself, as every test that installs with npm or pip does (an
# install is seconds of subprocess work, most of the logic tier's time when it ran there); one
# that takes `installed_once` (a copy of the run's one install, which it may be the one to make)
# is end to end by that fixture. Read from fixtures, parameters and marks, not file names: a test
# moved keeps its tier.
_END_TO_END_FIXTURES = frozenset({"postgres_server", "postgres_dir", "suite", "installed_once"})


def _end_to_end(item: pytest.Item) -> bool:
    from tests.processes import needs_bwrap

    if _END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    # Only strings are compared: a parameter may be an inline-snapshot, which equals anything.
    if callspec is not None and any(isinstance(v, str) and v == "postgres" for v in callspec.params.values()):
        return True
    return needs_bwrap.mark in item.iter_markers()


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark end-to-end tests `e2e`: `pytest -m "not e2e"` runs the in-process logic tier."""
    for item in items:
        if _end_to_end(item):
            item.add_marker(pytest.mark.e2e)


# -- no host outlives its test ----------------------------------------------------------------

# The coroutines of a running host's lifetime: uvicorn's lifespan task (detached: cancelling
# `server.serve` leaves it, and with it the whole host, running), the replica heartbeat, the
# change channel and the protocol session records' keep-alive. anyio's pytest plugin keeps one
# event loop for the whole run, so a host a test leaves behind goes on running into later tests,
# on a database its test dropped.
_HOST_LIFETIME = frozenset({"LifespanOn.main", "Replicas.run", "ChangeChannel.listen", "ProtocolSessions.keep_records"})


def _host_tasks() -> set[asyncio.Task[object]]:
    runner = anyio_pytest_plugin._current_runner  # the loop anyio's plugin runs every test in
    loop = getattr(getattr(runner, "_runner", None), "get_loop", None)
    if loop is None:
        return set()
    return {
        task
        for task in asyncio.all_tasks(loop())
        if getattr(task.get_coro(), "__qualname__", None) in _HOST_LIFETIME and not task.done()
    }


@pytest.fixture(autouse=True)
def no_host_left_running() -> Iterator[None]:
    """Fail a test that leaves a host running (wider fixtures' hosts, started before, are left
    alone), and cancel what it left so later tests run on a quiet loop."""
    before = _host_tasks()
    yield
    left = _host_tasks() - before
    if left:
        for task in left:
            task.cancel()
        names = sorted(str(getattr(task.get_coro(), "__qualname__", "?")) for task in left)
        pytest.fail(f"the test left a host running: {', '.join(names)}", pytrace=False)


@pytest.fixture(autouse=True)
def sync_tests_run_outside_the_session_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """A plain (sync) test runs as if no event loop were about: the session's async fixtures
    (the PostgreSQL server) keep anyio's runner, and with it sniffio's "asyncio" mark, alive
    between tests, and a sync test calling `mcp-host`'s `main()` (whose commands call
    `anyio.run`) would fail with "Already running asyncio in this thread" — or not, depending
    on which tests xdist happened to run before it on the same worker."""
    if inspect.iscoroutinefunction(request.function):
        yield
        return
    token = sniffio.current_async_library_cvar.set(None)
    before, sniffio.thread_local.name = sniffio.thread_local.name, None
    try:
        yield
    finally:
        sniffio.thread_local.name = before
        sniffio.current_async_library_cvar.reset(token)
