"""A plugin's run of failures and its restart backoff, shared by every child of that plugin.

Above: `lifecycle.ChildLife` (tells it each crash, each answered call and each stable run, and
asks it before each start) and the catalogue (via `ChildPool.failures`). Below: nothing.

One run per plugin, not per child: a per-session plugin's instances (one per visitor session,
plus its owner-context one) run the same program, so a crash loop is the plugin's. A new
session's instance waits out the backoff the others set rather than spawning once more, so a
crash-looping plugin costs the host no more with a hundred sessions than with one, and
`failing` is the plugin's state. What ends the run is the plugin's too: an answered call on
any instance, or any instance's process that stayed up `stable_after_s`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["RunOfFailures"]


@dataclass
class RunOfFailures:
    """Consecutive failures (crashes, failed starts) of a plugin's children, the cause of the
    last one, and when a child of it may next be started."""

    count: int = 0
    cause: str | None = None
    next_start_at: float = 0.0
    """Monotonic time before which no child of the plugin is started."""
    unconfigured: bool = False
    """`cause` says what the owner must set up (`refused`), not a failure."""

    def refused(self, cause: str) -> None:
        """A start was refused for want of the owner's setup (a remote server answered 401 or
        403): no failure, no backoff; the cause stays until a child answers or fails."""
        self.cause = cause
        self.unconfigured = True

    def crashed(self, cause: str, *, base_s: float, max_s: float) -> None:
        """One more failure: the first restart is immediate, the next waits `base_s`, doubling
        with each further one up to `max_s`."""
        self.count += 1
        # 2 ** n overflows a float past n ~ 1000: the exponent is capped, the delay too.
        doublings = min(self.count - 2, 64)
        delay = 0.0 if self.count == 1 else base_s * 2.0**doublings
        self.next_start_at = time.monotonic() + min(delay, max_s)
        self.cause = cause
        self.unconfigured = False

    def answered(self) -> None:
        """A child answered a call: the plugin works; a pending backoff no longer holds."""
        self.count = 0
        self.cause = None
        self.next_start_at = 0.0
        self.unconfigured = False

    def stayed_up(self, *, crashed: bool) -> None:
        """A process ran long enough: whatever ended it starts a new count (a clean end also
        clears the cause)."""
        self.count = 0
        if not crashed:
            self.cause = None

    def retry_in_s(self) -> float:
        """How long until a child of the plugin may be started; 0 when it may now."""
        return max(0.0, self.next_start_at - time.monotonic())

    def failing(self, threshold: int) -> bool:
        return self.count >= threshold
