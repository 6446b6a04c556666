"""caldav: the `calendar` connector for one calendar collection on a CalDAV server (RFC 4791).

The host calls each verb as a tool and puts the owner's settings in the call's
`_meta["mcp-host/connection"]`: `url` (the calendar collection, http:// or https://),
`username`, `password`. They serve that call only; nothing is stored.

    freebusy     {start, end}                  -> {busy: [{start, end}]}
    list_events  {start, end}                  -> {events: [{uid, summary, start, end}], truncated}
    insert_event {summary, start, end, description?, attendees?} -> {uid}
    delete_event {uid}                         -> {deleted}
    can_perform  {action}                      -> {can}
    connected    {}                            -> {ok, detail}

Inputs are ISO 8601 date-times with a UTC offset; outputs are in UTC (`+00:00`), all-day
events as dates (`2030-01-01`), floating times read as UTC. A refusal is an `isError` result
`{code, message}`: `invalid_arguments`, `unconfigured` (no or unusable settings, or the URL
names no calendar), `denied` (the server refused the credentials or the permission),
`unavailable` (unreachable, no answer in time, an answer that cannot be used, or the host's
egress proxy refused the server: `could not reach HOST:PORT: the host's egress proxy refused
it (why)`). Messages never carry the password or a library's exception text; logs name the
exception class only.

Below: the `caldav` library's async client (niquests), one client per call. Sandboxed, the
connector's only way out is the host's egress proxy, which HTTP_PROXY and HTTPS_PROXY name:
niquests reads them (trust_env) and sends plain http:// requests to it in absolute form and
https:// ones through a CONNECT tunnel (TLS end to end, checked for the server's name).
Unsandboxed, without those variables, it connects directly.
"""

from __future__ import annotations

import logging
import re
import traceback
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
import icalendar
from caldav import aio
from caldav.elements import dav
from caldav.lib import error as dav_error
from mcp.server.mcpserver import Context
from niquests.auth import AsyncHTTPDigestAuth, HTTPBasicAuth
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from mcp_host_kit import (
    Denied,
    EgressRefused,
    HostOpError,
    InvalidArguments,
    Kit,
    PluginServer,
    Unavailable,
    Unconfigured,
    open_tunnel,
    tool_errors,
)
from mcp_host_kit.addresses import is_email
from mcp_host_kit.egress import proxy_address

logger = logging.getLogger("caldav_connector")

CALL_TIMEOUT_S = 20.0  # below the host's call timeout (30 s), so the caller hears why
HTTP_TIMEOUT_S = 10
PROBE_TIMEOUT_S = 5.0  # after a failed call: CALL_TIMEOUT_S + this stays below the host's
MAX_RANGE = timedelta(days=366)
MAX_EVENTS = 500
MAX_SUMMARY_CHARS = 500
MAX_DESCRIPTION_CHARS = 8000
MAX_ATTENDEES = 50

_CALDAV = "{urn:ietf:params:xml:ns:caldav}"
# RFC 3744 privileges (Clark notation) any one of which allows the action on the calendar
# collection. Creating an event binds a new resource in the collection, deleting one unbinds
# it; DAV:write aggregates both and DAV:all everything. Radicale reports its writable
# calendars as all + write + write-content and read-only ones as read + read-free-busy;
# write-content is accepted too, as the one write privilege some servers list on a calendar.
PRIVILEGES_FOR: dict[str, frozenset[str]] = {
    "freebusy.read": frozenset({"{DAV:}read", f"{_CALDAV}read-free-busy", "{DAV:}all"}),
    "events.read": frozenset({"{DAV:}read", "{DAV:}all"}),
    "events.insert": frozenset({"{DAV:}bind", "{DAV:}write", "{DAV:}write-content", "{DAV:}all"}),
    "events.delete": frozenset({"{DAV:}unbind", "{DAV:}write", "{DAV:}write-content", "{DAV:}all"}),
}

_EXAMPLE = "2030-01-01T09:00:00+01:00"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BUT_NEWLINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


mcp = PluginServer("caldav", version="1", log_level="WARNING")
kit = Kit(__file__)


