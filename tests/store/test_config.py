"""Declared config: values checked against the declaration on write and on read, the store
contract (run against Postgres and the in-memory twin), isolation between plugins, owners and
scopes, one query for several scopes, and atomic merges under concurrent writers."""

from __future__ import annotations

import logging
from typing import Any, cast

import anyio
import asyncpg
import pytest
from inline_snapshot import snapshot

from mcp_host.access.owners import OwnerStore
from mcp_host.errors import InvalidArguments, Unavailable
from mcp_host.plugins import ChildConfig
from mcp_host.plugins.manifest import ConfigField, Manifest
from mcp_host.store.config import (
    SCOPES,
    ConfigBackend,
    ConfigStore,
    ConfigUnset,
    InMemoryConfigStore,
    check_value,
    check_values,
    declared,
    read_values,
    role_values,
)
from mcp_host.store.database import PgConnection, PgPool
from mcp_host.store.secrets_box import SecretBox

MANIFEST = Manifest.model_validate(
    {
        "id": "demo.plugin",
        "config": [
            {"key": "max_bookings", "type": "int", "default": 3, "min": 1, "max": 50},
            {"key": "greeting", "type": "string"},
            {"key": "open_at", "type": "time", "default": "09:00"},
            {"key": "notify", "type": "bool", "default": False},
            {"key": "tags", "type": "string_list", "default": ["a", "b"]},
        ],
        "code_config": [{"key": "max_bookings", "type": "int", "default": 1, "min": 0}],
        "role_config": [{"key": "can_cancel", "type": "bool", "default": True}],
        "key_config": [{"key": "label", "type": "string", "default": "agent"}],
    }
)
# Another plugin declaring the same keys: only the binding keeps their values apart.
OTHER = Manifest.model_validate({"id": "other.plugin", "config": [{"key": "max_bookings", "type": "int"}]})

INT = ConfigField(key="max_bookings", type="int", min=1, max=50)
ANY_INT = ConfigField(key="offset", type="int")
STRING = ConfigField(key="greeting", type="string")
TIME = ConfigField(key="open_at", type="time")
BOOL = ConfigField(key="notify", type="bool")
LIST = ConfigField(key="tags", type="string_list")


def _refusal(field: ConfigField, value: object) -> str:
    with pytest.raises(InvalidArguments) as caught:
        check_value(field, value)
    return caught.value.message


# -- checking values (no database) ----------------------------------------------------------


def test_each_scope_reads_its_own_manifest_list() -> None:
    assert {scope: [f.key for f in declared(MANIFEST, scope)] for scope in SCOPES} == snapshot(
        {
            "owner": ["max_bookings", "greeting", "open_at", "notify", "tags"],
            "code": ["max_bookings"],
            "role": ["can_cancel"],
            "key": ["label"],
        }
    )


def test_values_that_fit_are_returned_as_json() -> None:
    fits: list[tuple[ConfigField, object]] = [
        (INT, 1),
        (INT, 50),
        (ANY_INT, -(2**53 - 1)),
        (STRING, ""),
        (STRING, "line one\n\tline two"),
        (STRING, "x" * 4096),
        (BOOL, False),
        (TIME, "00:00"),
        (TIME, "23:59"),
        (LIST, ["a", "b"]),
        (LIST, []),
    ]
    for field, value in fits:
        assert check_value(field, value) == value
    assert check_value(LIST, ("a", "b")) == ["a", "b"]


