"""Plugin stores: the document-store contract (run against PostgreSQL, the in-memory twin and the
plugin kit's standalone store),
owner and plugin isolation, argument checks before the database, quota and claims under real
concurrency (two pools on one database, as two host replicas), and the schema lifecycle."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from inline_snapshot import snapshot
from pydantic import SecretStr

from mcp_host.errors import InvalidArguments, QuotaExhausted, Unavailable
from mcp_host.settings import Settings
from mcp_host.store.database import DatabaseLimits, PgConnection, PgPool, open_database
from mcp_host.store.memory_store import InMemoryPluginStore
from mcp_host.store.plugin_store import (
    DocumentStore,
    PluginStore,
    PluginStores,
    QuotaCheck,
    SearchHit,
    check_schema_name,
    store_schema,
)
from mcp_host.store.search import search_sql

pytestmark = pytest.mark.anyio

A, B = "owner-a", "owner-b"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MISSING_ID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def stores(pool: PgPool) -> PluginStores:
    return PluginStores(pool)


@pytest.fixture
async def pg_store(stores: PluginStores) -> PluginStore:
    return await stores.ensure("capability", "notes.app")


@pytest.fixture(params=["postgres", "memory"])
def store(request: pytest.FixtureRequest) -> DocumentStore:
    """The PostgreSQL store, and the in-memory one (the plugin kit's standalone store, which
    plugins run without a host use), through the same contract tests."""
    # A plain fixture: anyio cannot run an async fixture looked up from inside an async one.
    if request.param == "memory":
        return InMemoryPluginStore()
    postgres: PluginStore = request.getfixturevalue("pg_store")
    return postgres


@pytest.fixture
async def other_pool(database_url: str, tmp_path: Path) -> AsyncIterator[PgPool]:
    """A second pool on this test's database, as another host replica would open it."""
    settings = Settings(database_url=SecretStr(database_url), data_dir=tmp_path)
    async with open_database(settings, limits=DatabaseLimits(max_connections=16)) as database:
        yield database.pool


async def _refusals(calls: list[Callable[[], Awaitable[object]]]) -> list[str]:
    """The `InvalidArguments` message of each call, which must raise it."""
    messages = []
    for call in calls:
        with pytest.raises(InvalidArguments) as caught:
            await call()
        messages.append(caught.value.message)
    return messages


async def _wait_for_lock_waiters(conn: PgConnection, count: int) -> None:
    """Poll until `count` backends of this database wait for a table or advisory lock."""
    with anyio.fail_after(10):
        while True:
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('relation', 'advisory')"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            if waiting >= count:
                return
            await anyio.sleep(0.01)


async def _wait_for_row_waiters(conn: PgConnection, count: int) -> None:
    """Poll until `count` backends wait for a row lock (a transactionid or tuple lock)."""
    with anyio.fail_after(10):
        while True:
            waiting = await conn.fetchval(
                "SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')"
            )
            if waiting >= count:
                return
            await anyio.sleep(0.01)


# -- the contract, both stores ------------------------------------------------------------------


async def test_inserted_docs_come_back_oldest_first_with_their_ids(store: DocumentStore) -> None:
    first = await store.insert(A, "notes", {"text": "one", "n": 1})
    second = await store.insert(A, "notes", {"text": "two", "tags": ["a", "b"], "nested": {"x": None}})
    records = await store.query(A, "notes")
    assert UUID.fullmatch(first) and UUID.fullmatch(second)
    assert [(r.id, r.doc) for r in records] == [
        (first, {"text": "one", "n": 1}),
        (second, {"text": "two", "tags": ["a", "b"], "nested": {"x": None}}),
    ]
    assert records[0].created_at <= records[1].created_at
    assert records[0].created_at.tzinfo is not None


async def test_a_stored_doc_shares_nothing_with_the_callers_object(store: DocumentStore) -> None:
    doc: dict[str, Any] = {"tags": ["a"]}
    await store.insert(A, "notes", doc)
    doc["tags"].append("changed")
    (record,) = await store.query(A, "notes")
    record.doc["tags"].append("changed again")
    assert [r.doc for r in await store.query(A, "notes")] == [{"tags": ["a"]}]


CATALOGUE: dict[str, dict[str, Any]] = {
    "ada": {"name": "ada", "tags": ["x", "y"], "n": 1, "flag": True, "meta": {"a": {"b": 1}, "c": [1, {"d": 2}]}},
    "bob": {"name": "bob", "tags": ["y"], "n": 1.0, "flag": 1, "meta": {"a": {"b": 2}}},
    "cy": {"name": "cy", "tags": [], "n": "1", "flag": None, "meta": {}},
}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ({}, ["ada", "bob", "cy"]),
        ({"name": "ada"}, ["ada"]),
        ({"n": 1}, ["ada", "bob"]),  # numbers compare by value: 1 is 1.0
        ({"n": "1"}, ["cy"]),
        ({"flag": True}, ["ada"]),  # true is not 1
        ({"flag": 1}, ["bob"]),
        ({"flag": None}, ["cy"]),
        ({"missing": None}, []),
        ({"tags": ["y"]}, ["ada", "bob"]),
        ({"tags": ["y", "x", "y"]}, ["ada"]),  # order and repeats do not matter
        ({"tags": []}, ["ada", "bob", "cy"]),
        ({"tags": "y"}, []),  # below the top level a bare scalar does not match an array
        ({"meta": {"a": {}}}, ["ada", "bob"]),
        ({"meta": {"a": {"b": 1}}}, ["ada"]),
        ({"meta": {"c": [{"d": 2}]}}, ["ada"]),
        ({"meta": {"c": [{}, 1]}}, ["ada"]),
        ({"meta": {"c": [[]]}}, []),
        ({"name": "%"}, []),  # no LIKE or glob: metacharacters are plain data
        ({"name": "' OR 1=1 --"}, []),
    ],
)
async def test_query_and_count_match_docs_containing_the_filter(
    store: DocumentStore, pattern: dict[str, Any], expected: list[str]
) -> None:
    for doc in CATALOGUE.values():
        await store.insert(A, "people", doc)
    assert [r.doc["name"] for r in await store.query(A, "people", pattern)] == expected
    assert await store.count(A, "people", pattern) == len(expected)


