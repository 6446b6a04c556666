"""The builtin `calendar.book` capability: its policy alone, the plugin standalone (kit
emulation), and through a real host with real MCP clients, the builtin `caldav` connector and
a Radicale server on loopback.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest
from caldav.davclient import DAVClient
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from mcp_host.plugins.manifest import load_manifest
from mcp_host.policy.turns import judge
from mcp_host_kit.contract import refusal_of
from tests.hosting import BUILTINS, REPO, RunningHost, allow_loopback, host_fixture, host_settings, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.peers import PASSWORDS, Radicale, new_calendar, running_radicale
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

FOLDER = BUILTINS / "calendar_book"
CAPABILITY = "calendar.book"
TOOLS = ["bookings_list", "calendar_book", "calendar_cancel", "calendar_list_slots"]
INVALID_ARGUMENTS = "invalid_arguments"
QUOTA_EXHAUSTED = "quota_exhausted"
SLOT_TAKEN = "slot_taken"
NOT_FOUND = "not_found"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"calendar_book_{name}", FOLDER / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


policy_module = _module("booking_policy")


def _monday(weeks_ahead: int = 1) -> date:
    """A Monday at least a week (and so past the minimum notice) ahead."""
    today = datetime.now(UTC).date()
    return today + timedelta(days=7 * weeks_ahead + (7 - today.weekday()) % 7)


def _at(day: date, hour: int, minute: int = 0) -> str:
    return datetime.combine(day, time(hour, minute), UTC).isoformat()


def _too_soon() -> str:
    """09:00 on the latest working day up to tomorrow: always within the 2 days' notice."""
    day = datetime.now(UTC).date() + timedelta(days=1)
    while day.weekday() >= 5:
        day -= timedelta(days=1)
    return _at(day, 9)


def _bad_starts() -> list[tuple[str, str]]:
    monday = _monday()
    return [
        (_at(monday - timedelta(days=1), 10), "sun is not a working day"),
        (_at(monday, 8), "08:00 is not the start of a slot"),
        (_at(monday, 17, 45), "17:45 is not the start of a slot"),
        (_at(monday, 10, 10), "10:10 is not the start of a slot"),
        (_too_soon(), "too soon: a meeting needs 2 days notice"),
        (_at(monday + timedelta(days=70), 10), "too far ahead"),
        ("next monday at ten", "start must be an ISO 8601 date-time with a UTC offset"),
        (f"{monday.isoformat()}T10:00:00", "start must be an ISO 8601 date-time with a UTC offset"),
    ]


# -- the policy alone ------------------------------------------------------------------------


def _policy(**config: Any) -> Any:
    return policy_module.policy_from(config, None)


def test_the_default_policy_offers_half_hours_from_nine_to_six_on_weekdays() -> None:
    policy = _policy()
    monday = _monday()
    slots = policy.free_slots(monday - timedelta(days=2), 3, [], datetime.now(UTC))

    assert [s.start.isoformat() for s in slots[:2]] == [_at(monday, 9), _at(monday, 9, 30)]
    assert slots[-1].end.isoformat() == _at(monday, 18)
    assert len(slots) == 18  # the weekend before offers nothing
    assert policy.wire() == {
        "timezone": "UTC",
        "slot_minutes": 30,
        "working_hours": "09:00-18:00",
        "working_days": ["mon", "tue", "wed", "thu", "fri"],
        "min_notice": "2 days",
        "buffer_minutes": 15,
    }


def test_a_busy_period_blocks_the_slots_within_the_buffer_of_it() -> None:
    policy = _policy()
    monday = _monday()
    busy = [(datetime.fromisoformat(_at(monday, 10)), datetime.fromisoformat(_at(monday, 10, 30)))]
    starts = [s.start.strftime("%H:%M") for s in policy.free_slots(monday, 1, busy, datetime.now(UTC))]

    assert starts[:3] == ["09:00", "11:00", "11:30"]  # 09:30 ends 5 minutes short of the buffer


