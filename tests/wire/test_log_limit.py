"""Rate-limited logging: a token bucket per source, and one line telling what was held back."""

from __future__ import annotations

import logging

import pytest

from mcp_host.wire.log_limit import LimitedLog, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_gives_its_burst_then_refills_at_its_rate_never_above_the_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(per_s=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(5)] == [True, True, True, False, False]
    clock.now = 0.5  # one token back
    assert [bucket.take() for _ in range(2)] == [True, False]
    clock.now = 100.0  # a long pause refills to the burst, no more
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_held_lines_are_counted_and_told_before_the_next_line_and_at_flush(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.limited")
    clock = Clock()
    log = LimitedLog(logging.getLogger("test.limited"), per_s=1.0, burst=2, what="denials", clock=clock)
    written = [log.log("a", logging.WARNING, "a: denied %d", n) for n in range(10)]
    assert log.log("b", logging.WARNING, "b: denied")  # another source has its own bucket
    clock.now = 1.0
    assert log.log("a", logging.WARNING, "a: denied again")
    log.log("a", logging.WARNING, "a: held")
    log.flush()
    assert written == [True, True] + [False] * 8
    assert caplog.messages == [
        "a: denied 0",
        "a: denied 1",
        "b: denied",
        "a: 8 more denials suppressed",
        "a: denied again",
        "a: 1 more denials suppressed",
    ]


def test_a_reservation_borrows_from_the_refill_to_come_up_to_its_wait_and_a_refusal_spends_nothing() -> None:
    clock = Clock()
    bucket = TokenBucket(per_s=2.0, burst=2, clock=clock)
    assert [bucket.reserve(1.0) for _ in range(5)] == [0.0, 0.0, 0.5, 1.0, None]
    clock.now = 0.5  # one token refilled: the debt is one token less
    assert bucket.reserve(1.0) == 1.0
    assert bucket.reserve(1.0) is None
    assert not bucket.take()  # in debt: nothing in hand
