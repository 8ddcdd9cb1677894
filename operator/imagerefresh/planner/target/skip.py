"""Not settled without a refresh of ours: a skip, and Frozen after too many in a row.

The spec's step c. A workload that is not settled (``kubectl rollout status`` would still wait)
and has no pending refresh of ours is left alone this tick: ``skipStreak`` grows, and at
``maxSkipTicks`` the target is Frozen, with a Warning naming the target, its containers and the
likely cause — pods that never become Ready. Settling again resets the streak, which clears
Frozen by itself: nothing waits for a reset. A skip is not a failed attempt.

A workload whose pods crash on the build our refresh pinned, after that refresh was judged
healthy through its window, is skipped the same way — the crash came after the window, so it is
not the refresh's to roll back — and the message says which build the pods run and since when
it was judged healthy (:func:`~.health.after_window`).
"""

from __future__ import annotations

from imagerefresh.models import Phase
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.target.decision import Decision, TargetOutcome
from imagerefresh.planner.target.health import after_window

__all__ = ["skip_unsettled"]


def skip_unsettled(decision: Decision, workload: Workload) -> TargetOutcome | None:
    """The skip an unsettled workload costs; None, with the streak reset, once it is settled."""
    if workload.verdict.settled:
        decision.update(skip_streak=0)
        return None
    ceiling = decision.ctx.spec.max_skip_ticks
    # Capped at the ceiling: a frozen target must not rewrite status every tick.
    streak = min(decision.status.skip_streak + 1, ceiling)
    decision.update(skip_streak=streak)
    if decision.locked:
        return decision.finish(Phase.LOCKED, decision.locked_message(workload.verdict.message))
    ours = after_window(decision, workload)
    if streak >= ceiling:
        containers = ", ".join(c.name for c in decision.target.containers)
        return decision.finish(
            Phase.FROZEN,
            f"{decision.key} (containers {containers}) has not settled for {streak} "
            f"consecutive ticks: {workload.verdict.message}. Likely cause: its pods never "
            "become Ready (check readiness probes and `kubectl rollout status`). Refreshes "
            f"of this target wait; it resumes by itself once it settles{ours}",
        )
    return decision.finish(
        Phase.SKIPPING,
        f"not settled ({streak} of {ceiling} ticks before Frozen): {workload.verdict.message}"
        f"{ours}",
    )
