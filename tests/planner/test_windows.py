"""The window clock: open or not at a fixed instant, and the next start as a UTC instant.

Every case is a fixed clock. DST dates of 2026: Europe/Berlin springs forward on 29 March
(02:00 CET → 03:00 CEST, at 01:00Z) and falls back on 25 October (03:00 CEST → 02:00 CET, at
01:00Z; 02:00-02:59 happens twice); America/New_York springs forward on 8 March (02:00 EST →
03:00 EDT, at 07:00Z) and falls back on 1 November (02:00 EDT → 01:00 EST, at 06:00Z;
01:00-01:59 happens twice).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from imagerefresh.models import WindowSpec
from imagerefresh.planner.windows import OPEN, WindowState, local_instant, window_state

BERLIN, NEW_YORK = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")
SECOND = timedelta(seconds=1)
ALL_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def w(days: str | list[str], start: str, end: str, zone: str = "Europe/Berlin") -> WindowSpec:
    listed = days.split(",") if isinstance(days, str) else days
    return WindowSpec.model_validate({"days": listed, "start": start, "end": end, "timeZone": zone})


def z(*fields: int) -> datetime:
    """A UTC instant."""
    return datetime(*fields, tzinfo=UTC)  # type: ignore[misc]


def closed(next_start: datetime) -> WindowState:
    return WindowState(next_start=next_start)


# (windows, now, expected). 2026-12-01 is a Tuesday; Berlin is UTC+1 in winter, +2 in summer.
WEEKEND = w("Sat,Sun", "02:00", "05:00")
CASES: dict[str, tuple[list[WindowSpec], datetime, WindowState]] = {
    # --- a plain weekly window, and its half-open boundaries ---
    "weekday outside a weekend window": ([WEEKEND], z(2026, 12, 1, 7), closed(z(2026, 12, 5, 1))),
    "one second before the start": (
        [WEEKEND],
        z(2026, 12, 5, 1) - SECOND,
        closed(z(2026, 12, 5, 1)),
    ),
    "exactly at the start": ([WEEKEND], z(2026, 12, 5, 1), OPEN),
    "one second before the end": ([WEEKEND], z(2026, 12, 5, 4) - SECOND, OPEN),
    "exactly at the end": ([WEEKEND], z(2026, 12, 5, 4), closed(z(2026, 12, 6, 1))),
    "after the last day's window: next week": (
        [WEEKEND],
        z(2026, 12, 6, 4),
        closed(z(2026, 12, 12, 1)),
    ),
    "the same hours on a day not listed": ([WEEKEND], z(2026, 12, 4, 2), closed(z(2026, 12, 5, 1))),
    "before today's window opens": (
        [w("Tue", "10:00", "11:00")],
        z(2026, 12, 1, 8),
        closed(z(2026, 12, 1, 9)),
    ),
    # --- several days, several windows, several zones ---
    "Mon, Wed, Fri: on Tuesday the next is Wednesday": (
        [w("Mon,Wed,Fri", "09:00", "10:00")],
        z(2026, 12, 1, 12),
        closed(z(2026, 12, 2, 8)),
    ),
    "Mon, Wed, Fri: on Friday evening the next is Monday": (
        [w("Mon,Wed,Fri", "09:00", "10:00")],
        z(2026, 12, 4, 18),
        closed(z(2026, 12, 7, 8)),
    ),
    "several windows: the earliest next start wins": (
        [w("Thu", "09:00", "10:00"), w("Wed", "23:00", "23:30"), w("Fri", "01:00", "02:00")],
        z(2026, 12, 1, 12),
        closed(z(2026, 12, 2, 22)),
    ),
    "several windows: open when inside any": (
        [w("Thu", "09:00", "10:00"), w("Tue", "12:00", "14:00")],
        z(2026, 12, 1, 12),
        OPEN,
    ),
    "windows in two zones: New York's opens first": (
        [w("Wed", "04:00", "05:00"), w("Tue", "21:00", "22:00", "America/New_York")],
        z(2026, 12, 1, 12),
        closed(z(2026, 12, 2, 2)),
    ),
    "touching windows: the second's start is open": (
        [w("Tue", "10:00", "12:00"), w("Tue", "12:00", "14:00")],
        z(2026, 12, 1, 11),
        OPEN,
    ),
    "every day: the next is tomorrow": (
        [w(ALL_DAYS, "03:00", "04:00")],
        z(2026, 12, 1, 12),
        closed(z(2026, 12, 2, 2)),
    ),
    # --- crossing midnight: the days are the days it starts ---
    "crossing midnight: open after midnight of the start day": (
        [w("Fri", "22:00", "02:00")],
        z(2026, 12, 4, 23, 30),
        OPEN,
    ),
    "crossing midnight: open before midnight too": (
        [w("Fri", "22:00", "02:00")],
        z(2026, 12, 4, 21),
        OPEN,
    ),
    "crossing midnight: one second before its end": (
        [w("Fri", "22:00", "02:00")],
        z(2026, 12, 5, 1) - SECOND,
        OPEN,
    ),
    "crossing midnight: at its end on the next day": (
        [w("Fri", "22:00", "02:00")],
        z(2026, 12, 5, 1),
        closed(z(2026, 12, 11, 21)),
    ),
    "crossing midnight: the next day's evening is not a start": (
        [w("Fri", "22:00", "02:00")],
        z(2026, 12, 5, 21, 30),
        closed(z(2026, 12, 11, 21)),
    ),
    "crossing midnight: early on the start day is closed": (
        [w("Fri", "22:00", "02:00")],
        z(2026, 12, 4, 0, 30),
        closed(z(2026, 12, 4, 21)),
    ),
    "Sunday to Monday: open early on Monday": (
        [w("Sun", "23:00", "01:00")],
        z(2026, 12, 6, 23, 30),
        OPEN,
    ),
    "Sunday to Monday: after it, next Sunday": (
        [w("Sun", "23:00", "01:00")],
        z(2026, 12, 7, 0),
        closed(z(2026, 12, 13, 22)),
    ),
    "Saturday to Sunday and Sunday to Monday": (
        [w("Sat,Sun", "22:00", "06:00")],
        z(2026, 12, 7, 4, 59),
        OPEN,
    ),
    # --- the days are the window zone's, whatever the date is in UTC ---
    "New York Monday evening is Tuesday in UTC: Sunday's day-long window is open": (
        [w("Sun", "23:00", "23:00", "America/New_York")],
        z(2026, 12, 1, 3, 30),
        OPEN,
    ),
    "Auckland Tuesday morning is Monday in UTC: Tuesday's window is open": (
        [w("Tue", "00:30", "01:00", "Pacific/Auckland")],
        z(2026, 11, 30, 11, 45),
        OPEN,
    ),
    # --- a full day: end equal to start ---
    "a full day: open at its midnight": ([w("Mon", "00:00", "00:00")], z(2026, 11, 29, 23), OPEN),
    "a full day: open at its last second": (
        [w("Mon", "00:00", "00:00")],
        z(2026, 11, 30, 23) - SECOND,
        OPEN,
    ),
    "a full day: closed the day after": (
        [w("Mon", "00:00", "00:00")],
        z(2026, 11, 30, 23),
        closed(z(2026, 12, 6, 23)),
    ),
    "a full day from noon to noon": ([w("Mon", "12:00", "12:00")], z(2026, 12, 1, 10), OPEN),
    "every full day: always open": ([w(ALL_DAYS, "00:00", "00:00")], z(2026, 12, 1, 12), OPEN),
    "a one-minute window": ([w("Tue", "13:00", "13:01")], z(2026, 12, 1, 12, 0, 59), OPEN),
    # --- Europe/Berlin, spring forward (Sun 29 March: 02:00-02:59 does not exist) ---
    "Berlin gap: a start in the gap opens when the gap ends": (
        [w("Sun", "02:30", "04:00")],
        z(2026, 3, 29, 0, 59, 59),
        closed(z(2026, 3, 29, 1)),
    ),
    "Berlin gap: open from the first instant after it": (
        [w("Sun", "02:30", "04:00")],
        z(2026, 3, 29, 1),
        OPEN,
    ),
    "Berlin gap: the window then ends at 04:00 CEST": (
        [w("Sun", "02:30", "04:00")],
        z(2026, 3, 29, 2),
        closed(z(2026, 4, 5, 0, 30)),
    ),
    "Berlin gap: an end in the gap ends when the gap ends": (
        [w("Sat", "22:00", "02:30")],
        z(2026, 3, 29, 1) - SECOND,
        OPEN,
    ),
    "Berlin gap: closed at the gap's end": (
        [w("Sat", "22:00", "02:30")],
        z(2026, 3, 29, 1),
        closed(z(2026, 4, 4, 20)),
    ),
    "Berlin gap: a window inside the gap does not open that night": (
        [w("Sun", "02:15", "02:45")],
        z(2026, 3, 28, 12),
        closed(z(2026, 4, 5, 0, 15)),
    ),
    "Berlin gap: nor at the gap's end": (
        [w("Sun", "02:15", "02:45")],
        z(2026, 3, 29, 1),
        closed(z(2026, 4, 5, 0, 15)),
    ),
    "Berlin gap: two weeks ahead when this week's has passed": (
        [w("Sun", "02:15", "02:45")],
        z(2026, 3, 22, 4),
        closed(z(2026, 4, 5, 0, 15)),
    ),
    "Berlin gap: a full day is 23 hours": (
        [w("Sun", "00:00", "00:00")],
        z(2026, 3, 29, 22),
        closed(z(2026, 4, 4, 22)),
    ),
    "Berlin gap: a full day's last second": (
        [w("Sun", "00:00", "00:00")],
        z(2026, 3, 29, 22) - SECOND,
        OPEN,
    ),
    "Berlin gap: the week after is on summer time": (
        [w("Sun", "02:30", "04:00")],
        z(2026, 3, 30, 12),
        closed(z(2026, 4, 5, 0, 30)),
    ),
    # --- Europe/Berlin, fall back (Sun 25 October: 02:00-02:59 happens twice) ---
    "Berlin repeat: a start opens at its first occurrence": (
        [w("Sun", "02:30", "04:00")],
        z(2026, 10, 25, 0, 30),
        OPEN,
    ),
    "Berlin repeat: not before it": (
        [w("Sun", "02:30", "04:00")],
        z(2026, 10, 25, 0, 30) - SECOND,
        closed(z(2026, 10, 25, 0, 30)),
    ),
    "Berlin repeat: an end closes at its first occurrence": (
        [w("Sun", "02:00", "02:45")],
        z(2026, 10, 25, 0, 45),
        closed(z(2026, 11, 1, 1)),
    ),
    "Berlin repeat: still open a second before": (
        [w("Sun", "02:00", "02:45")],
        z(2026, 10, 25, 0, 45) - SECOND,
        OPEN,
    ),
    "Berlin repeat: the second 02:10 is closed": (
        [w("Sun", "02:00", "02:45")],
        z(2026, 10, 25, 1, 10),
        closed(z(2026, 11, 1, 1)),
    ),
    "Berlin repeat: a window crossing into the night ends at the first 02:30": (
        [w("Sat", "23:00", "02:30")],
        z(2026, 10, 25, 0, 30),
        closed(z(2026, 10, 31, 22)),
    ),
    "Berlin repeat: a full day is 25 hours": (
        [w("Sun", "00:00", "00:00")],
        z(2026, 10, 25, 22, 59, 59),
        OPEN,
    ),
    "Berlin repeat: and ends at the next midnight": (
        [w("Sun", "00:00", "00:00")],
        z(2026, 10, 25, 23),
        closed(z(2026, 10, 31, 23)),
    ),
    "Berlin repeat: a window after the change is on winter time": (
        [w("Sun", "04:00", "05:00")],
        z(2026, 10, 25, 2, 59),
        closed(z(2026, 10, 25, 3)),
    ),
    # --- America/New_York, spring forward (Sun 8 March: 02:00-02:59 does not exist) ---
    "New York gap: a start in the gap opens at 03:00 EDT": (
        [w("Sun", "02:00", "05:00", "America/New_York")],
        z(2026, 3, 8, 6, 59),
        closed(z(2026, 3, 8, 7)),
    ),
    "New York gap: open from 07:00Z": (
        [w("Sun", "02:00", "05:00", "America/New_York")],
        z(2026, 3, 8, 7),
        OPEN,
    ),
    "New York gap: an end in the gap closes at 07:00Z": (
        [w("Sun", "01:30", "02:30", "America/New_York")],
        z(2026, 3, 8, 7),
        closed(z(2026, 3, 15, 5, 30)),
    ),
    "New York gap: open until then": (
        [w("Sun", "01:30", "02:30", "America/New_York")],
        z(2026, 3, 8, 6, 59, 59),
        OPEN,
    ),
    "New York gap: a window in the gap does not open": (
        [w("Sun", "02:00", "03:00", "America/New_York")],
        z(2026, 3, 8, 7),
        closed(z(2026, 3, 15, 6)),
    ),
    # --- America/New_York, fall back (Sun 1 November: 01:00-01:59 happens twice) ---
    "New York repeat: a start opens at the first 01:00 (EDT)": (
        [w("Sun", "01:00", "01:30", "America/New_York")],
        z(2026, 11, 1, 5),
        OPEN,
    ),
    "New York repeat: and ends at the first 01:30": (
        [w("Sun", "01:00", "01:30", "America/New_York")],
        z(2026, 11, 1, 5, 30),
        closed(z(2026, 11, 8, 6)),
    ),
    "New York repeat: the second 01:00-01:30 (EST) is closed": (
        [w("Sun", "01:00", "01:30", "America/New_York")],
        z(2026, 11, 1, 6, 15),
        closed(z(2026, 11, 8, 6)),
    ),
    "New York repeat: a window from Saturday ends at the first 01:15": (
        [w("Sat", "22:00", "01:15", "America/New_York")],
        z(2026, 11, 1, 5, 15),
        closed(z(2026, 11, 8, 3)),
    ),
    "New York repeat: a start after the change is on standard time": (
        [w("Sun", "03:00", "04:00", "America/New_York")],
        z(2026, 11, 1, 7, 59),
        closed(z(2026, 11, 1, 8)),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_window_state_at_a_fixed_clock(case: str) -> None:
    windows, now, expected = CASES[case]
    assert window_state(tuple(windows), now) == expected


@pytest.mark.parametrize("case", list(CASES))
def test_the_answer_does_not_depend_on_the_zone_now_is_given_in(case: str) -> None:
    windows, now, expected = CASES[case]
    assert window_state(tuple(windows), now.astimezone(NEW_YORK)) == expected
    assert window_state(tuple(windows), now.astimezone(ZoneInfo("Asia/Kolkata"))) == expected


def test_the_next_start_is_an_absolute_utc_instant() -> None:
    state = window_state((WEEKEND,), z(2026, 12, 1, 7).astimezone(BERLIN))
    assert state.next_start is not None
    assert not state.open
    assert state.next_start.utcoffset() == timedelta(0)
    assert state.next_start.isoformat() == "2026-12-05T01:00:00+00:00"


@pytest.mark.parametrize("windows", [None, ()])
def test_no_windows_means_always_open(windows: tuple[WindowSpec, ...] | None) -> None:
    state = window_state(windows, z(2026, 12, 1, 7))
    assert (state, state.open, state.next_start) == (OPEN, True, None)


LOCAL = {
    "an ordinary wall time": (date(2026, 12, 1), "10:15", BERLIN, z(2026, 12, 1, 9, 15)),
    "summer time": (date(2026, 7, 1), "10:15", BERLIN, z(2026, 7, 1, 8, 15)),
    "Berlin: skipped 02:00 is 03:00 CEST": (date(2026, 3, 29), "02:00", BERLIN, z(2026, 3, 29, 1)),
    "Berlin: skipped 02:59 is 03:00 CEST": (date(2026, 3, 29), "02:59", BERLIN, z(2026, 3, 29, 1)),
    "Berlin: 03:00 exists": (date(2026, 3, 29), "03:00", BERLIN, z(2026, 3, 29, 1)),
    "Berlin: 01:59 before the gap": (date(2026, 3, 29), "01:59", BERLIN, z(2026, 3, 29, 0, 59)),
    "Berlin: repeated 02:00 is the CEST one": (
        date(2026, 10, 25),
        "02:00",
        BERLIN,
        z(2026, 10, 25, 0),
    ),
    "Berlin: repeated 02:59 is the CEST one": (
        date(2026, 10, 25),
        "02:59",
        BERLIN,
        z(2026, 10, 25, 0, 59),
    ),
    "Berlin: 03:00 after the repeat": (date(2026, 10, 25), "03:00", BERLIN, z(2026, 10, 25, 2)),
    "New York: skipped 02:30 is 03:00 EDT": (date(2026, 3, 8), "02:30", NEW_YORK, z(2026, 3, 8, 7)),
    "New York: repeated 01:30 is the EDT one": (
        date(2026, 11, 1),
        "01:30",
        NEW_YORK,
        z(2026, 11, 1, 5, 30),
    ),
    # Lord Howe Island moves its clocks by half an hour: 02:00 → 02:30 on 4 October 2026.
    "Lord Howe: a half-hour gap": (
        date(2026, 10, 4),
        "02:10",
        ZoneInfo("Australia/Lord_Howe"),
        z(2026, 10, 3, 15, 30),
    ),
}


@pytest.mark.parametrize("case", list(LOCAL))
def test_a_local_wall_time_as_an_instant(case: str) -> None:
    day, clock, zone, expected = LOCAL[case]
    hours, minutes = clock.split(":")
    instant = local_instant(day, int(hours) * 60 + int(minutes), zone)
    assert instant == expected
    assert instant.tzinfo is UTC
