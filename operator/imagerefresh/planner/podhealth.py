"""What a pod's container statuses say about crashes: the evidence of a refresh's health window.

A refresh succeeds only when the pods of the new build stay up for a while after the rollout
settled (:mod:`imagerefresh.planner.target.health`). What tells is the kubelet's report of each
container (``status.containerStatuses[]`` and ``initContainerStatuses[]``):

- ``restartCount`` — how many times the container was started again;
- ``lastState.terminated`` — the previous instance, which ended and was restarted: its
  ``reason`` (``Error``, ``OOMKilled``, ``Completed``, ``StartError``…), ``exitCode`` and
  ``finishedAt``. Only the latest such instance is kept by the kubelet, so its time bounds every
  earlier restart too;
- ``state`` — the instance now: ``running`` (since ``startedAt``), ``terminated`` (it ended and
  is about to be restarted) or ``waiting`` (``CrashLoopBackOff`` between restarts, or
  ``ContainerCreating``, ``ErrImagePull``…, which are not crashes).

:func:`container_health` keeps only containers that show trouble (a restart, an ended instance,
a back-off) and only the fields the rule reads, so a watch-fed copy of healthy pods costs
nothing more. Its reading is strict about shape (the API server validates pod status) and
reads a time it cannot parse as unknown, never as "now".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "CRASH_LOOP",
    "OOM_KILLED",
    "ContainerHealth",
    "Exit",
    "container_health",
    "timestamp",
]

CRASH_LOOP = "CrashLoopBackOff"
OOM_KILLED = "OOMKilled"


def timestamp(value: object) -> datetime | None:
    """An RFC 3339 time of the API (``2026-12-04T14:20:16Z``); None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@dataclass(frozen=True, slots=True)
class Exit:
    """An instance of a container that ended: why, with what code, and when."""

    reason: str  # as the kubelet gives it; "" when it gave none
    code: int | None  # None when the kubelet gave none
    at: datetime | None  # finishedAt; None when unknown
    started: datetime | None = None  # startedAt of the instance that ended; None when unknown

    @classmethod
    def from_api(cls, terminated: object) -> Exit | None:
        if not isinstance(terminated, Mapping):
            return None
        code = terminated.get("exitCode")
        return cls(
            str(terminated.get("reason") or "")[:64],
            int(code) if code is not None else None,
            timestamp(terminated.get("finishedAt")),
            timestamp(terminated.get("startedAt")),
        )

    @property
    def failed(self) -> bool:
        """An error exit, or one killed for memory (an unknown code is not a success)."""
        return self.code != 0 or self.reason == OOM_KILLED

    def __str__(self) -> str:
        code = f"exit code {self.code}" if self.code is not None else "no exit code"
        return f"{code} ({self.reason})" if self.reason else code


@dataclass(frozen=True, slots=True)
class ContainerHealth:
    """A container that restarted, ended or backs off, as its kubelet reported it."""

    restarts: int
    init: bool = False  # an init container: it ends by design, only a failed exit is a crash
    waiting: str | None = None  # state.waiting.reason (CrashLoopBackOff…)
    since: datetime | None = None  # state.running.startedAt: when the instance now running began
    ended: Exit | None = None  # state.terminated: the instance that ran last has ended
    last: Exit | None = None  # lastState.terminated: the instance before, restarted since


def container_health(status: Mapping[str, Any], *, init: bool) -> ContainerHealth | None:
    """What one ``containerStatuses[]`` (``init``: ``initContainerStatuses[]``) entry says about
    crashes; None when it shows none."""
    restarts = int(status.get("restartCount") or 0)
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated")
    waiting = state.get("waiting")
    reason = waiting.get("reason") if isinstance(waiting, Mapping) else None
    ended = Exit.from_api(state.get("terminated"))
    if init and ended is not None and not ended.failed and restarts == 0:
        return None  # an init container that completed, as it should
    if restarts == 0 and ended is None and last is None and reason != CRASH_LOOP:
        return None
    running = state.get("running")
    return ContainerHealth(
        restarts=restarts,
        init=init,
        waiting=str(reason)[:64] if reason else None,
        since=timestamp(running.get("startedAt")) if isinstance(running, Mapping) else None,
        ended=ended,
        last=Exit.from_api(last),
    )