def test_values_that_do_not_fit_are_refused_with_a_message_naming_the_key() -> None:
    cases: dict[str, tuple[ConfigField, object]] = {
        "bool for int": (INT, True),
        "string for int": (INT, "5"),
        "word for int": (INT, "five"),
        "float for int": (INT, 5.0),
        "null for int": (INT, None),
        "below min": (INT, 0),
        "above max": (INT, 51),
        "beyond a JSON number": (ANY_INT, 2**53),
        "int for string": (STRING, 5),
        "NUL in string": (STRING, "a\x00b"),
        "carriage return in string": (STRING, "a\rb"),
        "escape in string": (STRING, "\x1b[31mred"),
        "C1 control in string": (STRING, "a\x85b"),
        "lone surrogate in string": (STRING, "ok\ud800"),
        "string too long": (STRING, "x" * 4097),
        "hour 25": (TIME, "25:00"),
        "one-digit hour": (TIME, "9:00"),
        "time with seconds": (TIME, "09:00:00"),
        "time as int": (TIME, 900),
        "string for bool": (BOOL, "yes"),
        "int for bool": (BOOL, 1),
        "string for list": (LIST, "a"),
        "non-string item": (LIST, ["a", 5]),
        "control in item": (LIST, ["ok", "\x07"]),
        "too many items": (LIST, ["x"] * 257),
        "mapping for list": (LIST, {"a": 1}),
    }
    assert {name: _refusal(field, value) for name, (field, value) in cases.items()} == snapshot(
        {
            "bool for int": "max_bookings: must be an integer (type int), got true",
            "string for int": 'max_bookings: must be an integer (type int), got "5"',
            "word for int": 'max_bookings: must be an integer (type int), got "five"',
            "float for int": "max_bookings: must be an integer (type int), got 5.0",
            "null for int": "max_bookings: must be an integer (type int), got null",
            "below min": "max_bookings: 0 is below min (1)",
            "above max": "max_bookings: 51 is above max (50)",
            "beyond a JSON number": ("offset: must be within ±9007199254740991, the range a JSON number holds exactly"),
            "int for string": "greeting: must be a string (type string), got 5",
            "NUL in string": "greeting: contains a control character (U+0000) at index 1",
            "carriage return in string": "greeting: contains a control character (U+000D) at index 1",
            "escape in string": "greeting: contains a control character (U+001B) at index 0",
            "C1 control in string": "greeting: contains a control character (U+0085) at index 1",
            "lone surrogate in string": "greeting: contains a lone surrogate (U+D800) at index 2",
            "string too long": "greeting: is 4097 characters long; the limit is 4096",
            "hour 25": 'open_at: must be a 24-hour time "HH:MM" (type time), got "25:00"',
            "one-digit hour": 'open_at: must be a 24-hour time "HH:MM" (type time), got "9:00"',
            "time with seconds": 'open_at: must be a 24-hour time "HH:MM" (type time), got "09:00:00"',
            "time as int": 'open_at: must be a 24-hour time "HH:MM" (type time), got 900',
            "string for bool": 'notify: must be true or false (type bool), got "yes"',
            "int for bool": "notify: must be true or false (type bool), got 1",
            "string for list": 'tags: must be a list of strings (type string_list), got "a"',
            "non-string item": "tags.1: must be a string, got 5",
            "control in item": "tags.1: contains a control character (U+0007) at index 0",
            "too many items": "tags: has 257 items; the limit is 256",
            "mapping for list": 'tags: must be a list of strings (type string_list), got {"a": 1}',
        }
    )


def test_a_refused_value_is_shown_escaped_and_cut_short() -> None:
    assert [
        _refusal(INT, "\x1b[2J\u202e" + "x" * 1_000_000),
        _refusal(INT, ["y" * 100] * 100_000),
        _refusal(INT, b"bytes"),
        _refusal(INT, 10**5000),
    ] == snapshot(
        [
            (
                "max_bookings: must be an integer (type int), got "
                '"\\u001b[2J\\u202exxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…'
            ),
            (
                "max_bookings: must be an integer (type int), got "
                '["yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy…'
            ),
            "max_bookings: must be an integer (type int), got a value of type bytes",
            ("max_bookings: must be within ±9007199254740991, the range a JSON number holds exactly"),
        ]
    )


def test_check_values_lists_every_problem_in_key_order_and_names_undeclared_keys() -> None:
    with pytest.raises(InvalidArguments) as caught:
        check_values(
            MANIFEST.config, {"tags": "a", "colour": "red", "max_bookings": 0, "greeting": "hi", "Bad Key\n": 1}
        )
    assert caught.value.message == snapshot(
        '"Bad Key\\n": not a declared config key; colour: not a declared config key; '
        "max_bookings: 0 is below min (1); "
        'tags: must be a list of strings (type string_list), got "a". '
        "Declared keys: max_bookings, greeting, open_at, notify, tags"
    )


