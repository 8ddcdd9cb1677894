"""What to follow between interval ticks: the rollouts of ours in flight, and their deadlines.

After a tick, every target whose status holds a ``pending`` patch has a rollout of ours in
flight (or owed). The shell watches those workloads and ticks again — a follow-up tick, which
judges only them — as soon as one changes, so that a verdict arrives within seconds of the
rollout settling or failing rather than at the next interval. A rollout that stops changing
altogether still needs a verdict once its progress deadline passes: :func:`in_flight` says
when that is, so the shell can tick then without polling for it.

A refresh with a health window (``healthyFor``) is judged on its pods too, from the patch to
the window's end: :attr:`InFlight.pods` names those workloads, whose pods' changes (a restart, a
back-off) tick the policy as the workload's own do, and the window's end is a deadline like the
progress deadline — the verdict follows it within the second.

A rollback the API server refused for good (an admission policy, RBAC) is owed: every tick
of the interval sends it again, and between them a follow-up does too, backing off — 2 s
after the first refusal, doubling with each, up to once per interval — so a refusal that
stays costs about a request per interval, not one every 2 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from imagerefresh.models import PendingPurpose, PendingRefresh, PolicySpec, PolicyStatus
from imagerefresh.planner.evidence import TargetKey

__all__ = ["NOTHING_IN_FLIGHT", "InFlight", "in_flight", "owed_retry_at"]

# A deadline is judged strictly after it passes (``now - since > timeout``): tick just past it.
_PAST_DEADLINE = timedelta(seconds=1)
# A health window is over at its end (``now >= end``, whole seconds): tick just after it.
_PAST_WINDOW = timedelta(milliseconds=100)
_FIRST_RETRY = timedelta(seconds=2)  # a refused rollback is sent again this soon, then later
_MAX_DOUBLINGS = 20


def owed_retry_at(pending: PendingRefresh, interval: timedelta) -> datetime | None:
    """When a follow-up sends a refused rollback again: None when it was not refused."""
    if pending.purpose is not PendingPurpose.ROLLBACK or pending.refused_at is None:
        return None
    doublings = min(max(pending.refusals - 1, 0), _MAX_DOUBLINGS)
    backoff: timedelta = min(interval, _FIRST_RETRY * (1 << doublings))
    return pending.refused_at + backoff


@dataclass(frozen=True, slots=True)
class InFlight:
    """The workloads with a rollout of ours in flight, and the earliest verdict that falls due
    without any change to them (None when nothing is in flight); ``pods``: those of them whose
    pods are judged too (a refresh's health window: its pods' changes tick the policy)."""

    workloads: frozenset[TargetKey]
    deadline: datetime | None
    pods: frozenset[TargetKey] = frozenset()


NOTHING_IN_FLIGHT = InFlight(frozenset(), None)


def in_flight(
    spec: PolicySpec, status: PolicyStatus, namespace: str, now: datetime | None = None
) -> InFlight:
    """The rollouts a policy's ``status`` says are in flight; ``namespace`` is the policy's.

    ``now``: the tick's instant; a health window that ended by then (a success held for its
    lockstep peers) is no deadline any more.
    """
    targets = {TargetKey(t.kind, t.namespace or namespace, t.name): t for t in spec.targets}
    workloads: set[TargetKey] = set()
    pods: set[TargetKey] = set()
    deadlines: list[datetime] = []
    for target in status.targets:
        key = TargetKey(target.kind, target.namespace, target.name)
        pending, declared = target.pending, targets.get(key)
        if pending is None or declared is None:
            continue
        workloads.add(key)
        retry = owed_retry_at(pending, spec.interval)
        if retry is not None:
            deadlines.append(retry)  # refused: sent again then, not at a progress deadline
            continue
        window = spec.healthy_for_of(declared)
        watched = pending.purpose is PendingPurpose.REFRESH and bool(window)
        if pending.settled_at is not None:
            end = pending.settled_at + window
            if watched and (now is None or end > now):
                pods.add(key)  # settled: its health window runs until ``end``
                deadlines.append(end + _PAST_WINDOW)
            continue  # healthy, waiting for its lockstep peers: no deadline of its own left
        if watched:
            pods.add(key)  # a crash while it rolls out fails it too
        since = pending.progressed_at or pending.started_at
        timeout = declared.rollout_timeout or spec.rollout_timeout
        deadlines.append(since + timeout + _PAST_DEADLINE)
    return InFlight(frozenset(workloads), min(deadlines, default=None), frozenset(pods))
