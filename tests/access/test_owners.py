"""Owners: one owner under concurrent starts, token rotation, the stored form of a token, and
the owner-token file (mode 0600, written once, never rotated behind the owner's back)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import anyio
import asyncpg
import pytest

from mcp_host.access.owners import (
    OWNER_TOKEN_FILE,
    Owner,
    OwnerError,
    OwnerStore,
    ensure_owner_token,
    write_owner_token_file,
)
from mcp_host.errors import InvalidArguments
from mcp_host.store.database import PgConnection, PgPool

pytestmark = pytest.mark.anyio


async def _wait_for_relation_waiters(conn: PgConnection, relation: str, count: int) -> None:
    """Poll until `count` backends wait for a lock on `relation`."""
    with anyio.fail_after(10):
        while True:
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted", relation
            )
            if waiting >= count:
                return
            await anyio.sleep(0.01)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_single_owner_is_created_once_under_concurrent_starts(pool: PgPool) -> None:
    stores = [OwnerStore(pool) for _ in range(4)]
    owners: list[Owner] = []

    async def start(store: OwnerStore) -> None:
        owners.append(await store.ensure_single_owner())

    # Block the owners table so that all four starts are queued before any of them reads it.
    async with pool.acquire() as holder:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                async with holder.transaction():
                    await holder.execute("LOCK TABLE mcp_host.owners IN ACCESS EXCLUSIVE MODE")
                    for store in stores:
                        tg.start_soon(start, store)
                    await _wait_for_relation_waiters(holder, "mcp_host.owners", len(stores))
    rows = await pool.fetch("SELECT id FROM mcp_host.owners")
    assert len(owners) == 4
    assert all(owner == owners[0] for owner in owners)
    assert [r["id"] for r in rows] == [owners[0].id]


async def test_ensure_single_owner_is_idempotent(pool: PgPool) -> None:
    store = OwnerStore(pool)
    first = await store.ensure_single_owner()
    assert await store.ensure_single_owner() == first
    assert (first.name, first.email, first.timezone) == (None, None, None)


async def test_several_owners_are_not_a_single_owner_install(pool: PgPool) -> None:
    await pool.execute("INSERT INTO mcp_host.owners (id) VALUES ('a'), ('b')")
    with pytest.raises(OwnerError) as caught:
        await OwnerStore(pool).ensure_single_owner()
    assert str(caught.value) == "the database holds several owners; this is not a single-owner install"


async def test_set_profile_changes_only_the_named_fields_and_none_or_empty_unsets_one(pool: PgPool) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()

    full = await store.set_profile(owner.id, {"name": "Ada", "email": " ada@example.org ", "timezone": "Asia/Tokyo"})
    partly = await store.set_profile(owner.id, {"timezone": "UTC"})
    unset = await store.set_profile(owner.id, {"name": None, "email": "  "})
    unchanged = await store.set_profile(owner.id, {})

    assert full.profile() == {"name": "Ada", "email": "ada@example.org", "timezone": "Asia/Tokyo"}
    assert partly.profile() == {"name": "Ada", "email": "ada@example.org", "timezone": "UTC"}
    assert unset.profile() == unchanged.profile() == {"name": None, "email": None, "timezone": "UTC"}
    with pytest.raises(OwnerError):
        await store.set_profile("nobody", {"name": "Ada"})


async def test_a_refused_profile_value_writes_nothing(pool: PgPool) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    await store.set_profile(owner.id, {"name": "Ada"})

    for changes in ({"name": "Grace", "email": "not an address"}, {"timezone": "Europe/Atlantis"}, {"id": "x"}):
        with pytest.raises(InvalidArguments):
            await store.set_profile(owner.id, changes)

    assert (await store.set_profile(owner.id, {})).profile() == {"name": "Ada", "email": None, "timezone": None}


@pytest.mark.parametrize(
    ("column", "value"),
    [("name", "x" * 129), ("name", "Ada\nLovelace"), ("email", "ada"), ("timezone", "Europe/Berlin; DROP")],
)
async def test_the_database_refuses_a_profile_value_out_of_bounds_from_any_writer(
    pool: PgPool, column: str, value: str
) -> None:
    owner = await OwnerStore(pool).ensure_single_owner()
    with pytest.raises(asyncpg.CheckViolationError):
        await pool.execute(f"UPDATE mcp_host.owners SET {column} = $2 WHERE id = $1", owner.id, value)


async def test_token_rotation_invalidates_the_old_token(pool: PgPool) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    old = await store.issue_token(owner.id)
    assert await store.verify_token(old) == owner
    new = await store.issue_token(owner.id)
    assert new != old
    assert await store.verify_token(old) is None
    assert await store.verify_token(new) == owner
    live = await pool.fetchval("SELECT count(*) FROM mcp_host.owner_tokens WHERE revoked_at IS NULL")
    assert live == 1


async def test_junk_tokens_are_refused(pool: PgPool) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    token = await store.issue_token(owner.id)
    for junk in ("", token[:-1], token + " ", "é" * 43, "x" * 10_000):
        assert await store.verify_token(junk) is None, junk


async def test_a_token_for_an_unknown_owner_is_refused(pool: PgPool) -> None:
    with pytest.raises(OwnerError) as caught:
        await OwnerStore(pool).issue_token("nobody")
    assert str(caught.value) == "no owner 'nobody'"


async def test_the_owner_token_is_not_stored_in_clear(pool: PgPool) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    token = await store.issue_token(owner.id)
    rows = await pool.fetch("SELECT t.token_hash, t::text AS whole FROM mcp_host.owner_tokens t")
    assert [r["token_hash"] for r in rows] == [hashlib.sha256(token.encode()).digest()]
    assert all(token not in r["whole"] for r in rows)


def test_the_owner_token_file_is_created_with_mode_0600(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    old_umask = os.umask(0)  # a permissive umask must not widen the file
    try:
        path = write_owner_token_file(data_dir, "first-token")
        assert (path, _mode(path), path.read_text()) == (data_dir / OWNER_TOKEN_FILE, 0o600, "first-token\n")
        path.chmod(0o644)
        assert write_owner_token_file(data_dir, "second-token") == path
    finally:
        os.umask(old_umask)
    assert (_mode(path), path.read_text()) == (0o600, "second-token\n")
    assert sorted(p.name for p in data_dir.iterdir()) == [OWNER_TOKEN_FILE]  # no temporary left over


async def test_ensure_owner_token_writes_a_token_once_and_keeps_it(pool: PgPool, tmp_path: Path) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    path = await ensure_owner_token(store, owner, tmp_path)
    assert path == tmp_path / OWNER_TOKEN_FILE
    token = path.read_text().strip()
    assert (_mode(path), await store.verify_token(token)) == (0o600, owner)
    assert await ensure_owner_token(store, owner, tmp_path) == path
    assert path.read_text().strip() == token
    assert await store.verify_token(token) == owner


async def test_ensure_owner_token_replaces_a_stale_file_when_no_token_is_live(pool: PgPool, tmp_path: Path) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    (tmp_path / OWNER_TOKEN_FILE).write_text("a-token-from-another-database\n")
    path = await ensure_owner_token(store, owner, tmp_path)
    assert path is not None
    assert await store.verify_token(path.read_text().strip()) == owner


async def test_ensure_owner_token_never_rotates_a_live_token_behind_the_owner(pool: PgPool, tmp_path: Path) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    live = await store.issue_token(owner.id)  # e.g. another replica's data dir holds it
    assert await ensure_owner_token(store, owner, tmp_path) is None
    assert not (tmp_path / OWNER_TOKEN_FILE).exists()
    assert await store.verify_token(live) == owner


async def test_concurrent_starts_leave_one_live_token_and_it_is_in_the_file(pool: PgPool, tmp_path: Path) -> None:
    store = OwnerStore(pool)
    owner = await store.ensure_single_owner()
    results: list[Path | None] = []

    async def start() -> None:
        results.append(await ensure_owner_token(store, owner, tmp_path))

    async with pool.acquire() as holder:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                async with holder.transaction():
                    # Hold the owner row so that both starts queue on it before either issues.
                    await holder.execute("SELECT 1 FROM mcp_host.owners WHERE id = $1 FOR UPDATE", owner.id)
                    tg.start_soon(start)
                    tg.start_soon(start)
                    await _wait_for_tuple_waiters(holder, 2)
    path = tmp_path / OWNER_TOKEN_FILE
    live = await pool.fetchval("SELECT count(*) FROM mcp_host.owner_tokens WHERE revoked_at IS NULL")
    assert sorted(results, key=str) == sorted([path, None], key=str)
    assert live == 1
    assert await store.verify_token(path.read_text().strip()) == owner


async def _wait_for_tuple_waiters(conn: PgConnection, count: int) -> None:
    """Poll until `count` backends wait for a row lock (a transactionid or tuple lock)."""
    with anyio.fail_after(10):
        while True:
            waiting = await conn.fetchval(
                "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype IN ('transactionid', 'tuple') AND NOT granted"
            )
            if waiting >= count:
                return
            await anyio.sleep(0.01)
