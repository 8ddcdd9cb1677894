"""The leader-election decision (client-go's semantics), as a table: no I/O, no clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from imagerefresh.lease import (
    Action,
    LeaseRecord,
    Observation,
    claim,
    decide,
    observe,
    record_from_api,
    record_to_api,
    released,
)

ME, OTHER = "pod-a_1", "pod-b_2"
STAMP = datetime(2026, 12, 1, 4, 0, 0, 123456, tzinfo=UTC)


def held_by(holder: str, duration: int = 15, transitions: int = 2) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        duration_seconds=duration,
        acquire_time="2026-12-01T03:00:00.000000Z",
        renew_time="2026-12-01T03:59:58.000000Z",
        transitions=transitions,
    )


@pytest.mark.parametrize(
    ("record", "observed_since", "now", "expected"),
    [
        pytest.param(None, 0.0, 0.0, Action.TAKE, id="no-lease-takes"),
        pytest.param(
            LeaseRecord(holder=""), 100.0, 100.0, Action.TAKE, id="released-takes-at-once"
        ),
        pytest.param(held_by(ME), 100.0, 500.0, Action.RENEW, id="own-lease-renews-even-if-old"),
        pytest.param(held_by(OTHER), 100.0, 100.0, Action.WAIT, id="fresh-other-waits"),
        pytest.param(held_by(OTHER), 100.0, 114.999, Action.WAIT, id="other-just-before-expiry"),
        pytest.param(held_by(OTHER), 100.0, 115.0, Action.TAKE, id="other-expires-at-duration"),
        pytest.param(held_by(OTHER), 100.0, 200.0, Action.TAKE, id="long-expired-other-takes"),
        pytest.param(held_by(OTHER, duration=60), 100.0, 130.0, Action.WAIT, id="its-duration"),
        pytest.param(held_by(OTHER, duration=0), 100.0, 110.0, Action.WAIT, id="no-duration-ours"),
        pytest.param(held_by(OTHER, duration=0), 100.0, 115.0, Action.TAKE, id="no-dur-expires"),
    ],
)
def test_decide_takes_renews_or_waits_as_client_go_does(
    record: LeaseRecord | None, observed_since: float, now: float, expected: Action
) -> None:
    assert decide(record, observed_since, now, ME, default_duration=15) is expected


def test_expiry_counts_from_when_the_record_was_first_seen_not_from_its_renew_time() -> None:
    # renewTime is another machine's clock: an hour-old stamp on a record first seen now is
    # not expired; the observation clock restarts whenever the record changes.
    stale_stamp = held_by(OTHER)
    seen = observe(None, stale_stamp, now=1000.0)
    assert decide(stale_stamp, seen.since, 1010.0, ME, 15) is Action.WAIT
    assert observe(seen, stale_stamp, now=1010.0) == seen  # unchanged: the clock keeps running
    renewed = LeaseRecord(**{**held_by(OTHER).__dict__, "renew_time": "2026-12-01T04:00:10Z"})
    again = observe(seen, renewed, now=1014.0)
    assert again == Observation(renewed, 1014.0)
    assert decide(renewed, again.since, 1020.0, ME, 15) is Action.WAIT
    assert decide(renewed, again.since, 1029.0, ME, 15) is Action.TAKE


def test_taking_counts_a_transition_and_renewing_keeps_acquire_time_and_count() -> None:
    taken = claim(held_by(OTHER, transitions=4), Action.TAKE, ME, 15, STAMP)
    assert taken == LeaseRecord(
        holder=ME,
        duration_seconds=15,
        acquire_time="2026-12-01T04:00:00.123456Z",
        renew_time="2026-12-01T04:00:00.123456Z",
        transitions=5,
    )
    renewed = claim(held_by(ME, transitions=4), Action.RENEW, ME, 15, STAMP)
    assert renewed.acquire_time == "2026-12-01T03:00:00.000000Z"
    assert renewed.renew_time == "2026-12-01T04:00:00.123456Z"
    assert (renewed.holder, renewed.transitions) == (ME, 4)
    assert claim(None, Action.TAKE, ME, 15, STAMP).transitions == 0  # a new Lease
    with pytest.raises(ValueError, match="writes nothing"):
        claim(held_by(OTHER), Action.WAIT, ME, 15, STAMP)


def test_a_released_lease_has_no_holder_and_is_taken_at_once_by_a_standby() -> None:
    gone = released(held_by(ME, transitions=3), STAMP)
    assert (gone.holder, gone.duration_seconds, gone.transitions) == ("", 1, 3)
    assert decide(gone, observed_since=50.0, now=50.0, identity=OTHER, default_duration=15) is (
        Action.TAKE
    )


def test_lease_json_round_trips_and_fields_of_the_wrong_type_read_as_absent() -> None:
    record = held_by(ME)
    assert record_from_api({"spec": record_to_api(record)}) == record
    hostile = {
        "spec": {
            "holderIdentity": 7,
            "leaseDurationSeconds": True,
            "leaseTransitions": -3,
            "renewTime": ["x"],
        }
    }
    assert record_from_api(hostile) == LeaseRecord()
    assert record_from_api({}) == LeaseRecord()
