"""Console sessions, one contract for PostgreSQL and the in-memory twin: open, read, end,
expire; only a digest is stored."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from mcp_host.access.owners import OwnerStore
from mcp_host.settings import Settings
from mcp_host.store.database import open_database
from owner_console import ConsoleSessions, MemoryConsoleSessions, PostgresConsoleSessions
from tests.conftest import fresh_database

pytestmark = pytest.mark.anyio


@dataclass
class Book:
    sessions: ConsoleSessions
    owner_id: str
    expire: Callable[[], Awaitable[None]]
    stored: Callable[[], Awaitable[list[bytes]]]


@pytest.fixture(params=["memory", "postgres"])
async def book(request: pytest.FixtureRequest, postgres_server: str, tmp_path: Path) -> AsyncIterator[Book]:
    if request.param == "memory":
        now = [datetime(2026, 1, 1, tzinfo=UTC)]
        memory = MemoryConsoleSessions(timedelta(hours=1), clock=lambda: now[0])

        async def later() -> None:
            now[0] += timedelta(hours=2)

        async def digests() -> list[bytes]:
            return memory.stored

        yield Book(memory, "o_memory", later, digests)
        return
    async with fresh_database(postgres_server) as url:
        async with open_database(Settings(database_url=SecretStr(url), data_dir=tmp_path)) as database:
            pool = database.pool
            owner = await OwnerStore(pool).ensure_single_owner()

            async def past() -> None:
                await pool.execute("UPDATE mcp_host.console_sessions SET expires_at = now() - interval '1 second'")

            async def rows() -> list[bytes]:
                return [bytes(r[0]) for r in await pool.fetch("SELECT cookie_sha256 FROM mcp_host.console_sessions")]

            yield Book(PostgresConsoleSessions(pool, timedelta(hours=1)), owner.id, past, rows)


async def test_a_session_signs_its_owner_in_until_it_ends(book: Book) -> None:
    cookie = await book.sessions.open(book.owner_id)
    other = await book.sessions.open(book.owner_id)
    assert len(cookie) == 43 and cookie != other
    assert await book.sessions.owner_of(cookie) == book.owner_id
    assert await book.sessions.end(cookie) is True
    assert await book.sessions.owner_of(cookie) is None
    assert await book.sessions.end(cookie) is False
    assert await book.sessions.owner_of(other) == book.owner_id  # signing out ends that one only


async def test_only_the_cookies_digest_is_stored(book: Book) -> None:
    cookie = await book.sessions.open(book.owner_id)
    assert await book.stored() == [hashlib.sha256(cookie.encode()).digest()]


async def test_an_expired_or_forged_cookie_signs_nobody_in(book: Book) -> None:
    cookie = await book.sessions.open(book.owner_id)
    assert await book.sessions.owner_of(cookie[:-1] + ("A" if cookie[-1] != "A" else "B")) is None
    assert await book.sessions.owner_of("x" * 65) is None
    assert await book.sessions.owner_of("é") is None
    await book.expire()
    assert await book.sessions.owner_of(cookie) is None
