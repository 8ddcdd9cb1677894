"""The progress deadline of a rollout of ours: ``rolloutTimeout`` without progress, not in all.

The spec's step b judges a refresh or a rollback that has not settled within ``rolloutTimeout``
a failure, and its step 4 says what that time counts: a rollout fails when it has made no
progress (updated or available replicas, or scheduled nodes) for that long, so a DaemonSet
rolling across many nodes is not a bad image while it keeps moving. The pending patch carries
the high-water mark of what the rollout reached and when it last moved; each decision raises it
when the workload shows more, and the deadline runs from the last move (or from the start).
"""

from __future__ import annotations

from imagerefresh.models import PendingRefresh, ProgressMark, format_duration
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.target.decision import Decision
from imagerefresh.rollout import RolloutProgress

__all__ = ["controller_failed", "stalled", "timed_out", "track_progress"]


def track_progress(
    decision: Decision, workload: Workload, pending: PendingRefresh
) -> PendingRefresh:
    """Record a new high-water mark of the rollout: the progress deadline starts again.

    The first counts seen (once the controller observed the patched spec) are the baseline,
    not progress: until the rollout moves beyond them the deadline runs from ``startedAt``.
    """
    seen = workload.progress
    if seen is None:
        return pending
    mark = pending.progress
    before = RolloutProgress(mark.updated, mark.available) if mark is not None else None
    if before is not None and not seen.beyond(before):
        return pending
    highest = seen.highest(before)
    changes: dict[str, object] = {
        "progress": ProgressMark(updated=highest.updated, available=highest.available)
    }
    if before is not None:
        changes["progressed_at"] = decision.ctx.now
    tracked = pending.model_copy(update=changes)
    decision.update(pending=tracked)
    return tracked


def controller_failed(workload: Workload, pending: PendingRefresh) -> bool:
    """Whether the workload's controller reports our rollout failed — not a failure of the
    rollout before it that its status still shows (:meth:`RolloutVerdict.failed_since`)."""
    return workload.verdict.failed_since(pending.started_at)


def timed_out(decision: Decision, pending: PendingRefresh) -> bool:
    since = pending.progressed_at or pending.started_at
    return decision.ctx.now - since > decision.rollout_timeout


def stalled(decision: Decision, pending: PendingRefresh) -> str:
    """Why a rollout ran out of time, with what it had reached: the SRE's first question."""
    timeout = format_duration(decision.rollout_timeout)
    mark = pending.progress
    reached = (
        f"; it reached {mark.updated} updated and {mark.available} available"
        if mark is not None
        else "; the controller never reported it under way"
    )
    since = (pending.progressed_at or pending.started_at).isoformat()
    return f"it made no progress for rolloutTimeout {timeout} (since {since}){reached}"
