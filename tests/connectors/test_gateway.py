"""Connectors through the host: the owner connects the builtin `caldav` connector (a real
sandboxed child) to a Radicale server on loopback; the `scheduler` capability needs a calendar
and reaches it only through the `connector.invoke` host op.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mcp_host_kit.contract import Refusal, refusal_of
from tests.hosting import BUILTINS, RunningHost, allow_loopback, host_fixture
from tests.owner_facade.test_door import call, owner_client
from tests.peers import DAY, PASSWORDS, Radicale, new_calendar, running_radicale
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]
NONE = Refusal(code="", message="")  # what a result that is no refusal reads as here

HOUR = {"start": "2030-01-07T09:00:00+00:00", "end": "2030-01-07T10:00:00+00:00"}


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    with running_radicale(tmp_path_factory.mktemp("radicale")) as server:
        yield server


host = host_fixture(["scheduler"], builtin_dir=BUILTINS)


async def connect(host: RunningHost, radicale: Radicale, user: str = "owner") -> str:
    url = new_calendar(radicale)
    await allow_loopback(host, "caldav", radicale.port)
    await host.connections.connect(host.owner_id, "caldav", radicale.connection(url, user))
    return url


async def tool_names(host: RunningHost, session: dict[str, Any]) -> list[str]:
    async with host.client(session) as client:
        return sorted(t.name for t in (await client.session.list_tools()).tools)


async def test_capability_needing_a_calendar_is_hidden_until_one_is_connected(
    host: RunningHost, radicale: Radicale
) -> None:
    session = await host.new_session()
    assert "slots_busy" not in await tool_names(host, session)

    await connect(host, radicale)

    assert {"meeting_book", "slots_busy", "meta_seen"} <= set(await tool_names(host, session))


async def test_capability_books_and_reads_through_the_connector(host: RunningHost, radicale: Radicale) -> None:
    await connect(host, radicale)
    session = await host.new_session()
    async with host.client(session) as client:
        booked = await client.call_tool("meeting_book", {"summary": "Intro call", **HOUR})
        busy = await client.call_tool("slots_busy", DAY)

    assert not booked.is_error and set(booked.structured_content or {}) == {"uid"}
    assert busy.structured_content == {"busy": [{"start": HOUR["start"], "end": HOUR["end"]}]}


async def test_read_only_account_hides_the_write_tools_only(host: RunningHost, radicale: Radicale) -> None:
    await connect(host, radicale, user="reader")
    session = await host.new_session()

    names = await tool_names(host, session)
    async with host.client(session) as client:
        refused = await client.call_tool("meeting_book", {"summary": "x", **HOUR})
        unknown = await client.call_tool("no_such_tool", {})

    assert "slots_busy" in names and "meeting_book" not in names
    assert refused.is_error
    assert (refusal_of(refused) or NONE).code == "unknown"
    assert (refusal_of(refused) or NONE).message == (refusal_of(unknown) or NONE).message.replace(
        "no_such_tool", "meeting_book"
    )


async def test_disconnecting_mid_session_removes_the_dependants_at_the_next_list(
    host: RunningHost, radicale: Radicale
) -> None:
    await connect(host, radicale)
    session = await host.new_session()
    assert "slots_busy" in await tool_names(host, session)

    assert await host.connections.disconnect(host.owner_id, "calendar") is True

    names = await tool_names(host, session)
    assert not {"slots_busy", "meeting_book", "meta_seen", "mail_send"} & set(names)
    async with host.client(session) as client:
        refused = await client.call_tool("slots_busy", DAY)
    assert (refusal_of(refused) or NONE).code == "unknown"


async def test_secrets_reach_neither_listings_nor_the_capability(host: RunningHost, radicale: Radicale) -> None:
    url = await connect(host, radicale)
    session = await host.new_session()
    async with host.client(session) as client:
        seen = await client.call_tool("meta_seen", {})

    listed = await host.connections.list(host.owner_id)
    assert [(c.connector, c.settings, c.secrets_set) for c in listed] == [
        ("caldav", {"url": url, "username": "owner"}, ("password",))
    ]
    meta = (seen.structured_content or {})["meta"]
    assert "mcp-host/grant" in meta and "mcp-host/session" in meta
    assert PASSWORDS["owner"] not in meta and "mcp-host/connection" not in meta
    catalogue = await host.http.get(
        f"{host.url}/v1/catalogue",
        headers={"Authorization": f"Bearer {host.owner_token()}"},
    )
    assert catalogue.status_code == 200 and PASSWORDS["owner"] not in catalogue.text


async def test_capability_cannot_reach_a_category_it_does_not_require(host: RunningHost, radicale: Radicale) -> None:
    await connect(host, radicale)
    session = await host.new_session()
    async with host.client(session) as client:
        refused = await client.call_tool("mail_send", {})

    assert refused.structured_content == {"code": "denied", "message": "denied"}


async def test_the_owner_connects_and_invokes_the_connector_through_the_door(
    host: RunningHost, radicale: Radicale
) -> None:
    url = new_calendar(radicale)
    await allow_loopback(host, "caldav", radicale.port)
    async with owner_client(host) as client:
        _, connected = await call(client, "connector_connect", connector="caldav", settings=radicale.connection(url))
        _, listed = await call(client, "connectors_list")
        failed, can = await call(
            client, "connector_invoke", category="calendar", verb="can_perform", args={"action": "events.insert"}
        )
        _, trail = await call(client, "audit_list", limit=10)

    assert connected["connection"]["settings"] == {"url": url, "username": "owner"}
    assert connected["connection"]["secrets_set"] == ["password"]
    assert connected["connected"]["ok"] is True
    caldav = next(c for c in listed["connectors"] if c["id"] == "caldav")
    assert caldav["connection"]["category"] == "calendar"
    assert not failed and can == {"can": True}
    shown = str(connected) + str(listed) + str(trail)
    assert PASSWORDS["owner"] not in shown
