"""Per-session instances: the children of plugins whose manifest says `instances: per_session`,
one per (plugin, visitor session), bounded host-wide and shared fairly between principals.

Above: `ChildPool` (which makes each child and hands it here, with the principal asking for
its session: `principal.Asking`). Below: `Child` (its health, whether a call is in flight, when it
was last used), seen only through `Instance`; `wire.TokenBucket` (each principal's starts) and
`wire.LimitedLog` (a refusal is logged, but a principal that keeps asking cannot flood the log).

The table holds at most `InstanceShares.host` instances, of which one principal (an access
code, an API key, a public session's address: `principal.Principal`) holds at most `per_principal`,
busy or idle, and adds at most `starts_per_minute` (a token bucket). A new instance is refused
`unavailable`, saying why and when to retry, when its principal has started its minute's worth,
or holds its share with every one of its instances busy, or when the host's whole table is busy.
Otherwise room is made by stopping one idle instance (no call in flight, nor a start under way,
nor a live task): the principal's own least recently used one when it holds its share, else the
least recently used one of the principal holding the most. So one principal can slow only
itself: its sessions and calls never stop another principal's instance (idle or busy), never
take another's place in a table that has room for both, and a table full of busy instances
refuses everyone alike only once several principals fill it, each within its share.

An instance is forgotten (and never started again) when its process stops cleanly (idle, or
stopped to make room) and when its session ends; one that crashed is kept (the owner's
`capability_logs` shows its exit) until it is evicted or its session ends. The restart backoff
is not an instance's but the plugin's (`backoff.RunOfFailures`, shared by all its children): a
new session's instance of a crash-looping plugin waits it out like the others.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from mcp_host.errors import Unavailable
from mcp_host.principal import Principal
from mcp_host.wire import LimitedLog, TokenBucket

__all__ = ["BUSY_RETRY_S", "Instance", "InstanceShares", "SessionInstances"]

logger = logging.getLogger(__name__)

_CLEAN_EXITS = ("stopped", "idle")

BUSY_RETRY_S = 5
"""The retry hint when instances are busy: a call usually ends within seconds (the host's call
timeout bounds it), and then its instance may make room."""


@dataclass(frozen=True)
class InstanceShares:
    """How many per-session instances the host runs, and what one principal may hold of them
    (settings `principals`: `max_session_instances`, `principal_session_instances`,
    `principal_instance_starts_per_minute`)."""

    host: int = 32
    per_principal: int = 4
    starts_per_minute: int = 4


class _Health(Protocol):
    @property
    def last_exit(self) -> str | None: ...


class Instance(Protocol):
    """What the table reads of a child (`mcp_session.Child`)."""

    @property
    def plugin_id(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def busy(self) -> bool: ...
    @property
    def last_used(self) -> float: ...
    @property
    def running(self) -> bool: ...
    def health(self) -> _Health: ...
    def retire(self) -> None: ...


C = TypeVar("C", bound=Instance)


@dataclass
class _Starts:
    bucket: TokenBucket
    last: float


class SessionInstances(Generic[C]):
    """The per-session instances of one host, by (plugin id, session id), each held by the
    principal that asked for it."""

    def __init__(self, shares: InstanceShares, *, clock: Callable[[], float] = time.monotonic) -> None:
        """`clock`: seconds, for the start buckets (the same clock as `Instance.last_used`)."""
        self.shares = shares
        self._clock = clock
        self._table: dict[tuple[str, str], C] = {}
        self._holder: dict[tuple[str, str], Principal] = {}
        self._held: Counter[Principal] = Counter()
        self._starts: dict[Principal, _Starts] = {}
        self._refusals = LimitedLog(logger, per_s=0.2, burst=5, what="refusals of per-session instances")

    def get(self, plugin_id: str, session_id: str) -> C | None:
        return self._table.get((plugin_id, session_id))

    def holder(self, plugin_id: str, session_id: str) -> Principal | None:
        """The principal holding the instance of (`plugin_id`, `session_id`), if any."""
        return self._holder.get((plugin_id, session_id))

    def held_by(self, principal: Principal) -> int:
        """How many instances `principal` holds (busy or idle)."""
        return self._held[principal]

    def add(self, child: C, principal: Principal) -> C:
        """Keep `child` (a new instance) for `principal`, first stopping one idle instance when
        `principal` holds its share or the table is full (see the module's docstring).

        Raises Unavailable (nothing stopped, nothing counted) when `principal` has started as
        many instances as it may this minute, holds its share with all of them busy, or the
        table is full of busy instances."""
        assert child.session_id is not None
        victim = self._room_for(principal)
        self._take_start(principal)
        if victim is not None:
            logger.info(
                "%s: the instance of session %s (%s) is stopped to make room for %s",
                victim.plugin_id,
                victim.session_id,
                self._holder.get(_key(victim)),
                principal,
            )
            self._forget(victim)
        key = (child.plugin_id, child.session_id)
        self._table[key] = child
        self._holder[key] = principal
        self._held[principal] += 1
        return child

    def _room_for(self, principal: Principal) -> C | None:
        """The idle instance to stop for `principal`'s new one (None: there is room), or
        Unavailable."""
        shares = self.shares
        if self._held[principal] >= shares.per_principal:
            own = [c for c in self._table.values() if not c.busy and self._holder[_key(c)] == principal]
            if not own:
                self._refusals.log(
                    "share",
                    logging.WARNING,
                    "%s holds %d per-session instances, each serving a call; its new one is refused",
                    principal,
                    shares.per_principal,
                )
                raise Unavailable(
                    f"this visitor (its access code, API key or address) holds as many per-session instances as "
                    f"one may ({shares.per_principal}), each serving a call; retry in {BUSY_RETRY_S} s"
                )
            return min(own, key=lambda c: c.last_used)
        if len(self._table) < shares.host:
            return None
        idle = [c for c in self._table.values() if not c.busy]
        if not idle:
            self._refusals.log(
                "host",
                logging.WARNING,
                "all %d per-session instances are serving calls; a new one of %s is refused",
                shares.host,
                principal,
            )
            raise Unavailable(
                f"the host runs as many per-session instances as it may ({shares.host}), each serving a call; "
                f"retry in {BUSY_RETRY_S} s"
            )
        return min(idle, key=lambda c: (-self._held[self._holder[_key(c)]], c.last_used))

    def _take_start(self, principal: Principal) -> None:
        """Spend one of `principal`'s starts, or raise Unavailable."""
        per_minute = self.shares.starts_per_minute
        now = self._clock()
        # A bucket unused for a minute is full again: forgetting it changes nothing.
        for stale in [p for p, s in self._starts.items() if now - s.last >= 60.0]:
            del self._starts[stale]
        starts = self._starts.get(principal)
        if starts is None:
            bucket = TokenBucket(per_s=per_minute / 60.0, burst=per_minute, clock=self._clock)
            starts = self._starts[principal] = _Starts(bucket, now)
        if not starts.bucket.take():
            self._refusals.log(
                "starts",
                logging.WARNING,
                "%s started %d per-session instances within a minute; its next is refused",
                principal,
                per_minute,
            )
            raise Unavailable(
                f"this visitor (its access code, API key or address) started as many per-session instances as it "
                f"may in a minute ({per_minute}); retry in {math.ceil(60 / per_minute)} s"
            )
        starts.last = now

    def ended(self, child: C) -> None:
        """A process of `child` ended: forgotten when it stopped cleanly, kept when it crashed."""
        health = child.health()
        if health.last_exit is None or health.last_exit in _CLEAN_EXITS:
            if child.session_id is not None and self._table.get(_key(child)) is child:
                self._forget(child)

    def end_session(self, session_id: str) -> None:
        """Stop and forget every instance of `session_id`."""
        for child in [c for (_, sid), c in self._table.items() if sid == session_id]:
            self._forget(child)

    def end_plugin(self, plugin_id: str) -> None:
        """Stop and forget every instance of `plugin_id` (it was uninstalled)."""
        for child in self.of(plugin_id):
            self._forget(child)

    def _forget(self, child: C) -> None:
        key = _key(child)
        if self._table.pop(key, None) is not None:
            holder = self._holder.pop(key)
            self._held[holder] -= 1
            if self._held[holder] <= 0:
                del self._held[holder]
        child.retire()

    def all(self) -> Iterator[C]:
        return iter(list(self._table.values()))

    def of(self, plugin_id: str) -> list[C]:
        """The instances of `plugin_id` the table holds (running, starting, or crashed)."""
        return [c for (pid, _), c in self._table.items() if pid == plugin_id]

    def __len__(self) -> int:
        return len(self._table)


def _key(child: Instance) -> tuple[str, str]:
    assert child.session_id is not None
    return (child.plugin_id, child.session_id)
