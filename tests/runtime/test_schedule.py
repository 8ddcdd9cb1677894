"""The tick grid: policies of one interval tick at the same instants, never twice in a row."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagerefresh.runtime.schedule import MIN_GAP_SECONDS, on_clock, seconds_until_next_tick

intervals = st.floats(min_value=30, max_value=86400, allow_nan=False)
moments = st.floats(min_value=1.6e9, max_value=2.0e9, allow_nan=False)
phases = st.floats(min_value=0, max_value=86400, allow_nan=False)


@given(intervals, moments, phases)
def test_the_next_tick_is_on_the_grid_and_within_one_interval_and_the_gap(
    interval: float, now: float, phase: float
) -> None:
    delay = seconds_until_next_tick(interval, now, phase)
    assert MIN_GAP_SECONDS <= delay < interval + MIN_GAP_SECONDS + 1e-6
    steps = (now + delay - phase) / interval
    assert math.isclose(steps, round(steps), abs_tol=1e-6)


@given(st.floats(min_value=0, max_value=0.999), st.floats(min_value=0, max_value=0.999))
def test_policies_finishing_at_different_moments_of_one_interval_tick_together(
    first: float, second: float
) -> None:
    interval, phase, start = 30.0, 7.0, 1_800_000_007.0  # start is on the grid
    earlier = start + 2 + first * 20  # both between two instants, away from the gap
    later = start + 2 + second * 20
    assert math.isclose(
        earlier + seconds_until_next_tick(interval, earlier, phase),
        later + seconds_until_next_tick(interval, later, phase),
    )


def test_a_longer_interval_ticks_on_every_other_instant_of_the_shorter() -> None:
    now, phase = 1_800_000_123.0, 42.0
    at_15m = {now + seconds_until_next_tick(900, now + k * 900, phase) + k * 900 for k in range(4)}
    at_30m = now + seconds_until_next_tick(1800, now, phase)
    assert at_30m in at_15m


def test_a_timer_waking_a_hair_early_does_not_tick_twice() -> None:
    interval, phase = 30.0, 0.0
    instant = 1_800_000_000.0
    assert instant % interval == 0
    assert seconds_until_next_tick(interval, instant - 0.001, phase) == pytest.approx(30.001)
    assert seconds_until_next_tick(interval, instant, phase) == pytest.approx(30.0)
    assert seconds_until_next_tick(interval, instant + 0.5, phase) == pytest.approx(29.5)


@pytest.mark.parametrize("interval", [0.0, -30.0, math.inf, math.nan])
def test_an_interval_that_is_not_a_positive_number_is_refused(interval: float) -> None:
    with pytest.raises(ValueError, match="positive number"):
        seconds_until_next_tick(interval, 1_800_000_000.0)


def test_a_grid_instant_is_handed_to_a_monotonic_clock_by_its_age_and_never_later_than_now() -> (
    None
):
    def monotonic() -> float:
        return 500.0

    assert on_clock(monotonic, time.time() - 20) == pytest.approx(480.0, abs=1.0)
    assert on_clock(monotonic, time.time() + 60) == 500.0  # a clock that stepped back: now
