"""The failure slow-down: free failures, a doubling capped delay, a sliding window, the wait
before a client's next try, one client never slowing another, bounded memory, and the defaults
pinned."""

from __future__ import annotations

from pathlib import Path

from inline_snapshot import snapshot

from mcp_host.edge.throttle import FailureThrottle, ThrottleLimits
from mcp_host.settings import Settings

LIMITS = ThrottleLimits(free_failures=3, window_s=60.0, base_delay_s=0.25, max_delay_s=2.0, max_clients=3)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failures_past_the_free_ones_wait_longer_each_time_up_to_the_cap() -> None:
    throttle = FailureThrottle(LIMITS, clock=Clock())
    assert [throttle.failed("10.0.0.1") for _ in range(9)] == snapshot([0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 2.0, 2.0])


def test_one_clients_failures_never_slow_another() -> None:
    throttle = FailureThrottle(LIMITS, clock=Clock())
    for _ in range(8):
        throttle.failed("10.0.0.1")
    assert throttle.failed("10.0.0.2") == 0.0
    assert throttle.failed("10.0.0.1") == 2.0


def test_failures_older_than_the_window_are_forgotten() -> None:
    clock = Clock()
    throttle = FailureThrottle(LIMITS, clock=clock)
    for _ in range(5):
        throttle.failed("10.0.0.1")
        clock.now += 10
    clock.now += 25  # the first two failures (at 0 s and 10 s) are now more than 60 s old
    assert throttle.failed("10.0.0.1") == 0.25  # the 4th within the window
    clock.now += 61
    assert throttle.failed("10.0.0.1") == 0.0


def test_memory_is_bounded_by_clients_and_by_failures_kept_per_client() -> None:
    throttle = FailureThrottle(LIMITS, clock=Clock())
    for n in range(10):
        throttle.failed(f"10.0.0.{n}")
    assert throttle.tracked() == 3
    for _ in range(1000):
        throttle.failed("10.0.0.99")
    assert LIMITS.kept() == 7  # 3 free + 0.25 → 0.5 → 1 → 2 s
    assert throttle.failed("10.0.0.99") == 2.0


def test_the_least_recently_failing_client_is_forgotten_first() -> None:
    throttle = FailureThrottle(LIMITS, clock=Clock())
    for _ in range(5):
        throttle.failed("a")
    throttle.failed("b")
    throttle.failed("c")
    throttle.failed("a")  # a fails again: now b is the oldest
    throttle.failed("d")  # b is forgotten
    assert throttle.failed("a") == 2.0  # its 7th failure: a was kept
    assert throttle.failed("b") == 0.0


def test_a_zero_base_delay_never_slows_anyone() -> None:
    throttle = FailureThrottle(ThrottleLimits(free_failures=0, base_delay_s=0.0), clock=Clock())
    assert {throttle.failed("a") for _ in range(20)} == {0.0}


def test_a_client_waits_out_the_delay_its_latest_failure_earned_before_trying_again() -> None:
    clock = Clock()
    throttle = FailureThrottle(LIMITS, clock=clock)
    waits = []
    for _ in range(4):
        throttle.failed("10.0.0.1")
        waits.append(throttle.retry_after("10.0.0.1"))
    assert waits == [0.0, 0.0, 0.0, 0.25]  # the 4th failure earned 0.25 s
    clock.now += 0.125
    assert throttle.retry_after("10.0.0.1") == 0.125
    assert throttle.retry_after("10.0.0.2") == 0.0  # another client is not held back
    clock.now += 0.125
    assert throttle.retry_after("10.0.0.1") == 0.0
    throttle.failed("10.0.0.1")
    assert (throttle.failures("10.0.0.1"), throttle.retry_after("10.0.0.1")) == (5, 0.5)
    clock.now += 61  # the window has passed: nothing to wait for, nothing counted
    assert (throttle.failures("10.0.0.1"), throttle.retry_after("10.0.0.1")) == (0, 0.0)


def test_defaults_are_pinned(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert {
        "free": settings.access.failures_free,
        "window_s": settings.access.failure_window_s,
        "delay_s": settings.access.failure_delay_s,
        "max_delay_s": settings.access.failure_delay_max_s,
        "clients": settings.access.failure_clients_max,
    } == snapshot({"free": 5, "window_s": 300.0, "delay_s": 0.25, "max_delay_s": 4.0, "clients": 10000})
    assert ThrottleLimits() == ThrottleLimits(
        free_failures=settings.access.failures_free,
        window_s=settings.access.failure_window_s,
        base_delay_s=settings.access.failure_delay_s,
        max_delay_s=settings.access.failure_delay_max_s,
        max_clients=settings.access.failure_clients_max,
    )
