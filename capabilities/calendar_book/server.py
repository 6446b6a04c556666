"""calendar.book: visitors find free slots in the owner's calendar and book, list and cancel
meetings there, within the owner's booking policy.

    calendar_list_slots {date_from?, days?}              -> {policy, slots: [{start, end}]}
    calendar_book       {start, topic?, name?, email?}   -> {ok, booking: {id, start, end, topic}}
    calendar_cancel     {booking_id}                     -> {ok, cancelled}
    bookings_list       {}                               -> {bookings: [...]} (+ notices for the owner)

A visitor sees and cancels only the bookings of their own credential (the session's subject:
an access code or API key; a public session: that session). In owner context (the owner
door's `calendar.slots`, `calendar.bookings`, `calendar.cancel`) every booking is listed and
any can be cancelled. Refusals are `{code, message}`: `invalid_arguments` (the policy's reason
included), `slot_taken`, `not_found`, and what the calendar connector or the host answered.

The app: `calendar_list_slots` and `calendar_book` name the slot picker
(`ui://calendar.book/slot-picker.html`, the file `slot_picker.html`), an MCP App a visitor's
client renders: it lists the free slots, takes the visitor's name, email and topic, and books
through the client with these same tools (so every gate of a visitor's call applies to it).
`name` and `email` are the visitor's own as they typed them (one line each, the email's syntax
checked): given, they stand for the session's visitor in the event and the booking.

Booking one slot: claim `slot:<UTC start>` in the store (one winner; a loser is `slot_taken`),
check the calendar is still free around it, add the event, save the booking — and when the
save fails (the host refused it over the quota, or anything else), delete the event again —
then give the claim back. A later booker of the slot sees the event as busy.

`notify_owner` (role config): no mail is sent — this capability requires only `calendar`, and
a capability reaches only the categories it requires. Instead each booking and cancellation of
such a role's sessions leaves a notice that `calendar.bookings` shows the owner.

Above: the host, which forwards visitors' and the owner's calls. Below: `booking_policy` (the
slots the policy allows) and the host ops through the plugin kit, the calendar through
`connector.invoke`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
from booking_policy import EXAMPLE, MAX_LIST_DAYS, Policy, Slot, parse_day, policy_from
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_host_kit import Host, HostOpError, InvalidArguments, Kit, PluginServer, Record, SessionInfo, tool_errors

logger = logging.getLogger("calendar_book")

mcp = PluginServer("calendar.book", version="1", log_level="WARNING")
kit = Kit(__file__)
SLOT_PICKER = mcp.app(
    "ui://calendar.book/slot-picker.html", Path(__file__).with_name("slot_picker.html"), name="slot-picker"
)

BOOKINGS = "bookings"  # the quota's collection: one row per booking held
NOTICES = "notices"
SLOTS = "slots"  # claims, keyed by slot start
CLAIM_TTL_S = 120  # longer than the host's call timeout: the claim outlives any one booking call
CLEANUP_TIMEOUT_S = 15.0
MAX_SLOTS = 100
MAX_ROWS = 500
MAX_TOPIC_CHARS = 200
MAX_NAME_CHARS = 100
MAX_EMAIL_CHARS = 254
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# One address as a person types it. No space, quote, bracket, comma or colon: it goes into the
# event's text as `Name <email>`.
_PART = r"[^\s@<>\"',;:()\[\]\\.]+"
_EMAIL = re.compile(rf"{_PART}(\.{_PART})*@{_PART}(\.{_PART})+")

SLOT_TAKEN = "slot_taken"
NOT_FOUND = "not_found"


def _now() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------------------------------------
# The calendar, through the host


async def _calendar(host: Host, verb: str, args: dict[str, Any]) -> dict[str, Any]:
    return await host.call("connector.invoke", {"category": "calendar", "verb": verb, "args": args})


async def _busy(host: Host, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    answer = await _calendar(host, "freebusy", {"start": start.isoformat(), "end": end.isoformat()})
    periods = answer.get("busy")
    if not isinstance(periods, list):
        raise HostOpError("unavailable", "the calendar's free/busy answer could not be used")
    try:
        return [(_aware(p["start"]), _aware(p["end"])) for p in periods]
    except (KeyError, TypeError, ValueError):
        raise HostOpError("unavailable", "the calendar's free/busy answer could not be used") from None


def _aware(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)  # floating: read as UTC


async def _remove_event(host: Host, uid: str) -> None:
    """Delete the event `uid` again, even while the call is being cancelled; a failure is logged."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
        try:
            await _calendar(host, "delete_event", {"uid": uid})
            return
        except Exception as exc:  # logged by class only: the text may quote the service
            logger.error("could not delete event %s after a failed booking: %s", uid, type(exc).__name__)
            return
    logger.error("could not delete event %s after a failed booking: no answer in time", uid)