# ---------------------------------------------------------------------------------------------
# Settings and arguments


class Settings(BaseModel):
    """The owner's connection settings; `url` names one calendar collection."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    url: str = Field(max_length=2048)
    username: str | None = Field(default=None, max_length=256)
    password: SecretStr | None = Field(default=None, max_length=1024)

    @field_validator("username", "password", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # The host may hand every declared setting over, the unset ones as "".
        return None if value == "" else value

    @field_validator("url")
    @classmethod
    def _calendar_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or _CONTROL.search(value) or " " in value:
            raise ValueError("must be an http:// or https:// URL")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not carry credentials (use username and password)")
        return value if value.endswith("/") else f"{value}/"

    @property
    def server(self) -> str:
        """The server's host (and port) for messages to the owner: no path, no credentials."""
        return urlsplit(self.url).netloc


def _settings(ctx: Context) -> Settings:
    connection = kit.connection(ctx)
    try:
        return Settings.model_validate(connection.settings)
    except ValidationError as exc:
        # Field names only: the values may be secrets.
        fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        raise Unconfigured(f"the calendar connection's settings are unusable: {', '.join(fields)}") from None


def _instant(name: str, value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value) if len(value) <= 64 else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise InvalidArguments(f"{name} must be an ISO 8601 date-time with a UTC offset, e.g. {_EXAMPLE}")
    return parsed.astimezone(UTC)


def _range(start: str, end: str) -> tuple[datetime, datetime]:
    first, last = _instant("start", start), _instant("end", end)
    if last <= first:
        raise InvalidArguments("end must be after start")
    if last - first > MAX_RANGE:
        raise InvalidArguments(f"start and end may be at most {MAX_RANGE.days} days apart")
    return first, last


def _summary(value: str) -> str:
    value = value.strip()
    if not value or len(value) > MAX_SUMMARY_CHARS or _CONTROL.search(value):
        raise InvalidArguments(f"summary must be 1-{MAX_SUMMARY_CHARS} characters on one line")
    return value


def _description(value: str | None) -> str | None:
    if value is None:
        return None
    if len(value) > MAX_DESCRIPTION_CHARS or _CONTROL_BUT_NEWLINES.search(value):
        raise InvalidArguments(f"description must be at most {MAX_DESCRIPTION_CHARS} characters of text")
    return value


def _attendees(values: list[str] | None) -> list[str]:
    values = values or []
    if len(values) > MAX_ATTENDEES:
        raise InvalidArguments(f"at most {MAX_ATTENDEES} attendees")
    for index, value in enumerate(values):
        if not is_email(value):
            raise InvalidArguments(f"attendees[{index}] is not an email address")
    return list(dict.fromkeys(value.lower() for value in values))


def _uid(value: str) -> str:
    if not value or len(value) > 255 or _CONTROL.search(value):
        raise InvalidArguments("uid must be 1-255 characters on one line")
    return value


# ---------------------------------------------------------------------------------------------
# The server and its failures


# The auth scheme each server took (basic or digest), by host: later calls send credentials
# at once instead of first probing without them (a round trip, and on Radicale a deliberate
# delay of about a second). Schemes only, never credentials; a 401 forgets the server's.
_AUTH_SCHEMES: dict[str, str] = {}


@asynccontextmanager
async def _calendar(settings: Settings, action: str) -> AsyncIterator[Any]:
    """The calendar collection of `settings`, with every failure of `action` (words for the
    owner: "list events") turned into a HostOpError and the whole bounded in time; a failure
    the host's egress proxy caused is `EgressRefused`, naming the server and the reason."""
    try:
        async with _collection(settings, action) as calendar:
            yield calendar
    except (Denied, Unavailable) as failure:
        refusal = await _egress_refusal(settings)
        if refusal is not None:
            raise refusal from failure
        raise


