"""Refresh windows: is a refresh allowed to start now, and if not, when next.

A policy's ``windows`` are weekly, each in its own IANA time zone. A window opens on each of
its ``days`` at ``start`` local time and closes at ``end`` local time — the next day when
``end`` is at or before ``start`` (``start == end``: a full day) — so its ``days`` are the days
it *starts* on. It is half-open: open at its start, closed at its end.

Wall times are read as a site engineer means them across DST changes, the same way for start
and end:

- a time the clocks skip (spring forward: 02:30 in Europe/Berlin on the last Sunday of March)
  means the first instant after the gap (03:00 CEST), so a window starting in the gap opens
  when the gap ends, and one ending in it closes then;
- a time the clocks repeat (fall back: 02:30 in Europe/Berlin on the last Sunday of October)
  means its first occurrence (02:30 CEST), for a start and an end alike: a window 02:00-02:45
  on that night lasts 45 minutes, not an hour and 45.

So a window may be an hour shorter or longer on a DST night, and one lying entirely inside a
gap (02:15-02:45 on a spring-forward night) does not open that night at all.

Pure: :func:`window_state` is a function of the windows and an aware ``now``; the answer's
``next_start`` is an absolute UTC instant, which the planner writes into the status and the
scheduler wakes up for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from imagerefresh.models import WindowSpec

__all__ = [
    "OPEN",
    "WINDOW_OVERRIDE_ANNOTATION",
    "WindowState",
    "local_instant",
    "window_state",
    "window_times",
]

# Any new value lets refreshes start outside the windows in one tick, once per value
# (status.lastWindowOverride); the shell reads it, the planner's messages name it.
WINDOW_OVERRIDE_ANNOTATION = "images.tracebloc.io/refresh-outside-window"

_DAY = timedelta(days=1)
# The local days (relative to today) whose windows are looked at. A window starting on day d
# spans at most 25 hours, so only windows starting the day before can reach into today; and two
# weeks ahead always holds a window that opens (one can vanish into a DST gap, but not on two
# consecutive weeks).
_DAYS = range(-1, 15)


@dataclass(frozen=True, slots=True)
class WindowState:
    """Whether a refresh may start now: ``next_start`` None; else when the next window opens
    (UTC)."""

    next_start: datetime | None = None

    @property
    def open(self) -> bool:
        return self.next_start is None


OPEN = WindowState()


def _utc(local: datetime) -> datetime:
    return local.astimezone(UTC)


def _offset(second: int, zone: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(second, zone).utcoffset()


def _gap_end(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The second in ``(before, after]`` at which ``zone``'s offset changes: the first valid
    instant after a gap (a bisection: zoneinfo does not expose its transitions)."""
    low, high = int(before.timestamp()), int(after.timestamp())
    offset = _offset(low, zone)  # invariant: low has the old offset, high the new one
    # Each step halves (high - low), rounding up: this many steps bring it down to one second.
    for _ in range((high - low).bit_length()):
        middle = (low + high) // 2
        if _offset(middle, zone) == offset:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def local_instant(day: date, minute: int, zone: ZoneInfo) -> datetime:
    """The UTC instant of wall time ``minute`` (after midnight) on ``day`` in ``zone``.

    A repeated wall time is its first occurrence; a skipped one is the first instant after
    the gap (see the module docs).
    """
    wall = datetime.combine(day, time(minute // 60, minute % 60), tzinfo=zone)
    # zoneinfo reads fold=0 with the offset before a change and fold=1 with the one after. For
    # an ordinary wall time both are one instant; for a repeated one fold=0 is the first of
    # two; for a skipped one fold=1 is the earlier instant, and the change lies between them.
    first, second = _utc(wall.replace(fold=0)), _utc(wall.replace(fold=1))
    if first <= second:
        return first
    return _gap_end(second, first, zone)


def window_times(window: WindowSpec, day: date) -> tuple[datetime, datetime]:
    """When ``window`` opens and closes (UTC) if it starts on local ``day``.

    Reading wall times as :func:`local_instant` does keeps their order, so it never closes
    before it opens; a window lying inside a DST gap opens and closes at the same instant.
    """
    zone = window.zone
    opens = local_instant(day, window.start_minute, zone)
    end_day = day + _DAY if window.end_minute <= window.start_minute else day
    closes = local_instant(end_day, window.end_minute, zone)
    return opens, closes


def _openings(window: WindowSpec, now: datetime) -> Iterator[tuple[datetime, datetime]]:
    today = now.astimezone(window.zone).date()
    days = {day.weekday for day in window.days}
    for offset in _DAYS:
        day = today + offset * _DAY
        if day.weekday() in days:
            yield window_times(window, day)


def window_state(windows: Sequence[WindowSpec] | None, now: datetime) -> WindowState:
    """Whether ``now`` (aware) is inside any of ``windows``; if not, the next start (UTC).

    No windows (None or empty) means a refresh may start at any time.
    """
    if not windows:
        return OPEN
    starts: list[datetime] = []
    for window in windows:
        for opens, closes in _openings(window, now):
            if opens <= now < closes:
                return OPEN
            if opens > now and closes > opens:
                starts.append(opens)
    return WindowState(next_start=min(starts))
