"""The owner's booking policy, and the slots it allows: pure functions, no I/O.

Above: `server` (reads the config and the calendar's busy periods, then asks this module
which slots are free and whether a requested start is one). Below: the standard library.

A *slot* starts on the grid of its day — the working day's start plus a whole number of slot
lengths — on a working weekday, ends by the working day's end, starts no sooner than the
minimum notice and no later than the horizon, and is *free* when no busy period of the
calendar comes within the buffer of it. Times are in the policy's timezone (the `timezone`
config key, else the owner's, else UTC); instants leave this module in UTC or with the
policy zone's offset, never naive.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from mcp_host_kit import InvalidArguments

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_LIST_DAYS = 14
EXAMPLE = "2030-01-08T09:00:00+01:00"

Busy = tuple[datetime, datetime]


@dataclass(frozen=True)
class Slot:
    start: datetime
    end: datetime

    def wire(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat()}


@dataclass(frozen=True)
class Policy:
    """When visitors may book: a slot length, working hours and days, notice, buffer and horizon."""

    zone: ZoneInfo
    slot: timedelta
    day_start: time
    day_end: time
    weekdays: frozenset[int]  # Monday is 0
    min_lead: timedelta
    buffer: timedelta
    horizon: timedelta

    @property
    def timezone(self) -> str:
        return self.zone.key

    def day_slots(self, day: date) -> Iterator[Slot]:
        """Every slot of `day` on the grid, free or not (none on a day off)."""
        if day.weekday() not in self.weekdays:
            return
        start = datetime.combine(day, self.day_start, self.zone)
        last = datetime.combine(day, self.day_end, self.zone)
        # Wall-clock arithmetic, then a round trip through UTC: a slot on a DST change day
        # keeps its wall-clock start and its real length.
        while (end := _wall(start + self.slot)) <= last:
            yield Slot(start, end)
            start = _wall(start + self.slot)

    def bookable(self, slot: Slot, now: datetime) -> bool:
        """Whether `slot` is within the notice and the horizon, counted from `now`."""
        return now + self.min_lead <= slot.start <= now + self.horizon

    def free_slots(self, first: date, days: int, busy: Sequence[Busy], now: datetime) -> list[Slot]:
        """The bookable, free slots of `days` days from `first`, in order."""
        slots = (s for offset in range(days) for s in self.day_slots(first + timedelta(days=offset)))
        return [s for s in slots if self.bookable(s, now) and self.is_free(s, busy)]

    def window(self, first: date, days: int) -> tuple[datetime, datetime]:
        """The span to read busy periods for: the days from `first`, widened by the buffer."""
        start = datetime.combine(first, time(0), self.zone) - self.buffer
        end = datetime.combine(first + timedelta(days=days), time(0), self.zone) + self.buffer
        return start.astimezone(UTC), end.astimezone(UTC)

    def around(self, slot: Slot) -> tuple[datetime, datetime]:
        """The span that must be free for `slot`: the slot widened by the buffer, in UTC."""
        return (slot.start - self.buffer).astimezone(UTC), (slot.end + self.buffer).astimezone(UTC)

    def is_free(self, slot: Slot, busy: Sequence[Busy]) -> bool:
        first, last = self.around(slot)
        return all(end <= first or start >= last for start, end in busy)

    def requested(self, value: str, now: datetime) -> Slot:
        """The slot starting at `value` (ISO 8601 with an offset), if the policy allows it.

        Raises InvalidArguments with the reason otherwise (malformed, off the grid, a day off,
        outside working hours, too soon, too far ahead).
        """
        start = parse_instant("start", value).astimezone(self.zone)
        day = start.date()
        if day.weekday() not in self.weekdays:
            raise InvalidArguments(f"{WEEKDAYS[day.weekday()]} is not a working day ({self._days()})")
        slot = next((s for s in self.day_slots(day) if s.start == start), None)
        if slot is None:
            raise InvalidArguments(
                f"{start.strftime('%H:%M')} is not the start of a slot: meetings last {self._minutes()} minutes, "
                f"from {self.day_start:%H:%M} to {self.day_end:%H:%M} ({self.timezone}); "
                "pick a start from calendar_list_slots"
            )
        if slot.start < now + self.min_lead:
            raise InvalidArguments(f"too soon: a meeting needs {self._lead()} notice")
        if slot.start > now + self.horizon:
            raise InvalidArguments(f"too far ahead: meetings can be booked up to {self.horizon.days} days ahead")
        return slot

    def wire(self) -> dict[str, Any]:
        """The policy as a visitor's agent may read it."""
        return {
            "timezone": self.timezone,
            "slot_minutes": self._minutes(),
            "working_hours": f"{self.day_start:%H:%M}-{self.day_end:%H:%M}",
            "working_days": [WEEKDAYS[d] for d in sorted(self.weekdays)],
            "min_notice": self._lead(),
            "buffer_minutes": int(self.buffer.total_seconds() // 60),
        }

    def _minutes(self) -> int:
        return int(self.slot.total_seconds() // 60)

    def _days(self) -> str:
        return ", ".join(WEEKDAYS[d] for d in sorted(self.weekdays)) or "none"

    def _lead(self) -> str:
        days = self.min_lead.days
        return f"{days} day{'s' if days != 1 else ''}"


def _wall(value: datetime) -> datetime:
    return value.astimezone(UTC).astimezone(value.tzinfo)


def policy_from(config: Mapping[str, Any], owner_timezone: str | None) -> Policy:
    """The policy of the owner's config values (the manifest's defaults fill gaps)."""
    return Policy(
        zone=zone_of(config.get("timezone")) or zone_of(owner_timezone) or ZoneInfo("UTC"),
        slot=timedelta(minutes=_int(config, "slot_minutes", 30)),
        day_start=_time(config.get("day_start"), time(9)),
        day_end=_time(config.get("day_end"), time(18)),
        weekdays=_weekdays(config.get("weekdays")),
        min_lead=timedelta(days=_int(config, "min_lead_days", 2)),
        buffer=timedelta(minutes=_int(config, "buffer_minutes", 15)),
        horizon=timedelta(days=_int(config, "horizon_days", 60)),
    )


def zone_of(name: object) -> ZoneInfo | None:
    """The IANA zone `name`, or None when it is not one."""
    if not isinstance(name, str) or not name or len(name) > 64:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def parse_instant(name: str, value: str) -> datetime:
    """`value` as an aware datetime. Raises InvalidArguments unless ISO 8601 with an offset."""
    try:
        parsed = datetime.fromisoformat(value) if len(value) <= 64 else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise InvalidArguments(f"{name} must be an ISO 8601 date-time with a UTC offset, e.g. {EXAMPLE}")
    return parsed


def parse_day(value: str | None, policy: Policy, now: datetime) -> date:
    """The day `value` names (YYYY-MM-DD), or today in the policy's zone."""
    if value is None:
        return now.astimezone(policy.zone).date()
    try:
        return date.fromisoformat(value) if len(value) == 10 else date.fromisoformat("x")
    except ValueError:
        raise InvalidArguments("date_from must be a date, YYYY-MM-DD") from None


def _int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    return value if type(value) is int and value >= 0 else default


def _time(value: object, default: time) -> time:
    try:
        return time.fromisoformat(value) if isinstance(value, str) else default
    except ValueError:
        return default


def _weekdays(value: object) -> frozenset[int]:
    if not isinstance(value, list | tuple):
        return frozenset(range(5))
    return frozenset(WEEKDAYS.index(v[:3].lower()) for v in value if isinstance(v, str) and v[:3].lower() in WEEKDAYS)
