"""`PrincipalRate` and `PrincipalPace`: how fast each principal may start something, one bucket each."""

from __future__ import annotations

from mcp_host.edge import PrincipalPace, PrincipalRate
from mcp_host.principal import Principal

ADA = Principal("address", "192.0.2.1")
BOB = Principal("address", "192.0.2.2")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_principal_past_its_rate_waits_and_another_does_not() -> None:
    clock = Clock()
    rate = PrincipalRate(3, clock=clock)
    assert [rate.wait(ADA) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rate.wait(ADA) == 20.0  # one start every 20 s at 3 a minute
    assert rate.wait(BOB) == 0.0
    clock.now += 10
    assert rate.wait(ADA) == 10.0  # a refusal spends nothing
    clock.now += 10
    assert rate.wait(ADA) == 0.0


def test_the_table_is_bounded_and_drops_refilled_buckets_first() -> None:
    clock = Clock()
    rate = PrincipalRate(2, max_principals=2, clock=clock)
    rate.wait(ADA)
    rate.wait(ADA)
    rate.wait(BOB)
    clock.now += 30  # Bob's bucket is full again; Ada's is not
    carol = Principal("address", "192.0.2.3")
    assert rate.wait(carol) == 0.0
    assert rate.tracked() == 2
    assert rate.wait(ADA) == 0.0 and rate.wait(ADA) > 0  # Ada was kept: one refilled, then none


def test_a_principal_past_its_pace_waits_its_turn_then_is_refused_and_another_is_not() -> None:
    clock = Clock()
    pace = PrincipalPace(per_s=4.0, burst=2, max_wait_s=0.5, clock=clock)
    assert [pace.turn(ADA) for _ in range(5)] == [0.0, 0.0, 0.25, 0.5, None]
    assert pace.turn(BOB) == 0.0
    assert pace.retry_after_s() == 0.5
    clock.now += 1.0  # the debt paid and 2 more tokens: the burst again
    assert [pace.turn(ADA) for _ in range(3)] == [0.0, 0.0, 0.25]