async def test_query_returns_at_most_limit_records(store: DocumentStore) -> None:
    ids = [await store.insert(A, "notes", {"i": i}) for i in range(4)]
    assert [r.id for r in await store.query(A, "notes", limit=3)] == ids[:3]
    assert [r.id for r in await store.query(A, "notes", None, 1)] == ids[:1]


async def test_query_limit_defaults_to_the_store_default(store: DocumentStore) -> None:
    for i in range(101):
        await store.insert(A, "notes", {"i": i})
    assert len(await store.query(A, "notes")) == 100


@pytest.mark.parametrize("limit", [0, -1, 501, True, 1.5, "5"])
async def test_a_limit_outside_1_to_500_is_refused(store: DocumentStore, limit: Any) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await store.query(A, "notes", limit=limit)
    assert caught.value.message == "limit must be an integer from 1 to 500"


async def test_update_replaces_the_doc_of_this_owners_record(store: DocumentStore) -> None:
    record_id = await store.insert(A, "notes", {"text": "old", "keep": "no"})
    assert await store.update(A, "notes", record_id, {"text": "new"}) is True
    assert [(r.id, r.doc) for r in await store.query(A, "notes")] == [(record_id, {"text": "new"})]


async def test_update_of_an_unknown_id_or_another_collection_changes_nothing(store: DocumentStore) -> None:
    record_id = await store.insert(A, "notes", {"text": "old"})
    assert await store.update(A, "notes", MISSING_ID, {"text": "new"}) is False
    assert await store.update(A, "other", record_id, {"text": "new"}) is False
    assert [r.doc for r in await store.query(A, "notes")] == [{"text": "old"}]


async def test_update_accepts_an_uppercase_id(store: DocumentStore) -> None:
    record_id = await store.insert(A, "notes", {"text": "old"})
    assert await store.update(A, "notes", record_id.upper(), {"text": "new"}) is True


@pytest.mark.parametrize("bad_id", ["", "1", "not-a-uuid", MISSING_ID + "0", "{" + MISSING_ID + "}", 7])
async def test_a_malformed_record_id_is_refused(store: DocumentStore, bad_id: Any) -> None:
    message = "id is not a record id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)"
    with pytest.raises(InvalidArguments) as on_update:
        await store.update(A, "notes", bad_id, {})
    with pytest.raises(InvalidArguments) as on_delete:
        await store.delete(A, "notes", id=bad_id)
    assert (on_update.value.message, on_delete.value.message) == (message, message)


async def test_update_with_keep_field_keeps_the_stored_subject(store: DocumentStore) -> None:
    quota = QuotaCheck("subject_id", "code-1", 5)
    stamped = await store.insert(A, "bookings", {"slot": 1}, quota=quota)
    plain = await store.insert(A, "bookings", {"slot": 2})
    assert await store.update(A, "bookings", stamped, {"slot": 3, "subject_id": "other"}, keep_field="subject_id")
    assert await store.update(A, "bookings", plain, {"slot": 4, "subject_id": "code-1"}, keep_field="subject_id")
    assert [r.doc for r in await store.query(A, "bookings")] == [
        {"slot": 3, "subject_id": "code-1"},
        {"slot": 4},
    ]


async def test_delete_by_id_by_filter_and_by_both(store: DocumentStore) -> None:
    ids = [await store.insert(A, "notes", {"kind": kind}) for kind in ("x", "x", "y", "y")]
    assert await store.delete(A, "notes", id=ids[0]) == 1
    assert await store.delete(A, "notes", id=ids[1], filter={"kind": "y"}) == 0  # both must match
    assert await store.delete(A, "notes", id=ids[2], filter={"kind": "y"}) == 1
    assert await store.delete(A, "notes", filter={"kind": "x"}) == 1
    assert await store.delete(A, "notes", id=MISSING_ID) == 0
    assert [r.id for r in await store.query(A, "notes")] == [ids[3]]


async def test_delete_without_id_or_filter_is_refused(store: DocumentStore) -> None:
    await store.insert(A, "notes", {"kind": "x"})
    with pytest.raises(InvalidArguments) as caught:
        await store.delete(A, "notes")
    assert caught.value.message == "delete needs an id, a filter, or both"
    assert await store.count(A, "notes") == 1


async def test_one_owner_cannot_reach_another_owners_rows_or_claims(store: DocumentStore) -> None:
    record_id = await store.insert(A, "notes", {"secret": "a's"})
    assert await store.claim(A, "locks", "slot-1", 60) is True
    assert await store.query(B, "notes") == []
    assert await store.count(B, "notes") == 0
    assert await store.update(B, "notes", record_id, {"secret": "b's"}) is False
    assert await store.delete(B, "notes", id=record_id) == 0
    assert await store.delete(B, "notes", filter={}) == 0
    assert await store.release(B, "locks", "slot-1") is False
    assert await store.claim(B, "locks", "slot-1", 60) is True  # B's key is B's own
    assert await store.claim(A, "locks", "slot-1", 60) is False  # A's claim still stands
    assert [(r.id, r.doc) for r in await store.query(A, "notes")] == [(record_id, {"secret": "a's"})]


