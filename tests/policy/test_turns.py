"""Turns, receipts and the claim gate (docs/security.md E12): `judge` alone, the stores, and a real
host with the `booker` test plugin."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest

from mcp_host.access.owners import OwnerStore
from mcp_host.access.sessions import PostgresSessionStore, RoleSnapshot
from mcp_host.errors import DatabaseUnavailable
from mcp_host.plugins.manifest import ClaimGate
from mcp_host.policy.turns import (
    MemoryTurns,
    PostgresTurns,
    Receipt,
    Turn,
    TurnCaps,
    TurnStore,
    TurnsUsedUp,
    TurnTooLarge,
    UnknownTurn,
    Violation,
    judge,
    receipt_ok,
)
from mcp_host.store.database import PgPool
from tests.hosting import RunningHost, host_settings, running_host
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

BOOK = ClaimGate(tool="book_it", phrases=("i've booked", "invite went to"))
GATES = [("booker", BOOK)]


# -- judge ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "I've booked it for you.",
        "I'VE   BOOKED\nit",
        "Done — I’ve booked it",  # typographic apostrophe
        "ｉ've booked",  # fullwidth letter, NFKC
        "the invite went to Ana",
    ],
)
def test_a_gated_phrase_without_a_receipt_is_a_violation(text: str) -> None:
    violations = judge(text, GATES, [])
    assert len(violations) == 1
    assert violations[0].capability == "booker"
    assert violations[0].tool == "book_it"


def test_a_successful_receipt_of_the_gates_tool_clears_it() -> None:
    assert judge("I've booked it", GATES, [Receipt("booker", "book_it", True)]) == []


@pytest.mark.parametrize(
    ("text", "claims"),
    [
        ("I could not book it; that slot is already taken.", False),
        ("I haven't booked it yet.", False),
        ("Nothing is booked: the slot was taken.", False),
        ("I was unable to get it booked.", False),
        ("I've booked it, no problem.", True),  # a negation after the claim does not excuse it
        ("No worries. I've booked it.", True),  # nor one in another sentence
        ("It is not free, so I've booked the next one.", True),  # nor one in another clause
    ],
)
def test_a_phrase_after_a_negation_in_its_clause_is_not_a_claim(text: str, claims: bool) -> None:
    gate = ClaimGate(tool="book_it", phrases=("booked",))
    assert bool(judge(text, [("booker", gate)], [])) is claims


def test_an_answer_without_a_gated_phrase_needs_no_receipt() -> None:
    assert judge("Shall I book it?", GATES, []) == []
    assert judge("I've bookedit", GATES, []) == []  # whole words only


@pytest.mark.parametrize(
    "receipts",
    [
        pytest.param([Receipt("booker", "book_it", False)], id="failed-call"),
        pytest.param([Receipt("booker", "whatever", True)], id="another-tool"),
        pytest.param([Receipt("other", "book_it", True)], id="another-capability"),
        pytest.param([], id="receipt-only-in-an-earlier-turn"),
    ],
)
def test_receipts_that_do_not_count(receipts: list[Receipt]) -> None:
    assert judge("I've booked it", GATES, receipts) == [Violation("booker", "book_it", "i've booked")]


def test_one_violation_per_gate() -> None:
    other = ClaimGate(tool="send", phrases=("sent it",))
    violations = judge("I've booked it and sent it", [*GATES, ("mailer", other)], [])
    assert violations == [Violation("booker", "book_it", "i've booked"), Violation("mailer", "send", "sent it")]


def _result(*, is_error: bool = False, structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[], structured_content=structured, is_error=is_error)


def test_receipt_ok_reads_is_error_and_structured_ok() -> None:
    assert receipt_ok(_result(structured={"ok": True}))
    assert receipt_ok(_result())
    assert receipt_ok(_result(structured={"done": 1}))
    assert not receipt_ok(_result(is_error=True))
    assert not receipt_ok(_result(structured={"ok": False}))


# -- the stores ----------------------------------------------------------------------------


async def _session_id(pool: PgPool) -> str:
    owner = await OwnerStore(pool).ensure_single_owner()
    role = RoleSnapshot(id="public", capabilities=(), config={})
    session, _ = await PostgresSessionStore(pool).open(owner_id=owner.id, mode="public", visitor=None, role=role)
    return session.id


async def _exercise(store: TurnStore, session_id: str) -> None:
    await store.record(session_id, "booker", "book_it", True)  # no turn yet: nothing
    assert await store.open_turn(session_id, "book it") == 1
    await store.record(session_id, "booker", "book_it", True)
    assert await store.open_turn(session_id, "again") == 2
    await store.record(session_id, "booker", "book_it", False)
    await store.answer(session_id, 1, "I've booked it")
    assert await store.receipts(session_id, 1) == [Receipt("booker", "book_it", True)]
    assert await store.receipts(session_id, 2) == [Receipt("booker", "book_it", False)]
    with pytest.raises(UnknownTurn):
        await store.receipts(session_id, 3)
    with pytest.raises(UnknownTurn):
        await store.answer(session_id, 3, "x")
    turns = [t.wire() for t in await store.transcript(session_id)]
    assert turns == [
        {
            "n": 1,
            "message": "book it",
            "answer": "I've booked it",
            "receipts": [{"capability": "booker", "tool": "book_it", "ok": True}],
        },
        {
            "n": 2,
            "message": "again",
            "answer": None,
            "receipts": [{"capability": "booker", "tool": "book_it", "ok": False}],
        },
    ]


async def test_memory_turns() -> None:
    await _exercise(MemoryTurns(), "a" * 32)


async def test_postgres_turns(pool: PgPool) -> None:
    await _exercise(PostgresTurns(pool), await _session_id(pool))


# -- receipts queued and written in batches ---------------------------------------------------


class _CountingPool:
    """The pool, counting the batches of receipts written (`execute` of the receipts INSERT);
    `away` makes them fail as in an outage."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool
        self.batches: list[int] = []
        self.away = False

    async def execute(self, query: str, *args: Any) -> Any:
        if "mcp_host.receipts" in query:
            if self.away:
                raise DatabaseUnavailable("the database is unreachable")
            self.batches.append(len(args[0]))
        return await self._pool.execute(query, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


@asynccontextmanager
async def _writing(pool: PgPool, **options: Any) -> AsyncIterator[tuple[PostgresTurns, _CountingPool]]:
    counting = _CountingPool(pool)
    store = PostgresTurns(counting, **options)  # type: ignore[arg-type]  # the pool's duck
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        try:
            yield store, counting
        finally:
            await store.stop()


async def test_postgres_turns_with_the_writer_running(pool: PgPool) -> None:
    async with _writing(pool) as (store, counting):
        await _exercise(store, await _session_id(pool))
    assert sum(counting.batches) == 3  # the one recorded before any turn is dropped by the INSERT


async def test_receipts_are_written_in_batches_and_land_in_the_turn_of_their_completion(pool: PgPool) -> None:
    first, second = await _session_id(pool), await _session_id(pool)
    async with _writing(pool) as (store, counting):
        for session in (first, second):
            assert await store.open_turn(session, "go") == 1
        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(store.record, (first, second)[i % 2], "booker", f"t{i}", True)
        assert await store.open_turn(first, "next") == 2  # waits for the 20 of turn 1 first
        await store.record(first, "booker", "late", False)
        turn_1 = await store.receipts(first, 1)
        turn_2 = await store.receipts(first, 2)
        other = await store.transcript(second)
    assert [r.tool for r in turn_1] == [f"t{i}" for i in range(0, 40, 2)]  # in the order recorded
    assert turn_2 == [Receipt("booker", "late", False)]
    assert [r.tool for r in other[0].receipts] == [f"t{i}" for i in range(1, 40, 2)]
    assert sum(counting.batches) == 41
    assert len(counting.batches) < 41  # batched: far fewer INSERTs than receipts


async def test_the_answer_is_judged_on_receipts_queued_a_moment_before(pool: PgPool) -> None:
    session = await _session_id(pool)
    async with _writing(pool) as (store, _):
        await store.open_turn(session, "book it")
        await store.record(session, "booker", "book_it", True)  # queued, not yet written
        assert await store.receipts(session, 1) == [Receipt("booker", "book_it", True)]
        await store.record(session, "booker", "book_it", False)
        await store.answer(session, 1, "done")  # waits for it too: nothing queued is left behind
        assert store._queued[session] == 0


async def test_stop_writes_what_is_queued_and_later_receipts_at_once(pool: PgPool) -> None:
    session = await _session_id(pool)
    async with _writing(pool) as (store, counting):
        await store.open_turn(session, "go")
        for tool in ("a", "b", "c"):
            await store.record(session, "booker", tool, True)
    assert counting.batches[-1] == 3  # none written before the stop
    await store.record(session, "booker", "d", True)  # the writer stopped: written at once
    assert [r.tool for r in await store.receipts(session, 1)] == ["a", "b", "c", "d"]


async def test_a_full_queue_makes_record_wait_for_a_write(pool: PgPool) -> None:
    session = await _session_id(pool)
    async with _writing(pool, max_pending=3) as (store, counting):
        await store.open_turn(session, "go")
        await store.record(session, "booker", "a", True)
        await store.record(session, "booker", "b", True)
        assert counting.batches == []
        await store.record(session, "booker", "c", True)  # the third: written before it returns
        assert counting.batches == [3]


async def test_an_outage_drops_the_batch_with_one_line_and_the_writer_goes_on(
    pool: PgPool, caplog: pytest.LogCaptureFixture
) -> None:
    session = await _session_id(pool)
    with caplog.at_level(logging.DEBUG, logger="mcp_host.policy.turns"):
        async with _writing(pool) as (store, counting):
            await store.open_turn(session, "go")
            counting.away = True
            for tool in ("a", "b"):
                await store.record(session, "booker", tool, True)
            assert await store.transcript(session) != []  # the flush met the outage: dropped
            counting.away = False
            await store.record(session, "booker", "c", True)
            receipts = await store.receipts(session, 1)
    assert receipts == [Receipt("booker", "c", True)]
    said = [r.getMessage() for r in caplog.records if r.name == "mcp_host.policy.turns"]
    assert said == ["2 receipts were not recorded (the database is unreachable)"]


async def test_a_refused_receipt_costs_only_itself(pool: PgPool, caplog: pytest.LogCaptureFixture) -> None:
    session = await _session_id(pool)
    async with _writing(pool) as (store, counting):
        await store.open_turn(session, "go")
        await store.record(session, "booker", "a", True)
        await store.record(session, "booker", "\x00 not text", True)  # PostgreSQL refuses a NUL
        await store.record(session, "booker", "c", True)
        receipts = await store.receipts(session, 1)
    assert [r.tool for r in receipts] == ["a", "c"]
    assert "1 of 3 receipts were not recorded: the database refused them" in caplog.messages


async def test_concurrent_opens_get_consecutive_numbers(pool: PgPool) -> None:
    store = PostgresTurns(pool)
    session_id = await _session_id(pool)
    numbers: list[int] = []

    async def open_one(i: int) -> None:
        numbers.append(await store.open_turn(session_id, f"m{i}"))

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(open_one, i)
    assert sorted(numbers) == list(range(1, 9))


# -- through a real host -------------------------------------------------------------------


async def _post(running: RunningHost, session: dict[str, Any], path: str, body: Any, token: str | None = None) -> Any:
    url = f"{running.url}/v1/sessions/{session['session_id']}{path}"
    return await running.http.post(url, json=body, headers={"Authorization": f"Bearer {token or session['token']}"})


@needs_bwrap
async def test_claim_gate_through_the_host(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["booker"])) as running:
        session = await running.new_session()
        other = await running.new_session()
        async with running.client(session) as client:
            opened = await _post(running, session, "/turns", {"message": "book it please"})
            assert (opened.status_code, opened.json()) == (201, {"turn": 1})
            booked = await client.call_tool("book_it", {})
            assert booked.structured_content == {"ok": True}
            answered = await _post(running, session, "/turns/1/answer", {"text": "I've booked it"})
            assert (answered.status_code, answered.json()) == (200, {"ok": True})

            # A new turn: the earlier turn's receipt does not count.
            assert (await _post(running, session, "/turns", {"message": "and again"})).json() == {"turn": 2}
            await client.call_tool("whatever", {})
            answered = await _post(running, session, "/turns/2/answer", {"text": "I’ve  BOOKED it again"})
            assert answered.json() == {
                "ok": False,
                "violations": [{"capability": "booker", "tool": "book_it", "phrase": "i've booked"}],
            }

            # A booking that did not go through does not count either.
            assert (await _post(running, session, "/turns", {"message": "third"})).json() == {"turn": 3}
            failed = await client.call_tool("book_it", {"fail": True})
            assert failed.structured_content == {"ok": False}
            refused = await client.call_tool("no_such_tool", {})  # refused: no receipt
            assert refused.is_error
            answered = await _post(running, session, "/turns/3/answer", {"text": "I've booked it"})
            assert answered.json()["ok"] is False

            # The plugin reads the conversation of its own session through `conversation.read`.
            read = await client.call_tool("transcript", {})
            assert not read.is_error, read
            assert read.structured_content == {
                "turns": [
                    {
                        "n": 1,
                        "message": "book it please",
                        "answer": "I've booked it",
                        "receipts": [{"capability": "booker", "tool": "book_it", "ok": True}],
                    },
                    {
                        "n": 2,
                        "message": "and again",
                        "answer": "I’ve  BOOKED it again",
                        "receipts": [{"capability": "booker", "tool": "whatever", "ok": True}],
                    },
                    {
                        "n": 3,
                        "message": "third",
                        "answer": "I've booked it",
                        "receipts": [{"capability": "booker", "tool": "book_it", "ok": False}],
                    },
                ]
            }

        # Another session sees none of it; its turns are its own.
        async with running.client(other) as client:
            assert (await client.call_tool("transcript", {})).structured_content == {"turns": []}
        assert (await _post(running, other, "/turns/1/answer", {"text": "hi"})).status_code == 404

        # Wrong or missing token: 401; unknown turn: 404; bodies are checked.
        assert (await _post(running, session, "/turns", {"message": "x"}, token=other["token"])).status_code == 401
        no_token = await running.http.post(f"{running.url}/v1/sessions/{session['session_id']}/turns", json={})
        assert no_token.status_code == 401
        assert (await _post(running, session, "/turns/9/answer", {"text": "x"})).status_code == 404
        assert (await _post(running, session, "/turns/x/answer", {"text": "x"})).status_code == 404
        assert (await _post(running, session, "/turns", {"message": "x", "extra": 1})).status_code == 400
        assert (await _post(running, session, "/turns", {"message": "x" * 2_000_000})).status_code == 413