async def _release(host: Host, key: str) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
        try:
            await host.store.release(SLOTS, key)
        except Exception as exc:  # the claim expires on its own after CLAIM_TTL_S
            logger.warning("could not release %s: %s", key, type(exc).__name__)


# ---------------------------------------------------------------------------------------------
# Policy, ownership, rows


async def _policy(host: Host, config: dict[str, Any]) -> Policy:
    return policy_from(config, await host.owner.meta("timezone"))


def _own(session: SessionInfo) -> dict[str, Any] | None:
    """The store filter for the caller's own bookings; None (all) in owner context."""
    if session.mode == "owner":
        return None
    if session.subject is not None:
        return {"subject_id": session.subject.id}
    return {"subject_id": None, "session_id": session.session_id}


def _line(value: str | None, limit: int) -> str:
    return _CONTROL.sub(" ", value or "").strip()[:limit]


def _topic(value: str) -> str:
    if len(value) > MAX_TOPIC_CHARS:
        raise InvalidArguments(f"topic must be at most {MAX_TOPIC_CHARS} characters")
    return _line(value, MAX_TOPIC_CHARS)


@dataclass(frozen=True)
class Booker:
    """Who books: the name and email the visitor typed, else the session's visitor's."""

    name: str
    email: str

    @classmethod
    def of(cls, session: SessionInfo, name: str, email: str) -> Booker:
        """Raises InvalidArguments when `name` or `email` is not one line, too long, or (the
        email) not an address."""
        if len(name) > MAX_NAME_CHARS or _CONTROL.search(name):
            raise InvalidArguments(f"name must be one line of at most {MAX_NAME_CHARS} characters")
        email = email.strip()
        if email and (len(email) > MAX_EMAIL_CHARS or not _EMAIL.fullmatch(email)):
            raise InvalidArguments("email must be an address such as ada@example.org")
        visitor = session.visitor
        return cls(
            name=name.strip() or _line(visitor.name if visitor else None, MAX_NAME_CHARS),
            email=email or _line(visitor.email if visitor else None, MAX_EMAIL_CHARS),
        )

    def wire(self) -> dict[str, str | None] | None:
        if not self.name and not self.email:
            return None
        return {"name": self.name or None, "email": self.email or None}


def _event(booker: Booker, slot: Slot, topic: str) -> dict[str, Any]:
    name = booker.name or "a visitor"
    lines = [f"Booked by {name}" + (f" <{booker.email}>" if booker.email else "") + " through mcp-host."]
    if topic:
        lines.append(f"Topic: {topic}")
    return {
        "summary": f"Meeting with {name}" + (f": {topic}" if topic else ""),
        "start": slot.start.astimezone(UTC).isoformat(),
        "end": slot.end.astimezone(UTC).isoformat(),
        "description": "\n".join(lines),
    }


def _booking_doc(session: SessionInfo, booker: Booker, slot: Slot, topic: str, uid: str) -> dict[str, Any]:
    return {
        "start": slot.start.astimezone(UTC).isoformat(),
        "end": slot.end.astimezone(UTC).isoformat(),
        "topic": topic,
        "event_uid": uid,
        "session_id": session.session_id,
        "visitor": booker.wire(),
        # subject_id: stamped by the host (the quota counts by it)
    }


def _row(record: Record, policy: Policy, *, owner: bool) -> dict[str, Any]:
    doc = record.doc
    row = {
        "id": record.id,
        "start": _shown(doc.get("start"), policy),
        "end": _shown(doc.get("end"), policy),
        "topic": doc.get("topic", ""),
    }
    if owner:
        row |= {
            "visitor": doc.get("visitor"),
            "subject_id": doc.get("subject_id"),
            "session_id": doc.get("session_id"),
            "booked_at": record.created_at.isoformat(),
        }
    return row


def _shown(value: object, policy: Policy) -> object:
    try:
        return datetime.fromisoformat(value).astimezone(policy.zone).isoformat() if isinstance(value, str) else value
    except ValueError:
        return value


async def _notify(host: Host, config: dict[str, Any], kind: str, record_id: str, doc: dict[str, Any]) -> None:
    """A notice for the owner when the session's role asks for one; a failure is logged only
    (the booking or cancellation itself has happened)."""
    if config.get("notify_owner") is not True:
        return
    notice = {"kind": kind, "booking_id": record_id, "start": doc.get("start"), "visitor": doc.get("visitor")}
    try:
        await host.store.insert(NOTICES, {**notice, "at": _now().isoformat()})
    except HostOpError as exc:
        logger.warning("could not leave a %s notice: %s", kind, exc.code)


# ---------------------------------------------------------------------------------------------
# Tools