async def test_collections_are_separate(store: DocumentStore) -> None:
    await store.insert(A, "notes", {"x": 1})
    assert await store.query(A, "notes_2") == []
    assert await store.count(A, "note") == 0


BAD_COLLECTIONS: list[Any] = [
    "", "A", "Notes", "1notes", "_notes", "no-tes", "no.tes", "..", "../notes", "notes/..", "no tes", "notes;",
    "n'; DROP SCHEMA public CASCADE; --", 'n"x', "n%", "n*", "n?", "n[a]", "n\\x", "n\x00", "nötes", "n\n",
    "notes\n", "a" * 65, None, 3,
]  # fmt: skip


def _every_op(store: DocumentStore, collection: Any) -> list[Callable[[], Awaitable[object]]]:
    return [
        lambda: store.insert(A, collection, {}),
        lambda: store.query(A, collection),
        lambda: store.count(A, collection),
        lambda: store.update(A, collection, MISSING_ID, {}),
        lambda: store.delete(A, collection, id=MISSING_ID),
        lambda: store.claim(A, collection, "k", 5),
        lambda: store.release(A, collection, "k"),
    ]


async def test_a_collection_name_outside_the_grammar_is_refused_before_the_database(
    stores: PluginStores, pool: PgPool
) -> None:
    # A store whose schema was never created: any query would fail as unavailable, so an
    # InvalidArguments proves the name was refused before anything reached PostgreSQL.
    unset = stores.bound("capability", "never.ensured")
    refusals = {repr(collection): await _refusals(_every_op(unset, collection)) for collection in BAD_COLLECTIONS}
    message = "collection must be 1-64 characters of a-z, 0-9 and _, starting with a letter"
    assert refusals == {repr(collection): [message] * 7 for collection in BAD_COLLECTIONS}
    assert await pool.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'plugin%'") == 0


@pytest.mark.parametrize("owner_id", ["", "o" * 129, "a\x00", "a\nb", "\ud800", None])
async def test_an_owner_id_no_grant_could_carry_is_a_host_bug(store: DocumentStore, owner_id: Any) -> None:
    with pytest.raises(ValueError, match="^owner_id is not an owner id$"):
        await store.insert(owner_id, "notes", {})


def _deep_dict(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels):
        node["a"] = {}
        node = node["a"]
    return root


def _deep_list(levels: int) -> dict[str, Any]:
    root: list[Any] = []
    node = root
    for _ in range(levels):
        node.append([])
        node = node[0]
    return {"a": root}


HOSTILE_DOCS: list[tuple[str, object, str]] = [
    ("dict 100000 deep", _deep_dict(100_000), "doc is nested deeper than 32 levels"),
    ("list 100000 deep", _deep_list(100_000), "doc is nested deeper than 32 levels"),
    ("33 levels", _deep_dict(32), "doc is nested deeper than 32 levels"),
    ("NaN", {"x": math.nan}, "doc holds a number that is not finite (NaN or Infinity)"),
    ("Infinity", {"x": [math.inf]}, "doc holds a number that is not finite (NaN or Infinity)"),
    ("-Infinity", {"x": -math.inf}, "doc holds a number that is not finite (NaN or Infinity)"),
    ("NUL in a value", {"x": "a\u0000b"}, "doc holds a string with U+0000, which cannot be stored"),
    ("NUL in a key", {"a\u0000": 1}, "doc holds a string with U+0000, which cannot be stored"),
    ("lone surrogate value", {"x": "\ud800"}, "doc holds a string that is not valid Unicode (a lone surrogate)"),
    ("lone surrogate key", {"\udfff": 1}, "doc holds a string that is not valid Unicode (a lone surrogate)"),
    ("5000-digit integer", {"x": 10**5000 - 1}, "doc holds an integer beyond ±10**30"),
    ("10**30 + 1", {"x": 10**30 + 1}, "doc holds an integer beyond ±10**30"),
    ("-10**30 - 1", {"x": [-(10**30) - 1]}, "doc holds an integer beyond ±10**30"),
    ("a key that is not a string", {1: "x"}, "doc has a key that is not a string"),
    ("a tuple", {"x": (1, 2)}, "doc holds a value that is not JSON: tuple"),
    ("a set", {"x": {1}}, "doc holds a value that is not JSON: set"),
    ("bytes", {"x": b"x"}, "doc holds a value that is not JSON: bytes"),
    ("over 256 KiB", {"x": "y" * (256 * 1024)}, "doc is larger than 262144 bytes of JSON"),
    ("a list", ["x"], "doc must be a JSON object"),
    ("a string", "x", "doc must be a JSON object"),
    ("null", None, "doc must be a JSON object"),
]


@pytest.mark.parametrize(("doc", "message"), [c[1:] for c in HOSTILE_DOCS], ids=[c[0] for c in HOSTILE_DOCS])
async def test_a_hostile_doc_is_refused_and_leaves_no_row(store: DocumentStore, doc: Any, message: str) -> None:
    kept = await store.insert(A, "notes", {"ok": True})
    with pytest.raises(InvalidArguments) as on_insert:
        await store.insert(A, "notes", doc)
    with pytest.raises(InvalidArguments) as on_update:
        await store.update(A, "notes", kept, doc)
    assert (on_insert.value.message, on_update.value.message) == (message, message)
    assert [(r.id, r.doc) for r in await store.query(A, "notes")] == [(kept, {"ok": True})]


