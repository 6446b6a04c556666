"""Rate-limited logging: what a child or plugin can make the host log is bounded per source.

Above: `children.stderr` (a child's stderr lines) and `backchannel` (the host-op refusals a plugin
provokes). Below: `logging` and the monotonic clock.

A source that can make the host write a log line at will (a child writing to stderr, a plugin
calling ops it may not) must not fill the disk or drown every other line (5,000 refused ops
once made 780 KB of log in 10 s). Each source gets a token bucket: `burst` lines at once, then
`per_s` a second. Lines over it are counted, not written; the count is told in one line
("N more … suppressed") before the source's next line that is written, or by `flush`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["LimitedLog", "TokenBucket"]


class TokenBucket:
    """`burst` tokens, refilled at `per_s` a second (never above `burst`)."""

    def __init__(self, *, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_s = per_s
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        """Spend one token; False (nothing spent) when none is left."""
        return self.take_or_wait() == 0.0

    def take_or_wait(self) -> float:
        """Spend one token and return 0.0; when none is left, spend nothing and return the
        seconds until one is."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_s)
        self._at = now
        if self._tokens < 1.0:
            return (1.0 - self._tokens) / self._per_s
        self._tokens -= 1.0
        return 0.0

    def reserve(self, max_wait_s: float) -> float | None:
        """Spend one token, borrowing it from the refill to come when none is left, up to
        `max_wait_s` worth: the seconds until the token is the caller's (0.0 when it was in
        hand), or None (nothing spent) when it would be longer than `max_wait_s`."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_s)
        self._at = now
        if self._tokens - 1.0 < -max_wait_s * self._per_s:
            return None
        self._tokens -= 1.0
        return max(0.0, -self._tokens / self._per_s)

    def full(self) -> bool:
        """Whether the bucket holds `burst` tokens again (nothing spent lately)."""
        return min(self._burst, self._tokens + (self._clock() - self._at) * self._per_s) >= self._burst


class _Source:
    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket
        self.held = 0


class LimitedLog:
    """Lines of many sources (e.g. plugin ids) through one logger, each within its own bucket.

    Sources are expected to be few and known (the plugins a host loaded): one bucket each.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        per_s: float,
        burst: int,
        what: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`what` names the lines in the summary: "{source}: {n} more {what} suppressed"."""
        self._logger = logger
        self._per_s = per_s
        self._burst = burst
        self._what = what
        self._clock = clock
        self._sources: dict[str, _Source] = {}

    def log(self, source: str, level: int, message: str, *args: Any, exc_info: bool = False) -> bool:
        """Log `message % args` for `source` if its bucket allows; whether it was written."""
        state = self._sources.get(source)
        if state is None:
            bucket = TokenBucket(per_s=self._per_s, burst=self._burst, clock=self._clock)
            state = self._sources[source] = _Source(bucket)
        if not state.bucket.take():
            state.held += 1
            return False
        self._tell_held(source, state)
        self._logger.log(level, message, *args, exc_info=exc_info)
        return True

    def flush(self) -> None:
        """Tell every count still held (at the end of the sources' life)."""
        for source, state in self._sources.items():
            self._tell_held(source, state)

    def _tell_held(self, source: str, state: _Source) -> None:
        if state.held:
            self._logger.warning("%s: %d more %s suppressed", source, state.held, self._what)
            state.held = 0
