"""Connections in Postgres: checked settings, sealed secrets, listings that never show them."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from mcp_host.access.owners import OwnerStore
from mcp_host.connectors.connections import Connections
from mcp_host.errors import InvalidArguments, Unconfigured
from mcp_host.plugins.loading import Plugin, load_plugins
from mcp_host.store.database import PgPool
from mcp_host.store.secrets_box import SecretBox

pytestmark = pytest.mark.anyio

SECRET = "canary-5f1e-password"
MANIFEST = """\
id: dav
kind: connector
category: calendar
verbs: [freebusy, can_perform, connected]
settings:
  - {key: url, type: string}
  - {key: username, type: string}
  - {key: password, type: string, secret: true}
transport: {command: python, args: [server.py], sandbox: {allow_net: true}}
"""


@pytest.fixture
def connector(tmp_path: Path) -> Plugin:
    folder = tmp_path / "dav"
    folder.mkdir()
    (folder / "manifest.yaml").write_text(MANIFEST)
    (folder / "server.py").write_text("")
    report = load_plugins(None, [folder])
    assert not report.errors
    return report.plugins[0]


@pytest.fixture
async def owner_id(pool: PgPool) -> str:
    return (await OwnerStore(pool).ensure_single_owner()).id


def connections(pool: PgPool, connector: Plugin, key: bytes = bytes(32)) -> Connections:
    return Connections(pool, SecretBox(key), {"dav": connector}, ttl_s=60)


SETTINGS = {"url": "http://127.0.0.1:5232/owner/cal/", "username": "owner", "password": SECRET}


async def test_connecting_keeps_secrets_sealed_and_listings_only_name_them(
    pool: PgPool, connector: Plugin, owner_id: str
) -> None:
    store = connections(pool, connector)

    made = await store.connect(owner_id, "dav", SETTINGS)
    listed = await store.list(owner_id)

    assert (made.category, made.connector, made.settings, made.secrets_set) == (
        "calendar",
        "dav",
        {"url": SETTINGS["url"], "username": "owner"},
        ("password",),
    )
    assert [(c.category, c.connector, c.settings, c.secrets_set) for c in listed] == [
        (made.category, made.connector, made.settings, made.secrets_set)
    ]
    raw = await pool.fetchrow("SELECT settings::text AS s, secrets FROM mcp_host.connections")
    assert raw is not None and SECRET not in raw["s"] and SECRET not in raw["secrets"]
    plugin, opened = await store.settings_for(owner_id, "calendar")
    assert plugin is connector and opened == SETTINGS


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({**SETTINGS, "colour": "red"}, snapshot("colour: not a setting of dav")),
        (
            {"url": 5, "colour": "red"},
            snapshot("colour: not a setting of dav; url: must be a string (type string), got 5"),
        ),
        ({**SETTINGS, "password": 42}, snapshot("password: must be a string (type string), got 42")),
    ],
)
async def test_settings_that_do_not_fit_are_refused_naming_the_key(
    pool: PgPool, connector: Plugin, owner_id: str, values: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArguments) as caught:
        await connections(pool, connector).connect(owner_id, "dav", values)

    assert caught.value.message == message
    assert await connections(pool, connector).list(owner_id) == []


async def test_an_unknown_connector_cannot_be_connected(pool: PgPool, connector: Plugin, owner_id: str) -> None:
    with pytest.raises(InvalidArguments, match="no connector named 'smtp'"):
        await connections(pool, connector).connect(owner_id, "smtp", {})


async def test_disconnecting_ends_the_category_at_once_on_this_replica(
    pool: PgPool, connector: Plugin, owner_id: str
) -> None:
    store = connections(pool, connector)
    await store.connect(owner_id, "dav", SETTINGS)
    assert await store.categories(owner_id) == {"calendar"}

    assert await store.disconnect(owner_id, "calendar") is True

    assert await store.categories(owner_id) == frozenset()
    assert await store.disconnect(owner_id, "calendar") is False
    with pytest.raises(Unconfigured):
        await store.settings_for(owner_id, "calendar")


async def test_secrets_sealed_under_another_host_key_ask_for_a_new_connection(
    pool: PgPool, connector: Plugin, owner_id: str
) -> None:
    await connections(pool, connector, key=b"\x01" * 32).connect(owner_id, "dav", SETTINGS)

    with pytest.raises(Unconfigured, match="must be made again"):
        await connections(pool, connector).settings_for(owner_id, "calendar")


async def test_a_connection_whose_connector_is_gone_connects_nothing(
    pool: PgPool, connector: Plugin, owner_id: str
) -> None:
    await connections(pool, connector).connect(owner_id, "dav", SETTINGS)
    without = Connections(pool, SecretBox(bytes(32)), {}, ttl_s=0)

    assert await without.categories(owner_id) == frozenset()
    with pytest.raises(Unconfigured):
        await without.settings_for(owner_id, "calendar")
