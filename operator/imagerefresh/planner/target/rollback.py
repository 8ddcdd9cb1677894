"""Rollbacks: restoring the images a failed refresh replaced, and following that rollout.

Part of the spec's step b (with ``rollbackOnFailure``) and of step g. A rollback is recorded as
the pending patch — its images are the refresh's ``previous`` — before it is sent, like every
patch of ours. It is then judged as it rolls out: settled is done; failed or out of time is
never rolled back in turn (the decision just stops following it and the skip streak takes
over). A rollback whose images never reached the workload (refused, lost) is owed, and sent
again every tick until it lands.
"""

from __future__ import annotations

from imagerefresh.models import PendingPurpose, PendingRefresh, Phase
from imagerefresh.planner import reasons
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.follow import owed_retry_at
from imagerefresh.planner.target.deadline import (
    controller_failed,
    stalled,
    timed_out,
    track_progress,
)
from imagerefresh.planner.target.decision import Decision, TargetOutcome

__all__ = ["judge_rollback", "owe_rollback", "send_rollback"]


def send_rollback(
    decision: Decision, workload: Workload, pending: PendingRefresh, because: str = ""
) -> str:
    """Record and plan the rollback of ``pending``: the images it replaced, restored."""
    rollback = PendingRefresh(
        purpose=PendingPurpose.ROLLBACK,
        images=pending.previous,
        previous=pending.images,
        started_at=decision.ctx.now,
    )
    decision.update(pending=rollback)
    decision.outcome.patch = decision.patch(workload, rollback)
    restored = ", ".join(f"{n}={i}" for n, i in sorted(rollback.images.items()))
    decision.event(
        "Warning", reasons.ROLLING_BACK, f"rolling {decision.key} back to {restored}{because}"
    )
    return restored


def judge_rollback(
    decision: Decision, workload: Workload, pending: PendingRefresh
) -> TargetOutcome | None:
    """Our rollback landed: follow it until it settles, fails or runs out of time."""
    pending = track_progress(decision, workload, pending)
    restored = ", ".join(f"{n}={i}" for n, i in sorted(pending.images.items()))
    if workload.verdict.settled:
        decision.update(pending=None)
        decision.event("Normal", reasons.ROLLED_BACK, f"{decision.key} rolled back to {restored}")
        return None
    failed = controller_failed(decision, workload, pending)
    if failed or timed_out(decision, pending):
        # Never roll back a rollback: stop following it; the skip streak takes over.
        decision.update(pending=None)
        why = workload.verdict.message if failed else stalled(decision, pending)
        decision.event(
            "Warning",
            reasons.ROLLBACK_STALLED,
            f"the rollback of {decision.key} to {restored} has not settled: {why}",
        )
        return None
    message = f"rolling back to {restored}: {workload.verdict.message}"
    if decision.locked:
        return decision.finish(Phase.LOCKED, decision.locked_message(message))
    return decision.finish(Phase.ROLLING_BACK, message)


def owe_rollback(decision: Decision, workload: Workload, pending: PendingRefresh) -> TargetOutcome:
    """A rollback recorded but not (yet) landed: owed, sent again every tick until it is —
    by a follow-up only once its back-off after a refusal has passed."""
    retry = owed_retry_at(pending, decision.ctx.spec.interval)
    if decision.ctx.follow_up and retry is not None and decision.ctx.now < retry:
        return decision.finish(decision.status.phase, decision.status.message)
    decision.outcome.patch = decision.patch(workload, pending)
    restored = ", ".join(f"{n}={i}" for n, i in sorted(pending.images.items()))
    message = f"rollback to {restored} owed: sending it again"
    if decision.locked:
        return decision.finish(Phase.LOCKED, decision.locked_message(message))
    return decision.finish(Phase.ROLLING_BACK, message)
