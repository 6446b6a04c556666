"""Retention (issue 26, defect 5): idle public sessions expire — refused at once, marked ended by
the sweep — and turns, receipts, audit rows, holds and ended sessions older than their
retention are deleted in batches, newer rows left; the sweeps of tables above the store (the
OAuth grants') run after; on real PostgreSQL, and the sweep run by a real host."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_host.access.owners import OwnerStore
from mcp_host.access.sessions import InMemorySessionStore, PostgresSessionStore, Subject, public_role
from mcp_host.errors import Held
from mcp_host.policy.audit import AuditLog
from mcp_host.policy.holds import Holds
from mcp_host.policy.turns import PostgresTurns
from mcp_host.settings import Settings
from mcp_host.store.database import PgPool
from mcp_host.store.retention import Retention, RetentionPolicy, Swept
from tests.hosting import host_settings, running_host
from tests.oauth.conftest import granted
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


async def _owner(pool: PgPool) -> str:
    return (await OwnerStore(pool).ensure_single_owner()).id


async def _db_now(pool: PgPool) -> datetime:
    now = await pool.fetchval("SELECT now()")
    assert isinstance(now, datetime)
    return now


async def _set(pool: PgPool, sql: str, *args: Any) -> None:
    assert (await pool.execute(sql, *args)).endswith(" 1"), sql


# -- idle public sessions ---------------------------------------------------------------------


async def test_an_idle_public_session_is_refused_like_an_ended_one_before_any_sweep(pool: PgPool) -> None:
    owner = await _owner(pool)
    store = PostgresSessionStore(pool, public_idle_s=3600)
    public, public_token = await store.open(owner_id=owner, mode="public", visitor=None, role=public_role())
    keyed, keyed_token = await store.open(
        owner_id=owner, mode="api_key", visitor=None, subject=Subject(kind="api_key", id="k_1"), role=public_role()
    )
    for session in (public, keyed):
        await _set(
            pool, "UPDATE mcp_host.sessions SET created_at = now() - interval '61 minutes' WHERE id = $1", session.id
        )

    assert await store.authenticate(public.id, public_token) is None
    assert [s.id for s in await store.list_live(owner)] == [keyed.id]  # code and key sessions do not expire
    found = await store.authenticate(keyed.id, keyed_token)
    assert found is not None and found.id == keyed.id
    # Without an idle timeout (the store's default) nothing expires.
    assert await PostgresSessionStore(pool).authenticate(public.id, public_token) is not None


async def test_the_in_memory_twin_expires_an_idle_public_session_too() -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = InMemorySessionStore(public_idle_s=3600, clock=lambda: now[0])
    public, public_token = await store.open(owner_id="o", mode="public", visitor=None, role=public_role())
    keyed, keyed_token = await store.open(
        owner_id="o", mode="api_key", visitor=None, subject=Subject(kind="api_key", id="k_1"), role=public_role()
    )
    now[0] += 59 * timedelta(minutes=1)
    assert await store.authenticate(public.id, public_token) is not None  # a request: seen now
    now[0] += 59 * timedelta(minutes=1)
    assert await store.authenticate(public.id, public_token) is not None
    now[0] += 61 * timedelta(minutes=1)
    assert await store.authenticate(public.id, public_token) is None
    assert [s.id for s in await store.list_live("o")] == [keyed.id]
    assert await store.authenticate(keyed.id, keyed_token) is not None


async def test_a_request_keeps_a_public_session_alive_with_one_write_a_minute(pool: PgPool) -> None:
    owner = await _owner(pool)
    store = PostgresSessionStore(pool, public_idle_s=3600)
    session, token = await store.open(owner_id=owner, mode="public", visitor=None, role=public_role())
    await _set(
        pool, "UPDATE mcp_host.sessions SET last_seen_at = now() - interval '59 minutes' WHERE id = $1", session.id
    )
    sweep = Retention(pool, RetentionPolicy(public_session_idle_s=3600))

    assert await store.authenticate(session.id, token) is not None
    seen = await pool.fetchval("SELECT now() - last_seen_at FROM mcp_host.sessions WHERE id = $1", session.id)
    assert seen < timedelta(seconds=5)  # the request moved it forward
    await _set(
        pool, "UPDATE mcp_host.sessions SET last_seen_at = now() - interval '30 seconds' WHERE id = $1", session.id
    )
    assert await store.authenticate(session.id, token) is not None
    seen = await pool.fetchval("SELECT now() - last_seen_at FROM mcp_host.sessions WHERE id = $1", session.id)
    assert seen >= timedelta(seconds=30)  # fresh enough: not written again
    now = await _db_now(pool)
    assert await sweep.sweep(now + 30 * timedelta(minutes=1)) == Swept()
    assert await sweep.sweep(now + 61 * timedelta(minutes=1)) == Swept(expired=1)
    assert await store.authenticate(session.id, token) is None


async def test_the_sweep_marks_idle_public_sessions_ended_when_they_expired(pool: PgPool) -> None:
    owner = await _owner(pool)
    store = PostgresSessionStore(pool)  # a token is refused because the sweep ended its session
    idle, idle_token = await store.open(owner_id=owner, mode="public", visitor=None, role=public_role())
    fresh, fresh_token = await store.open(owner_id=owner, mode="public", visitor=None, role=public_role())
    keyed, _ = await store.open(
        owner_id=owner, mode="api_key", visitor=None, subject=Subject(kind="api_key", id="k_1"), role=public_role()
    )
    now = await _db_now(pool)
    seen = now - 3 * HOUR
    for session in (idle, keyed):
        await _set(pool, "UPDATE mcp_host.sessions SET last_seen_at = $2 WHERE id = $1", session.id, seen)

    swept = await Retention(pool, RetentionPolicy(public_session_idle_s=3600)).sweep(now)

    assert swept == Swept(expired=1)
    rows = await pool.fetch("SELECT id, ended_at FROM mcp_host.sessions ORDER BY created_at")
    assert {r["id"]: r["ended_at"] for r in rows} == {idle.id: seen + HOUR, fresh.id: None, keyed.id: None}
    assert await store.authenticate(idle.id, idle_token) is None
    assert await store.authenticate(fresh.id, fresh_token) is not None


# -- rows past their retention ----------------------------------------------------------------

POLICY = RetentionPolicy(
    public_session_idle_s=None,
    turns_s=(30 * DAY).total_seconds(),
    receipts_s=(10 * DAY).total_seconds(),
    audit_s=(365 * DAY).total_seconds(),
    holds_s=(30 * DAY).total_seconds(),
    sessions_s=(30 * DAY).total_seconds(),
)


async def _held(holds: Holds, owner: str, session_id: str, target: str) -> str:
    with pytest.raises(Held) as held:
        await holds.admit(owner, session_id, "vault", "wipe", {"target": target})
    return held.value.message.split("(hold ", 1)[1].split(")")[0]


async def test_the_sweep_deletes_rows_past_their_retention_and_keeps_newer_ones(pool: PgPool) -> None:
    owner = await _owner(pool)
    sessions, turns, audit, holds = PostgresSessionStore(pool), PostgresTurns(pool), AuditLog(pool), Holds(pool)
    live, _ = await sessions.open(owner_id=owner, mode="public", visitor=None, role=public_role())
    gone, _ = await sessions.open(owner_id=owner, mode="public", visitor=None, role=public_role())
    ended, _ = await sessions.open(owner_id=owner, mode="public", visitor=None, role=public_role())
    for session in (live, gone):
        await turns.open_turn(session.id, "old")
        await turns.record(session.id, "booker", "old", True)
        await turns.open_turn(session.id, "new")
        await turns.record(session.id, "booker", "old", True)
        await turns.record(session.id, "booker", "new", True)
    await audit.record(owner, "old_call", {}, "ok")
    await audit.record(owner, "new_call", {}, "ok")
    old_hold = await _held(holds, owner, live.id, "old")
    new_hold = await _held(holds, owner, live.id, "new")
    now = await _db_now(pool)
    # Just past and just within each retention, by the clock the sweep is given.
    await pool.execute("UPDATE mcp_host.turns SET created_at = $1 WHERE message = 'old'", now - 30 * DAY)
    await pool.execute("UPDATE mcp_host.receipts SET at = $1 WHERE tool = 'old'", now - 10 * DAY)
    await pool.execute("UPDATE mcp_host.receipts SET at = $1 WHERE tool = 'new'", now - 10 * DAY + HOUR)
    await _set(pool, "UPDATE mcp_host.audit SET at = $1 WHERE tool = 'old_call'", now - 365 * DAY)
    await _set(pool, "UPDATE mcp_host.audit SET at = $1 WHERE tool = 'new_call'", now - 364 * DAY)
    await _set(pool, "UPDATE mcp_host.holds SET expires_at = $2 WHERE id = $1", old_hold, now - 30 * DAY)
    await _set(pool, "UPDATE mcp_host.holds SET expires_at = $2 WHERE id = $1", new_hold, now - 29 * DAY)
    await _set(pool, "UPDATE mcp_host.sessions SET ended_at = $2 WHERE id = $1", gone.id, now - 30 * DAY)
    await _set(pool, "UPDATE mcp_host.sessions SET ended_at = $2 WHERE id = $1", ended.id, now - 29 * DAY)

    swept = await Retention(pool, POLICY).sweep(now)

    assert swept == Swept(turns=2, receipts=2, audit=1, holds=1, sessions=1)
    assert {r["id"] for r in await pool.fetch("SELECT id FROM mcp_host.sessions")} == {live.id, ended.id}
    kept_turns = await pool.fetch("SELECT session_id, n, message FROM mcp_host.turns")
    assert [tuple(r) for r in kept_turns] == [(live.id, 2, "new")]  # the ended session's went with it
    receipts = await pool.fetch("SELECT session_id, n, tool FROM mcp_host.receipts")
    assert [tuple(r) for r in receipts] == [(live.id, 2, "new")]
    assert [r.tool for r in await audit.list(owner)] == ["new_call"]
    assert [h.id for h in await holds.of_owner(owner, everything=True)] == [new_hold]
    assert await Retention(pool, POLICY).sweep(now) == Swept()  # nothing left to do


async def test_the_sweep_goes_in_batches_and_replicas_sweeping_at_once_share_the_rows(pool: PgPool) -> None:
    owner = await _owner(pool)
    for i in range(25):
        await AuditLog(pool).record(owner, f"call_{i}", {}, "ok")
    await pool.execute("UPDATE mcp_host.audit SET at = now() - interval '400 days' WHERE tool <> 'call_24'")
    bounded = Retention(pool, RetentionPolicy(batch=4, max_batches=2))

    assert await bounded.sweep() == Swept(audit=8)  # two batches, then the next sweep goes on
    replicas = [Retention(pool, RetentionPolicy(batch=4)) for _ in range(2)]
    done: list[Swept] = []

    async def sweep(retention: Retention) -> None:
        done.append(await retention.sweep())

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for retention in replicas:
                tg.start_soon(sweep, retention)
    assert sum(s.audit for s in done) == 16
    assert [r["tool"] for r in await pool.fetch("SELECT tool FROM mcp_host.audit")] == ["call_24"]


async def test_a_retention_of_zero_keeps_rows_for_ever(pool: PgPool) -> None:
    owner = await _owner(pool)
    await AuditLog(pool).record(owner, "ancient", {}, "ok")
    await pool.execute("UPDATE mcp_host.audit SET at = now() - interval '40 years'")
    policy = RetentionPolicy.of(Settings(audit_retention_days=0, turn_retention_days=7).retention)

    assert (policy.audit_s, policy.turns_s) == (None, 7 * DAY.total_seconds())
    assert await Retention(pool, policy).sweep() == Swept()
    assert await pool.fetchval("SELECT count(*) FROM mcp_host.audit") == 1


async def test_the_sweeps_of_tables_above_the_store_run_after_and_one_failing_stops_none(
    pool: PgPool, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    async def counted(name: str, count: int) -> int:
        ran.append(name)
        return count

    async def failing() -> int:
        ran.append("failing")
        raise RuntimeError("a sweep's own trouble")

    also = {"failing": failing, "oauth": lambda: counted("oauth", 3), "idle": lambda: counted("idle", 0)}
    swept = await Retention(pool, also=also).sweep()

    assert (ran, swept) == (["failing", "oauth", "idle"], Swept(also=(("oauth", 3),)))
    assert "retention: the failing sweep failed" in caplog.text


# -- run by the host --------------------------------------------------------------------------


@needs_bwrap
async def test_the_host_sweeps_while_it_runs(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(
        tmp_path,
        database_url,
        [],
        public_session_idle_s=3600,
        retention_sweep_interval_s=0.05,
        auth_cache_ttl_s=0,  # a verified token is not reused: the next request asks the database
    )
    async with running_host(settings) as running:
        session = await running.new_session()
        url = f"{running.url}/v1/sessions/{session['session_id']}/turns"
        headers = {"Authorization": f"Bearer {session['token']}"}
        grant = await granted(running.oauth, session["session_id"])  # a client let in for this session
        assert (await running.http.post(url, json={"message": "hi"}, headers=headers)).status_code == 201
        pool = running.sql
        await _set(
            pool,
            "UPDATE mcp_host.sessions SET last_seen_at = now() - interval '2 hours' WHERE id = $1",
            session["session_id"],
        )
        ended = "SELECT ended_at FROM mcp_host.sessions WHERE id = $1"
        with anyio.fail_after(10):
            # No event tells of another task's row; the host's next sweep is within 0.05 s.
            while await pool.fetchval(ended, session["session_id"]) is None:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        refused = await running.http.post(url, json={"message": "again"}, headers=headers)
        oauth = running.oauth
        with anyio.fail_after(10):
            # The OAuth sweep runs in the same sweep: the expired session's grant ends.
            while await oauth.load_access_token(grant.access_token) is not None:  # noqa: ASYNC110
                await anyio.sleep(0.05)
    assert refused.status_code == 401
