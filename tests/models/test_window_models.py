"""``spec.windows``: what a refresh window accepts, what it refuses, and why."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from imagerefresh.models import PolicySpec, Weekday, WindowSpec


def window(**fields: Any) -> dict[str, Any]:
    return {"days": ["Sat", "Sun"], "start": "02:00", "end": "05:00", "timeZone": "UTC", **fields}


def test_a_window_reads_its_days_clock_times_and_zone() -> None:
    parsed = WindowSpec.model_validate(window(timeZone="Europe/Berlin", end="23:59"))
    assert parsed.days == (Weekday.SAT, Weekday.SUN)
    assert (parsed.start_minute, parsed.end_minute) == (120, 23 * 60 + 59)
    assert parsed.zone.key == "Europe/Berlin"
    assert parsed.to_api() == {
        "days": ["Sat", "Sun"],
        "start": "02:00",
        "end": "23:59",
        "timeZone": "Europe/Berlin",
    }


def test_weekdays_number_as_date_weekday_does() -> None:
    monday = date(2026, 11, 30)
    assert [d.weekday for d in Weekday] == [(monday + timedelta(n)).weekday() for n in range(7)]
    assert [str(d) for d in Weekday] == ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def test_windows_are_optional_and_absent_by_default() -> None:
    targets = [{"kind": "Deployment", "name": "x", "containers": [{"name": "a", "image": "a:b"}]}]
    assert PolicySpec.model_validate({"targets": targets}).windows is None
    spec = PolicySpec.model_validate({"targets": targets, "windows": [window()]})
    assert spec.windows == (WindowSpec.model_validate(window()),)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"days": []}, "at least 1 item"),
        ({"days": ["Sat", "Sat"]}, "each day may be listed once per window"),
        ({"days": ["Saturday"]}, "'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat' or 'Sun'"),
        ({"days": ["sat"]}, "'Mon', 'Tue'"),
        ({"start": "24:00"}, "should match pattern"),
        ({"start": "7:00"}, "should match pattern"),
        ({"end": "12:60"}, "should match pattern"),
        ({"end": "12:00:00"}, "should match pattern"),
        ({"timeZone": "Europe/Atlantis"}, "timeZone 'Europe/Atlantis' is not an IANA time zone"),
        ({"timeZone": "Europe"}, "timeZone 'Europe' is not an IANA time zone"),
        ({"timeZone": "../etc/passwd"}, "should match pattern"),
        ({"timeZone": "/usr/share/zoneinfo/UTC"}, "should match pattern"),
        ({"timeZone": ""}, "at least 1 character"),
    ],
)
def test_a_malformed_window_is_refused_with_the_reason(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        WindowSpec.model_validate(window(**fields))


def test_an_unknown_zone_says_what_to_write_instead() -> None:
    with pytest.raises(ValidationError) as refused:
        WindowSpec.model_validate(window(timeZone="CEST"))
    assert "(e.g. Europe/Berlin, America/New_York, UTC); fix the policy" in str(refused.value)


def test_an_empty_list_of_windows_is_refused_rather_than_read_as_always() -> None:
    targets = [{"kind": "Deployment", "name": "x", "containers": [{"name": "a", "image": "a:b"}]}]
    with pytest.raises(ValidationError, match="at least 1 item"):
        PolicySpec.model_validate({"targets": targets, "windows": []})


@pytest.mark.parametrize("zone", ["UTC", "Etc/GMT+5", "America/Argentina/Buenos_Aires"])
def test_iana_names_of_every_shape_are_accepted(zone: str) -> None:
    assert WindowSpec.model_validate(window(timeZone=zone)).time_zone == zone
