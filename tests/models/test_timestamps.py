"""Status timestamps on the wire: RFC 3339 in UTC, as metav1.Time writes and reads them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from imagerefresh.models import TargetStatus

LOCKED = {"kind": "Deployment", "namespace": "tracebloc", "name": "jobs-manager"}


@pytest.fixture
def eastern_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local zone is UTC-5, as on a node whose TZ nobody set to UTC."""
    monkeypatch.setenv("TZ", "EST5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("eastern_local_time")
def test_a_timestamp_is_written_in_utc_whatever_the_local_zone() -> None:
    berlin = timezone(timedelta(hours=1))
    status = TargetStatus(
        **LOCKED, phase="Locked", locked_at=datetime(2026, 11, 29, 13, 0, 5, tzinfo=berlin)
    )
    assert status.to_api()["lockedAt"] == "2026-11-29T12:00:05Z"


def test_a_timestamp_read_back_is_the_same_instant_in_utc() -> None:
    status = TargetStatus.model_validate(
        {**LOCKED, "phase": "Locked", "lockedAt": "2026-11-29T12:00:05Z"}
    )
    assert status.locked_at == datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)
    assert status.locked_at.utcoffset() == timedelta(0)
    assert status.to_api()["lockedAt"] == "2026-11-29T12:00:05Z"