HOSTILE_FILTERS = [c for c in HOSTILE_DOCS if c[1] is not None]  # no filter is a valid filter


@pytest.mark.parametrize(("pattern", "message"), [c[1:] for c in HOSTILE_FILTERS], ids=[c[0] for c in HOSTILE_FILTERS])
async def test_a_hostile_filter_is_refused(store: DocumentStore, pattern: Any, message: str) -> None:
    await store.insert(A, "notes", {"ok": True})
    refusals = await _refusals(
        [
            lambda: store.query(A, "notes", pattern),
            lambda: store.count(A, "notes", pattern),
            lambda: store.delete(A, "notes", filter=pattern),
        ]
    )
    assert refusals == [message.replace("doc", "filter", 1)] * 3
    assert await store.count(A, "notes") == 1


async def test_integers_beyond_2_to_the_53_survive_exactly(store: DocumentStore) -> None:
    values = [2**53 + 1, -(2**53) - 1, 2**63 + 1, -(2**63) - 1, 2**64, 10**30, -(10**30), 12345678901234567890123]
    record_id = await store.insert(A, "numbers", {"values": values})
    (record,) = await store.query(A, "numbers", {"values": [2**63 + 1]})
    assert record.id == record_id
    assert record.doc == {"values": values}
    assert [type(v) for v in record.doc["values"]] == [int] * len(values)


@pytest.mark.parametrize("key", ["", "k" * 201, "a\x00", "a\nb", "a\tb", "\x7f", "\x85", "\ud800", None, 5])
async def test_a_claim_key_that_is_empty_too_long_or_has_control_characters_is_refused(
    store: DocumentStore, key: Any
) -> None:
    refusals = await _refusals([lambda: store.claim(A, "locks", key, 5), lambda: store.release(A, "locks", key)])
    assert refusals == ["key must be 1-200 characters without control characters"] * 2


@pytest.mark.parametrize("ttl", [0, -1, 301, True, 1.5, "5", None])
async def test_a_claim_ttl_outside_1_to_300_seconds_is_refused(store: DocumentStore, ttl: Any) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await store.claim(A, "locks", "k", ttl)
    assert caught.value.message == "ttl_s must be an integer from 1 to 300"
    assert await store.claim(A, "locks", "k", 300) is True  # nothing was taken by the refusal


async def test_a_claimed_key_has_one_holder_until_released(store: DocumentStore) -> None:
    assert await store.claim(A, "locks", "slot-1", 60) is True
    assert await store.claim(A, "locks", "slot-1", 60) is False
    assert await store.claim(A, "locks", "slot-2", 60) is True
    assert await store.claim(A, "other", "slot-1", 60) is True
    assert await store.release(A, "locks", "slot-1") is True
    assert await store.release(A, "locks", "slot-1") is False
    assert await store.claim(A, "locks", "slot-1", 60) is True


async def test_quota_stamps_the_subject_over_what_the_plugin_wrote(store: DocumentStore) -> None:
    await store.insert(A, "bookings", {"slot": 1, "subject_id": "forged"}, quota=QuotaCheck("subject_id", "c1", 3))
    await store.insert(A, "bookings", {"slot": 2, "subject_id": "forged"}, quota=QuotaCheck("subject_id", None, 3))
    await store.insert(A, "bookings", {"slot": 3}, quota=QuotaCheck("subject_id", "c2", None))
    assert [r.doc for r in await store.query(A, "bookings")] == snapshot(
        [
            {"slot": 1, "subject_id": "c1"},
            {"slot": 2, "subject_id": None},
            {"slot": 3, "subject_id": "c2"},
        ]
    )


async def test_quota_refuses_the_insert_past_the_cap_for_that_subject_only(store: DocumentStore) -> None:
    capped = QuotaCheck("subject_id", "c1", 2)
    for slot in range(2):
        await store.insert(A, "bookings", {"slot": slot}, quota=capped)
    with pytest.raises(QuotaExhausted) as caught:
        await store.insert(A, "bookings", {"slot": 9}, quota=capped)
    assert caught.value.message == "the quota of 2 is used up"
    await store.insert(A, "bookings", {"slot": 3}, quota=QuotaCheck("subject_id", "c2", 2))
    await store.insert(B, "bookings", {"slot": 4}, quota=capped)  # another owner counts apart
    await store.insert(A, "other", {"slot": 5}, quota=capped)  # so does another collection
    assert await store.count(A, "bookings", {"subject_id": "c1"}) == 2


@pytest.mark.parametrize(
    "quota",
    [QuotaCheck("subject_id", None, 1), QuotaCheck("subject_id", "c1", None), QuotaCheck("subject_id", "c1", 0)],
    ids=["public session", "no limit", "limit 0"],
)
async def test_quota_without_subject_or_positive_limit_never_refuses(store: DocumentStore, quota: QuotaCheck) -> None:
    for slot in range(3):
        await store.insert(A, "bookings", {"slot": slot}, quota=quota)
    assert await store.count(A, "bookings") == 3


async def test_freeing_a_row_frees_quota(store: DocumentStore) -> None:
    capped = QuotaCheck("subject_id", "c1", 1)
    record_id = await store.insert(A, "bookings", {"slot": 1}, quota=capped)
    assert await store.delete(A, "bookings", id=record_id) == 1
    await store.insert(A, "bookings", {"slot": 2}, quota=capped)
    assert await store.count(A, "bookings") == 1


