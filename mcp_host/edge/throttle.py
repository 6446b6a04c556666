"""Slowing down a client that keeps presenting wrong credentials.

Above: the sessions endpoint, which records each refused code or key by the client's address
and waits the answer's delay before sending its 401; the owner console's sign-in, which
records each wrong owner token and answers 429 (`retry_after`) to a client still inside its
delay, without looking at what it sent. Below: nothing but a clock.

Each client (the peer address of the HTTP connection) has a sliding window of recent
failures. Up to `free_failures` within `window_s` cost nothing; every further one is answered
after `base_delay_s`, doubling with each failure, capped at `max_delay_s`. A client's
failures never slow another client, and a success changes nothing. Memory is bounded: at most
`max_clients` clients are tracked (the least recently failing are forgotten first) and each
keeps only as many timestamps as it takes to reach the cap.

The record lives in this replica's memory: each replica slows down what it sees. That is a
brake on guessing, not an account lockout; a code or key has 128 bits or more of entropy.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_host.principal import Principal

__all__ = ["FailureThrottle", "ThrottleLimits", "client_address"]


def client_address(scope: Mapping[str, Any]) -> str:
    """The address a request's failures and paces are counted by: its ASGI client's (behind a
    proxy uvicorn trusts, the forwarded one it put there), an IPv6 one by its /64, as every
    per-principal cap counts it (`Principal.of_client`)."""
    return Principal.of_client(scope.get("client")).id


@dataclass(frozen=True)
class ThrottleLimits:
    """How many failures are free within the window, and how the delay grows after them."""

    free_failures: int = 5
    window_s: float = 300.0
    base_delay_s: float = 0.25
    max_delay_s: float = 4.0
    max_clients: int = 10_000

    def delay_after(self, failures: int) -> float:
        """The wait before answering a client's `failures`-th failure within the window."""
        over = failures - self.free_failures
        if over <= 0 or self.base_delay_s <= 0:
            return 0.0
        return min(self.max_delay_s, self.base_delay_s * (1 << min(over - 1, 62)))

    def kept(self) -> int:
        """Failures worth remembering per client: the free ones plus the steps to the cap."""
        steps = 1
        if self.base_delay_s > 0 and self.max_delay_s > self.base_delay_s:
            steps += math.ceil(math.log2(self.max_delay_s / self.base_delay_s))
        return self.free_failures + steps


class FailureThrottle:
    """Failures by client, in a bounded sliding window."""

    def __init__(self, limits: ThrottleLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._kept = limits.kept()
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def failed(self, client: str) -> float:
        """Record a failure of `client`; return how long to wait before answering it."""
        now = self._clock()
        times = self._failures.pop(client, None)
        if times is None:
            times = deque(maxlen=self._kept)
        while times and times[0] <= now - self.limits.window_s:
            times.popleft()
        times.append(now)
        self._failures[client] = times  # most recently failing last
        while len(self._failures) > self.limits.max_clients:
            self._failures.popitem(last=False)
        return self.limits.delay_after(len(times))

    def failures(self, client: str) -> int:
        """`client`'s failures within the window (at most `ThrottleLimits.kept()`)."""
        return len(self._recent(client))

    def retry_after(self, client: str) -> float:
        """How long `client` must wait before its next attempt: 0 while its failures within the
        window are free, else what is left of the delay its latest failure earned."""
        recent = self._recent(client)
        if not recent:
            return 0.0
        return max(0.0, recent[-1] + self.limits.delay_after(len(recent)) - self._clock())

    def _recent(self, client: str) -> list[float]:
        horizon = self._clock() - self.limits.window_s
        return [t for t in self._failures.get(client, ()) if t > horizon]

    def tracked(self) -> int:
        """How many clients are remembered."""
        return len(self._failures)