async def _egress_refusal(settings: Settings) -> EgressRefused | None:
    """The egress proxy's refusal of the server, when a proxy is set and refuses it.

    Asked after a failure with a CONNECT of its own: through the proxy (niquests reads its
    variables), its 403 to a plain http:// request looks like the server's own and its
    refusal of an https:// tunnel like any failure to connect."""
    parts = urlsplit(settings.url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        if proxy_address(host) is None:
            return None
        (await open_tunnel(host, port, timeout_s=PROBE_TIMEOUT_S)).close()
    except EgressRefused as refusal:
        return refusal
    except (HostOpError, OSError, ValueError) as exc:  # the call's own failure stands
        _log("ask the egress proxy", exc)
    return None


@asynccontextmanager
async def _collection(settings: Settings, action: str) -> AsyncIterator[Any]:
    with _failures(action, settings):
        with anyio.fail_after(CALL_TIMEOUT_S):
            password = settings.password.get_secret_value() if settings.password is not None else None
            async with aio.AsyncDAVClient(
                url=settings.url,
                username=settings.username,
                password=password,
                auth_type=_AUTH_SCHEMES.get(settings.server) if settings.username is not None else None,
                timeout=HTTP_TIMEOUT_S,
                enable_rfc6764=False,
            ) as client:
                try:
                    # caldav 3.6 annotates `client` as the sync DAVClient, yet its objects are dual-mode
                    # and take the async client too (caldav.aio re-exports this very class for it).
                    yield aio.Calendar(client=client, url=settings.url)  # type: ignore[arg-type]
                except dav_error.AuthorizationError as exc:
                    if exc.status == 401:
                        _AUTH_SCHEMES.pop(settings.server, None)
                    raise
                scheme = _scheme_of(client.auth)
                if scheme is not None:
                    _AUTH_SCHEMES[settings.server] = scheme


def _scheme_of(auth: object) -> str | None:
    if isinstance(auth, AsyncHTTPDigestAuth):
        return "digest"
    if isinstance(auth, HTTPBasicAuth):
        return "basic"
    return None


@contextmanager
def _failures(action: str, settings: Settings) -> Iterator[None]:
    try:
        yield
    except HostOpError:
        raise
    except dav_error.AuthorizationError as exc:
        if exc.status == 403:
            raise Denied(f"the calendar server does not let this account {action}") from None
        raise Denied("the calendar server refused the username or password") from None
    except dav_error.NotFoundError:
        raise Unconfigured("the calendar URL names no calendar on the server") from None
    except dav_error.DAVError as exc:
        _log(action, exc)
        status = f" (HTTP {exc.status})" if isinstance(exc.status, int) else ""
        raise Unavailable(f"the calendar server could not {action}{status}") from None
    except TimeoutError:
        raise Unavailable(f"the calendar server did not answer within {CALL_TIMEOUT_S:g} s") from None
    except OSError as exc:  # niquests' connection and TLS errors are OSErrors too
        _log(action, exc)
        raise Unavailable(f"could not reach the calendar server at {settings.server}") from None
    except Exception as exc:  # a malformed answer (XML, iCalendar) or a library bug
        _log(action, exc, trace=True)
        raise Unavailable(f"the calendar server's answer to {action} could not be used") from None


def _log(action: str, exc: BaseException, *, trace: bool = False) -> None:
    # The class and where it was raised, never the text: it may quote the server or a secret.
    frames = "".join(traceback.format_tb(exc.__traceback__)) if trace else ""
    logger.warning("%s failed: %s.%s\n%s", action, type(exc).__module__, type(exc).__qualname__, frames)


# ---------------------------------------------------------------------------------------------
# iCalendar


def _shown(value: date | datetime) -> str:
    if isinstance(value, datetime):
        return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    return value.isoformat()


def _as_instant(value: date | datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return datetime(value.year, value.month, value.day, tzinfo=UTC)


def _span(component: Any) -> tuple[date | datetime, date | datetime]:
    start = component.decoded("dtstart")
    if "dtend" in component:
        return start, component.decoded("dtend")
    if "duration" in component:
        return start, start + component.decoded("duration")
    # RFC 5545 3.6.1: without DTEND or DURATION a date lasts one day, a date-time no time.
    return start, (start + timedelta(days=1) if not isinstance(start, datetime) else start)


def _event_rows(events: list[Any]) -> list[tuple[datetime, dict[str, Any]]]:
    """(start instant, row) of each event; one the server keeps malformed is left out, logged."""
    rows = []
    for event in events:
        try:
            component = event.icalendar_component
            start, end = _span(component)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            _log("read an event", exc)
            continue
        row = {
            "uid": str(component.get("uid", "")),
            "summary": str(component.get("summary", "")),
            "start": _shown(start),
            "end": _shown(end),
        }
        rows.append((_as_instant(start), row))
    return rows


def _instants(component: Any) -> tuple[datetime, datetime]:
    start, end = _span(component)
    return _as_instant(start), _as_instant(end)


def _is_busy(component: Any) -> bool:
    transparent = str(component.get("transp", "OPAQUE")).upper() == "TRANSPARENT"
    return not transparent and str(component.get("status", "")).upper() != "CANCELLED"


def _merged(periods: list[tuple[datetime, datetime]], start: datetime, end: datetime) -> list[dict[str, str]]:
    """`periods` clipped to [start, end), sorted, overlapping or touching ones joined."""
    joined: list[tuple[datetime, datetime]] = []
    for first, last in sorted((max(a, start), min(b, end)) for a, b in periods):
        if last <= first:
            continue
        if joined and first <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(joined[-1][1], last))
        else:
            joined.append((first, last))
    return [{"start": _shown(a), "end": _shown(b)} for a, b in joined]


def _report_periods(freebusy: Any) -> list[tuple[datetime, datetime]]:
    periods: list[Any] = []
    for component in freebusy.icalendar_instance.walk("VFREEBUSY"):
        values = component.get("freebusy", [])
        periods.extend(values if isinstance(values, list) else [values])
    # FBTYPE defaults to BUSY (RFC 5545 3.2.9); BUSY-TENTATIVE and BUSY-UNAVAILABLE count too.
    return [
        (_as_instant(p.start), _as_instant(p.end))
        for p in periods
        if str(p.params.get("FBTYPE", "BUSY")).upper() != "FREE"
    ]


def _new_event(
    uid: str, summary: str, start: datetime, end: datetime, description: str | None, attendees: list[str]
) -> str:
    calendar = icalendar.Calendar()
    calendar.add("prodid", "-//mcp-host//caldav connector//EN")
    calendar.add("version", "2.0")
    event = icalendar.Event()
    event.add("uid", uid)
    event.add("dtstamp", datetime.now(UTC))
    event.add("dtstart", start)
    event.add("dtend", end)
    event.add("summary", summary)
    if description:
        event.add("description", description)
    for address in attendees:
        parameters = {"ROLE": "REQ-PARTICIPANT", "PARTSTAT": "NEEDS-ACTION", "RSVP": "TRUE"}
        event.add("attendee", icalendar.vCalAddress(f"mailto:{address}"), parameters=parameters)
    calendar.add_component(event)
    ical: bytes = calendar.to_ical()  # icalendar leaves to_ical unannotated
    return ical.decode()


async def _privileges(calendar: Any) -> tuple[list[str], set[str] | None, str]:
    """The collection's resource types, the caller's privileges on it (None when the server
    does not say) and its display name."""
    props = await calendar.get_properties([dav.ResourceType(), dav.CurrentUserPrivilegeSet(), dav.DisplayName()])
    privileges = props.get(dav.CurrentUserPrivilegeSet.tag)
    return (
        list(props.get(dav.ResourceType.tag) or []),
        set(privileges) if isinstance(privileges, list) else None,
        str(props.get(dav.DisplayName.tag) or ""),
    )


# ---------------------------------------------------------------------------------------------
# Verbs

Instant = Annotated[str, Field(description=f"ISO 8601 date-time with a UTC offset, e.g. {_EXAMPLE}")]


@mcp.tool()
@tool_errors
async def freebusy(start: Instant, end: Instant, ctx: Context) -> dict[str, Any]:
    """The busy periods of the calendar between start and end, in UTC, joined and sorted."""
    first, last = _range(start, end)
    settings = _settings(ctx)
    async with _calendar(settings, "read free/busy") as calendar:
        try:
            periods = _report_periods(await calendar.freebusy_request(first, last))
        except dav_error.DAVError as exc:
            if isinstance(exc, dav_error.AuthorizationError):
                raise
            # No free-busy REPORT here: derive it from the events themselves.
            _log("free-busy report", exc)
            events = await calendar.search(start=first, end=last, event=True, expand=True)
            components = [event.icalendar_component for event in events]
            periods = [_instants(c) for c in components if _is_busy(c)]
    return {"busy": _merged(periods, first, last)}


@mcp.tool()
@tool_errors
async def list_events(start: Instant, end: Instant, ctx: Context) -> dict[str, Any]:
    """The events between start and end (recurrences expanded), sorted by start; at most
    500, with `truncated` true when there were more."""
    first, last = _range(start, end)
    settings = _settings(ctx)
    async with _calendar(settings, "list events") as calendar:
        rows = _event_rows(await calendar.search(start=first, end=last, event=True, expand=True))
    rows.sort(key=lambda row: (row[0], row[1]["uid"]))
    return {"events": [row for _, row in rows[:MAX_EVENTS]], "truncated": len(rows) > MAX_EVENTS}


@mcp.tool()
@tool_errors
async def insert_event(
    summary: str,
    start: Instant,
    end: Instant,
    ctx: Context,
    description: str | None = None,
    attendees: Annotated[list[str] | None, Field(description="email addresses")] = None,
) -> dict[str, Any]:
    """Add an event; returns its new uid. Attendees are listed on the event (the server may
    or may not invite them)."""
    first, last = _range(start, end)
    uid = str(uuid.uuid4())
    text = _new_event(uid, _summary(summary), first, last, _description(description), _attendees(attendees))
    settings = _settings(ctx)
    async with _calendar(settings, "add events") as calendar:
        await calendar.add_event(ical=text)
    return {"uid": uid}


@mcp.tool()
@tool_errors
async def delete_event(uid: str, ctx: Context) -> dict[str, Any]:
    """Delete the event with this uid; `deleted` is false when there is none."""
    uid = _uid(uid)
    settings = _settings(ctx)
    async with _calendar(settings, "delete events") as calendar:
        try:
            event = await calendar.get_event_by_uid(uid)
            await event.delete()
        except dav_error.NotFoundError:
            return {"deleted": False}
    return {"deleted": True}


@mcp.tool()
@tool_errors
async def can_perform(action: str, ctx: Context) -> dict[str, Any]:
    """Whether this account may do `action` on the calendar: freebusy.read, events.read,
    events.insert or events.delete (anything else: false). Read from the server's
    current-user-privilege-set (RFC 3744); a server that does not report it gets false."""
    wanted = PRIVILEGES_FOR.get(action)
    settings = _settings(ctx)
    async with _calendar(settings, "read its permissions") as calendar:
        _, privileges, _ = await _privileges(calendar)
    return {"can": bool(wanted and privileges and wanted & privileges)}


@mcp.tool()
@tool_errors
async def connected(ctx: Context) -> dict[str, Any]:
    """Whether the settings reach a calendar: `ok`, and a `detail` to show the owner."""
    settings = _settings(ctx)
    try:
        async with _calendar(settings, "read the calendar") as calendar:
            types, privileges, name = await _privileges(calendar)
    except HostOpError as refusal:
        return {"ok": False, "detail": refusal.message}
    if f"{_CALDAV}calendar" not in types:
        return {"ok": False, "detail": f"the URL names a collection on {settings.server} that is not a calendar"}
    if privileges is None:
        access = "the server does not report this account's permissions"
    else:
        access = "read-write" if PRIVILEGES_FOR["events.insert"] & privileges else "read-only"
    shown = _CONTROL.sub("", name)[:100] or settings.url  # the server's words, shown to the owner
    return {"ok": True, "detail": f"connected to calendar {shown!r} on {settings.server} ({access})"}


if __name__ == "__main__":
    mcp.run()
