"""The owner's side of access against real Postgres: roles (grantable capabilities, config
frozen into sessions), access codes and API keys (shown once, stored hashed, revoked, redeemed
atomically under real concurrency) and host settings."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from inline_snapshot import Is, snapshot

from mcp_host.access.admission import Access, HostSettings
from mcp_host.access.credentials import Redeemed
from mcp_host.access.owners import OwnerStore
from mcp_host.access.roles import grantable, not_grantable_because
from mcp_host.access.sessions import (
    InMemorySessionStore,
    PostgresSessionStore,
    RoleSnapshot,
    Session,
    SessionMode,
    Subject,
    Visitor,
)
from mcp_host.errors import InvalidArguments
from mcp_host.plugins.loading import Plugin
from mcp_host.plugins.manifest import Manifest, load_manifest
from mcp_host.store.config import ConfigStore
from mcp_host.store.database import PgPool
from tests.hosting import PLUGINS

pytestmark = pytest.mark.anyio

TESTS = PLUGINS.parent  # any folder


def _plugin(manifest: dict[str, Any] | str) -> Plugin:
    if isinstance(manifest, str):
        return Plugin(load_manifest(PLUGINS / manifest), PLUGINS / manifest, builtin=False)
    return Plugin(Manifest.model_validate(manifest), TESTS, builtin=False)


LOADED = (
    _plugin("guarded"),  # role_granted, with role/code/key config
    _plugin("echo"),  # acl: always, no role_config
    _plugin("notes"),  # acl: always, code_config and key_config only
    _plugin({"id": "test.styled", "acl": "always", "role_config": [{"key": "tone", "type": "string"}]}),
    _plugin({"id": "test.backoffice", "owner_tools": [{"name": "ledger.list", "tool": "ledger_list"}]}),
    _plugin({"id": "test.link", "kind": "connector", "category": "agenda", "verbs": ["freebusy"], "settings": []}),
)


class Revocations:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Subject]] = []

    def __call__(self, owner_id: str, subject: Subject) -> None:
        self.seen.append((owner_id, subject))


@pytest.fixture
async def owner_id(pool: PgPool) -> str:
    return (await OwnerStore(pool).ensure_single_owner()).id


@pytest.fixture
def revoked() -> Revocations:
    return Revocations()


@pytest.fixture
async def access(pool: PgPool, owner_id: str, revoked: Revocations) -> Access:
    access = Access(pool, ConfigStore(pool), LOADED, PostgresSessionStore(pool), on_revoked=revoked)
    await access.ensure_defaults(owner_id)
    return access


async def _nothing_stored(pool: PgPool) -> dict[str, int]:
    counts = {}
    for table in ("roles", "access_codes", "api_keys", "config_values"):
        counts[table] = await pool.fetchval(f"SELECT count(*) FROM mcp_host.{table}")
    return counts


def _role_view(role: Any) -> dict[str, Any]:
    return dict(role.model_dump(exclude={"created_at", "updated_at"}))


# -- roles and host settings -------------------------------------------------------------


async def test_a_fresh_install_has_a_public_role_granting_nothing_and_public_sessions_on(
    pool: PgPool, owner_id: str
) -> None:
    replicas = [Access(pool, ConfigStore(pool), LOADED, PostgresSessionStore(pool)) for _ in range(4)]
    async with anyio.create_task_group() as tg:  # replicas starting at once
        for replica in replicas:
            tg.start_soon(replica.ensure_defaults, owner_id)
    await replicas[0].ensure_defaults(owner_id)  # and a later start

    assert [_role_view(r) for r in await replicas[0].list_roles(owner_id)] == snapshot(
        [{"id": "public", "capabilities": (), "config": {}}]
    )
    assert await replicas[0].host_settings(owner_id) == HostSettings(public_sessions=True, public_role="public")


def test_grantable_offers_what_a_role_can_change_and_says_why_not_for_the_rest() -> None:
    assert grantable(LOADED) == snapshot(("test.guarded", "test.styled"))
    assert {p.manifest.id: not_grantable_because(p) for p in LOADED} == snapshot(
        {
            "test.guarded": None,
            "test.echo": "is visible to every session (acl: always) and declares no role_config",
            "notes": "is visible to every session (acl: always) and declares no role_config",
            "test.styled": None,
            "test.backoffice": "has owner tools only; no visitor could see it",
            "test.link": "is a connector; roles grant capabilities",
        }
    )


async def test_put_role_creates_and_replaces_and_reads_config_back_with_defaults(access: Access, owner_id: str) -> None:
    created = await access.put_role(owner_id, "staff", ["test.guarded"], {"test.guarded": {"greeting": "hi"}})
    assert _role_view(created) == snapshot(
        {
            "id": "staff",
            "capabilities": ("test.guarded",),
            "config": {"test.guarded": {"greeting": "hi", "max_items": 3}},
        }
    )
    # Given config replaces the role's config: a key left out is back to its default.
    replaced = await access.put_role(
        owner_id, "staff", ["test.styled", "test.guarded", "test.guarded"], {"test.guarded": {"max_items": 5}}
    )
    assert _role_view(replaced) == snapshot(
        {
            "id": "staff",
            "capabilities": ("test.guarded", "test.styled"),
            "config": {"test.guarded": {"greeting": "hello", "max_items": 5}, "test.styled": {"tone": None}},
        }
    )
    # No config: the stored config stays.
    kept = await access.put_role(owner_id, "staff", ["test.guarded"])
    assert _role_view(kept)["config"] == {"test.guarded": {"greeting": "hello", "max_items": 5}}
    assert kept.created_at == created.created_at
    assert [r.id for r in await access.list_roles(owner_id)] == ["public", "staff"]


@pytest.mark.parametrize(
    ("capabilities", "config", "message"),
    [
        (
            ["test.guarded", "nope"],
            None,
            "capabilities: 'nope' is not a loaded capability",
        ),
        (["test.link"], None, "capabilities: 'test.link' is a connector; roles grant capabilities"),
        (
            ["test.echo", "test.backoffice"],
            None,
            "capabilities: 'test.echo' is visible to every session (acl: always) and declares no role_config; "
            "'test.backoffice' has owner tools only; no visitor could see it",
        ),
        (
            ["test.guarded"],
            {"test.guarded": {"max_items": "many"}},
            'config.test.guarded: max_items: must be an integer (type int), got "many"',
        ),
        (
            ["test.guarded"],
            {"test.guarded": {"colour": "red", "max_items": -1}},
            "config.test.guarded: colour: not a declared config key; max_items: -1 is below min (0). "
            "Declared keys: greeting, max_items",
        ),
        (["test.guarded"], {"test.styled": {"tone": "warm"}}, "config: test.styled not among the role's capabilities"),
    ],
)
async def test_put_role_refuses_what_it_cannot_grant_naming_it_and_stores_nothing(
    access: Access, pool: PgPool, owner_id: str, capabilities: list[str], config: Any, message: str
) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await access.put_role(owner_id, "staff", capabilities, config)
    assert caught.value.message == message
    assert await _nothing_stored(pool) == {"roles": 1, "access_codes": 0, "api_keys": 0, "config_values": 0}


@pytest.mark.parametrize("role_id", ["", "Staff", "a/b", "-a", "x" * 65, "team lead", "ö"])
async def test_put_role_refuses_an_id_out_of_grammar(access: Access, owner_id: str, role_id: str) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await access.put_role(owner_id, role_id, [])
    assert caught.value.message.startswith("id: a role id is 1-64 characters a-z 0-9 _ - starting with")


async def test_host_settings_change_one_at_a_time_and_name_only_existing_roles(access: Access, owner_id: str) -> None:
    assert await access.set_host_settings(owner_id, public_sessions=False) == HostSettings(
        public_sessions=False, public_role="public"
    )
    with pytest.raises(InvalidArguments) as caught:
        await access.set_host_settings(owner_id, public_role="staff")
    assert caught.value.message == "public_role: no role 'staff'"
    await access.put_role(owner_id, "staff", ["test.guarded"])
    assert await access.set_host_settings(owner_id, public_role="staff") == HostSettings(
        public_sessions=False, public_role="staff"
    )
    assert await access.host_settings(owner_id) == HostSettings(public_sessions=False, public_role="staff")


async def test_the_tool_search_threshold_is_40_until_set_and_only_0_to_100000(access: Access, owner_id: str) -> None:
    assert (await access.host_settings(owner_id)).tool_search_threshold == 40
    assert await access.set_host_settings(owner_id, tool_search_threshold=0) == HostSettings(tool_search_threshold=0)
    for bad in (-1, 100_001, True, 10**100, 2.5, "7"):
        with pytest.raises(InvalidArguments) as caught:
            await access.set_host_settings(owner_id, tool_search_threshold=bad)  # type: ignore[arg-type]
        assert caught.value.message == "tool_search_threshold: must be an integer from 0 to 100000"
    assert await access.set_host_settings(owner_id, public_sessions=False) == HostSettings(
        public_sessions=False, tool_search_threshold=0
    )
    assert await access.tool_search_threshold(owner_id) == 0


async def test_a_session_freezes_its_role_and_a_later_edit_reaches_new_sessions_only(
    access: Access, pool: PgPool, owner_id: str
) -> None:
    await access.put_role(owner_id, "public", ["test.guarded"], {"test.guarded": {"greeting": "hi"}})
    opened = await access.open_public(owner_id, Visitor(name="Ada"))
    assert opened is not None
    before, _ = opened
    await access.put_role(owner_id, "public", [])
    after = await access.open_public(owner_id, None)
    assert after is not None

    assert before.role == snapshot(
        RoleSnapshot(
            id="public", capabilities=("test.guarded",), config={"test.guarded": {"greeting": "hi", "max_items": 3}}
        )
    )
    assert after[0].role == RoleSnapshot(id="public", capabilities=(), config={})
    assert await PostgresSessionStore(pool).get(before.id) == before


async def test_public_sessions_off_opens_none(access: Access, owner_id: str) -> None:
    await access.set_host_settings(owner_id, public_sessions=False)
    assert await access.open_public(owner_id, None) is None


# -- access codes -------------------------------------------------------------------------


async def test_a_code_is_shown_once_and_only_its_hash_is_stored(access: Access, pool: PgPool, owner_id: str) -> None:
    expires = datetime.now(UTC) + timedelta(days=7)
    text, code = await access.create_code(
        owner_id, "public", {"test.guarded": {"label": "spring"}}, expires_at=expires, max_uses=10
    )
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", text)  # 128 bits
    assert code.model_dump() == snapshot(
        {
            "id": Is(code.id),
            "role": "public",
            "expires_at": Is(expires),
            "max_uses": 10,
            "uses": 0,
            "status": "live",
            "created_at": Is(code.created_at),
            "revoked_at": None,
        }
    )
    assert re.fullmatch(r"c_[0-9a-f]{16}", code.id)
    row = await pool.fetchrow("SELECT c.*, c::text AS whole FROM mcp_host.access_codes c WHERE id = $1", code.id)
    assert row is not None
    assert row["code_hash"] == hashlib.sha256(text.encode()).digest()
    assert text not in row["whole"]
    assert await access.list_codes(owner_id) == [code]
    stored = ConfigStore(pool).for_plugin("test.guarded", LOADED[0].manifest)
    assert await stored.get(owner_id, "code", code.id) == {"label": "spring"}
    assert await access.credentials.code_id(owner_id, text) == code.id
    assert await access.credentials.code_id(owner_id, code.id) == code.id


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"role": "staff"}, "role: no role 'staff'"),
        ({"role": "public", "max_uses": 0}, "max_uses: must be an integer from 1 to 2147483647, got 0"),
        ({"role": "public", "max_uses": True}, "max_uses: must be an integer from 1 to 2147483647, got True"),
        (
            {"role": "public", "expires_at": datetime(2030, 1, 1)},
            "expires_at: must be a date and time with a time zone (ISO 8601)",
        ),
        ({"role": "public", "expires_at": datetime(2020, 1, 1, tzinfo=UTC)}, "expires_at: is in the past"),
        (
            {"role": "public", "config": {"test.guarded": {"label": 5}}},
            "config.test.guarded: label: must be a string (type string), got 5",
        ),
        ({"role": "public", "config": {"test.link": {}}}, "config: 'test.link' is a connector"),
        ({"role": "public", "config": {"gone": {}}}, "config: 'gone' is not a loaded capability"),
    ],
)
async def test_create_code_refuses_bad_arguments_naming_them_and_stores_nothing(
    access: Access, pool: PgPool, owner_id: str, arguments: dict[str, Any], message: str
) -> None:
    role = arguments.pop("role")
    config = arguments.pop("config", None)
    with pytest.raises(InvalidArguments) as caught:
        await access.create_code(owner_id, role, config, **arguments)
    assert caught.value.message == message
    assert await _nothing_stored(pool) == {"roles": 1, "access_codes": 0, "api_keys": 0, "config_values": 0}


async def test_a_code_is_redeemed_until_its_uses_are_spent(access: Access, owner_id: str) -> None:
    text, code = await access.create_code(owner_id, "public", max_uses=2)
    outcomes = [await access.credentials.redeem_code(owner_id, text) for _ in range(3)]
    assert outcomes == [Redeemed(id=code.id, role="public")] * 2 + [None]
    assert [(c.uses, c.status) for c in await access.list_codes(owner_id)] == [(2, "used_up")]


async def test_an_expired_code_is_not_redeemed(access: Access, pool: PgPool, owner_id: str) -> None:
    text, code = await access.create_code(owner_id, "public", expires_at=datetime.now(UTC) + timedelta(hours=1))
    await pool.execute(
        "UPDATE mcp_host.access_codes SET expires_at = now() - interval '1 second' WHERE id = $1", code.id
    )
    assert await access.credentials.redeem_code(owner_id, text) is None
    assert [(c.uses, c.status) for c in await access.list_codes(owner_id)] == [(0, "expired")]


async def test_concurrent_redemptions_never_pass_max_uses(access: Access, owner_id: str) -> None:
    text, code = await access.create_code(owner_id, "public", max_uses=3)
    go = anyio.Event()
    outcomes: list[Redeemed | None] = []

    async def redeem() -> None:
        await go.wait()
        outcomes.append(await access.credentials.redeem_code(owner_id, text))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(redeem)
            await anyio.lowlevel.checkpoint()
            go.set()
    assert sorted(outcomes, key=str) == sorted([Redeemed(id=code.id, role="public")] * 3 + [None] * 9, key=str)
    assert [c.uses for c in await access.list_codes(owner_id)] == [3]


async def test_revoking_a_code_by_its_text_or_id_works_once_and_tells_the_cache(
    access: Access, owner_id: str, revoked: Revocations
) -> None:
    first_text, first = await access.create_code(owner_id, "public")
    _, second = await access.create_code(owner_id, "public")
    assert await access.revoke_code(owner_id, first_text) is True
    assert await access.revoke_code(owner_id, first_text) is False
    assert await access.revoke_code(owner_id, second.id) is True
    assert await access.revoke_code(owner_id, "c_" + "0" * 16) is False
    assert await access.revoke_code(owner_id, "no such code") is False
    assert await access.credentials.redeem_code(owner_id, first_text) is None
    assert [c.status for c in await access.list_codes(owner_id)] == ["revoked", "revoked"]
    assert revoked.seen == [
        (owner_id, Subject(kind="code", id=first.id)),
        (owner_id, Subject(kind="code", id=second.id)),
    ]


class FailingSessions(InMemorySessionStore):
    async def open(
        self,
        *,
        owner_id: str,
        mode: SessionMode,
        visitor: Visitor | None,
        subject: Subject | None = None,
        role: RoleSnapshot,
    ) -> tuple[Session, str]:
        raise RuntimeError("the session table is unreachable")


async def test_a_use_is_given_back_when_its_session_cannot_be_opened(pool: PgPool, owner_id: str) -> None:
    access = Access(pool, ConfigStore(pool), LOADED, FailingSessions())
    await access.ensure_defaults(owner_id)
    text, _ = await access.create_code(owner_id, "public", max_uses=1)
    with pytest.raises(RuntimeError):
        await access.open_with_code(owner_id, text, None)
    assert [(c.uses, c.status) for c in await access.list_codes(owner_id)] == [(0, "live")]


# -- API keys -----------------------------------------------------------------------------


async def test_an_api_key_is_shown_once_stored_hashed_and_revoked_by_its_id(
    access: Access, pool: PgPool, owner_id: str, revoked: Revocations
) -> None:
    text, key = await access.create_api_key(owner_id, "public", {"test.guarded": {"priority": True}})
    assert re.fullmatch(r"mcphk_[A-Za-z0-9_-]{43}", text)
    assert key.model_dump() == snapshot(
        {"id": Is(key.id), "role": "public", "status": "live", "created_at": Is(key.created_at), "revoked_at": None}
    )
    assert re.fullmatch(r"k_[0-9a-f]{16}", key.id)
    row = await pool.fetchrow("SELECT k.*, k::text AS whole FROM mcp_host.api_keys k WHERE id = $1", key.id)
    assert row is not None
    assert row["key_hash"] == hashlib.sha256(text.encode()).digest()
    assert text not in row["whole"]
    stored = ConfigStore(pool).for_plugin("test.guarded", LOADED[0].manifest)
    assert await stored.get(owner_id, "key", key.id) == {"label": None, "priority": True}
    assert await access.credentials.verify_api_key(owner_id, text) == Redeemed(id=key.id, role="public")

    assert await access.revoke_api_key(owner_id, key.id) is True
    assert await access.revoke_api_key(owner_id, key.id) is False
    assert await access.revoke_api_key(owner_id, text) is False  # by id only
    assert await access.credentials.verify_api_key(owner_id, text) is None
    assert [k.status for k in await access.list_api_keys(owner_id)] == ["revoked"]
    assert revoked.seen == [(owner_id, Subject(kind="api_key", id=key.id))]


async def test_create_api_key_refuses_config_of_the_wrong_type_and_stores_nothing(
    access: Access, pool: PgPool, owner_id: str
) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await access.create_api_key(owner_id, "public", {"test.guarded": {"priority": "yes", "label": "bot"}})
    assert caught.value.message == snapshot(
        'config.test.guarded: priority: must be true or false (type bool), got "yes"'
    )
    assert await _nothing_stored(pool) == {"roles": 1, "access_codes": 0, "api_keys": 0, "config_values": 0}


async def test_credentials_of_one_owner_open_nothing_for_another(access: Access, pool: PgPool, owner_id: str) -> None:
    code, _ = await access.create_code(owner_id, "public")
    key, _ = await access.create_api_key(owner_id, "public")
    await pool.execute("INSERT INTO mcp_host.owners (id) VALUES ('other')")
    assert await access.credentials.redeem_code("other", code) is None
    assert await access.credentials.verify_api_key("other", key) is None
    assert await access.revoke_code("other", code) is False
    assert await access.list_codes("other") == []


async def test_a_withdrawn_code_session_ends_and_gives_its_use_back(
    access: Access, owner_id: str, pool: PgPool
) -> None:
    text, code = await access.create_code(owner_id, "public", max_uses=1)
    opened = await access.open_with_code(owner_id, text, None)
    assert opened is not None
    used = {c.id: c.uses for c in await access.list_codes(owner_id)}
    await access.withdraw(opened[0])
    back = {c.id: c.uses for c in await access.list_codes(owner_id)}
    again = await access.open_with_code(owner_id, text, None)  # its one use is there again
    assert (used[code.id], back[code.id], again is not None) == (1, 0, True)
    ended = await PostgresSessionStore(pool).get(opened[0].id)
    assert ended is not None and ended.ended_at is not None