# -- in memory only -----------------------------------------------------------------------------


async def test_an_in_memory_claim_can_be_taken_over_once_its_time_is_up() -> None:
    now = [datetime(2030, 1, 1, tzinfo=UTC)]
    store = InMemoryPluginStore(clock=lambda: now[0])
    assert await store.claim(A, "locks", "k", 1) is True
    now[0] += timedelta(seconds=1)
    assert await store.release(A, "locks", "k") is False  # expired: nothing live was released
    assert await store.claim(A, "locks", "k", 1) is True
    assert await store.claim(A, "locks", "k", 1) is False
    now[0] += timedelta(seconds=1)
    assert await store.claim(A, "locks", "k", 5) is True


# -- PostgreSQL only ----------------------------------------------------------------------------


def test_schema_names_are_readable_bounded_and_distinct() -> None:
    long_id = "a" * 40 + ".x" + "b" * 20  # its slug is cut to the first 41 characters
    pairs: list[tuple[Any, str]] = [
        ("capability", "notes.app"),
        ("capability", "notes_app"),
        ("connector", "notes.app"),
        ("capability", long_id),
        ("capability", long_id[:-1] + "c"),
    ]
    names = [store_schema(kind, plugin_id) for kind, plugin_id in pairs]
    assert names == snapshot(
        [
            "plugin_cap_notes_app_73fcaea583",
            "plugin_cap_notes_app_ba476e1ea2",
            "plugin_con_notes_app_fc58fc55b5",
            "plugin_cap_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa__00d83a7d2d",
            "plugin_cap_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa__3e73cb2b42",
        ]
    )
    assert len(set(names)) == len(names)
    assert max(len(name.encode()) for name in names) == 63
    assert all(check_schema_name(name) == name for name in names)


@pytest.mark.parametrize(
    ("kind", "plugin_id"),
    [("capability", ""), ("capability", "A"), ("capability", "a..b"), ("capability", ".a"), ("capability", "a."),
     ("capability", "a-b"), ("capability", "a" * 65), ("capability", "a\n"), ("capability", "a/b"),
     ("capability", "a;b"), ("capability", None), ("plugin", "a"), ("", "a")],
)  # fmt: skip
def test_store_schema_refuses_what_is_not_a_plugin_kind_and_id(kind: Any, plugin_id: Any) -> None:
    with pytest.raises(ValueError):
        store_schema(kind, plugin_id)


@pytest.mark.parametrize(
    "name",
    ["mcp_host", "public", "information_schema", "pg_catalog", "pg_temp", "plugin_", "plugin_X", 'plugin_x"; drop',
     "plugin_x y", "plugin_x\n", "plugin_ä", "plugin_" + "a" * 57, "xplugin_a", "", None],
)  # fmt: skip
def test_check_schema_name_refuses_core_schemas_and_anything_unquotable(name: Any) -> None:
    with pytest.raises(ValueError):
        check_schema_name(name)


async def test_ensure_creates_the_records_and_claims_tables_and_their_indexes(
    pool: PgPool, pg_store: PluginStore
) -> None:
    columns = await pool.fetch(
        "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns"
        " WHERE table_schema = $1 ORDER BY table_name, ordinal_position",
        pg_store.schema,
    )
    indexes = await pool.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname", pg_store.schema
    )
    assert [tuple(row) for row in columns] == snapshot(
        [
            ("claims", "owner_id", "text", "NO"),
            ("claims", "collection", "text", "NO"),
            ("claims", "key", "text", "NO"),
            ("claims", "expires_at", "timestamp with time zone", "NO"),
            ("records", "id", "uuid", "NO"),
            ("records", "owner_id", "text", "NO"),
            ("records", "collection", "text", "NO"),
            ("records", "doc", "jsonb", "NO"),
            ("records", "created_at", "timestamp with time zone", "NO"),
            ("records", "text_vector", "tsvector", "YES"),
        ]
    )
    schema = pg_store.schema
    assert [(row["indexname"], row["indexdef"].replace(schema, "S")) for row in indexes] == snapshot(
        [
            ("claims_pkey", "CREATE UNIQUE INDEX claims_pkey ON S.claims USING btree (owner_id, collection, key)"),
            ("records_doc", "CREATE INDEX records_doc ON S.records USING gin (doc jsonb_path_ops)"),
            ("records_pkey", "CREATE UNIQUE INDEX records_pkey ON S.records USING btree (id)"),
            (
                "records_scope",
                "CREATE INDEX records_scope ON S.records USING btree (owner_id, collection, created_at, id)",
            ),
            ("records_text", "CREATE INDEX records_text ON S.records USING gin (text_vector)"),
        ]
    )


async def test_one_plugins_store_cannot_see_another_plugins_rows(stores: PluginStores, pool: PgPool) -> None:
    notes = await stores.ensure("capability", "notes.app")
    other = await stores.ensure("capability", "notes_app")  # same slug, other plugin
    connector = await stores.ensure("connector", "notes.app")  # same id, other kind
    record_id = await notes.insert(A, "notes", {"secret": 1})
    assert await notes.claim(A, "locks", "k", 60) is True
    for store in (other, connector):
        assert await store.query(A, "notes") == []
        assert await store.count(A, "notes") == 0
        assert await store.update(A, "notes", record_id, {"secret": 2}) is False
        assert await store.delete(A, "notes", id=record_id) == 0
        assert await store.release(A, "locks", "k") is False
    assert [r.doc for r in await notes.query(A, "notes")] == [{"secret": 1}]
    schemas = await pool.fetch("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'plugin%' ORDER BY nspname")
    assert [row["nspname"] for row in schemas] == sorted([notes.schema, other.schema, connector.schema])