def test_check_values_counts_problems_beyond_the_first_ten() -> None:
    with pytest.raises(InvalidArguments) as caught:
        check_values((), {f"k{i:02d}": 1 for i in range(25)})
    message = caught.value.message
    assert message.count("not a declared config key") == 10
    assert message.endswith("; k09: not a declared config key; and 15 more. No key is declared here")


def test_check_values_keeps_none_as_a_reset_and_lists_as_lists() -> None:
    assert check_values(MANIFEST.config, {"greeting": None, "tags": ("x",), "max_bookings": 7}) == snapshot(
        {"greeting": None, "max_bookings": 7, "tags": ["x"]}
    )


def test_read_values_gives_every_declared_key_with_its_default_and_no_default_as_none() -> None:
    assert read_values(MANIFEST.config, {}) == snapshot(
        {"max_bookings": 3, "greeting": None, "open_at": "09:00", "notify": False, "tags": ["a", "b"]}
    )


def test_a_stored_value_wins_over_the_default_and_an_undeclared_stored_key_is_not_returned() -> None:
    stored = {"max_bookings": 9, "greeting": "hello", "tags": [], "retired_key": "stale"}
    assert read_values(MANIFEST.config, stored) == snapshot(
        {"max_bookings": 9, "greeting": "hello", "open_at": "09:00", "notify": False, "tags": []}
    )


def test_a_stored_value_that_no_longer_fits_reads_as_the_default_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stored = {"max_bookings": "9", "open_at": "25:00", "notify": True}
    with caplog.at_level(logging.WARNING, logger="mcp_host.store.config"):
        values = read_values(MANIFEST.config, stored)
    assert values == snapshot(
        {"max_bookings": 3, "greeting": None, "open_at": "09:00", "notify": True, "tags": ["a", "b"]}
    )
    assert [r.getMessage() for r in caplog.records] == snapshot(
        [
            (
                "a stored config value no longer fits its declaration; reading the default: max_bookings: "
                'must be an integer (type int), got "9"'
            ),
            (
                "a stored config value no longer fits its declaration; reading the default: open_at: must "
                'be a 24-hour time "HH:MM" (type time), got "25:00"'
            ),
        ]
    )


def test_role_values_read_the_snapshot_of_this_plugin_only() -> None:
    frozen: dict[str, dict[str, object]] = {
        "demo.plugin": {"can_cancel": False, "gone": 1},
        "other.plugin": {"can_cancel": False},
    }
    assert role_values(MANIFEST, frozen, "demo.plugin") == {"can_cancel": False}
    assert role_values(MANIFEST.role_config, {}, "demo.plugin") == {"can_cancel": True}
    assert role_values(MANIFEST, {"other.plugin": {"can_cancel": False}}, "demo.plugin") == {"can_cancel": True}


def test_a_handle_cannot_be_made_with_another_plugins_manifest() -> None:
    with pytest.raises(ValueError, match="does not declare"):
        InMemoryConfigStore().for_plugin("other.plugin", MANIFEST)


def test_a_handle_names_its_plugin_and_the_fields_of_each_scope() -> None:
    config = InMemoryConfigStore().for_plugin("demo.plugin", MANIFEST)
    assert config.plugin_id == "demo.plugin"
    assert config.fields("role") is MANIFEST.role_config
    with pytest.raises(InvalidArguments, match="scope: must be one of"):
        config.fields(cast(Any, "team"))


# -- the store contract, both stores ----------------------------------------------------------


@pytest.fixture
async def owners_in_db(pool: PgPool) -> tuple[str, str]:
    first = await OwnerStore(pool).ensure_single_owner()
    await pool.execute("INSERT INTO mcp_host.owners (id) VALUES ('second-owner')")
    return first.id, "second-owner"


@pytest.fixture(params=["postgres", "memory"])
def backend(request: pytest.FixtureRequest) -> tuple[ConfigBackend, str, str]:
    """A store and two owners in it."""
    # A plain fixture: anyio cannot run an async fixture looked up from inside an async one.
    if request.param == "memory":
        return InMemoryConfigStore(), "owner-1", "owner-2"
    first, second = request.getfixturevalue("owners_in_db")
    return ConfigStore(request.getfixturevalue("pool")), first, second