Start = Annotated[str, Field(description=f"a slot's start as calendar_list_slots gave it, e.g. {EXAMPLE}")]


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True), meta=SLOT_PICKER)
@tool_errors
async def calendar_list_slots(
    ctx: Context,
    date_from: Annotated[str | None, Field(description="first day, YYYY-MM-DD (default: today)")] = None,
    days: Annotated[int, Field(description=f"how many days, 1-{MAX_LIST_DAYS}")] = 7,
) -> dict[str, Any]:
    """The owner's free meeting slots, soonest first (at most 100), with the booking policy
    they follow (timezone, meeting length, working hours and days, notice)."""
    if not 1 <= days <= MAX_LIST_DAYS:
        raise InvalidArguments(f"days must be 1-{MAX_LIST_DAYS}")
    host = kit.host(ctx)
    policy = await _policy(host, (await host.config.get()).config)
    now = _now()
    first = parse_day(date_from, policy, now)
    busy = await _busy(host, *policy.window(first, days))
    slots = policy.free_slots(first, days, busy, now)
    return {"policy": policy.wire(), "slots": [s.wire() for s in slots[:MAX_SLOTS]]}


@mcp.tool(meta=SLOT_PICKER)
@tool_errors
async def calendar_book(
    start: Start,
    ctx: Context,
    topic: Annotated[str, Field(description="what the meeting is about (one line)")] = "",
    name: Annotated[str, Field(description="the visitor's name, if they gave it (one line)")] = "",
    email: Annotated[str, Field(description="the visitor's email address, if they gave it")] = "",
) -> dict[str, Any]:
    """Book the free slot starting at `start` in the owner's calendar, for the visitor named
    (else the session's visitor). Refusals: slot_taken (someone else has it),
    invalid_arguments (with the policy's reason, or what is wrong with name or email),
    quota_exhausted."""
    host = kit.host(ctx)
    session = host.session
    booker = Booker.of(session, name, email)
    values = await host.config.get()
    policy = await _policy(host, values.config)
    slot = policy.requested(start, _now())
    topic = _topic(topic)
    key = f"slot:{slot.start.astimezone(UTC).isoformat()}"
    if not await host.store.claim(SLOTS, key, CLAIM_TTL_S):
        raise HostOpError(SLOT_TAKEN, "that slot is being booked by someone else; pick another")
    try:
        if not policy.is_free(slot, await _busy(host, *policy.around(slot))):
            raise HostOpError(SLOT_TAKEN, "that slot is no longer free; pick another")
        uid = str((await _calendar(host, "insert_event", _event(booker, slot, topic)))["uid"])
        doc = _booking_doc(session, booker, slot, topic, uid)
        try:
            booking_id = await host.store.insert(BOOKINGS, doc)
        except BaseException:
            await _remove_event(host, uid)
            raise
    finally:
        await _release(host, key)
    await _notify(host, values.role_config, "booked", booking_id, doc)
    booking = {"id": booking_id, "start": slot.start.isoformat(), "end": slot.end.isoformat(), "topic": topic}
    return {"ok": True, "booking": booking}


@mcp.tool()
@tool_errors
async def calendar_cancel(
    booking_id: Annotated[str, Field(description="the id calendar_book or bookings_list gave")], ctx: Context
) -> dict[str, Any]:
    """Cancel one of your bookings (the owner: any booking); its calendar event is deleted."""
    host = kit.host(ctx)
    session = host.session
    mine = _own(session)
    record = next((r for r in await host.store.query(BOOKINGS, mine, MAX_ROWS) if r.id == booking_id), None)
    if record is None:
        raise HostOpError(NOT_FOUND, "no such booking")
    if mine is not None and datetime.fromisoformat(record.doc["start"]) <= _now():
        raise InvalidArguments("that meeting has already begun; it can no longer be cancelled")
    await _calendar(host, "delete_event", {"uid": record.doc["event_uid"]})
    await host.store.delete(BOOKINGS, id=record.id)
    if mine is not None:
        await _notify(host, (await host.config.get()).role_config, "cancelled", record.id, record.doc)
    return {"ok": True, "cancelled": record.id}


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
@tool_errors
async def bookings_list(ctx: Context) -> dict[str, Any]:
    """Your bookings, soonest first (the owner: every booking, and the notices left for them)."""
    host = kit.host(ctx)
    mine = _own(host.session)
    policy = await _policy(host, (await host.config.get()).config)
    records = sorted(await host.store.query(BOOKINGS, mine, MAX_ROWS), key=lambda r: str(r.doc.get("start")))
    answer: dict[str, Any] = {"bookings": [_row(r, policy, owner=mine is None) for r in records]}
    if mine is None:
        notices = await host.store.query(NOTICES, None, MAX_ROWS)
        answer["notices"] = [{**n.doc, "id": n.id} for n in notices]
    return answer


if __name__ == "__main__":
    mcp.run()
