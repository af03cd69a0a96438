"""poll_until, driven by a fake clock: no real waiting and no timing assertions."""

from __future__ import annotations

import pytest

from perfbisect.runtime.polling import poll_until


class FakeClock:
    """A monotonic clock that moves only when ``sleep`` is called; it remembers every sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def answers(*values: bool):
    """A predicate that gives ``values`` in turn and counts its calls."""
    it = iter(values)

    def predicate() -> bool:
        predicate.calls += 1
        return next(it)

    predicate.calls = 0
    return predicate


def test_a_condition_that_already_holds_costs_one_check_and_no_sleep():
    clock = FakeClock()
    predicate = answers(True)
    assert poll_until(predicate, timeout_s=10, interval_s=1, clock=clock, sleep=clock.sleep)
    assert predicate.calls == 1 and clock.sleeps == []


def test_checks_every_interval_until_the_condition_holds():
    clock = FakeClock()
    predicate = answers(False, False, True)
    waited: list[float] = []
    assert poll_until(predicate, 10, 0.5, on_wait=waited.append, clock=clock, sleep=clock.sleep)
    assert predicate.calls == 3
    assert clock.sleeps == [0.5, 0.5]
    assert waited == [0.0, 0.5]  # seconds since the start, after each failed check


def test_gives_up_once_the_timeout_has_passed_after_a_last_check():
    clock = FakeClock()
    predicate = answers(*[False] * 10)
    waited: list[float] = []
    assert not poll_until(predicate, 2, 1, on_wait=waited.append, clock=clock, sleep=clock.sleep)
    # checks at 0, 1 and 2 seconds: the one at the deadline is still made, then no more sleeping
    assert predicate.calls == 3 and clock.sleeps == [1, 1] and waited == [0, 1, 2]


def test_zero_timeout_checks_exactly_once():
    clock = FakeClock()
    predicate = answers(False)
    assert not poll_until(predicate, 0, 5, clock=clock, sleep=clock.sleep)
    assert predicate.calls == 1 and clock.sleeps == []


def test_no_timeout_waits_until_the_condition_holds():
    clock = FakeClock()
    predicate = answers(*[False] * 50, True)
    assert poll_until(predicate, None, 60, clock=clock, sleep=clock.sleep)
    assert predicate.calls == 51 and len(clock.sleeps) == 50


def test_what_the_predicate_or_on_wait_raises_ends_the_wait():
    clock = FakeClock()

    def broken() -> bool:
        raise RuntimeError("probe failed")

    with pytest.raises(RuntimeError, match="probe failed"):
        poll_until(broken, 10, 1, clock=clock, sleep=clock.sleep)

    def give_up(elapsed: float) -> None:
        if elapsed >= 1:
            raise TimeoutError("enough")

    with pytest.raises(TimeoutError):
        poll_until(answers(*[False] * 5), 10, 1, on_wait=give_up, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [1]
