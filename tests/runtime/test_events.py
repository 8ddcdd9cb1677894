"""The event recorder: a tick never waits for its events, a full backlog drops, counted, and the
policy is told each reason once."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.events import MAX_EVENT_MESSAGE
from imagerefresh.planner import Event, TargetKey
from imagerefresh.runtime.events import EventRecorder, about_the_policy


class BlockedApi:
    """Stands in for KubeApi.post_event: holds every post until released (a slow API server)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.posted: list[str] = []

    def post_event(
        self, regarding: Mapping[str, Any], type: str, reason: str, message: str
    ) -> None:
        self.release.wait(10)
        self.posted.append(reason)


def recorder_on(api: BlockedApi, **kwargs: Any) -> EventRecorder:
    stand_in: Any = api
    fake: KubeApi = stand_in
    return EventRecorder(fake, **kwargs)


def test_record_returns_before_the_event_is_posted_and_wait_idle_sees_it_through() -> None:
    api = BlockedApi()
    recorder = recorder_on(api)
    recorder.record({}, "Normal", "Refreshing", "a → b")
    assert api.posted == []  # the API server has not answered, the tick has moved on
    assert not recorder.wait_idle(0.05)
    api.release.set()
    assert recorder.wait_idle(10)
    assert api.posted == ["Refreshing"]
    recorder.close()


def test_a_full_backlog_drops_events_and_counts_them() -> None:
    api = BlockedApi()
    dropped: list[int] = []
    recorder = recorder_on(api, workers=1, backlog=2, on_dropped=lambda: dropped.append(1))
    for reason in ("first", "second", "third", "fourth"):
        recorder.record({}, "Normal", reason, "")
    assert recorder.dropped == 2
    assert len(dropped) == 2
    api.release.set()
    assert recorder.wait_idle(10)
    assert api.posted == ["first", "second"]
    recorder.record({}, "Normal", "fifth", "")  # room again once the backlog drained
    assert recorder.wait_idle(10)
    assert api.posted[-1] == "fifth"
    recorder.close()


def _refreshing(name: str, message: str | None = None) -> Event:
    key = TargetKey("Deployment", "edge", name)
    return Event("Normal", "Refreshing", message or f"patching {key}: app → 1234", key)


def test_the_policy_is_told_one_event_per_reason_naming_each_target() -> None:
    events = [
        _refreshing("a"),
        Event("Warning", "RefreshFailed", "refresh of Deployment edge/c failed"),
        _refreshing("b"),
        Event("Normal", "AllCurrent", "every target runs its newest build"),
    ]
    assert about_the_policy(events) == [
        (
            "Normal",
            "Refreshing",
            "2 targets: patching Deployment edge/a: app → 1234; "
            "patching Deployment edge/b: app → 1234",
        ),
        ("Warning", "RefreshFailed", "refresh of Deployment edge/c failed"),
        ("Normal", "AllCurrent", "every target runs its newest build"),
    ]


def test_one_event_of_a_reason_reaches_the_policy_as_it_is() -> None:
    assert about_the_policy([_refreshing("a")]) == [
        ("Normal", "Refreshing", "patching Deployment edge/a: app → 1234")
    ]


def test_the_same_reason_in_normal_and_warning_stays_two_events() -> None:
    normal, warning = Event("Normal", "X", "n"), Event("Warning", "X", "w")
    assert about_the_policy([normal, warning]) == [("Normal", "X", "n"), ("Warning", "X", "w")]


def test_a_summary_of_many_targets_fits_an_event_and_counts_those_it_does_not_name() -> None:
    events = [_refreshing(f"t{i:02d}", f"patching t{i:02d}: " + "x" * 90) for i in range(64)]
    [(_, _, message)] = about_the_policy(events)
    assert len(message) <= MAX_EVENT_MESSAGE
    named = message.count("patching t")
    assert named < 64
    assert message.startswith("64 targets: patching t00: ")
    assert message.endswith(f"; and {64 - named} more (each on its workload)")


def test_a_summary_that_fits_whole_names_every_target_and_no_count() -> None:
    events = [_refreshing(f"t{i}", f"patching t{i}") for i in range(3)]
    [(_, _, message)] = about_the_policy(events)
    assert message == "3 targets: patching t0; patching t1; patching t2"


def test_no_summary_outgrows_an_event_whatever_its_targets_messages_measure() -> None:
    for size in range(1, 400):
        events = [_refreshing(f"t{i}", "m" * size) for i in range(64)]
        [(_, _, message)] = about_the_policy(events)
        assert len(message) <= MAX_EVENT_MESSAGE, size
        # Every target is named or counted, none twice.
        named = len(re.findall(rf"(?:: |; )m{{{size}}}(?=;|$)", message))
        more = re.search(r"; and (\d+) more \(each on its workload\)$", message)
        assert named + (int(more[1]) if more else 0) == 64, size
