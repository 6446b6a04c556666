"""How fast each principal may start something: one token bucket per principal.

Above: the sessions endpoint (how fast one client address opens public sessions), the turns
endpoint (turns a minute) and the visitor MCP endpoint (requests a second: `PrincipalPace`).
Below: `wire.TokenBucket`, `principal.Principal`.

The table is bounded: past `max_principals`, buckets that refilled (nobody spent from them
lately) are dropped first, and only if none has, the least recently used one — which gives
that principal a full bucket again, a leniency and never a refusal of someone else.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from mcp_host.principal import Principal
from mcp_host.wire import TokenBucket

__all__ = ["PrincipalPace", "PrincipalRate"]


class PrincipalRate:
    """At most `per_minute` starts a minute per principal (a bucket of that size, refilled
    over a minute)."""

    def __init__(
        self,
        per_minute: int,
        *,
        max_principals: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
        per_s: float | None = None,
    ) -> None:
        """`per_s`: the refill a second when it is not `per_minute / 60` (the bucket still holds
        `per_minute`)."""
        self._per_s = per_minute / 60.0 if per_s is None else per_s
        self._burst = per_minute
        self._max = max_principals
        self._clock = clock
        self._buckets: OrderedDict[Principal, TokenBucket] = OrderedDict()

    def wait(self, principal: Principal) -> float:
        """Spend one of `principal`'s starts and return 0.0; when it has none left, spend
        nothing and return the seconds until it has one."""
        return self._bucket(principal).take_or_wait()

    def _bucket(self, principal: Principal) -> TokenBucket:
        bucket = self._buckets.get(principal)
        if bucket is None:
            self._make_room()
            bucket = TokenBucket(per_s=self._per_s, burst=self._burst, clock=self._clock)
            self._buckets[principal] = bucket
        else:
            self._buckets.move_to_end(principal)
        return bucket

    def tracked(self) -> int:
        return len(self._buckets)

    def _make_room(self) -> None:
        if len(self._buckets) < self._max:
            return
        refilled = [p for p, b in self._buckets.items() if b.full()]
        for principal in refilled[: max(1, len(self._buckets) - self._max + 1)]:
            del self._buckets[principal]
        while len(self._buckets) >= self._max:
            self._buckets.popitem(last=False)


class PrincipalPace(PrincipalRate):
    """At most `per_s` requests a second per principal, `burst` at once; a request past them
    waits for its turn, at most `max_wait_s` (a tarpit: waiting costs the host no CPU, and a
    client that sends its next request when this one is answered is slowed to the rate), and
    past that is refused.

    Why (issue 26): every request a principal sends costs the host CPU however quickly it is
    refused further in (a call past the principal's share of instances is answered
    `unavailable` only after authentication, the SDK and the gates), and that CPU is taken from
    every other principal's calls. What one principal may have waiting is bounded too:
    `per_s * max_wait_s` requests.
    """

    def __init__(
        self,
        per_s: float,
        burst: int,
        max_wait_s: float,
        *,
        max_principals: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(burst, max_principals=max_principals, clock=clock, per_s=per_s)
        self._max_wait_s = max_wait_s

    def turn(self, principal: Principal) -> float | None:
        """Spend one of `principal`'s requests: the seconds it must wait first (0.0: none), or
        None (nothing spent) when it would wait longer than `max_wait_s`."""
        return self._bucket(principal).reserve(self._max_wait_s)

    def retry_after_s(self) -> float:
        """What a refused request is told to wait: the longest a request may wait here."""
        return self._max_wait_s