async def test_sql_in_docs_and_filters_is_only_data(pg_store: PluginStore, pool: PgPool) -> None:
    doc = {"'; DROP SCHEMA public CASCADE; --": 'x"); DELETE FROM records; --', "$1": "${jndi}"}
    record_id = await pg_store.insert(A, "notes", doc)
    assert [(r.id, r.doc) for r in await pg_store.query(A, "notes", doc)] == [(record_id, doc)]
    assert (
        await pool.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname IN ('public', $1)", pg_store.schema) == 2
    )


async def test_jsonb_normalises_numbers_as_documented(pg_store: PluginStore) -> None:
    await pg_store.insert(
        A, "numbers", {"z": -0.0, "e": 1e20, "f": 0.1, "i": 1.0, "tiny": 5e-324, "k": {"b": 1, "a": 2}}
    )
    (record,) = await pg_store.query(A, "numbers")
    assert record.doc == snapshot(
        {"e": 100000000000000000000, "f": 0.1, "i": 1.0, "k": {"a": 2, "b": 1}, "z": 0.0, "tiny": 5e-324}
    )
    assert type(record.doc["e"]) is int


async def test_drop_removes_the_schema_and_ensure_recreates_it_empty(stores: PluginStores, pool: PgPool) -> None:
    store = await stores.ensure("capability", "notes.app")
    await store.insert(A, "notes", {"x": 1})
    assert await stores.drop("capability", "notes.app") is True
    assert await pool.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", store.schema) == 0
    with pytest.raises(Unavailable) as caught:
        await store.query(A, "notes")
    assert caught.value.message == "this plugin's store is not set up"
    assert await stores.drop("capability", "notes.app") is False
    again = await stores.ensure("capability", "notes.app")
    assert await again.query(A, "notes") == []
    assert await store.count(A, "notes") == 0  # a store bound before the drop works again


async def test_ensure_is_idempotent_and_keeps_rows(stores: PluginStores) -> None:
    store = await stores.ensure("capability", "notes.app")
    await store.insert(A, "notes", {"x": 1})
    again = await stores.ensure("capability", "notes.app")
    assert [r.doc for r in await again.query(A, "notes")] == [{"x": 1}]


async def test_concurrent_ensures_from_two_replicas_all_succeed(pool: PgPool, other_pool: PgPool) -> None:
    replicas = [PluginStores(pool), PluginStores(other_pool)]
    made: list[PluginStore] = []

    async def ensure(stores: PluginStores, plugin_id: str) -> None:
        made.append(await stores.ensure("capability", plugin_id))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(ensure, replicas[i % 2], f"plugin{i % 3}")
    assert sorted({store.schema for store in made}) == sorted(
        store_schema("capability", f"plugin{i}") for i in range(3)
    )
    assert len(made) == 12


async def test_concurrent_capped_inserts_from_two_replicas_stop_exactly_at_the_cap(
    pool: PgPool, other_pool: PgPool, pg_store: PluginStore
) -> None:
    replicas = [pg_store, PluginStores(other_pool).bound("capability", "notes.app")]
    quota = QuotaCheck("subject_id", "code-1", 5)
    outcomes: list[str] = []

    async def insert(store: PluginStore, slot: int) -> None:
        try:
            await store.insert(A, "bookings", {"slot": slot}, quota=quota)
        except QuotaExhausted:
            outcomes.append("exhausted")
        else:
            outcomes.append("inserted")

    # Hold the records table so that all 20 inserts are in flight (one holds the subject's
    # lock and waits for the table, nineteen wait for the subject's lock) before any counts.
    async with other_pool.acquire() as holder:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                async with holder.transaction():
                    await holder.execute(f'LOCK TABLE "{pg_store.schema}".records IN ACCESS EXCLUSIVE MODE')
                    for slot in range(20):
                        tg.start_soon(insert, replicas[slot % 2], slot)
                    await _wait_for_lock_waiters(holder, 20)
    assert sorted(outcomes) == ["exhausted"] * 15 + ["inserted"] * 5
    assert await pool.fetchval(f'SELECT count(*) FROM "{pg_store.schema}".records') == 5


async def test_concurrent_claims_on_one_key_have_one_winner(pg_store: PluginStore, other_pool: PgPool) -> None:
    replicas = [pg_store, PluginStores(other_pool).bound("capability", "notes.app")]
    results: list[bool] = []

    async def claim(store: PluginStore) -> None:
        results.append(await store.claim(A, "locks", "slot-1", 60))

    async with other_pool.acquire() as holder:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                async with holder.transaction():
                    await holder.execute(f'LOCK TABLE "{pg_store.schema}".claims IN ACCESS EXCLUSIVE MODE')
                    for i in range(20):
                        tg.start_soon(claim, replicas[i % 2])
                    await _wait_for_lock_waiters(holder, 20)
    assert sorted(results) == [False] * 19 + [True]


async def _expire(pool: PgPool, store: PluginStore, key: str) -> None:
    await pool.execute(
        f"UPDATE \"{store.schema}\".claims SET expires_at = now() - interval '1 second' WHERE key = $1", key
    )


