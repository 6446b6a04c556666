"""How fast each principal may start something: one token bucket per principal.

Above: the sessions endpoint (how fast one client address opens public sessions). Below:
`wire.TokenBucket`, `edge.Principal`.

The table is bounded: past `max_principals`, buckets that refilled (nobody spent from them
lately) are dropped first, and only if none has, the least recently used one — which gives
that principal a full bucket again, a leniency and never a refusal of someone else.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from mcp_host.wire import TokenBucket

from .principal import Principal

__all__ = ["PrincipalRate"]


class PrincipalRate:
    """At most `per_minute` starts a minute per principal (a bucket of that size, refilled
    over a minute)."""

    def __init__(
        self, per_minute: int, *, max_principals: int = 65_536, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._per_minute = per_minute
        self._max = max_principals
        self._clock = clock
        self._buckets: OrderedDict[Principal, TokenBucket] = OrderedDict()

    def wait(self, principal: Principal) -> float:
        """Spend one of `principal`'s starts and return 0.0; when it has none left, spend
        nothing and return the seconds until it has one."""
        bucket = self._buckets.get(principal)
        if bucket is None:
            self._make_room()
            bucket = TokenBucket(per_s=self._per_minute / 60.0, burst=self._per_minute, clock=self._clock)
            self._buckets[principal] = bucket
        else:
            self._buckets.move_to_end(principal)
        return bucket.take_or_wait()

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
