"""Go-style durations as the CRD's CEL duration() accepts them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagerefresh.models import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("15m", 900),
        ("1h30m", 5400),
        ("90s", 90),
        ("1.5h", 5400),
        ("0", 0),
        ("300ms", 0.3),
        ("2h0m0s", 7200),
        ("1m30.5s", 90.5),
        ("10us", 1e-5),
        ("-1m", -60),
    ],
)
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text", ["", "-", "15", "15 m", "m", "1d", "1h 30m", "PT15M", "1.h2", "X15m", "15mX"]
)
def test_what_go_rejects_is_rejected_with_the_accepted_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"30s, 15m or 1h30m|empty"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (30, "30s"),
        (900, "15m0s"),
        (5400, "1h30m0s"),
        (0, "0s"),
        (1, "1s"),
        (61, "1m1s"),
        (1.5, "1.5s"),
        (-1, "-1s"),
        (-90, "-1m30s"),
        (-5400, "-1h30m0s"),
    ],
)
def test_format_is_go_duration_string(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_a_fraction_of_a_second_is_written_and_read_back_as_written() -> None:
    half = timedelta(milliseconds=500)
    assert parse_duration(format_duration(half)) == half


@given(st.integers(min_value=0, max_value=10**7))
def test_format_round_trips(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value
