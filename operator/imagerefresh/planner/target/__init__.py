"""One target's decision in a tick, independent of every other target.

The steps, lettered as the spec's tick letters them, run in this order, each in a module of its
own, and each may end the decision:

a. scope and shape (:mod:`.scope`) — a suspended policy, a namespace the policy may not reach,
   an absent workload, a declared container missing from the pod template, a live repository
   other than the tracked one, or an OnDelete workload: nothing is patched (Conflict / Missing);
b. a pending patch of ours (:mod:`.pending`; refresh or rollback, recorded in status before it
   was sent) is judged first, by what the workload carries now: our images — the patch landed,
   so judge its rollout (:mod:`.verdict`, :mod:`.rollback`: a refresh settled is a success;
   failed, or without progress for the progress deadline, :mod:`.deadline`, is a flap:
   attempts + 1, a rollback, Locked at the ceiling); the images it replaced — it never landed
   (a refresh is planned afresh, a rollback is owed and sent again); anything else — another
   writer moved them (a contested attempt naming that writer, :mod:`.contest`);
c. not settled without a refresh of ours — a skip (:mod:`.skip`: Skipping, Frozen at the
   ceiling);
d. settled — compare live images (and, for tags, the digests the pods run) with the desired
   digests (:mod:`.compare`);
j. what may be pinned — the gates a drifted digest must pass before it is refreshed to
   (:mod:`.gates`), between the comparison and the refresh;
e. drift — Locked targets wait for a reset; windows, lockstep peers and the pull budget may
   hold it; otherwise one guarded patch for every drifted container of the workload, recorded
   as ``pending`` first (:mod:`.refresh`).

What every step shares — the status being edited, the outcome, the lock rules — is
:class:`~.decision.Decision`. Unreadable evidence never becomes a patch: an API read error makes
the target Error, and a container whose digest could not be resolved is left alone (the others
still refresh).
"""

from __future__ import annotations

from imagerefresh.models import TargetSpec, TargetStatus
from imagerefresh.planner.evidence import TargetEvidence, TargetKey
from imagerefresh.planner.lockstep import NO_ORDERS, LockstepOrders
from imagerefresh.planner.target.compare import compare, conclude
from imagerefresh.planner.target.decision import Decision, TargetContext, TargetOutcome
from imagerefresh.planner.target.gates import screen
from imagerefresh.planner.target.pending import judge_pending
from imagerefresh.planner.target.scope import admit
from imagerefresh.planner.target.skip import skip_unsettled

__all__ = ["TargetContext", "TargetOutcome", "plan_target"]


def plan_target(
    ctx: TargetContext,
    target: TargetSpec,
    key: TargetKey,
    previous: TargetStatus | None,
    evidence: TargetEvidence,
    allowed: bool,
    claimed: str | None = None,
    orders: LockstepOrders = NO_ORDERS,
) -> TargetOutcome:
    """Decide one target's tick; see the module docstring for the order of the rules.

    ``claimed`` says why another target or policy claims the same containers (a Conflict);
    ``orders`` what its lockstep peers ask of it (:mod:`~imagerefresh.planner.lockstep`).
    """
    decision = Decision(ctx, target, key, previous, evidence, orders)
    workload = admit(decision, allowed, claimed)
    if isinstance(workload, TargetOutcome):
        return workload
    judged = judge_pending(decision, workload)
    if judged is not None:
        return judged
    skipped = skip_unsettled(decision, workload)
    if skipped is not None:
        return skipped
    comparison = screen(decision, compare(decision, workload))
    return conclude(decision, workload, comparison)