async def test_an_expired_claim_can_be_taken_over(pool: PgPool, pg_store: PluginStore) -> None:
    assert await pg_store.claim(A, "locks", "k", 1) is True
    assert await pg_store.claim(A, "locks", "k", 1) is False
    await _expire(pool, pg_store, "k")
    assert await pg_store.claim(A, "locks", "k", 60) is True
    assert await pg_store.claim(A, "locks", "k", 60) is False


async def test_releasing_an_expired_claim_reports_nothing_released(pool: PgPool, pg_store: PluginStore) -> None:
    assert await pg_store.claim(A, "locks", "k", 1) is True
    await _expire(pool, pg_store, "k")
    assert await pg_store.release(A, "locks", "k") is False
    assert await pool.fetchval(f'SELECT count(*) FROM "{pg_store.schema}".claims') == 0


async def test_concurrent_takeovers_of_an_expired_claim_have_one_winner(
    pool: PgPool, other_pool: PgPool, pg_store: PluginStore
) -> None:
    replicas = [pg_store, PluginStores(other_pool).bound("capability", "notes.app")]
    assert await pg_store.claim(A, "locks", "k", 1) is True
    results: list[bool] = []

    async def claim(store: PluginStore) -> None:
        results.append(await store.claim(A, "locks", "k", 60))

    async with other_pool.acquire() as holder:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                async with holder.transaction():
                    # Expire the claim and keep its row locked until every claimer waits on it.
                    await holder.execute(
                        f"UPDATE \"{pg_store.schema}\".claims SET expires_at = now() - interval '1 second'"
                    )
                    for i in range(10):
                        tg.start_soon(claim, replicas[i % 2])
                    await _wait_for_row_waiters(holder, 10)
    assert sorted(results) == [False] * 9 + [True]


async def test_a_store_locked_too_long_answers_busy(database_url: str, tmp_path: Path, pool: PgPool) -> None:
    await PluginStores(pool).ensure("capability", "notes.app")
    settings = Settings(database_url=SecretStr(database_url), data_dir=tmp_path)
    async with open_database(settings, limits=DatabaseLimits(lock_timeout_s=0.1)) as impatient:
        store = PluginStores(impatient.pool).bound("capability", "notes.app")
        async with pool.acquire() as holder, holder.transaction():
            await holder.execute(f'LOCK TABLE "{store.schema}".records IN ACCESS EXCLUSIVE MODE')
            with pytest.raises(Unavailable) as caught:
                await store.insert(A, "notes", {"x": 1})
    assert caught.value.message == "the store is busy; try again"


async def test_an_unexpected_database_error_is_logged_and_answered_opaquely(
    pool: PgPool, pg_store: PluginStore, caplog: pytest.LogCaptureFixture
) -> None:
    await pool.execute(f'ALTER TABLE "{pg_store.schema}".records RENAME COLUMN doc TO body')
    with caplog.at_level(logging.ERROR, logger="mcp_host.store.plugin_store"), pytest.raises(Unavailable) as caught:
        await pg_store.query(A, "notes")
    assert caught.value.message == "the store is unavailable"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    (logged,) = caplog.records
    assert logged.getMessage() == f"plugin store {pg_store.schema} failed"
    assert logged.exc_info is not None and "doc" in str(logged.exc_info[1])


# -- search -------------------------------------------------------------------------------------


def _titles(hits: list[SearchHit]) -> list[str]:
    return [hit.doc["title"] for hit in hits]


async def test_search_ranks_the_docs_that_use_the_words_more_first(store: DocumentStore) -> None:
    await store.insert(A, "docs", {"title": "once", "text": "a refund is possible"})
    await store.insert(A, "docs", {"title": "none", "text": "shipping takes three days"})
    await store.insert(A, "docs", {"title": "thrice", "text": "refund, refund and a refund form"})
    hits = await store.search(A, "docs", "refund")
    assert _titles(hits) == ["thrice", "once"]
    assert hits[0].rank > hits[1].rank > 0


async def test_search_weighs_fields_in_the_order_given(store: DocumentStore) -> None:
    await store.insert(A, "docs", {"title": "other", "text": "about the refund"})
    await store.insert(A, "docs", {"title": "refund", "text": "about something else"})
    assert _titles(await store.search(A, "docs", "refund", fields=["title", "text"])) == ["refund", "other"]
    assert _titles(await store.search(A, "docs", "refund", fields=["text", "title"])) == ["other", "refund"]
    # Only the named fields are searched.
    assert _titles(await store.search(A, "docs", "refund", fields=["text"])) == ["other"]


async def test_search_reads_websearch_syntax(store: DocumentStore) -> None:
    await store.insert(A, "docs", {"title": "a", "text": "the quick brown fox"})
    await store.insert(A, "docs", {"title": "b", "text": "the brown quick dog"})
    await store.insert(A, "docs", {"title": "c", "text": "a lazy cat"})
    assert sorted(_titles(await store.search(A, "docs", "quick brown"))) == ["a", "b"]
    assert _titles(await store.search(A, "docs", '"quick brown"')) == ["a"]
    assert sorted(_titles(await store.search(A, "docs", "fox or cat"))) == ["a", "c"]
    assert _titles(await store.search(A, "docs", "brown -fox")) == ["b"]
    assert _titles(await store.search(A, "docs", "QUICK Fox")) == ["a"]  # case does not matter
    assert await store.search(A, "docs", "fox cat") == []  # every word must appear


