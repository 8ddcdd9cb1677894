"""Events leave the tick: posted in the background, a few at a time, once per reason on the policy.

An Event is best-effort — losing one never changes a decision — while a tick's patches and
status are not. Posting events inside the ticks puts them ahead of other policies' work: when
500 targets refresh at once, a thousand Event writes (each about the policy and the workload)
would compete with the patches still to come. So a tick hands its events to the
:class:`EventRecorder` and finishes; a small pool of threads posts them. The backlog is
bounded: when the API server cannot keep up, events are dropped and logged, never queued
without limit.

An event about a target is posted about its workload (``kubectl describe deployment`` shows it)
and about the policy; a tick that refreshes five targets tells the policy once — one event per
type and reason, naming each target — rather than five times, so a policy's event list reads
as its ticks and costs the API server one write where it cost one per target.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.events import MAX_EVENT_MESSAGE
from imagerefresh.planner import Event

__all__ = ["DEFAULT_BACKLOG", "DEFAULT_WORKERS", "EventRecorder", "about_the_policy"]

log = structlog.get_logger(__name__)

DEFAULT_WORKERS = 2
DEFAULT_BACKLOG = 10_000


def about_the_policy(events: Sequence[Event]) -> list[tuple[str, str, str]]:
    """The tick's events as the policy is told them: (type, reason, message), one per type and
    reason in the order they first came; events of one reason about several targets are
    joined ("3 targets: …; …"), as many as fit and then how many more."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for event in events:
        grouped.setdefault((event.type, event.reason), []).append(event.message)
    return [(kind, reason, _summary(messages)) for (kind, reason), messages in grouped.items()]


def _summary(messages: list[str]) -> str:
    if len(messages) == 1:
        return messages[0]
    text = f"{len(messages)} targets: {messages[0]}"
    for shown, message in enumerate(messages[1:], start=1):
        joined, left = f"{text}; {message}", len(messages) - shown - 1
        # What follows must still fit the API layer's cut: the count of the messages not named.
        if len(joined) + (len(_more(left)) if left else 0) > MAX_EVENT_MESSAGE:
            return text + _more(len(messages) - shown)
        text = joined
    return text


def _more(count: int) -> str:
    return f"; and {count} more (each on its workload)"


class EventRecorder:
    """Posts core/v1 Events through ``api`` on ``workers`` threads of its own."""

    def __init__(
        self,
        api: KubeApi,
        *,
        workers: int = DEFAULT_WORKERS,
        backlog: int = DEFAULT_BACKLOG,
        on_dropped: Callable[[], object] | None = None,
    ) -> None:
        self._api = api
        self._backlog = backlog
        self._on_dropped = on_dropped
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="imagerefresh-events")
        self._lock = threading.Condition()
        self._pending = 0
        self.dropped = 0

    def record(self, regarding: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Queue one Event about ``regarding``; returns at once."""
        with self._lock:
            if self._pending >= self._backlog:
                self.dropped += 1
                if self._on_dropped is not None:
                    self._on_dropped()
                log.warning(
                    "event dropped: the API server is not keeping up with events",
                    reason=reason,
                    backlog=self._backlog,
                )
                return
            self._pending += 1
        self._pool.submit(self._post, regarding, type, reason, message)

    def _post(self, regarding: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        try:
            self._api.post_event(regarding, type, reason, message)  # never raises
        finally:
            with self._lock:
                self._pending -= 1
                self._lock.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every recorded event has been posted (or dropped); False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Post what is queued, then stop the threads."""
        self._pool.shutdown(wait=True)