@pytest.mark.anyio
async def test_nothing_stored_reads_as_the_defaults(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, _ = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    assert await config.get_many(owner, [(scope, "" if scope == "owner" else "x1") for scope in SCOPES]) == snapshot(
        {
            "owner": {"max_bookings": 3, "greeting": None, "open_at": "09:00", "notify": False, "tags": ["a", "b"]},
            "code": {"max_bookings": 1},
            "role": {"can_cancel": True},
            "key": {"label": "agent"},
        }
    )


@pytest.mark.anyio
async def test_set_merges_values_and_returns_every_declared_key(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, _ = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    await config.set(owner, "owner", "", {"max_bookings": 5, "greeting": "hi"})
    written = await config.set(owner, "owner", "", {"tags": ["x", "y"], "notify": True})
    assert written == snapshot(
        {"max_bookings": 5, "greeting": "hi", "open_at": "09:00", "notify": True, "tags": ["x", "y"]}
    )
    assert await config.get(owner, "owner") == written


@pytest.mark.anyio
async def test_none_resets_a_value_to_its_default(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, _ = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    await config.set(owner, "owner", "", {"max_bookings": 5, "greeting": "hi"})
    assert await config.set(owner, "owner", "", {"max_bookings": None, "greeting": None}) == snapshot(
        {"max_bookings": 3, "greeting": None, "open_at": "09:00", "notify": False, "tags": ["a", "b"]}
    )
    assert await config.get(owner, "owner") == read_values(MANIFEST.config, {})


@pytest.mark.anyio
async def test_an_empty_set_changes_nothing_and_returns_the_values(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, _ = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    before = await config.set(owner, "key", "key-1", {"label": "bot"})
    assert await config.set(owner, "key", "key-1", {}) == before == {"label": "bot"}


@pytest.mark.anyio
async def test_a_refused_set_writes_nothing(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, _ = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    before = await config.set(owner, "owner", "", {"max_bookings": 5})
    refused: list[dict[str, Any]] = [
        {"max_bookings": True},
        {"max_bookings": "5"},
        {"max_bookings": 0},
        {"max_bookings": 51},
        {"greeting": 5},
        {"open_at": "25:00"},
        {"tags": ["a", 1]},
        {"colour": "red"},
        {"greeting": "fits", "colour": "red"},
    ]
    messages = []
    for values in refused:
        with pytest.raises(InvalidArguments) as caught:
            await config.set(owner, "owner", "", values)
        messages.append(caught.value.message)
    assert messages == snapshot(
        [
            "max_bookings: must be an integer (type int), got true",
            'max_bookings: must be an integer (type int), got "5"',
            "max_bookings: 0 is below min (1)",
            "max_bookings: 51 is above max (50)",
            "greeting: must be a string (type string), got 5",
            'open_at: must be a 24-hour time "HH:MM" (type time), got "25:00"',
            "tags.1: must be a string, got 1",
            "colour: not a declared config key. Declared keys: max_bookings, greeting, open_at, notify, tags",
            "colour: not a declared config key. Declared keys: max_bookings, greeting, open_at, notify, tags",
        ]
    )
    assert await config.get(owner, "owner") == before


@pytest.mark.anyio
async def test_a_handle_bound_to_one_plugin_never_sees_another_plugins_values(
    backend: tuple[ConfigBackend, str, str],
) -> None:
    store, owner, _ = backend
    mine = store.for_plugin("demo.plugin", MANIFEST)
    theirs = store.for_plugin("other.plugin", OTHER)
    await theirs.set(owner, "owner", "", {"max_bookings": 40})
    assert (await mine.get(owner, "owner"))["max_bookings"] == 3
    await mine.set(owner, "owner", "", {"max_bookings": 7})
    assert await theirs.get(owner, "owner") == {"max_bookings": 40}
    assert (await mine.get(owner, "owner"))["max_bookings"] == 7


@pytest.mark.anyio
async def test_owners_and_scope_ids_are_isolated(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, other_owner = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    await config.set(owner, "code", "code-a", {"max_bookings": 4})
    await config.set(other_owner, "code", "code-a", {"max_bookings": 9})
    assert [
        await config.get(owner, "code", "code-a"),
        await config.get(other_owner, "code", "code-a"),
        await config.get(owner, "code", "code-b"),
        await config.get(owner, "key", "code-a"),
    ] == snapshot([{"max_bookings": 4}, {"max_bookings": 9}, {"max_bookings": 1}, {"label": "agent"}])


@pytest.mark.anyio
async def test_a_value_stored_under_an_old_declaration_reads_as_the_new_default(
    backend: tuple[ConfigBackend, str, str],
) -> None:
    store, owner, _ = backend
    old = Manifest.model_validate(
        {"id": "demo.plugin", "config": [{"key": "max_bookings", "type": "string"}, {"key": "retired", "type": "bool"}]}
    )
    await store.for_plugin("demo.plugin", old).set(owner, "owner", "", {"max_bookings": "lots", "retired": True})
    values = await store.for_plugin("demo.plugin", MANIFEST).get(owner, "owner")
    assert values == read_values(MANIFEST.config, {})


@pytest.mark.anyio
async def test_get_many_reads_each_scope_at_its_own_id(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, _ = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    await config.set(owner, "owner", "", {"max_bookings": 20})
    await config.set(owner, "code", "code-a", {"max_bookings": 2})
    await config.set(owner, "code", "code-b", {"max_bookings": 0})
    await config.set(owner, "key", "key-1", {"label": "bot"})
    got = await config.get_many(owner, [("code", "code-a"), ("key", "key-1"), ("owner", "")])
    assert got == snapshot(
        {
            "code": {"max_bookings": 2},
            "key": {"label": "bot"},
            "owner": {"max_bookings": 20, "greeting": None, "open_at": "09:00", "notify": False, "tags": ["a", "b"]},
        }
    )
    assert list(got) == ["code", "key", "owner"]


@pytest.mark.anyio
async def test_bad_scopes_and_scope_ids_are_refused(backend: tuple[ConfigBackend, str, str]) -> None:
    store, owner, _ = backend
    config = store.for_plugin("demo.plugin", MANIFEST)
    messages = []
    for scope, scope_id in [("owner", "x"), ("code", ""), ("code", "a/b"), ("role", "-x"), ("role", "r" * 129)]:
        with pytest.raises(InvalidArguments) as caught:
            await config.get(owner, cast(Any, scope), scope_id)
        messages.append(caught.value.message)
    with pytest.raises(InvalidArguments) as caught:
        await config.set(owner, cast(Any, "team"), "t1", {})
    messages.append(caught.value.message)
    with pytest.raises(InvalidArguments) as caught:
        await config.get_many(owner, [("code", "a"), ("code", "b")])
    messages.append(caught.value.message)
    assert messages == snapshot(
        [
            "scope_id: the owner scope takes no scope_id",
            (
                "scope_id: a code scope needs an id of 1-128 characters A-Z a-z 0-9 . _ - starting with a "
                'letter or digit, got ""'
            ),
            (
                "scope_id: a code scope needs an id of 1-128 characters A-Z a-z 0-9 . _ - starting with a "
                'letter or digit, got "a/b"'
            ),
            (
                "scope_id: a role scope needs an id of 1-128 characters A-Z a-z 0-9 . _ - starting with a "
                'letter or digit, got "-x"'
            ),
            (
                "scope_id: a role scope needs an id of 1-128 characters A-Z a-z 0-9 . _ - starting with a "
                'letter or digit, got "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr…'
            ),
            'scope: must be one of owner, code, role, key, got "team"',
            "scopes: each scope may be named once",
        ]
    )


# -- Postgres only ------------------------------------------------------------------------------


class _CountingPool:
    """The real pool, recording each statement sent through it."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool
        self.statements: list[str] = []

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        self.statements.append(query)
        return await self._pool.fetch(query, *args)

    async def fetchval(self, query: str, *args: object) -> object:
        self.statements.append(query)
        return await self._pool.fetchval(query, *args)


@pytest.mark.anyio
async def test_get_many_reads_several_scopes_in_one_query(pool: PgPool, owners_in_db: tuple[str, str]) -> None:
    owner, _ = owners_in_db
    counting = _CountingPool(pool)
    config = ConfigStore(cast(PgPool, counting)).for_plugin("demo.plugin", MANIFEST)
    await config.set(owner, "owner", "", {"max_bookings": 20})
    await config.set(owner, "key", "key-1", {"label": "bot"})
    counting.statements.clear()
    got = await config.get_many(owner, [("owner", ""), ("code", "code-a"), ("key", "key-1")])
    assert len(counting.statements) == 1
    assert got == snapshot(
        {
            "owner": {"max_bookings": 20, "greeting": None, "open_at": "09:00", "notify": False, "tags": ["a", "b"]},
            "code": {"max_bookings": 1},
            "key": {"label": "bot"},
        }
    )


@pytest.mark.anyio
async def test_a_plugin_without_declared_config_reads_without_a_query(
    pool: PgPool, owners_in_db: tuple[str, str]
) -> None:
    counting = _CountingPool(pool)
    bare = Manifest.model_validate({"id": "bare.plugin"})
    config = ConfigStore(cast(PgPool, counting)).for_plugin("bare.plugin", bare)
    assert await config.get_many(owners_in_db[0], [("owner", ""), ("code", "c")]) == {"owner": {}, "code": {}}
    assert counting.statements == []


@pytest.mark.anyio
async def test_a_reset_key_is_removed_from_the_stored_row(pool: PgPool, owners_in_db: tuple[str, str]) -> None:
    owner, _ = owners_in_db
    config = ConfigStore(pool).for_plugin("demo.plugin", MANIFEST)
    await config.set(owner, "owner", "", {"max_bookings": 5, "greeting": "hi"})
    await config.set(owner, "owner", "", {"greeting": None})
    row = await pool.fetchrow('SELECT plugin_id, scope, scope_id, "values" FROM mcp_host.config_values')
    assert dict(row or {}) == snapshot(
        {"plugin_id": "demo.plugin", "scope": "owner", "scope_id": "", "values": {"max_bookings": 5}}
    )


@pytest.mark.anyio
async def test_removing_an_owner_removes_its_config(pool: PgPool, owners_in_db: tuple[str, str]) -> None:
    owner, other = owners_in_db
    config = ConfigStore(pool).for_plugin("demo.plugin", MANIFEST)
    await config.set(owner, "owner", "", {"max_bookings": 5})
    await config.set(other, "owner", "", {"max_bookings": 6})
    await pool.execute("DELETE FROM mcp_host.owners WHERE id = $1", other)
    assert await pool.fetchval("SELECT array_agg(owner_id) FROM mcp_host.config_values") == [owner]


async def _wait_for_backends_blocked_by(holder: PgConnection, count: int) -> None:
    """Poll until `count` backends wait for a lock that `holder` holds."""
    # pg_locks, not pg_stat_activity: inside a transaction the latter is a frozen snapshot.
    with anyio.fail_after(10):
        while True:
            waiting = await holder.fetchval(
                "SELECT count(DISTINCT pid) FROM pg_locks "
                "WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
            )
            if waiting >= count:
                return
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_concurrent_sets_of_different_keys_on_one_row_both_survive(
    pool: PgPool, owners_in_db: tuple[str, str]
) -> None:
    owner, _ = owners_in_db
    config = ConfigStore(pool).for_plugin("demo.plugin", MANIFEST)
    # The holder inserts the row and keeps it uncommitted: both writers first try to insert,
    # queue on the conflict, and must then merge into the committed row one after the other.
    async with pool.acquire() as holder:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                async with holder.transaction():
                    await holder.execute(
                        'INSERT INTO mcp_host.config_values (owner_id, plugin_id, scope, scope_id, "values") '
                        "VALUES ($1, 'demo.plugin', 'owner', '', '{\"notify\": true}')",
                        owner,
                    )
                    tg.start_soon(config.set, owner, "owner", "", {"greeting": "hi"})
                    tg.start_soon(config.set, owner, "owner", "", {"max_bookings": 7})
                    await _wait_for_backends_blocked_by(holder, 2)
    assert await config.get(owner, "owner") == snapshot(
        {"max_bookings": 7, "greeting": "hi", "open_at": "09:00", "notify": True, "tags": ["a", "b"]}
    )


# -- secrets and the child's environment ------------------------------------------------------

ENVY = Manifest.model_validate(
    {
        "id": "demo.envy",
        "config": [
            {"key": "token", "type": "string", "secret": True, "required": True},
            {"key": "level", "type": "int"},
            {"key": "verbose", "type": "bool", "default": False},
        ],
        "code_config": [{"key": "token", "type": "string"}],
        "transport": {
            "command": "python",
            "env_from_config": {"TOKEN": "token", "LEVEL": "level", "VERBOSE": "verbose"},
        },
    }
)
TOKEN = "tok-5ecret-value"


@pytest.mark.anyio
async def test_a_secret_is_sealed_reads_as_set_and_only_env_opens_it() -> None:
    changed: list[str] = []
    store = InMemoryConfigStore(box=SecretBox(bytes(32)), on_env_changed=changed.append)
    config = store.for_plugin("demo.envy", ENVY)
    with pytest.raises(ConfigUnset) as unset:
        await config.env("owner-1")
    written = await config.set("owner-1", "owner", "", {"token": TOKEN, "level": 2})
    code = await config.set("owner-1", "code", "c1", {"token": "not-a-secret-here"})
    assert unset.value.message == "the owner must set 'token' of demo.envy (config_set) before it can start"
    assert written == {"token": {"set": True}, "level": 2, "verbose": False}
    assert code == {"token": "not-a-secret-here"}  # the code scope's own field is not secret
    assert TOKEN not in repr(store._rows)  # sealed before it is stored
    assert await config.get("owner-1", "owner") == written
    assert await config.env("owner-1") == {"TOKEN": TOKEN, "LEVEL": "2", "VERBOSE": "false"}
    assert changed == ["demo.envy"]  # the owner write fed the environment; the code write did not
    # Sealed for this owner and plugin: another owner's handle opens nothing.
    store._rows[("owner-2", "demo.envy", "owner", "")] = dict(store._rows[("owner-1", "demo.envy", "owner", "")])
    with pytest.raises(ConfigUnset):
        await config.env("owner-2")


@pytest.mark.anyio
async def test_a_refused_secret_is_not_shown_in_the_message() -> None:
    config = InMemoryConfigStore(box=SecretBox(bytes(32))).for_plugin("demo.envy", ENVY)
    with pytest.raises(InvalidArguments) as refused:
        await config.set("owner-1", "owner", "", {"token": f"{TOKEN}\x01"})
    assert refused.value.message == ("token: must be a string of at most 4096 characters without control characters")


@pytest.mark.anyio
async def test_a_host_without_a_box_refuses_to_store_a_secret() -> None:
    config = InMemoryConfigStore().for_plugin("demo.envy", ENVY)
    with pytest.raises(Unavailable):
        await config.set("owner-1", "owner", "", {"token": TOKEN})
    assert await config.get("owner-1", "owner") == {"token": {"set": False}, "level": None, "verbose": False}


GREETER = Manifest.model_validate(
    {
        "id": "demo.greeter",
        "config": [
            {"key": "greeting", "type": "string", "default": "Hello"},
            {"key": "mark", "type": "string", "default": "!"},
            {"key": "token", "type": "string", "secret": True},
            {"key": "unrelated", "type": "int"},
        ],
        "transport": {
            "command": "node",
            "args": ["server.js", "--mark", "${config.mark}"],
            "env": {"GREETING": "${config.greeting}", "AUTH": "Bearer ${config.token}", "FIXED": "x"},
        },
    }
)


@pytest.mark.anyio
async def test_a_child_gets_the_owners_values_where_its_manifest_references_them() -> None:
    changed: list[str] = []
    store = InMemoryConfigStore(box=SecretBox(bytes(32)), on_env_changed=changed.append)
    config = store.for_plugin("demo.greeter", GREETER)
    defaults = await config.child_config("owner-1")
    await config.set("owner-1", "owner", "", {"unrelated": 1})
    await config.set("owner-1", "owner", "", {"mark": "?"})
    await config.set("owner-1", "owner", "", {"greeting": "Howdy", "token": TOKEN})
    assert defaults == ChildConfig({"GREETING": "Hello", "AUTH": "Bearer "}, ("server.js", "--mark", "!"))
    assert await config.child_config("owner-1") == ChildConfig(
        {"GREETING": "Howdy", "AUTH": f"Bearer {TOKEN}"}, ("server.js", "--mark", "?")
    )
    assert changed == ["demo.greeter", "demo.greeter"]  # each write a start reads restarts the children
    assert TOKEN not in repr(store._rows)