async def test_search_keeps_to_the_filter_the_limit_the_owner_and_the_collection(store: DocumentStore) -> None:
    for n in range(5):
        await store.insert(A, "docs", {"title": f"a{n}", "corpus": "x" if n % 2 else "y", "text": "refund"})
    await store.insert(B, "docs", {"title": "b", "corpus": "x", "text": "refund"})
    await store.insert(A, "other", {"title": "o", "corpus": "x", "text": "refund"})
    assert _titles(await store.search(A, "docs", "refund", filter={"corpus": "x"})) == [
        "a1",
        "a3",
    ]  # ties: oldest first
    assert _titles(await store.search(A, "docs", "refund", limit=2)) == ["a0", "a1"]
    assert _titles(await store.search(B, "docs", "refund")) == ["b"]
    assert _titles(await store.search(A, "other", "refund")) == ["o"]


async def test_search_defaults_to_every_string_of_the_doc_at_any_depth(store: DocumentStore) -> None:
    await store.insert(A, "docs", {"title": "nested", "meta": {"tags": ["alpha", "beta"]}, "n": 7})
    assert _titles(await store.search(A, "docs", "beta")) == ["nested"]
    assert await store.search(A, "docs", "7") == []  # numbers are not text
    assert await store.search(A, "docs", "tags") == []  # keys are not text


@pytest.mark.parametrize("query", ["!!! ---", '"', "-", "&|!:*()<->", "...", "or"])
async def test_a_query_without_a_word_finds_nothing(store: DocumentStore, query: str) -> None:
    await store.insert(A, "docs", {"title": "t", "text": "anything at all"})
    assert await store.search(A, "docs", query) == []


@pytest.mark.parametrize(
    ("query", "fields", "limit", "message"),
    [
        ("", None, None, "query must be a string of 1-1000 characters"),
        ("x" * 1001, None, None, "query must be a string of 1-1000 characters"),
        (None, None, None, "query must be a string of 1-1000 characters"),
        (" \t\n ", None, None, "query must contain a word"),
        ("re\x00fund", None, None, "query contains U+0000 or a lone surrogate"),
        ("re\ud800fund", None, None, "query contains U+0000 or a lone surrogate"),
        ("refund", [], None, "fields must be a list of 1-8 keys of the doc"),
        ("refund", "title", None, "fields must be a list of 1-8 keys of the doc"),
        ("refund", [f"f{n}" for n in range(9)], None, "fields must be a list of 1-8 keys of the doc"),
        ("refund", ["title", "title"], None, "fields: each key may be named once"),
        ("refund", ["ti\ntle"], None, "fields: each key must be 1-64 characters without control characters"),
        ("refund", [""], None, "fields: each key must be 1-64 characters without control characters"),
        ("refund", [1], None, "fields: each key must be 1-64 characters without control characters"),
        ("refund", None, 0, "limit must be an integer from 1 to 100"),
        ("refund", None, 101, "limit must be an integer from 1 to 100"),
        ("refund", None, True, "limit must be an integer from 1 to 100"),
    ],
)
async def test_bad_search_arguments_are_refused_before_the_database(
    store: DocumentStore, query: Any, fields: Any, limit: Any, message: str
) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await store.search(A, "docs", query, fields=fields, limit=limit)
    assert caught.value.message == message


async def test_a_search_snippet_marks_the_matched_words(pg_store: PluginStore) -> None:
    text = " ".join(["filler"] * 40 + ["the", "refund", "is", "paid", "in", "full"] + ["filler"] * 40)
    await pg_store.insert(A, "docs", {"title": "Payments", "text": text})
    [hit] = await pg_store.search(A, "docs", "refund", fields=["title", "text"])
    assert "**refund**" in hit.snippet
    assert len(hit.snippet.split()) <= 2 * 30 + 2  # two fragments of at most 30 words and a delimiter


async def test_search_arguments_are_only_data(pg_store: PluginStore) -> None:
    await pg_store.insert(A, "docs", {"title": "t", "text": "refund"})
    hostile = "'); DROP TABLE records; --"
    assert await pg_store.search(A, "docs", hostile) == []
    assert await pg_store.search(A, "docs", "refund", fields=[hostile]) == []
    assert _titles(await pg_store.search(A, "docs", "refund")) == ["t"]


async def test_a_huge_doc_is_searched_and_its_hits_come_back_whole(pg_store: PluginStore) -> None:
    text = "word " * 40_000 + "needle"
    await pg_store.insert(A, "docs", {"title": "big", "text": text})
    [hit] = await pg_store.search(A, "docs", "needle", fields=["text"])
    assert hit.doc["text"] == text
    assert "**needle**" in hit.snippet


async def test_the_text_index_serves_both_kinds_of_search(pg_store: PluginStore, pool: PgPool) -> None:
    rows = [(A, "docs", {"title": f"d{n}", "text": f"common words w{n}"}) for n in range(2000)]
    await pool.executemany(
        f'INSERT INTO "{pg_store.schema}".records (owner_id, collection, doc) VALUES ($1, $2, $3)', rows
    )
    await pool.execute(f'ANALYZE "{pg_store.schema}".records')
    plans = []
    async with pool.acquire() as conn, conn.transaction():
        # Whether the planner picks it depends on the table's size; here: that it can.
        await conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off")
        for fields in ((), ("title", "text")):
            statement = search_sql(f'"{pg_store.schema}".records', len(fields))
            plan = await conn.fetch(f"EXPLAIN {statement}", A, "docs", "w123", {}, 20, *fields)
            plans.append("\n".join(row[0] for row in plan))
    assert ["Bitmap Index Scan on records_text" in plan for plan in plans] == [True, True]
    assert _titles(await pg_store.search(A, "docs", "w123", fields=["title", "text"])) == ["d123"]
