"""Holds: a visitor's call to a destructive tool waits for the owner — the rule, the store
(in memory and in real Postgres, single use under real concurrency, expiry, binding to
session and arguments), and the whole flow through a real host, real children and real clients."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import mcp.types as types
import pytest
from mcp import Client
from pydantic import SecretStr

from mcp_host.access.owners import OwnerStore
from mcp_host.errors import HostError, InvalidArguments, UnknownTool
from mcp_host.policy.holds import (
    MAX_SHOWN_ARGUMENTS_BYTES,
    HoldBook,
    HoldCaps,
    Holds,
    MemoryHolds,
    arguments_hash,
    needs_hold,
)
from mcp_host.settings import Settings
from mcp_host.store.database import PgPool, open_database
from tests.conftest import fresh_database
from tests.hosting import host_settings, running_host
from tests.owner_facade.test_door import audit, call, owner_client
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

HELD = "held"
DENIED = "denied"
UNKNOWN = "unknown"
INVALID_ARGUMENTS = "invalid_arguments"
HOLD_ID = re.compile(r"\bh_[0-9a-f]{16}\b")
SESSION_A = "a" * 32
SESSION_B = "b" * 32


# -- the rule ---------------------------------------------------------------------------------


def _tool(**hints: bool) -> types.Tool:
    annotations = types.ToolAnnotations(**hints) if hints else None  # type: ignore[arg-type]
    return types.Tool(name="t", input_schema={"type": "object"}, annotations=annotations)


def test_only_a_tool_annotated_destructive_and_not_read_only_is_held() -> None:
    assert needs_hold(_tool(destructive_hint=True)) is True
    assert needs_hold(_tool(destructive_hint=True, read_only_hint=True)) is False
    assert needs_hold(_tool(destructive_hint=False)) is False
    assert needs_hold(_tool(read_only_hint=True)) is False
    assert needs_hold(_tool()) is False


def test_arguments_hash_is_sha256_of_canonical_json() -> None:
    expected = hashlib.sha256('{"a":1,"b":{"c":"é","d":[1,2]}}'.encode()).digest()
    assert arguments_hash({"b": {"d": [1, 2], "c": "é"}, "a": 1}) == expected
    with pytest.raises(InvalidArguments):
        arguments_hash({"x": float("nan")})


# -- the store, in memory and in Postgres -------------------------------------------------------


@dataclass
class Book:
    holds: HoldBook
    owner_id: str
    expire: Callable[[], Awaitable[None]]
    """Move every hold of the book past its expiry."""


@pytest.fixture(params=["memory", "postgres"])
async def book(request: pytest.FixtureRequest, postgres_server: str, tmp_path: Path) -> AsyncIterator[Book]:
    if request.param == "memory":
        now = [datetime(2026, 1, 1, tzinfo=UTC)]

        def tick() -> datetime:
            now[0] += timedelta(milliseconds=1)
            return now[0]

        async def later() -> None:
            now[0] += timedelta(hours=2)

        yield Book(MemoryHolds(ttl_s=3600, clock=tick), "o_memory", later)
        return
    async with fresh_database(postgres_server) as url:
        async with open_database(Settings(database_url=SecretStr(url), data_dir=tmp_path)) as database:
            pool = database.pool
            owner = await OwnerStore(pool).ensure_single_owner()

            async def past() -> None:
                await pool.execute("UPDATE mcp_host.holds SET expires_at = now() - interval '1 second'")

            yield Book(Holds(pool, ttl_s=3600), owner.id, past)


async def _admit(b: Book, arguments: dict[str, Any], session: str = SESSION_A, tool: str = "wipe") -> str:
    """The answer to one call: `go:<id>` of the hold it used, or `<code>:<hold id>`."""
    try:
        return "go:" + await b.holds.admit(b.owner_id, session, "vault", tool, arguments)
    except HostError as exc:
        found = HOLD_ID.search(exc.message)
        return f"{exc.code}:{found.group(0) if found else '-'}"


def _code_and_id(answer: str) -> tuple[str, str]:
    code, _, hold_id = answer.partition(":")
    return code, hold_id


async def test_a_call_is_held_until_approved_then_runs_once(book: Book) -> None:
    first = await _admit(book, {"target": "x"})
    code, hold_id = _code_and_id(first)
    assert code == HELD
    assert await _admit(book, {"target": "x"}) == first  # still pending: the same hold, no new row
    listed = await book.holds.of_owner(book.owner_id)
    assert [(h.id, h.session_id, h.capability, h.tool, h.arguments, h.status) for h in listed] == [
        (hold_id, SESSION_A, "vault", "wipe", {"target": "x"}, "pending")
    ]

    decided = await book.holds.decide(book.owner_id, hold_id, True)
    assert (decided.status, decided.decided_by) == ("approved", book.owner_id)
    assert decided.decided_at is not None
    assert await book.holds.of_owner(book.owner_id) == []  # nothing pending any more

    assert await _admit(book, {"target": "x"}) == f"go:{hold_id}"
    again_code, again_id = _code_and_id(await _admit(book, {"target": "x"}))
    assert (again_code, again_id != hold_id) == (HELD, True)  # single use: a new hold
    everything = await book.holds.of_owner(book.owner_id, everything=True)
    assert [(h.id, h.status) for h in everything] == [(again_id, "pending"), (hold_id, "used")]
    assert everything[1].used_at is not None


async def test_an_approval_is_bound_to_its_session_and_its_arguments(book: Book) -> None:
    _, hold_id = _code_and_id(await _admit(book, {"target": "x", "n": 1}))
    await book.holds.decide(book.owner_id, hold_id, True)

    other_session = await _admit(book, {"target": "x", "n": 1}, session=SESSION_B)
    changed_args = await _admit(book, {"target": "x", "n": 2})
    other_tool = await _admit(book, {"target": "x", "n": 1}, tool="burn")
    answers = [other_session, changed_args, other_tool]
    assert [_code_and_id(a)[0] for a in answers] == [HELD, HELD, HELD]
    assert len({hold_id, *(_code_and_id(a)[1] for a in answers)}) == 4  # each a new hold

    # The same arguments in another key order are the same call.
    assert await _admit(book, {"n": 1, "target": "x"}) == f"go:{hold_id}"


async def test_a_denied_call_is_refused_until_its_hold_expires(book: Book) -> None:
    _, hold_id = _code_and_id(await _admit(book, {"target": "x"}))
    await book.holds.decide(book.owner_id, hold_id, False)
    assert await _admit(book, {"target": "x"}) == f"{DENIED}:{hold_id}"
    assert await _admit(book, {"target": "x"}) == f"{DENIED}:{hold_id}"
    await book.expire()
    code, new_id = _code_and_id(await _admit(book, {"target": "x"}))
    assert (code, new_id != hold_id) == (HELD, True)


async def test_an_expired_approval_lets_nothing_through_and_a_new_hold_is_made(book: Book) -> None:
    _, hold_id = _code_and_id(await _admit(book, {"target": "x"}))
    await book.holds.decide(book.owner_id, hold_id, True)
    await book.expire()
    code, new_id = _code_and_id(await _admit(book, {"target": "x"}))
    assert (code, new_id != hold_id) == (HELD, True)
    everything = await book.holds.of_owner(book.owner_id, everything=True)
    assert sorted((h.id, h.status) for h in everything) == sorted([(hold_id, "expired"), (new_id, "pending")])


async def test_an_expired_pending_hold_cannot_be_decided_and_is_replaced(book: Book) -> None:
    _, hold_id = _code_and_id(await _admit(book, {"target": "x"}))
    await book.expire()
    assert await book.holds.of_owner(book.owner_id) == []
    with pytest.raises(InvalidArguments, match="expired"):
        await book.holds.decide(book.owner_id, hold_id, True)
    code, new_id = _code_and_id(await _admit(book, {"target": "x"}))
    assert (code, new_id != hold_id) == (HELD, True)


async def test_deciding_an_unknown_or_decided_hold_is_refused(book: Book) -> None:
    _, hold_id = _code_and_id(await _admit(book, {"target": "x"}))
    with pytest.raises(UnknownTool):
        await book.holds.decide(book.owner_id, "h_0000000000000000", True)
    with pytest.raises(UnknownTool):
        await book.holds.decide(book.owner_id, "not an id", True)
    with pytest.raises(UnknownTool):
        await book.holds.decide("o_someone_else", hold_id, True)
    await book.holds.decide(book.owner_id, hold_id, False)
    with pytest.raises(InvalidArguments, match="denied, not pending"):
        await book.holds.decide(book.owner_id, hold_id, True)


async def test_arguments_too_large_to_show_are_a_note_and_still_bind_the_hold(book: Book) -> None:
    big = {"blob": "x" * (MAX_SHOWN_ARGUMENTS_BYTES + 1)}
    _, hold_id = _code_and_id(await _admit(book, big))
    [hold] = await book.holds.of_owner(book.owner_id)
    assert list(hold.arguments) == ["_note"] and "too large" in hold.arguments["_note"]
    await book.holds.decide(book.owner_id, hold_id, True)
    assert _code_and_id(await _admit(book, {"blob": "x"}))[0] == HELD
    assert await _admit(book, big) == f"go:{hold_id}"


async def test_arguments_jsonb_cannot_store_are_a_note_and_still_bind_the_hold(book: Book) -> None:
    nul = {"target": "a\x00b"}
    _, hold_id = _code_and_id(await _admit(book, nul))
    [hold] = await book.holds.of_owner(book.owner_id)
    assert list(hold.arguments) == ["_note"] and "NUL" in hold.arguments["_note"]
    await book.holds.decide(book.owner_id, hold_id, True)
    assert await _admit(book, nul) == f"go:{hold_id}"


async def test_concurrent_repeats_of_an_approved_call_run_exactly_once(pool: PgPool) -> None:
    owner = await OwnerStore(pool).ensure_single_owner()
    holds = Holds(pool, ttl_s=3600)
    b = Book(holds, owner.id, lambda: anyio.lowlevel.checkpoint())
    go = anyio.Event()
    answers: list[str] = []

    async def repeat() -> None:
        await go.wait()
        answers.append(await _admit(b, {"target": "x"}))

    # Ten concurrent first calls share one pending hold.
    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(repeat)
        await anyio.lowlevel.checkpoint()
        go.set()
    assert len(set(answers)) == 1 and _code_and_id(answers[0])[0] == HELD
    hold_id = _code_and_id(answers[0])[1]
    await holds.decide(owner.id, hold_id, True)

    go, answers = anyio.Event(), []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(repeat)
            await anyio.lowlevel.checkpoint()
            go.set()
    winners = [a for a in answers if a.startswith("go:")]
    losers = {a for a in answers if not a.startswith("go:")}
    assert winners == [f"go:{hold_id}"]
    assert len(losers) == 1 and _code_and_id(losers.pop())[0] == HELD  # they share one new hold
    rows = await pool.fetch("SELECT status, count(*) AS n FROM mcp_host.holds GROUP BY status ORDER BY status")
    assert [(r["status"], r["n"]) for r in rows] == [("pending", 1), ("used", 1)]


# -- through a real host ----------------------------------------------------------------------


async def _visitor_call(client: Client, name: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(name, arguments)
    return bool(result.is_error), dict(result.structured_content or {})


def _held_id(answer: tuple[bool, dict[str, Any]]) -> str:
    failed, content = answer
    assert failed and content["code"] == HELD, content
    assert content["message"].startswith("waiting for the owner's approval (hold h_")
    found = HOLD_ID.search(content["message"])
    assert found is not None
    return found.group(0)


@needs_bwrap
async def test_a_visitors_destructive_call_waits_for_the_owner_and_runs_once_approved(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["vault"])) as running:
        session, other = await running.new_session(), await running.new_session()
        async with running.client(session) as visitor, owner_client(running) as owner:
            listed = [t.name for t in (await visitor.list_tools()).tools]
            first = _held_id(await _visitor_call(visitor, "wipe", target="x"))
            assert _held_id(await _visitor_call(visitor, "wipe", target="x")) == first
            ran_before = await _visitor_call(visitor, "calls")
            _, pending = await call(owner, "holds_list")
            failed, decided = await call(owner, "hold_decide", id=first, approve=True)
            assert not failed and decided["hold"]["status"] == "approved"
            wiped = await _visitor_call(visitor, "wipe", target="x")
            second = _held_id(await _visitor_call(visitor, "wipe", target="x"))  # single use
            changed = _held_id(await _visitor_call(visitor, "wipe", target="y"))
            await call(owner, "hold_decide", id=changed, approve=False)
            declined = await _visitor_call(visitor, "wipe", target="y")
            await call(owner, "hold_decide", id=second, approve=True)
            async with running.client(other) as stranger:
                strangers = _held_id(await _visitor_call(stranger, "wipe", target="x"))
            peeks = [await _visitor_call(visitor, "peek", target="x") for _ in range(2)]
            ran_after = await _visitor_call(visitor, "calls")
            unknown = await call(owner, "hold_decide", id="h_0000000000000000", approve=True)
            again = await call(owner, "hold_decide", id=first, approve=True)
            _, everything = await call(owner, "holds_list", status="all")
            trail = await audit(owner)

    assert listed == ["wipe", "peek", "calls"]
    assert ran_before == (False, {"wipe": 0, "peek": 0})  # the child was never called
    [shown] = pending["holds"]
    assert {k: v for k, v in shown.items() if not k.endswith("_at")} == {
        "id": first,
        "capability": "test.vault",
        "tool": "wipe",
        "session_id": session["session_id"],
        "arguments": {"target": "x"},
        "status": "pending",
    }
    assert wiped == (False, {"wiped": "x"})
    assert len({first, second, changed, strangers}) == 4
    assert declined[0] and declined[1]["code"] == DENIED
    assert declined[1]["message"] == f"the owner declined this call (hold {changed})"
    assert peeks == [(False, {"peeked": "x"})] * 2
    assert ran_after == (False, {"wipe": 1, "peek": 2})
    assert unknown[0] and unknown[1]["code"] == UNKNOWN
    assert again[0] and again[1]["code"] == INVALID_ARGUMENTS
    statuses = {h["id"]: (h["status"], h["session_id"]) for h in everything["holds"]}
    assert statuses == {
        first: ("used", session["session_id"]),
        second: ("approved", session["session_id"]),  # the stranger could not use it
        changed: ("denied", session["session_id"]),
        strangers: ("pending", other["session_id"]),
    }
    decisions = [outcome for tool, outcome in trail if tool == "hold_decide"]
    assert decisions == ["ok", "ok", "ok", UNKNOWN, INVALID_ARGUMENTS]
    assert ("holds_list", "ok") in trail


@needs_bwrap
async def test_with_holds_off_a_destructive_call_runs_at_once(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["vault"], hold_destructive_tools=False)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with running.client(session) as visitor:
            wiped = await _visitor_call(visitor, "wipe", target="x")
    assert wiped == (False, {"wiped": "x"})


# -- caps on pending holds (issue 26, defect 8) ------------------------------------------------

UNAVAILABLE = "unavailable"
SESSION_C = "c" * 32
# Sessions A and B are one principal (one address), C another.
PRINCIPALS = {SESSION_A: "address:192.0.2.1", SESSION_B: "address:192.0.2.1", SESSION_C: "address:192.0.2.9"}
CAPS = HoldCaps(per_session=3, per_principal=5)


@pytest.fixture(params=["memory", "postgres"])
async def capped(request: pytest.FixtureRequest, postgres_server: str, tmp_path: Path) -> AsyncIterator[Book]:
    """A book with small caps, each session asked for by the principal `PRINCIPALS` names."""
    if request.param == "memory":
        yield Book(MemoryHolds(caps=CAPS, principal_of=PRINCIPALS.__getitem__), "o_memory", anyio.lowlevel.checkpoint)
        return
    async with fresh_database(postgres_server) as url:
        async with open_database(Settings(database_url=SecretStr(url), data_dir=tmp_path)) as database:
            owner = await OwnerStore(database.pool).ensure_single_owner()
            holds = Holds(database.pool, caps=CAPS, principal_of=PRINCIPALS.__getitem__)
            yield Book(holds, owner.id, anyio.lowlevel.checkpoint)


async def _refusal(b: Book, arguments: dict[str, Any], session: str = SESSION_A) -> tuple[str, str]:
    try:
        await b.holds.admit(b.owner_id, session, "vault", "wipe", arguments)
    except HostError as exc:
        return exc.code, exc.message
    raise AssertionError("the call was let through")


async def _pending(b: Book) -> list[tuple[str, dict[str, Any]]]:
    return sorted(((h.session_id, h.arguments) for h in await b.holds.of_owner(b.owner_id)), key=repr)


async def test_a_session_past_its_pending_holds_is_refused_unavailable_and_nothing_is_recorded(capped: Book) -> None:
    answers = [_code_and_id(await _admit(capped, {"n": i}))[0] for i in range(3)]
    code, message = await _refusal(capped, {"n": 3})
    assert answers == [HELD] * 3
    assert code == UNAVAILABLE
    assert message.startswith("3 calls of this session already wait for the owner's approval, the most one")
    assert re.search(r"retry once the owner has decided one, or in \d+ s$", message)
    assert await _pending(capped) == [(SESSION_A, {"n": i}) for i in range(3)]
    # A call already waiting is answered `held` as before, and another session has room.
    assert _code_and_id(await _admit(capped, {"n": 0}))[0] == HELD
    assert _code_and_id(await _admit(capped, {"n": 0}, session=SESSION_C))[0] == HELD


async def test_a_decided_hold_makes_room_for_another(capped: Book) -> None:
    ids = [_code_and_id(await _admit(capped, {"n": i}))[1] for i in range(3)]
    assert (await _refusal(capped, {"n": 3}))[0] == UNAVAILABLE
    await capped.holds.decide(capped.owner_id, ids[0], False)
    assert _code_and_id(await _admit(capped, {"n": 3}))[0] == HELD


async def test_a_principal_past_its_pending_holds_is_refused_across_its_sessions(capped: Book) -> None:
    for i in range(3):
        await _admit(capped, {"n": i}, session=SESSION_A)
    for i in range(2):
        await _admit(capped, {"n": i}, session=SESSION_B)
    code, message = await _refusal(capped, {"n": 2}, session=SESSION_B)  # B has room, its principal none
    assert code == UNAVAILABLE
    assert message.startswith("5 calls of this visitor (its access code, API key or address) already wait")
    assert _code_and_id(await _admit(capped, {"n": 0}, session=SESSION_C))[0] == HELD  # another principal
    assert [s for s, _ in await _pending(capped)] == [SESSION_A] * 3 + [SESSION_B] * 2 + [SESSION_C]


async def test_concurrent_calls_cannot_pass_the_cap_together(pool: PgPool) -> None:
    owner = await OwnerStore(pool).ensure_single_owner()
    b = Book(Holds(pool, caps=CAPS, principal_of=PRINCIPALS.__getitem__), owner.id, anyio.lowlevel.checkpoint)
    go = anyio.Event()
    codes: list[str] = []

    async def call(i: int) -> None:
        await go.wait()
        codes.append(_code_and_id(await _admit(b, {"n": i}))[0])

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(call, i)
            await anyio.lowlevel.checkpoint()
            go.set()
    assert sorted(codes) == sorted([HELD] * 3 + [UNAVAILABLE] * 9)
    assert await pool.fetchval("SELECT count(*) FROM mcp_host.holds") == 3
    principals = await pool.fetch("SELECT DISTINCT principal FROM mcp_host.holds")
    assert [r["principal"] for r in principals] == ["address:192.0.2.1"]


@needs_bwrap
async def test_a_visitor_past_its_pending_holds_is_refused_unavailable_through_the_host(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["vault"], session_max_pending_holds=2)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with running.client(session) as visitor, owner_client(running) as owner:
            held = [_held_id(await _visitor_call(visitor, "wipe", target=t)) for t in ("a", "b")]
            refused = await _visitor_call(visitor, "wipe", target="c")
            again = _held_id(await _visitor_call(visitor, "wipe", target="a"))
            ran = await _visitor_call(visitor, "calls")
            _, pending = await call(owner, "holds_list")
        principals = await running.sql.fetch("SELECT DISTINCT principal FROM mcp_host.holds")
    assert refused[0] and refused[1]["code"] == UNAVAILABLE
    assert refused[1]["message"].startswith("2 calls of this session already wait for the owner's approval")
    assert again == held[0]
    assert ran == (False, {"wipe": 0, "peek": 0})
    assert sorted(h["arguments"]["target"] for h in pending["holds"]) == ["a", "b"]
    assert [r["principal"] for r in principals] == ["address:127.0.0.1"]  # the client's address
