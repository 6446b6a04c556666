"""The back-channel end to end: a hostile sandboxed plugin against a real host and Postgres.

The `forger` plugin speaks raw MCP to its host-op socket (no plugin kit) and tries what a
hostile plugin would: ops it did not name, no grant, a made-up grant, a grant kept from an
earlier call, a forged owner, SQL in collection names, more ops than its budget, oversized
messages and too many connections. One host serves every test of this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from inline_snapshot import snapshot

from conftest import fresh_database
from hosting import RunningHost, host_settings, running_host
from processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

BUDGET = 6
MAX_MESSAGE = 8192
MAX_CONNECTIONS = 4
DENIED = {"is_error": True, "structured": {"code": "denied", "message": "denied"}}


@pytest.fixture(scope="module")
async def host(
    postgres_server: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[RunningHost, dict[str, Any]]]:
    async with fresh_database(postgres_server) as url:
        settings = host_settings(
            tmp_path_factory.mktemp("backchannel"),
            url,
            ["forger", "notes"],
            grant_op_budget=BUDGET,
            host_op_max_message_bytes=MAX_MESSAGE,
            host_op_max_connections=MAX_CONNECTIONS,
        )
        async with running_host(settings) as running:
            session = await running.new_session()
            yield running, session


async def forge(host: tuple[RunningHost, dict[str, Any]], tool: str, **arguments: Any) -> Any:
    running, session = host
    async with running.client(session) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return result.structured_content


async def test_socket_lists_exactly_the_ops_the_manifest_named(host: Any) -> None:
    assert await forge(host, "listed_ops") == {"ops": ["store.claim", "store.count", "store.insert", "store.query"]}


async def test_sandbox_sees_its_own_socket_only_at_the_fixed_path(host: Any) -> None:
    assert await forge(host, "socket_view") == snapshot(
        {"socket": "/run/mcp-host/ops.sock", "folder": ["ops.sock"], "run": ["mcp-host"]}
    )


async def test_op_the_manifest_did_not_name_is_denied(host: Any) -> None:
    answer = await forge(host, "op", name="owner.meta", arguments={"field": "email"})
    assert answer == {"outcomes": [DENIED]}


@pytest.mark.parametrize("grant", ["none", "x" * 43, "", "y" * 5000])
async def test_op_without_a_genuine_grant_is_denied(host: Any, grant: str) -> None:
    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"}, grant=grant)
    assert answer == {"outcomes": [DENIED]}


async def test_grant_replayed_after_its_call_ended_is_denied(host: Any) -> None:
    assert await forge(host, "keep_grant") == {"kept": True}

    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"}, grant="kept")

    assert answer == {"outcomes": [DENIED]}
    running, _ = host
    assert running.host.grants.live_count() == 0


async def test_owner_forged_in_op_meta_is_ignored(host: Any) -> None:
    running, session = host
    forged = {"mcp-host/session": {"owner_id": "intruder", "session_id": session["session_id"], "mode": "owner"}}

    answer = await forge(
        host, "op", name="store.insert", arguments={"collection": "forged", "doc": {"n": 1}}, extra_meta=forged
    )

    assert answer["outcomes"][0]["is_error"] is False
    store = running.host.stores.bound("capability", "forger")
    assert [r.doc for r in await store.query(running.host.owner_id, "forged")] == [{"n": 1}]
    assert await store.query("intruder", "forged") == []


async def test_owner_named_in_op_arguments_is_refused(host: Any) -> None:
    arguments = {"collection": "forged", "doc": {}, "owner_id": "intruder"}

    answer = await forge(host, "op", name="store.insert", arguments=arguments)

    assert answer["outcomes"][0]["structured"]["code"] == "invalid_arguments"


@pytest.mark.parametrize(
    "collection", ['x"; DROP SCHEMA mcp_host CASCADE; --', "../notes", "notes.*", "mcp_host.owners"]
)
async def test_collection_that_is_not_a_plain_name_is_refused(host: Any, collection: str) -> None:
    answer = await forge(host, "op", name="store.count", arguments={"collection": collection})
    assert answer["outcomes"][0]["structured"]["code"] == "invalid_arguments"


async def test_plugin_reaches_only_its_own_store(host: Any) -> None:
    running, _ = host
    await forge(host, "op", name="store.insert", arguments={"collection": "notes", "doc": {"text": "planted"}})

    notes = running.host.stores.bound("capability", "notes")
    forger = running.host.stores.bound("capability", "forger")

    assert await notes.query(running.host.owner_id, "notes") == []
    assert [r.doc for r in await forger.query(running.host.owner_id, "notes")] == [{"text": "planted"}]


async def test_a_call_gets_at_most_its_budget_of_ops(host: Any) -> None:
    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"}, repeat=BUDGET + 2)

    outcomes = answer["outcomes"]
    assert [o["is_error"] for o in outcomes] == [False] * BUDGET + [True, True]
    assert outcomes[-1] == DENIED


async def test_oversized_message_ends_the_connection_and_the_socket_keeps_serving(host: Any) -> None:
    assert await forge(host, "oversized", size=MAX_MESSAGE * 4) == {"closed": True}

    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"})
    assert answer["outcomes"][0]["is_error"] is False


async def test_connections_over_the_cap_are_closed_at_once(host: Any) -> None:
    assert await forge(host, "connections", count=MAX_CONNECTIONS + 3) == {"closed": 3}

    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"})
    assert answer["outcomes"][0]["is_error"] is False