def test_the_owners_timezone_sets_the_working_hours() -> None:
    policy = policy_module.policy_from({}, "Europe/Berlin")
    slot = policy.requested(f"{_monday().isoformat()}T09:00:00+01:00", datetime.now(UTC))
    override = policy_module.policy_from({"timezone": "America/New_York", "slot_minutes": 60}, "Europe/Berlin")

    assert (policy.timezone, slot.start.utcoffset()) == ("Europe/Berlin", timedelta(hours=1))
    assert override.wire()["timezone"] == "America/New_York" and override.wire()["slot_minutes"] == 60
    assert policy_module.policy_from({}, "Not/AZone").timezone == "UTC"


@pytest.mark.parametrize(("start", "reason"), _bad_starts())
def test_the_policy_refuses_a_start_it_does_not_offer_with_the_reason(start: str, reason: str) -> None:
    with pytest.raises(policy_module.InvalidArguments) as refused:
        _policy().requested(start, datetime.now(UTC))
    assert reason in refused.value.message


# -- the claim gate's phrases, as the host judges them ---------------------------------------


def test_claims_of_a_booking_are_gated_and_refusals_that_say_booked_are_not() -> None:
    gate = load_manifest(FOLDER).claim_gate
    assert gate is not None and gate.tool == "calendar_book"
    gates = [(CAPABILITY, gate)]
    claims = ["I've booked you in for Monday.", "You're booked!", "Your booking is confirmed.", "I have reserved it."]
    refusals = [
        "I could not book it; that slot is already booked.",
        "That time is booked by someone else. Shall I try 10:30?",
        "Nothing is booked yet: which slot would you like?",
    ]

    assert all(judge(text, gates, []) for text in claims)
    assert [judge(text, gates, []) for text in refusals] == [[], [], []]


# -- standalone (the kit's in-memory host) ---------------------------------------------------


