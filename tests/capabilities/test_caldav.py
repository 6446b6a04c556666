"""The builtin `caldav` connector: a real stdio MCP child talking to a Radicale server on loopback.

Radicale runs as a subprocess for the module (htpasswd users in plain text, a rights file):
`owner` may read and write the calendars under /owner/, `reader` may only read them. Each test
gets a calendar of its own, made with MKCALENDAR through the caldav library. The connector
gets its settings per call in `_meta["mcp-host/connection"]`, as the host sends them.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from caldav.davclient import DAVClient
from inline_snapshot import snapshot

from mcp_host.children.pool import ChildPool
from mcp_host.plugins.loading import load_plugins
from mcp_host.sandbox.launch import launch_for
from mcp_host.settings import Settings as HostSettings
from mcp_host_kit import CONNECTION_KEY
from tests.capabilities.connector_child import Connector, connector_child, loopback_egress, refusal
from tests.hosting import BUILTINS, free_port
from tests.peers import DAY, PASSWORDS, WRONG_PASSWORD, Radicale, new_calendar, running_radicale
from tests.processes import CHILD_LIMITS, needs_bwrap
from tests.proxy_peer import REASON, running_proxy

pytestmark = pytest.mark.anyio

SERVER = BUILTINS / "caldav" / "server.py"


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    with running_radicale(tmp_path_factory.mktemp("radicale")) as server:
        yield server


@pytest.fixture
def calendar_url(radicale: Radicale) -> str:
    """A new, empty calendar collection of `owner`, made with MKCALENDAR."""
    return new_calendar(radicale)


@pytest.fixture(scope="module")
async def connector(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Connector]:
    async with connector_child(SERVER, "calendar", tmp_path_factory.mktemp("connector")) as child:
        yield child


def _event(summary: str, start: str, end: str, **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "start": start, "end": end, **extra}


async def test_insert_list_freebusy_delete_round_trip(
    connector: Connector, radicale: Radicale, calendar_url: str
) -> None:
    owner = radicale.connection(calendar_url)
    planning = await connector.ok(
        "insert_event",
        _event(
            "Planning",
            "2030-01-07T10:00:00+01:00",
            "2030-01-07T11:00:00+01:00",
            description="Agenda:\n- budget",
            attendees=["Ada@Example.test", "grace@example.test"],
        ),
        owner,
    )
    review = await connector.ok("insert_event", _event("Review", "2030-01-07T09:30:00Z", "2030-01-07T11:00:00Z"), owner)
    lunch = await connector.ok(
        "insert_event", _event("Lunch", "2030-01-07T13:00:00+01:00", "2030-01-07T14:00:00+01:00"), owner
    )
    await connector.ok("insert_event", _event("Next day", "2030-01-08T09:00:00Z", "2030-01-08T10:00:00Z"), owner)

    listed = await connector.ok("list_events", DAY, owner)
    assert listed == {
        "events": [
            {
                "uid": planning["uid"],
                "summary": "Planning",
                "start": "2030-01-07T09:00:00+00:00",
                "end": "2030-01-07T10:00:00+00:00",
            },
            {
                "uid": review["uid"],
                "summary": "Review",
                "start": "2030-01-07T09:30:00+00:00",
                "end": "2030-01-07T11:00:00+00:00",
            },
            {
                "uid": lunch["uid"],
                "summary": "Lunch",
                "start": "2030-01-07T12:00:00+00:00",
                "end": "2030-01-07T13:00:00+00:00",
            },
        ],
        "truncated": False,
    }
    # Overlapping events join into one busy period; the range clips.
    busy = await connector.ok("freebusy", {"start": "2030-01-07T09:15:00Z", "end": "2030-01-07T12:30:00Z"}, owner)
    assert busy == snapshot(
        {
            "busy": [
                {"start": "2030-01-07T09:15:00+00:00", "end": "2030-01-07T11:00:00+00:00"},
                {"start": "2030-01-07T12:00:00+00:00", "end": "2030-01-07T12:30:00+00:00"},
            ]
        }
    )
    stored = _stored_event(calendar_url, planning["uid"])
    assert stored == snapshot(
        {
            "summary": "Planning",
            "description": "Agenda:\n- budget",
            "attendees": ["mailto:ada@example.test", "mailto:grace@example.test"],
            "dtstart": "2030-01-07 09:00:00+00:00",
        }
    )

    assert await connector.ok("delete_event", {"uid": review["uid"]}, owner) == {"deleted": True}
    assert await connector.ok("delete_event", {"uid": review["uid"]}, owner) == {"deleted": False}
    assert [e["summary"] for e in (await connector.ok("list_events", DAY, owner))["events"]] == ["Planning", "Lunch"]
    busy = await connector.ok("freebusy", DAY, owner)
    assert busy == snapshot(
        {
            "busy": [
                {"start": "2030-01-07T09:00:00+00:00", "end": "2030-01-07T10:00:00+00:00"},
                {"start": "2030-01-07T12:00:00+00:00", "end": "2030-01-07T13:00:00+00:00"},
            ]
        }
    )


def _stored_event(calendar_url: str, uid: str) -> dict[str, Any]:
    """What the server keeps of the event `uid`, read with the caldav library."""
    with DAVClient(url=calendar_url, username="owner", password=PASSWORDS["owner"]) as client:
        component = client.calendar(url=calendar_url).get_event_by_uid(uid).icalendar_component
    attendees = component.get("attendee", [])
    return {
        "summary": str(component["summary"]),
        "description": str(component["description"]),
        "attendees": sorted(str(a) for a in (attendees if isinstance(attendees, list) else [attendees])),
        "dtstart": str(component.decoded("dtstart").astimezone(UTC)),
    }


ACTIONS = ["freebusy.read", "events.read", "events.insert", "events.delete", "calendar.drop"]


async def test_the_owner_may_do_every_calendar_action(
    connector: Connector, radicale: Radicale, calendar_url: str
) -> None:
    owner = radicale.connection(calendar_url)
    answers = {action: (await connector.ok("can_perform", {"action": action}, owner))["can"] for action in ACTIONS}
    assert answers == snapshot(
        {
            "freebusy.read": True,
            "events.read": True,
            "events.insert": True,
            "events.delete": True,
            "calendar.drop": False,
        }
    )


async def test_a_read_only_account_may_read_but_neither_insert_nor_delete(
    connector: Connector, radicale: Radicale, calendar_url: str
) -> None:
    owner, reader = radicale.connection(calendar_url), radicale.connection(calendar_url, "reader")
    answers = {action: (await connector.ok("can_perform", {"action": action}, reader))["can"] for action in ACTIONS}
    assert answers == snapshot(
        {
            "freebusy.read": True,
            "events.read": True,
            "events.insert": False,
            "events.delete": False,
            "calendar.drop": False,
        }
    )
    existing = await connector.ok(
        "insert_event", _event("Standup", "2030-01-07T09:00:00Z", "2030-01-07T09:15:00Z"), owner
    )

    inserted = await connector.call(
        "insert_event", _event("Intrusion", "2030-01-07T10:00:00Z", "2030-01-07T11:00:00Z"), reader
    )
    deleted = await connector.call("delete_event", {"uid": existing["uid"]}, reader)
    assert refusal(inserted) == snapshot(
        {"code": "denied", "message": "the calendar server does not let this account add events"}
    )
    assert refusal(deleted) == snapshot(
        {"code": "denied", "message": "the calendar server does not let this account delete events"}
    )
    listed = await connector.ok("list_events", DAY, reader)
    assert [(e["uid"], e["summary"]) for e in listed["events"]] == [(existing["uid"], "Standup")]
    busy = await connector.ok("freebusy", DAY, reader)
    assert busy == {"busy": [{"start": "2030-01-07T09:00:00+00:00", "end": "2030-01-07T09:15:00+00:00"}]}


async def test_connected_names_the_calendar_and_the_access(
    connector: Connector, radicale: Radicale, calendar_url: str
) -> None:
    server = radicale.base.removeprefix("http://")
    owner = await connector.ok("connected", {}, radicale.connection(calendar_url))
    reader = await connector.ok("connected", {}, radicale.connection(calendar_url, "reader"))
    principal = await connector.ok("connected", {}, radicale.connection(f"{radicale.base}/owner/"))
    assert [owner, reader, principal] == [
        {"ok": True, "detail": f"connected to calendar 'Team' on {server} (read-write)"},
        {"ok": True, "detail": f"connected to calendar 'Team' on {server} (read-only)"},
        {"ok": False, "detail": f"the URL names a collection on {server} that is not a calendar"},
    ]


async def test_wrong_password_is_denied_and_the_password_appears_nowhere(
    connector: Connector, radicale: Radicale, calendar_url: str
) -> None:
    settings = radicale.connection(calendar_url, password=WRONG_PASSWORD)
    listed = await connector.call("list_events", DAY, settings)
    inserted = await connector.call("insert_event", _event("x", DAY["start"], DAY["end"]), settings)
    checked = await connector.call("connected", {}, settings)
    denied = {"code": "denied", "message": "the calendar server refused the username or password"}
    assert [refusal(listed), refusal(inserted)] == [denied, denied]
    assert checked.structured_content == {"ok": False, "detail": denied["message"]}
    shown = json.dumps([r.model_dump(mode="json") for r in (listed, inserted, checked)])
    assert WRONG_PASSWORD not in shown
    assert WRONG_PASSWORD not in connector.stderr.read_text()


async def test_unreachable_server_is_unavailable_within_a_bounded_time(connector: Connector) -> None:
    closed = free_port()  # bound once and released: nothing listens there
    settings = {"url": f"http://127.0.0.1:{closed}/owner/calendar/", "username": "owner", "password": "x"}
    started = time.monotonic()
    listed = await connector.call("list_events", DAY, settings)
    checked = await connector.call("connected", {}, settings)
    assert time.monotonic() - started < 5
    reason = f"could not reach the calendar server at 127.0.0.1:{closed}"
    assert refusal(listed) == {"code": "unavailable", "message": reason}
    assert checked.structured_content == {"ok": False, "detail": reason}


async def test_a_url_that_names_no_calendar_is_unconfigured(connector: Connector, radicale: Radicale) -> None:
    result = await connector.call("list_events", DAY, radicale.connection(f"{radicale.base}/owner/missing/"))
    assert refusal(result) == snapshot(
        {"code": "unconfigured", "message": "the calendar URL names no calendar on the server"}
    )


VALID_ARGS = {
    "freebusy": DAY,
    "list_events": DAY,
    "insert_event": _event("Call", DAY["start"], "2030-01-07T01:00:00+00:00"),
    "delete_event": {"uid": "some-uid"},
    "can_perform": {"action": "events.read"},
    "connected": {},
}


@pytest.mark.parametrize("verb", list(VALID_ARGS))
async def test_a_call_without_a_connection_is_unconfigured(connector: Connector, verb: str) -> None:
    result = await connector.call(verb, VALID_ARGS[verb], None)
    assert refusal(result) == snapshot(
        {
            "code": "unconfigured",
            "message": "this call carries no connection: the owner has not connected this service",
        }
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"url": "ftp://127.0.0.1/cal/"}, "the calendar connection's settings are unusable: url"),
        ({"url": "http://owner:hunter2@127.0.0.1/cal/"}, "the calendar connection's settings are unusable: url"),
        ({"url": "calendar.example.test/owner/"}, "the calendar connection's settings are unusable: url"),
        ({"username": "owner"}, "the calendar connection's settings are unusable: url"),
        (
            {"url": "http://127.0.0.1/cal/", "username": ["owner"]},
            "the calendar connection's settings are unusable: username",
        ),
    ],
)
async def test_unusable_settings_are_unconfigured(connector: Connector, settings: dict[str, Any], message: str) -> None:
    result = await connector.call("list_events", DAY, settings)
    assert refusal(result) == {"code": "unconfigured", "message": message}
    assert "hunter2" not in json.dumps(result.model_dump(mode="json"))


@pytest.mark.parametrize(
    ("verb", "args", "message"),
    [
        (
            "list_events",
            {**DAY, "start": "2030-01-07T00:00:00"},
            "start must be an ISO 8601 date-time with a UTC offset, e.g. 2030-01-01T09:00:00+01:00",
        ),
        (
            "list_events",
            {**DAY, "end": "next tuesday"},
            "end must be an ISO 8601 date-time with a UTC offset, e.g. 2030-01-01T09:00:00+01:00",
        ),
        ("freebusy", {"start": DAY["end"], "end": DAY["start"]}, "end must be after start"),
        ("freebusy", {"start": DAY["start"], "end": DAY["start"]}, "end must be after start"),
        (
            "list_events",
            {"start": "2030-01-01T00:00:00Z", "end": "2031-01-03T00:00:00Z"},
            "start and end may be at most 366 days apart",
        ),
        ("freebusy", {"start": DAY["start"]}, "missing or mistyped: end"),
        (
            "insert_event",
            {**VALID_ARGS["insert_event"], "summary": "  "},
            "summary must be 1-500 characters on one line",
        ),
        (
            "insert_event",
            {**VALID_ARGS["insert_event"], "summary": "s" * 501},
            "summary must be 1-500 characters on one line",
        ),
        (
            "insert_event",
            {**VALID_ARGS["insert_event"], "summary": "Call\r\nATTENDEE:mailto:eve@example.test"},
            "summary must be 1-500 characters on one line",
        ),
        (
            "insert_event",
            {**VALID_ARGS["insert_event"], "description": "d" * 8001},
            "description must be at most 8000 characters of text",
        ),
        (
            "insert_event",
            {**VALID_ARGS["insert_event"], "attendees": ["ada@example.test", "not an address"]},
            "attendees[1] is not an email address",
        ),
        (
            "insert_event",
            {**VALID_ARGS["insert_event"], "attendees": [f"a{i}@example.test" for i in range(51)]},
            "at most 50 attendees",
        ),
        (
            "insert_event",
            {**VALID_ARGS["insert_event"], "attendees": "ada@example.test"},
            "missing or mistyped: attendees",
        ),
        ("delete_event", {"uid": ""}, "uid must be 1-255 characters on one line"),
        ("delete_event", {"uid": 42}, "missing or mistyped: uid"),
    ],
)
async def test_bad_arguments_are_invalid_arguments(
    connector: Connector, radicale: Radicale, calendar_url: str, verb: str, args: dict[str, Any], message: str
) -> None:
    result = await connector.call(verb, args, radicale.connection(calendar_url))
    assert refusal(result) == {"code": "invalid_arguments", "message": message}


async def test_through_the_egress_proxy_http_goes_in_absolute_form_and_a_refusal_names_the_server(
    radicale: Radicale, calendar_url: str, tmp_path: Path
) -> None:
    server = radicale.base.removeprefix("http://")
    async with (
        running_proxy() as proxy,
        connector_child(SERVER, "calendar", tmp_path, env=proxy.environ()) as child,
    ):
        reached = await child.ok("connected", {}, radicale.connection(calendar_url))
        through = list(proxy.requests)
        proxy.refused.add(server)
        refused = await child.call("list_events", DAY, radicale.connection(calendar_url))
        checked = await child.ok("connected", {}, radicale.connection(calendar_url))
    assert reached["ok"] is True
    assert through and all(request.startswith(f"PROPFIND {radicale.base}/") for request in through)
    reason = f"could not reach {server}: the host's egress proxy refused it ({REASON})"
    assert refusal(refused) == {"code": "unavailable", "message": reason}
    assert checked == {"ok": False, "detail": reason}
    # Each failed call asks the proxy again with a CONNECT of its own, to tell its 403 apart.
    asked = [f"REPORT {calendar_url}", f"CONNECT {server}", f"PROPFIND {calendar_url}", f"CONNECT {server}"]
    assert proxy.requests[len(through) :] == asked


async def test_through_the_egress_proxy_https_is_tunnelled_and_a_refusal_names_the_server(tmp_path: Path) -> None:
    async with (
        running_proxy() as proxy,
        connector_child(SERVER, "calendar", tmp_path, env=proxy.environ()) as child,
    ):
        proxy.refused.add("cal.egress.test:443")
        settings = {"url": "https://cal.egress.test/owner/team/", "username": "owner", "password": "x"}
        refused = await child.call("list_events", DAY, settings)
    reason = f"could not reach cal.egress.test:443: the host's egress proxy refused it ({REASON})"
    assert refusal(refused) == {"code": "unavailable", "message": reason}
    assert set(proxy.requests) == {"CONNECT cal.egress.test:443"}  # niquests' tunnel and the connector's question


@needs_bwrap
async def test_the_connector_reaches_the_server_from_inside_the_sandbox(radicale: Radicale, calendar_url: str) -> None:
    report = load_plugins(None, [BUILTINS / "caldav"])
    assert report.errors == ()
    [plugin] = report.plugins
    settings = radicale.connection(calendar_url)
    meta = {CONNECTION_KEY: {"owner_id": "owner-1", "category": "calendar", "settings": settings}}
    async with (
        loopback_egress(plugin.manifest.id, radicale.port) as egress,
        ChildPool(CHILD_LIMITS, max_children=1) as pool,
    ):
        child = pool.child(plugin.manifest.id, lambda: launch_for(plugin, HostSettings(), egress_socket=egress))
        inserted = await child.call_tool(
            "insert_event", _event("Sandboxed", DAY["start"], "2030-01-07T01:00:00Z"), meta, timeout_s=30
        )
        listed = await child.call_tool("list_events", dict(DAY), meta, timeout_s=30)
        child.stop()
    assert inserted.is_error is False and listed.is_error is False
    assert listed.structured_content is not None and inserted.structured_content is not None
    assert listed.structured_content["events"] == [
        {
            "uid": inserted.structured_content["uid"],
            "summary": "Sandboxed",
            "start": DAY["start"],
            "end": "2030-01-07T01:00:00+00:00",
        }
    ]


def test_busy_periods_are_clipped_sorted_and_joined() -> None:
    # The derivation used when a server has no free-busy REPORT; Radicale has one.
    merged = _load_server()._merged(
        [
            (_at(12), _at(13)),
            (_at(8), _at(10)),  # starts before the range
            (_at(9), _at(11)),  # overlaps the one above
            (_at(11), _at(11, 30)),  # touches it
            (_at(18), _at(20)),  # after the range
        ],
        _at(9),
        _at(17),
    )
    assert merged == snapshot(
        [
            {"start": "2030-01-07T09:00:00+00:00", "end": "2030-01-07T11:30:00+00:00"},
            {"start": "2030-01-07T12:00:00+00:00", "end": "2030-01-07T13:00:00+00:00"},
        ]
    )


def _at(hour: int, minute: int = 0) -> datetime:
    return datetime(2030, 1, 7, hour, minute, tzinfo=UTC)


def _load_server() -> Any:
    spec = importlib.util.spec_from_file_location("caldav_connector_server", SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
