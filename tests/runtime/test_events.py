"""The event recorder: a tick never waits for its events, and a full backlog drops, counted."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from imagerefresh.kube.api import KubeApi
from imagerefresh.runtime.events import EventRecorder


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
