"""The records of 2025-11-25 protocol sessions another replica may adopt (issue 16)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from pydantic import SecretStr

from mcp_host.settings import Settings
from mcp_host.store import PgPool, ProtocolSessionRecords, SessionRecord, open_database, record_key

pytestmark = pytest.mark.anyio

OPENED = SessionRecord(
    principal="visitor-1",
    path="/v1/sessions/visitor-1/mcp",
    initialize={"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}},
)


@pytest.fixture
async def pool(database_url: str, tmp_path: Path) -> AsyncIterator[PgPool]:
    async with open_database(Settings(data_dir=tmp_path, database_url=SecretStr(database_url))) as database:
        yield database.pool


async def test_a_record_is_found_by_the_hash_of_its_id_and_forgotten(pool: PgPool) -> None:
    records = ProtocolSessionRecords(pool, idle_s=60)
    key = record_key(b"abc")
    await records.record(key, OPENED)
    assert await records.lookup(key) == OPENED
    assert await records.lookup(record_key(b"abd")) is None
    stored = await pool.fetchval("SELECT count(*) FROM mcp_host.protocol_sessions WHERE key = $1", b"abc")
    assert stored == 0  # the id itself is never a key
    await records.forget(key)
    assert await records.lookup(key) is None


async def test_records_of_open_sessions_are_kept_and_the_others_expire(pool: PgPool) -> None:
    records = ProtocolSessionRecords(pool, idle_s=0.5)
    kept, left = record_key(b"kept"), record_key(b"left")
    await records.record(kept, OPENED)
    await records.record(left, OPENED)
    for _ in range(4):
        await anyio.sleep(0.2)
        await records.touch([kept])
    assert await records.lookup(kept) == OPENED
    assert await records.lookup(left) is None
    assert await pool.fetchval("SELECT count(*) FROM mcp_host.protocol_sessions") == 1