@needs_bwrap
async def test_a_receipt_that_cannot_be_recorded_changes_nothing_for_the_visitor(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(self: PostgresTurns, session_id: str, capability: str, tool: str, ok: bool) -> None:
        raise RuntimeError("database away")

    monkeypatch.setattr(PostgresTurns, "record", broken)
    async with running_host(host_settings(tmp_path, database_url, ["booker"])) as running:
        session = await running.new_session()
        assert (await _post(running, session, "/turns", {"message": "book"})).status_code == 201
        async with running.client(session) as client:
            booked = await client.call_tool("book_it", {})
        assert not booked.is_error and booked.structured_content == {"ok": True}
        answered = await _post(running, session, "/turns/1/answer", {"text": "I've booked it"})
        assert answered.json()["ok"] is False  # no receipt was kept, so the claim is flagged
    assert any("receipt of booker/book_it was not recorded" in m for m in caplog.messages)


# -- what one session may store (issue 26, defect 5) ---------------------------------------

SMALL = TurnCaps(turn_bytes=1024, turns=3, session_bytes=2500, receipts=3)
QUOTA_EXHAUSTED = "quota_exhausted"
FULL = "this session holds {} turns, the most one may; open a new session"


@pytest.fixture(params=["memory", "postgres"])
def capped(request: pytest.FixtureRequest) -> tuple[TurnStore, PgPool | None]:
    """A store with `SMALL` caps (and its pool); `_session` opens a session of it."""
    # A plain fixture: anyio cannot run an async fixture looked up from inside an async one.
    if request.param == "memory":
        return MemoryTurns(SMALL), None
    pool: PgPool = request.getfixturevalue("pool")
    return PostgresTurns(pool, caps=SMALL), pool


async def _capped(capped: tuple[TurnStore, PgPool | None]) -> tuple[TurnStore, str]:
    store, pool = capped
    return store, "a" * 32 if pool is None else await _session_id(pool)


async def test_a_turn_over_its_size_is_refused_and_nothing_is_stored(capped: tuple[TurnStore, PgPool | None]) -> None:
    store, session = await _capped(capped)
    with pytest.raises(TurnTooLarge, match=r"^the message is 1025 bytes; a turn holds at most 1024$"):
        await store.open_turn(session, "x" * 1025)
    with pytest.raises(TurnTooLarge, match="the message is 1026 bytes"):  # UTF-8 bytes, not characters
        await store.open_turn(session, "é" * 513)
    assert await store.transcript(session) == []
    assert await store.open_turn(session, "m" * 1000) == 1
    with pytest.raises(TurnTooLarge, match=r"^the answer is 25 bytes and its message 1000; a turn holds at most 1024"):
        await store.answer(session, 1, "a" * 25)
    assert await store.transcript(session) == [Turn(1, "m" * 1000, None)]
    await store.answer(session, 1, "a" * 24)
    assert await store.transcript(session) == [Turn(1, "m" * 1000, "a" * 24)]


async def test_a_session_past_its_turns_is_refused_and_nothing_is_stored(
    capped: tuple[TurnStore, PgPool | None],
) -> None:
    store, session = await _capped(capped)
    assert [await store.open_turn(session, f"m{i}") for i in range(3)] == [1, 2, 3]
    with pytest.raises(TurnsUsedUp) as refused:
        await store.open_turn(session, "one more")
    assert (refused.value.code, refused.value.message) == (
        QUOTA_EXHAUSTED,
        FULL.format(3),
    )
    assert [t.message for t in await store.transcript(session)] == ["m0", "m1", "m2"]


async def test_a_session_past_its_bytes_is_refused_and_nothing_is_stored(
    capped: tuple[TurnStore, PgPool | None],
) -> None:
    store, session = await _capped(capped)
    await store.open_turn(session, "m" * 1000)
    await store.open_turn(session, "n" * 1000)
    with pytest.raises(TurnsUsedUp, match=r"^this session's turns hold 2000 bytes and may hold at most 2500"):
        await store.open_turn(session, "o" * 501)
    assert await store.open_turn(session, "o" * 400) == 3
    with pytest.raises(TurnsUsedUp, match="hold 2400 bytes"):
        await store.answer(session, 3, "a" * 101)
    await store.answer(session, 3, "a" * 100)  # 2500 bytes held: the cap
    await store.answer(session, 3, "c" * 10)  # a new answer replaces the old one's bytes
    assert [(t.message[0], t.answer) for t in await store.transcript(session)] == [
        ("m", None),
        ("n", None),
        ("o", "c" * 10),
    ]


@pytest.mark.parametrize("writer", ["at once", "batched"])
async def test_a_turn_keeps_its_receipts_up_to_the_cap_then_the_first_of_each_kind(
    capped: tuple[TurnStore, PgPool | None], writer: str
) -> None:
    store, session = await _capped(capped)
    calls = [("a", True)] * 5 + [("b", False), ("a", True), ("b", True), ("a", False), ("a", False)]
    await store.open_turn(session, "go")
    if writer == "batched" and isinstance(store, PostgresTurns):
        async with anyio.create_task_group() as tg:
            await tg.start(store.run)
            for tool, ok in calls:  # queued, written as one batch
                await store.record(session, "booker", tool, ok)
            kept = await store.receipts(session, 1)
            await store.stop()
    else:
        for tool, ok in calls:
            await store.record(session, "booker", tool, ok)
        kept = await store.receipts(session, 1)
    assert [(r.tool, r.ok) for r in kept] == [("a", True)] * 3 + [("b", False), ("b", True), ("a", False)]
    gate = [("booker", ClaimGate(tool="b", phrases=("done",)))]
    assert judge("done", gate, kept) == []  # the claim gate judges as if every receipt were kept


async def test_concurrent_opens_cannot_pass_the_sessions_cap(pool: PgPool) -> None:
    store = PostgresTurns(pool, caps=SMALL)
    session_id = await _session_id(pool)
    answers: list[int | str] = []

    async def open_one(i: int) -> None:
        try:
            answers.append(await store.open_turn(session_id, f"m{i}"))
        except TurnsUsedUp as exc:
            answers.append(exc.code)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(open_one, i)
    assert sorted(answers, key=str) == [1, 2, 3] + [QUOTA_EXHAUSTED] * 7
    assert await pool.fetchval("SELECT count(*) FROM mcp_host.turns") == 3


@needs_bwrap
async def test_the_turn_routes_refuse_a_turn_too_large_413_and_a_full_session_429(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, [], turn_max_bytes=2048, session_max_turns=2)
    async with running_host(settings) as running:
        session = await running.new_session()
        too_large = await _post(running, session, "/turns", {"message": "x" * 3000})
        opened = [await _post(running, session, "/turns", {"message": m}) for m in ("hi", "again", "third")]
        long_answer = await _post(running, session, "/turns/1/answer", {"text": "y" * 2047})
        rows = await running.sql.fetch("SELECT n, message, answer FROM mcp_host.turns ORDER BY n")
    assert (too_large.status_code, too_large.json()) == (
        413,
        {"error": "invalid_arguments", "message": "the message is 3000 bytes; a turn holds at most 2048"},
    )
    assert [(r.status_code, r.json()) for r in opened] == [
        (201, {"turn": 1}),
        (201, {"turn": 2}),
        (429, {"error": QUOTA_EXHAUSTED, "message": FULL.format(2)}),
    ]
    assert (long_answer.status_code, long_answer.json()["error"]) == (413, "invalid_arguments")
    assert [tuple(r) for r in rows] == [(1, "hi", None), (2, "again", None)]


async def _turn_tables_bytes(pool: PgPool) -> int:
    """What the session, turn and receipt tables take on disk: rows, TOAST and indexes."""
    tables = "ARRAY['mcp_host.sessions', 'mcp_host.turns', 'mcp_host.receipts']::regclass[]"
    return int(await pool.fetchval(f"SELECT sum(pg_total_relation_size(t)) FROM unnest({tables}) AS t"))


@needs_bwrap
async def test_one_public_session_writes_no_more_than_its_caps_into_the_database(
    tmp_path: Path, database_url: str
) -> None:
    """The flood of the issue (36.5 MB from one session in 5 s), with the default caps: turns as
    large as they may be until the session's bytes are used up, then the smallest until its count
    is; every later request is refused and the tables stop growing. (The principal's turns a
    minute are lifted here: `test_a_principal_opening_turns_too_fast_...` covers that cap.)"""
    settings = host_settings(tmp_path, database_url, [], principal_turns_per_minute=100_000)
    async with running_host(settings) as running:
        pool = running.sql
        before = await _turn_tables_bytes(pool)
        session = await running.new_session()
        statuses: list[int] = []
        for _ in range(1100):  # bounded: 65 large turns, then 935 small ones, then refusals
            large = 429 not in statuses
            opened = await _post(running, session, "/turns", {"message": secrets.token_hex(20_000) if large else "hi"})
            statuses.append(opened.status_code)
            if opened.status_code == 201 and large:
                answer = await _post(running, session, f"/turns/{opened.json()['turn']}/answer", {"text": "a" * 24_000})
                assert answer.status_code == 200, answer.text
            if statuses[-2:] == [429, 429]:
                break
        grown = await _turn_tables_bytes(pool) - before
        held = await pool.fetchrow(
            "SELECT count(*) AS n, sum(octet_length(message) + coalesce(octet_length(answer), 0)) AS b"
            " FROM mcp_host.turns"
        )
    assert statuses.count(201) == 1000
    assert statuses[65] == 429  # the 66th large turn: the session's 4 MiB are used up
    assert held is not None and (held["n"], held["b"]) == (1000, 65 * 64_000 + 935 * 2)
    assert grown < 5 * 1024 * 1024, grown  # 4 MiB of text, plus rows and indexes


async def test_a_principal_opening_turns_too_fast_over_its_sessions_is_told_when_to_retry(
    tmp_path: Path, database_url: str
) -> None:
    # Each session's caps bound what it stores; the rate bounds what a principal adds a minute
    # however many sessions it opens: here 3 turns a minute over two public sessions.
    settings = host_settings(tmp_path, database_url, [], principal_turns_per_minute=3)
    async with running_host(settings) as running:
        first, second = await running.new_session(), await running.new_session()
        statuses = [(await _post(running, s, "/turns", {"message": "hi"})).status_code for s in (first, second, first)]
        refused = await _post(running, second, "/turns", {"message": "hi"})
        stored = await running.sql.fetchval("SELECT count(*) FROM mcp_host.turns")
    assert statuses == [201, 201, 201]
    wait = int(refused.headers["retry-after"])
    assert 15 <= wait <= 20
    assert (refused.status_code, refused.json(), stored) == (
        429,
        {"error": "unavailable", "message": f"this visitor opens turns faster than the host allows; retry in {wait} s"},
        3,
    )
