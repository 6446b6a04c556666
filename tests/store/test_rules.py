"""`RuleStore.state` cached while the store hears `mcp_host_rules` (migration 015's triggers):
no read per call while listening, a change by any writer (another store, SQL by hand, the
owner's timezone) seen once its notice arrives, the writer's own change at once, and reads
again while the database is away, then the cache again once it listens anew."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import SecretStr

from mcp_host.access.owners import OwnerStore
from mcp_host.settings import Settings
from mcp_host.store import PgPool, RuleState, RuleStore
from mcp_host.store.database import open_database
from mcp_host.store.embedded_postgres import embedded_postgres
from tests.hosting import wait_until

pytestmark = pytest.mark.anyio


class _CountingPool:
    """The pool, counting the reads of `RuleStore.state` (`fetchrow`)."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool
        self.reads = 0

    async def fetchrow(self, *args: Any) -> Any:
        self.reads += 1
        return await self._pool.fetchrow(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


@asynccontextmanager
async def _listening(pool: PgPool) -> AsyncIterator[tuple[RuleStore, _CountingPool]]:
    counting = _CountingPool(pool)
    store = RuleStore(counting)  # type: ignore[arg-type]  # the pool's duck
    async with anyio.create_task_group() as tg:
        await tg.start(store.listen)
        try:
            yield store, counting
        finally:
            store.stop()


async def _eventually(read: Callable[[], Awaitable[Any]], wanted: Any, within_s: float = 10.0) -> None:
    """Poll `read()` until it gives `wanted` (a notice travels a moment after its commit)."""
    with anyio.fail_after(within_s):
        while True:
            if await read() == wanted:
                return
            await anyio.sleep(0.02)


async def test_state_is_read_once_while_listening(pool: PgPool) -> None:
    owner = await OwnerStore(pool).ensure_single_owner()
    async with _listening(pool) as (store, counting):
        assert store.listening
        assert [await store.state(owner.id) for _ in range(5)] == [RuleState(0, None)] * 5
        assert counting.reads == 1
    assert not store.listening
    await store.state(owner.id)
    await store.state(owner.id)
    assert counting.reads == 3  # stopped: every call reads


async def test_a_store_that_does_not_listen_reads_every_time(pool: PgPool) -> None:
    owner = await OwnerStore(pool).ensure_single_owner()
    counting = _CountingPool(pool)
    store = RuleStore(counting)  # type: ignore[arg-type]
    for _ in range(3):
        assert await store.state(owner.id) == RuleState(0, None)
    assert counting.reads == 3


async def test_the_writer_sees_its_own_set_at_once(pool: PgPool) -> None:
    owner = await OwnerStore(pool).ensure_single_owner()
    async with _listening(pool) as (store, _):
        assert await store.state(owner.id) == RuleState(0, None)
        for version in (1, 2, 3):
            assert await store.put(owner.id, [{"when": "true", "effect": "allow"}]) == version
            assert await store.state(owner.id) == RuleState(version, None)  # no wait for the notice


async def test_another_writer_any_sql_and_the_timezone_invalidate(pool: PgPool) -> None:
    owner = await OwnerStore(pool).ensure_single_owner()
    async with _listening(pool) as (a, _), _listening(pool) as (b, counting):
        assert await b.state(owner.id) == RuleState(0, None)  # cached on B
        await a.put(owner.id, [{"when": "true", "effect": "allow"}])
        await _eventually(lambda: b.state(owner.id), RuleState(1, None))
        await pool.execute("UPDATE mcp_host.rule_sets SET version = 7 WHERE owner_id = $1", owner.id)
        await _eventually(lambda: b.state(owner.id), RuleState(7, None))
        await pool.execute("UPDATE mcp_host.owners SET timezone = 'Europe/Paris' WHERE id = $1", owner.id)
        await _eventually(lambda: b.state(owner.id), RuleState(7, "Europe/Paris"))
        await pool.execute("DELETE FROM mcp_host.rule_sets WHERE owner_id = $1", owner.id)
        await _eventually(lambda: b.state(owner.id), RuleState(0, "Europe/Paris"))
        await pool.execute("INSERT INTO mcp_host.rule_sets (owner_id, rules, version) VALUES ($1, '[]', 9)", owner.id)
        await _eventually(lambda: b.state(owner.id), RuleState(9, "Europe/Paris"))
        await pool.execute("TRUNCATE mcp_host.rule_sets")
        await _eventually(lambda: b.state(owner.id), RuleState(0, "Europe/Paris"))
        reads = counting.reads
        await b.state(owner.id)
        assert counting.reads == reads  # cached again after each change


async def test_a_database_restart_falls_back_to_reads_then_caches_again(postgres_dir: Path) -> None:
    pgdata = postgres_dir / "pg"
    async with AsyncExitStack() as stack:
        server = AsyncExitStack()
        stack.push_async_callback(lambda: server.aclose())  # whichever server runs by then
        dsn = await server.enter_async_context(embedded_postgres(pgdata))
        settings = Settings(data_dir=postgres_dir, database_url=SecretStr(dsn))
        db = await stack.enter_async_context(open_database(settings))
        owner = await OwnerStore(db.pool).ensure_single_owner()
        store, counting = await stack.enter_async_context(_listening(db.pool))
        await store.state(owner.id)
        await store.state(owner.id)
        assert counting.reads == 1

        with anyio.fail_after(60):
            await server.aclose()  # pg_ctl stop: the listening connection is cut
            await wait_until(lambda: not store.listening, within_s=15)
            reads = counting.reads
            with pytest.raises(Exception):  # noqa: B017, PT011  # the database is away: read, and fail
                await store.state(owner.id)
            assert counting.reads == reads + 1
            server = AsyncExitStack()
            assert await server.enter_async_context(embedded_postgres(pgdata)) == dsn
            # A change made while nobody listened: its notice is lost, the emptied cache is not.
            await _retrying(lambda: db.pool.execute("UPDATE mcp_host.owners SET timezone = 'Asia/Tokyo'"))
            await wait_until(lambda: store.listening, within_s=20)
        assert await store.state(owner.id) == RuleState(0, "Asia/Tokyo")
        reads = counting.reads
        await store.state(owner.id)
        assert counting.reads == reads  # cached again


async def _retrying(query: Callable[[], Awaitable[Any]]) -> None:
    """The first queries after a restart may meet connections the server cut."""
    for attempt in range(20):
        try:
            await query()
            return
        except Exception:
            if attempt == 19:
                raise
            await anyio.sleep(0.2)
