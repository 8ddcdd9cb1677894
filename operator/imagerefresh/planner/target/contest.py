"""Another writer: images moved away from what the operator last wrote count as a failed attempt.

The spec's step h. Two places meet another writer: a pending patch of ours whose images someone
changed (during the rollout, or after it landed — a GitOps self-heal reverting it), and a drift
whose live images are not what we last pinned there. Either way re-pinning is a fight, so it is
counted as a failed attempt (``contested``, which a success does not clear) and the message names
the field manager that changed the image: two writers on one image end Locked, loudly, instead
of rolling forever. Each move is counted once: the images the other writer wrote are remembered
(``contestedImages``), and re-pinning from them again is the same fight.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from imagerefresh.models import PendingPurpose, PendingRefresh
from imagerefresh.planner import reasons
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.lockstep import Judged, Result
from imagerefresh.planner.target.decision import Decision, normalised

__all__ = ["contest_pending", "contest_repin"]


def contest_pending(
    decision: Decision, workload: Workload, now: Mapping[str, str], reverted: bool
) -> None:
    """Our pending patch's images were moved (to ``now``) by another writer: it is dropped.

    A refresh moved away counts as a contested attempt; a rollback moved away is simply
    superseded. ``reverted``: the patch was known to have landed and is back at the images it
    replaced. The target is then judged afresh.
    """
    pending = decision.status.pending
    assert pending is not None
    decision.update(pending=None)
    writers = _writers(workload, now)
    if pending.purpose is PendingPurpose.ROLLBACK:
        what = (
            f"{decision.key} was reverted by {writers} after our rollback landed"
            if reverted
            else f"the images of {decision.key} were changed by {writers} during our rollback"
        )
        decision.event(
            "Normal",
            reasons.ROLLBACK_SUPERSEDED,
            f"{what}; it is dropped and the target is judged afresh",
        )
        return
    _contest_refresh(decision, workload, pending, writers, reverted)


def _contest_refresh(
    decision: Decision, workload: Workload, pending: PendingRefresh, writers: str, reverted: bool
) -> None:
    decision.outcome.judged = Judged(pending, Result.FAILED)
    attempts = _count_contest(decision, workload, pending.images)
    what = (
        f"reverted {decision.key} to the images our refresh replaced, after it landed"
        if reverted
        else f"changed the images of {decision.key} during our refresh"
    )
    decision.event(
        "Warning",
        reasons.CONTESTED,
        f"{writers} {what}: contested attempt {attempts} of "
        f"{decision.ctx.spec.max_refresh_attempts}. Two writers on one image end Locked: stop the "
        "other writer (a CronJob, GitOps self-heal, another policy) or remove the target "
        "from this policy",
    )


def contest_repin(decision: Decision, workload: Workload, drifted: Mapping[str, str]) -> str | None:
    """Count re-pinning ``drifted`` containers another writer moved since our last write.

    Returns the writers, named for the status message, or None when nobody moved them.
    """
    moved = _moved_since_our_write(decision, workload, drifted)
    if not moved:
        return None
    writers = _writers(workload, moved)
    attempts = _count_contest(decision, workload, moved)
    decision.event(
        "Warning",
        reasons.CONTESTED,
        f"{writers} changed {', '.join(moved)} of "
        f"{decision.key} away from what imagerefresh last wrote: re-pinning is contested "
        f"attempt {attempts} of {decision.ctx.spec.max_refresh_attempts}. Two writers on "
        "one image end Locked: stop the other writer (a CronJob, GitOps self-heal, "
        "another policy) or remove the target from this policy",
    )
    return writers


def _writers(workload: Workload, containers: Iterable[str]) -> str:
    managers = sorted(
        {workload.image_managers.get(name, "an unknown writer") for name in containers}
    )
    return ", ".join(f"field manager {m!r}" for m in managers)


def _count_contest(decision: Decision, workload: Workload, names: Iterable[str]) -> int:
    """Count another writer's move as a failed attempt, once: the images it wrote are
    remembered (``contestedImages``), so re-pinning from them is not counted again."""
    status = decision.status
    moved = {name: normalised(workload.containers[name].image) for name in names}
    decision.update(
        refresh_attempts=status.refresh_attempts + 1,
        contested=status.contested + 1,
        contested_images={**status.contested_images, **moved},
    )
    return decision.status.refresh_attempts


def _moved_since_our_write(
    decision: Decision, workload: Workload, drifted: Mapping[str, str]
) -> list[str]:
    """Drifted containers whose live image is not what imagerefresh last wrote there, nor
    a move already counted as a contest (re-pinning from it is the same fight)."""
    moved = []
    for name in sorted(drifted):
        live = normalised(workload.containers[name].image)
        ours = decision.status.last_good.get(name)
        if ours is not None and live not in (ours, decision.status.contested_images.get(name)):
            moved.append(name)
    return moved