@pytest.fixture
async def standalone() -> AsyncIterator[Client]:
    # The kit of this tree: the SDK gives the child a minimal environment, and the editable
    # install's finder may point at another checkout.
    env = {"PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=sys.executable, args=[str(FOLDER / "server.py")], cwd=str(FOLDER), env=env)
    async with Client(params, read_timeout_seconds=30) as client:
        yield client


async def test_standalone_the_policy_refuses_bad_starts_before_any_calendar_call(standalone: Client) -> None:
    names = await _names(standalone)
    refused = [await standalone.call_tool("calendar_book", {"start": start}) for start, _ in _bad_starts()]
    missing = await standalone.call_tool("calendar_book", {})
    no_calendar = await standalone.call_tool("calendar_list_slots", {})
    none_yet = await standalone.call_tool("bookings_list", {})

    assert names == TOOLS
    assert [(r.is_error, _code(r)) for r in refused] == [(True, INVALID_ARGUMENTS)] * len(refused)
    assert [reason in _message(r) for r, (_, reason) in zip(refused, _bad_starts(), strict=True)] == [True] * len(
        refused
    )
    assert (_code(missing), _message(missing)) == (INVALID_ARGUMENTS, "missing or mistyped: start")
    assert _code(no_calendar) == "denied"  # the kit does not emulate connectors: a host is needed
    assert none_yet.structured_content == {"bookings": []}


BAD_BOOKERS = [
    ({"name": "Ada\nLovelace"}, "name must be one line of at most 100 characters"),
    ({"name": "A" * 101}, "name must be one line of at most 100 characters"),
    ({"email": "ada"}, "email must be an address such as ada@example.org"),
    ({"email": "ada@example"}, "email must be an address such as ada@example.org"),
    ({"email": "Ada <ada@example.org>"}, "email must be an address such as ada@example.org"),
    ({"email": "ada@example.org, eve@example.org"}, "email must be an address such as ada@example.org"),
    ({"email": f"{'a' * 250}@example.org"}, "email must be an address such as ada@example.org"),
]


async def test_standalone_a_name_or_email_that_is_not_one_plain_line_is_refused(standalone: Client) -> None:
    start = _at(_monday(), 9)
    refused = [await standalone.call_tool("calendar_book", {"start": start, **bad}) for bad, _ in BAD_BOOKERS]

    assert [(r.is_error, _code(r), _message(r)) for r in refused] == [
        (True, INVALID_ARGUMENTS, message) for _, message in BAD_BOOKERS
    ]


def _code(result: CallToolResult) -> str:
    found = refusal_of(result)  # the host's key in `_meta`, else the plugin's structured pair
    return str(found.code if found else None)


def _message(result: CallToolResult) -> str:
    found = refusal_of(result)
    return str(found.message if found else None)


# -- through the host ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    with running_radicale(tmp_path_factory.mktemp("radicale")) as server:
        yield server


# Four builtin children start at a session's first list: on a loaded machine their initialize
# can take over the default 10 s, which would leave them out of the lists this file asserts.
host = host_fixture([], builtin_dir=BUILTINS, child_start_timeout_s=60.0)


async def _connect(running: RunningHost, radicale: Radicale, user: str = "owner") -> str:
    url = new_calendar(radicale)
    await allow_loopback(running, "caldav", radicale.port)
    await running.connections.connect(running.owner_id, "caldav", radicale.connection(url, user))
    return url


async def _visitor(
    running: RunningHost, name: str = "Ada", *, max_bookings: int = 3, notify_owner: bool = False
) -> dict[str, Any]:
    """A code session of a role granting calendar.book (one role and one code per visitor)."""
    access, owner = running.access, running.owner_id
    role = f"role_{name.lower()}"
    await access.put_role(owner, role, [CAPABILITY], {CAPABILITY: {"notify_owner": notify_owner}})
    code, _ = await access.create_code(owner, role, {CAPABILITY: {"max_bookings": max_bookings}})
    return await running.new_session({"code": code, "visitor": {"name": name, "email": f"{name.lower()}@example.org"}})


def _events(radicale: Radicale, url: str) -> list[tuple[str, str]]:
    """(summary, start in UTC) of every event in the calendar at `url`, sorted."""
    with DAVClient(url=url, username="owner", password=PASSWORDS["owner"]) as client:
        events = client.calendar(url=url).events()
        rows = []
        for event in events:
            component = event.icalendar_component
            start = component.decoded("dtstart").astimezone(UTC).isoformat()
            rows.append((str(component.get("summary")), start))
    return sorted(rows)


async def _names(client: Client) -> list[str]:
    """The session's tools of this capability (other builtins are `acl: always`)."""
    return sorted(t.name for t in (await client.list_tools()).tools if t.name in TOOLS)


async def _ok(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.structured_content
    return dict(result.structured_content or {})


async def _first_slot(client: Client) -> dict[str, str]:
    listed = await _ok(client, "calendar_list_slots", date_from=_monday().isoformat(), days=1)
    return dict(listed["slots"][0])


@needs_bwrap
async def test_the_capability_is_hidden_until_a_calendar_is_connected(host: RunningHost, radicale: Radicale) -> None:
    session = await _visitor(host)
    async with host.client(session) as client:
        before = await _names(client)
        refused = await client.call_tool("calendar_list_slots", {})
        await _connect(host, radicale)
        after = await _names(client)
    public = await host.new_session()
    async with host.client(public) as client:
        ungranted = await _names(client)

    assert (before, _code(refused)) == ([], "unknown")
    assert after == TOOLS
    assert not set(TOOLS) & set(ungranted)


@needs_bwrap
async def test_list_book_list_and_cancel(host: RunningHost, radicale: Radicale) -> None:
    url = await _connect(host, radicale)
    monday = _monday()
    async with host.client(await _visitor(host)) as client:
        listed = await _ok(client, "calendar_list_slots", date_from=monday.isoformat(), days=1)
        booked = await _ok(client, "calendar_book", start=listed["slots"][0]["start"], topic="Intro call")
        after = await _ok(client, "calendar_list_slots", date_from=monday.isoformat(), days=1)
        mine = await _ok(client, "bookings_list")
        events = _events(radicale, url)
        cancelled = await _ok(client, "calendar_cancel", booking_id=booked["booking"]["id"])
        remaining = await _ok(client, "bookings_list")

    booking_id = booked["booking"]["id"]
    assert listed["policy"]["timezone"] == "UTC"
    assert listed["slots"][:2] == [
        {"start": _at(monday, 9), "end": _at(monday, 9, 30)},
        {"start": _at(monday, 9, 30), "end": _at(monday, 10)},
    ]
    assert booked == {
        "ok": True,
        "booking": {"id": booking_id, "start": _at(monday, 9), "end": _at(monday, 9, 30), "topic": "Intro call"},
    }
    assert after["slots"][0]["start"] == _at(monday, 10)  # 09:00 is taken, 09:30 within the buffer
    assert mine == {"bookings": [booked["booking"]]}
    assert events == [("Meeting with Ada: Intro call", _at(monday, 9))]
    assert cancelled == {"ok": True, "cancelled": booking_id}
    assert remaining == {"bookings": []}
    assert _events(radicale, url) == []


@needs_bwrap
async def test_the_owners_profile_timezone_sets_the_working_hours_until_the_config_names_one(
    host: RunningHost, radicale: Radicale
) -> None:
    await _connect(host, radicale)
    monday = _monday()
    async with host.client(await _visitor(host)) as client, owner_client(host) as owner:
        set_zone = await call(owner, "owner_profile_set", timezone="Pacific/Auckland")
        profiled = await _ok(client, "calendar_list_slots", date_from=monday.isoformat(), days=1)
        await call(owner, "config_set", capability=CAPABILITY, scope="owner", values={"timezone": "Europe/Berlin"})
        configured = await _ok(client, "calendar_list_slots", date_from=monday.isoformat(), days=1)

    def nine(zone: str) -> str:
        return datetime.combine(monday, time(9), ZoneInfo(zone)).isoformat()

    assert set_zone[1]["timezone"] == "Pacific/Auckland"
    assert [(r["policy"]["timezone"], r["slots"][0]["start"]) for r in (profiled, configured)] == [
        ("Pacific/Auckland", nine("Pacific/Auckland")),  # the profile's, the config naming none
        ("Europe/Berlin", nine("Europe/Berlin")),  # the config's own wins
    ]


@needs_bwrap
async def test_a_taken_slot_is_refused_and_a_visitor_sees_and_cancels_only_their_own(
    host: RunningHost, radicale: Radicale
) -> None:
    url = await _connect(host, radicale)
    ada, bob = await _visitor(host, "Ada"), await _visitor(host, "Bob")
    async with host.client(ada) as ada_client, host.client(bob) as bob_client:
        slot = await _first_slot(ada_client)
        booked = await _ok(ada_client, "calendar_book", start=slot["start"])
        again = await ada_client.call_tool("calendar_book", {"start": slot["start"]})
        taken = await bob_client.call_tool("calendar_book", {"start": slot["start"]})
        bobs = await _ok(bob_client, "bookings_list")
        not_bobs = await bob_client.call_tool("calendar_cancel", {"booking_id": booked["booking"]["id"]})
        no_such = await bob_client.call_tool("calendar_cancel", {"booking_id": "nope"})
        adas = await _ok(ada_client, "bookings_list")

    assert [(r.is_error, _code(r)) for r in (again, taken)] == [(True, SLOT_TAKEN)] * 2
    assert bobs == {"bookings": []}
    assert not_bobs.structured_content == no_such.structured_content
    assert no_such.structured_content == {"code": NOT_FOUND, "message": "no such booking"}
    assert adas == {"bookings": [booked["booking"]]}
    assert _events(radicale, url) == [("Meeting with Ada", slot["start"])]


@needs_bwrap
async def test_bookings_belong_to_the_credential_and_a_public_session_keeps_its_own(
    host: RunningHost, radicale: Radicale
) -> None:
    await _connect(host, radicale)
    access, owner = host.access, host.owner_id
    await access.put_role(owner, "visitors", [CAPABILITY])
    await access.put_role(owner, "public", [CAPABILITY])
    code, _ = await access.create_code(owner, "visitors")
    key, _ = await access.create_api_key(owner, "visitors")
    first, second = await host.new_session({"code": code}), await host.new_session({"code": code})
    by_key = await host.http.post(f"{host.url}/v1/sessions", json={}, headers={"Authorization": f"Bearer {key}"})
    assert by_key.status_code == 201, by_key.text
    public, other_public = await host.new_session(), await host.new_session()
    monday = _monday()
    seen: dict[str, list[str]] = {}
    for name, session, hour in [
        ("first", first, 9),
        ("second", second, None),
        ("key", by_key.json(), 10),
        ("public", public, 11),
        ("other_public", other_public, None),
    ]:
        async with host.client(session) as client:
            if hour is not None:
                await _ok(client, "calendar_book", start=_at(monday, hour))
            seen[name] = [b["start"] for b in (await _ok(client, "bookings_list"))["bookings"]]

    assert seen == {
        "first": [_at(monday, 9)],
        "second": [_at(monday, 9)],  # another session of the same code
        "key": [_at(monday, 10)],
        "public": [_at(monday, 11)],
        "other_public": [],
    }


@needs_bwrap
async def test_visitors_racing_for_one_slot_get_one_booking(host: RunningHost, radicale: Radicale) -> None:
    url = await _connect(host, radicale)
    sessions = [await _visitor(host, name) for name in ("Ada", "Bob", "Cy", "Di")]
    results: list[CallToolResult] = []
    async with host.client(sessions[0]) as client:
        slot = await _first_slot(client)

    ready: list[int] = []
    all_ready, go = anyio.Event(), anyio.Event()

    async def race(session: dict[str, Any]) -> None:
        async with host.client(session) as client:
            await client.list_tools()  # connected and listed: the calls below start together
            ready.append(1)
            if len(ready) == len(sessions):
                all_ready.set()
            await go.wait()
            results.append(await client.call_tool("calendar_book", {"start": slot["start"]}))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for session in sessions:
                tg.start_soon(race, session)
            await all_ready.wait()
            go.set()

    assert sorted(_code(r) if r.is_error else "ok" for r in results) == ["ok", SLOT_TAKEN, SLOT_TAKEN, SLOT_TAKEN]
    assert [start for _, start in _events(radicale, url)] == [slot["start"]]


@needs_bwrap
async def test_at_the_codes_max_bookings_booking_is_used_up(host: RunningHost, radicale: Radicale) -> None:
    url = await _connect(host, radicale)
    async with host.client(await _visitor(host, max_bookings=1)) as client:
        slot = await _first_slot(client)
        await _ok(client, "calendar_book", start=slot["start"])
        names = await _names(client)
        refused = await client.call_tool("calendar_book", {"start": _at(_monday(), 11)})

    # Only the tool named in the manifest's `quota.tools` leaves: the visitor can still see
    # and cancel what they booked.
    assert names == sorted(["calendar_list_slots", "calendar_cancel", "bookings_list"])
    assert (refused.is_error, _code(refused)) == (True, QUOTA_EXHAUSTED)
    assert len(_events(radicale, url)) == 1


@needs_bwrap
async def test_bad_starts_are_refused_with_the_policys_reason(host: RunningHost, radicale: Radicale) -> None:
    url = await _connect(host, radicale)
    async with host.client(await _visitor(host)) as client:
        refused = [await client.call_tool("calendar_book", {"start": start}) for start, _ in _bad_starts()]
        bad_days = await client.call_tool("calendar_list_slots", {"days": 30})
        bad_date = await client.call_tool("calendar_list_slots", {"date_from": "Monday"})

    for result, (_, reason) in zip(refused, _bad_starts(), strict=True):
        assert (result.is_error, _code(result)) == (True, INVALID_ARGUMENTS)
        assert reason in _message(result)
    assert (_code(bad_days), _code(bad_date)) == (INVALID_ARGUMENTS, INVALID_ARGUMENTS)
    assert _events(radicale, url) == []


@needs_bwrap
async def test_a_booking_whose_save_is_refused_leaves_no_event(
    tmp_path: Path, database_url: str, radicale: Radicale
) -> None:
    # The owner lowers a code's limit while the door still has the old one cached (as it may
    # for up to quota_limit_ttl_s): the call reaches the plugin, the event goes in, and the
    # host refuses the booking's save. The plugin must take the event out again.
    settings = host_settings(tmp_path, database_url, [], builtin_dir=BUILTINS, quota_limit_ttl_s=60)
    async with running_host(settings) as running:
        url = await _connect(running, radicale)
        access, owner = running.access, running.owner_id
        await access.put_role(owner, "visitors", [CAPABILITY])
        code, issued = await access.create_code(owner, "visitors", {CAPABILITY: {"max_bookings": 2}})
        session = await running.new_session({"code": code, "visitor": {"name": "Ada"}})
        async with running.client(session) as client, owner_client(running) as owner_door:
            first = await _ok(client, "calendar_book", start=_at(_monday(), 9))
            failed, _ = await call(
                owner_door,
                "config_set",
                capability=CAPABILITY,
                scope="code",
                scope_id=issued.id,
                values={"max_bookings": 1},
            )
            refused = await client.call_tool("calendar_book", {"start": _at(_monday(), 11)})
            listed = await _ok(client, "bookings_list")

    assert not failed
    assert (refused.is_error, _code(refused)) == (True, QUOTA_EXHAUSTED)
    assert listed == {"bookings": [first["booking"]]}
    assert _events(radicale, url) == [("Meeting with Ada", _at(_monday(), 9))]


@needs_bwrap
async def test_a_read_only_calendar_hides_booking_and_cancelling(host: RunningHost, radicale: Radicale) -> None:
    await _connect(host, radicale, user="reader")
    async with host.client(await _visitor(host)) as client:
        names = await _names(client)
        refused = await client.call_tool("calendar_book", {"start": _at(_monday(), 9)})

    assert names == ["bookings_list", "calendar_list_slots"]
    assert _code(refused) == "unknown"


@needs_bwrap
async def test_the_name_and_email_a_visitor_gives_stand_for_the_sessions(host: RunningHost, radicale: Radicale) -> None:
    url = await _connect(host, radicale)
    monday = _monday()
    given = {"name": "  Grace Hopper ", "email": "grace.h+cal@navy.example.org"}
    async with host.client(await _visitor(host, "Ada")) as client:
        named = await _ok(client, "calendar_book", start=_at(monday, 9), topic="Intro", **given)
        plain = await _ok(client, "calendar_book", start=_at(monday, 11))
    async with owner_client(host) as owner:
        invoke = {"capability": CAPABILITY, "tool": "calendar.bookings", "arguments": {}}
        _, bookings = await call(owner, "capability_invoke", **invoke)

    assert {b["id"]: b["visitor"] for b in bookings["bookings"]} == {
        named["booking"]["id"]: {"name": "Grace Hopper", "email": "grace.h+cal@navy.example.org"},
        plain["booking"]["id"]: {"name": "Ada", "email": "ada@example.org"},
    }
    assert _events(radicale, url) == [
        ("Meeting with Ada", _at(monday, 11)),
        ("Meeting with Grace Hopper: Intro", _at(monday, 9)),
    ]


@needs_bwrap
async def test_the_owner_lists_slots_and_bookings_with_notices_and_cancels(
    host: RunningHost, radicale: Radicale
) -> None:
    url = await _connect(host, radicale)
    async with host.client(await _visitor(host, "Ada", notify_owner=True)) as client:
        booked = await _ok(client, "calendar_book", start=_at(_monday(), 9), topic="Pricing")
    async with owner_client(host) as owner:
        _, listed = await call(owner, "capabilities_list")
        invoke = {"capability": CAPABILITY}
        _, slots = await call(owner, "capability_invoke", **invoke, tool="calendar.slots", arguments={"days": 1})
        _, bookings = await call(owner, "capability_invoke", **invoke, tool="calendar.bookings", arguments={})
        booking_id = booked["booking"]["id"]
        _, cancelled = await call(
            owner, "capability_invoke", **invoke, tool="calendar.cancel", arguments={"booking_id": booking_id}
        )
        _, after = await call(owner, "capability_invoke", **invoke, tool="calendar.bookings", arguments={})
        bad, refused = await call(
            owner, "capability_invoke", **invoke, tool="calendar.cancel", arguments={"booking_id": booking_id}
        )

    entry = next(c for c in listed["capabilities"] if c["id"] == CAPABILITY)
    assert "calendar.bookings" in str(entry)
    assert "slots" in slots and "policy" in slots
    [row] = bookings["bookings"]
    assert row | {"subject_id": "-", "session_id": "-", "booked_at": "-"} == {
        **booked["booking"],
        "visitor": {"name": "Ada", "email": "ada@example.org"},
        "subject_id": "-",
        "session_id": "-",
        "booked_at": "-",
    }
    assert [(n["kind"], n["booking_id"]) for n in bookings["notices"]] == [("booked", booking_id)]
    assert cancelled == {"ok": True, "cancelled": booking_id}
    assert after["bookings"] == []
    assert (bad, refused["code"]) == (True, NOT_FOUND)
    assert _events(radicale, url) == []


async def _post(running: RunningHost, session: dict[str, Any], path: str, body: Any) -> Any:
    url = f"{running.url}/v1/sessions/{session['session_id']}{path}"
    response = await running.http.post(url, json=body, headers={"Authorization": f"Bearer {session['token']}"})
    return response.json()


@needs_bwrap
async def test_the_claim_gate_holds_an_agent_to_its_bookings(host: RunningHost, radicale: Radicale) -> None:
    await _connect(host, radicale)
    session = await _visitor(host)
    async with host.client(session) as client:
        assert await _post(host, session, "/turns", {"message": "Book me in on Monday at nine"}) == {"turn": 1}
        await _ok(client, "calendar_book", start=_at(_monday(), 9))
        true_answer = await _post(host, session, "/turns/1/answer", {"text": "I've booked you in for Monday 09:00."})

        assert await _post(host, session, "/turns", {"message": "And Tuesday at nine?"}) == {"turn": 2}
        false_answer = await _post(host, session, "/turns/2/answer", {"text": "Done, you're booked for Tuesday."})

        assert await _post(host, session, "/turns", {"message": "Monday at nine for my colleague?"}) == {"turn": 3}
        taken = await client.call_tool("calendar_book", {"start": _at(_monday(), 9)})
        refusal = await _post(
            host, session, "/turns/3/answer", {"text": "I could not book it; that slot is already booked."}
        )

    assert true_answer == {"ok": True}
    assert false_answer == {
        "ok": False,
        "violations": [{"capability": CAPABILITY, "tool": "calendar_book", "phrase": "you're booked"}],
    }
    assert _code(taken) == SLOT_TAKEN
    assert refusal == {"ok": True}
