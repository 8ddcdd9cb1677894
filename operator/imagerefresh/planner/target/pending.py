"""A pending patch of ours is judged first, by what the workload carries now.

The spec's step b. The intent of every patch (refresh or rollback) is recorded in status before
the patch is sent, so after a crash or a lost status write the next decision still knows it. It
is judged by the images the workload carries:

- our images — the patch landed, so its rollout is judged (:mod:`.verdict` for a refresh,
  :mod:`.rollback` for a rollback);
- the images it replaced — it never landed: a refresh is planned afresh, a rollback is owed and
  sent again; unless the workload changed after the generation the patch produced
  (:mod:`.landing`), when someone reverted it, as a GitOps self-heal does;
- anything else — another writer moved them (:mod:`.contest`).

A pending patch read back from status is trusted only when it could be ours: containers the
policy declares, instants not in the future, and images the write guard would let through.
Anything else makes the target Error, with nothing patched on it, until a reset rebuilds the
status from live evidence.
"""

from __future__ import annotations

from datetime import timedelta

from imagerefresh.models import PendingPurpose, PendingRefresh, Phase
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.guard import unsafe_changes
from imagerefresh.planner.target.contest import contest_pending
from imagerefresh.planner.target.decision import Decision, TargetOutcome
from imagerefresh.planner.target.landing import reverted
from imagerefresh.planner.target.rollback import judge_rollback, owe_rollback
from imagerefresh.planner.target.verdict import judge_refresh

__all__ = ["judge_pending"]

_CLOCK_SKEW = timedelta(minutes=5)  # what a status written by another replica may be ahead


def judge_pending(decision: Decision, workload: Workload) -> TargetOutcome | None:
    """The outcome our pending patch decides, or None when the decision goes on without it."""
    pending = decision.status.pending
    if pending is None:
        return None
    problem = _problem(decision, workload, pending)
    if problem is None:
        return _judge(decision, workload, pending)
    if not decision.ctx.reset:
        decision.outcome.degraded = True
        return decision.finish(Phase.ERROR, problem)
    decision.update(pending=None)  # a reset rebuilds from live evidence
    return None


def _problem(decision: Decision, workload: Workload, pending: PendingRefresh) -> str | None:
    """Why a pending patch read back from status cannot be ours for this target."""
    why = _foreign(decision, pending) or _unsafe(decision, workload, pending)
    if why is None:
        return None
    return (
        f"status.pending of {decision.key} {why}: it was not written by imagerefresh for this "
        "target, so nothing is patched on it; reset the policy to rebuild its status: "
        f"imagerefresh reset {decision.ctx.policy}"
    )


def _foreign(decision: Decision, pending: PendingRefresh) -> str | None:
    """Containers the policy does not declare, or an instant no replica could have written."""
    strangers = sorted(set(pending.images) - set(decision.tracked))
    ahead = decision.ctx.now + _CLOCK_SKEW
    if strangers:
        return f"names containers the policy does not declare ({', '.join(strangers)})"
    if pending.started_at > ahead:
        # A start in the future would never reach its progress deadline.
        return f"starts in the future ({pending.started_at.isoformat()})"
    if pending.progressed_at is not None and pending.progressed_at > ahead:
        return f"progressed in the future ({pending.progressed_at.isoformat()})"
    if pending.settled_at is not None and pending.settled_at > ahead:
        return f"settled in the future ({pending.settled_at.isoformat()})"
    if pending.refused_at is not None and pending.refused_at > ahead:
        return f"was refused in the future ({pending.refused_at.isoformat()})"
    return None


def _unsafe(decision: Decision, workload: Workload, pending: PendingRefresh) -> str | None:
    # The write guard's own rule, applied to both directions of the recorded patch.
    both = (pending, pending.model_copy(update={"images": pending.previous}))
    unsafe = [p for side in both for p in unsafe_changes(decision.patch(workload, side))]
    if not unsafe:
        return None
    return f"names images outside the tracked repository ({'; '.join(unsafe)})"


def _judge(decision: Decision, workload: Workload, pending: PendingRefresh) -> TargetOutcome | None:
    now = {name: workload.containers[name].image for name in pending.images}
    if now == pending.images:
        if pending.purpose is PendingPurpose.ROLLBACK:
            return judge_rollback(decision, workload, pending)
        return judge_refresh(decision, workload, pending)
    # Back at the images it replaced: a patch that never landed (a crash, a lost refusal) —
    # unless its spec changed after the generation the patch produced, when someone reverted
    # it, as a GitOps self-heal does.
    back = now == pending.previous
    if back and not reverted(pending, workload):
        if pending.purpose is PendingPurpose.ROLLBACK:
            return owe_rollback(decision, workload, pending)
        decision.update(pending=None)
        return None
    contest_pending(decision, workload, now, back)
    return None
