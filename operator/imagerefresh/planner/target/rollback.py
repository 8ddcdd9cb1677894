"""Rollbacks: restoring the images a failed refresh replaced, and following that rollout.

Part of the spec's step b (with ``rollbackOnFailure``) and of step g. A rollback is recorded as
the pending patch — its images are the refresh's ``previous`` — before it is sent, like every
patch of ours. It is then judged as it rolls out: settled is done; failed or out of time is
never rolled back in turn (the decision just stops following it and the skip streak takes
over). A rollback whose images never reached the workload (refused, lost) is owed, and sent
again every tick until it lands.

What a rollback restores is read back from status, which anyone may write, so it is sent only
to images live evidence proves the workload ran (:func:`~imagerefresh.planner.proof.ran`: its
previous revision's template, or what its pods run) and that failed nowhere here; under
``verify``, only to a digest verified for the policy's keys — a tag is replaced by the digest
its old pods run (a platform manifest mapped back to the index whose children hold it, which
is what cosign signs). A rollback that cannot meet that is not sent and not owed: the target
is ``Refused`` (``RollbackUnverified``, or ``RollbackNotAllowed``), with one Warning, and
stays on what it runs until someone acts. Its pulls are charged, and never deferred.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from imagerefresh.models import PendingPurpose, PendingRefresh, Phase
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import ImagePatch
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.follow import owed_retry_at
from imagerefresh.planner.proof import normalised, ran
from imagerefresh.planner.pulls import patch_pulls
from imagerefresh.planner.target.deadline import (
    controller_failed,
    stalled,
    timed_out,
    track_progress,
)
from imagerefresh.planner.target.decision import Decision, TargetOutcome
from imagerefresh.planner.target.landing import produced
from imagerefresh.reference import parse

__all__ = [
    "RollbackRefused",
    "judge_rollback",
    "owe_rollback",
    "refused_rollback",
    "send_rollback",
]


@dataclass(frozen=True, slots=True)
class RollbackRefused:
    """Why a rollback may not be sent: its reason and what to do."""

    reason: str
    message: str


def send_rollback(
    decision: Decision, workload: Workload, pending: PendingRefresh, because: str = ""
) -> str | RollbackRefused:
    """Record and plan the rollback of ``pending``: the images it replaced, restored. Returns
    what is restored, or why the rollback may not be sent (its Warning posted, nothing owed:
    :func:`refused_rollback` ends the decision)."""
    images = _restorable(decision, pending.previous, pending.images)
    if isinstance(images, RollbackRefused):
        _refuse(decision, images)
        return images
    rollback = PendingRefresh(
        purpose=PendingPurpose.ROLLBACK,
        images=images,
        previous=pending.images,
        started_at=decision.ctx.now,
        generation=produced(workload),
    )
    decision.update(pending=rollback)
    decision.outcome.patch = _charged(decision, workload, rollback)
    restored = ", ".join(f"{n}={i}" for n, i in sorted(rollback.images.items()))
    decision.event(
        "Warning", reasons.ROLLING_BACK, f"rolling {decision.key} back to {restored}{because}"
    )
    return restored


def refused_rollback(decision: Decision, message: str) -> TargetOutcome:
    """End a decision whose rollback may not be sent: Refused, the target left as it runs."""
    if decision.locked:
        return decision.finish(Phase.REFUSED, decision.locked_message(message))
    return decision.finish(Phase.REFUSED, message)


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
    failed = controller_failed(workload, pending)
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
    by a follow-up only once its back-off after a refusal has passed — as long as what it
    restores may still be written."""
    retry = owed_retry_at(pending, decision.ctx.spec.interval)
    if decision.ctx.follow_up and retry is not None and decision.ctx.now < retry:
        return decision.finish(decision.status.phase, decision.status.message)
    images = _restorable(decision, pending.images, pending.previous)
    if isinstance(images, RollbackRefused):
        _refuse(decision, images)
        return refused_rollback(decision, images.message)
    sent = {"images": images, "generation": produced(workload)}
    if sent != {"images": pending.images, "generation": pending.generation}:
        pending = pending.model_copy(update=sent)
        decision.update(pending=pending)
    decision.outcome.patch = _charged(decision, workload, pending)
    restored = ", ".join(f"{n}={i}" for n, i in sorted(pending.images.items()))
    message = f"rollback to {restored} owed: sending it again"
    if decision.locked:
        return decision.finish(Phase.LOCKED, decision.locked_message(message))
    return decision.finish(Phase.ROLLING_BACK, message)


def _charged(decision: Decision, workload: Workload, pending: PendingRefresh) -> ImagePatch:
    """The rollback's patch, charged the pulls it causes (never deferred for them)."""
    patch = decision.patch(workload, pending)
    changes = [(c.container, c.image) for c in patch.changes if c.image != c.expected]
    pulls = patch_pulls(changes, decision.evidence, decision.ctx.nodes)
    return replace(patch, pulls=tuple(sorted(pulls.items())))


def _refuse(decision: Decision, refused: RollbackRefused) -> None:
    decision.update(pending=None)
    decision.event("Warning", refused.reason, refused.message)


def _restorable(
    decision: Decision,
    wanted: dict[str, str],
    replacing: dict[str, str],
) -> dict[str, str] | RollbackRefused:
    """The images that restore ``wanted`` (container → image), each one the workload is proven
    to have run, failed nowhere here, and under ``verify`` a verified digest; or why not."""
    failed = {build.digest for build in decision.status.failed}
    images: dict[str, str] = {}
    for name, image in sorted(wanted.items()):
        repository = decision.tracked[name]
        proven = ran(decision.evidence, name, repository)
        chosen = image
        if decision.ctx.spec.verify is not None:
            new = parse(replacing[name]).digest
            candidate = _verified(decision, name, image, proven, new)
            if candidate is None:
                return RollbackRefused(
                    reasons.ROLLBACK_UNVERIFIED,
                    f"{decision.key} is not rolled back: {name} would go back to {image}, and "
                    "no digest the workload is proven to have run there carries a verified "
                    "signature by a key of spec.verify in the operator's memory (its registry "
                    "may be unreachable). It stays on what it runs; roll it back by hand to a "
                    "signed build, or push a signed fix",
                )
            chosen = candidate
        if normalised(chosen) not in proven:
            return RollbackRefused(
                reasons.ROLLBACK_NOT_ALLOWED,
                f"{decision.key} is not rolled back: {name} would go back to {chosen}, which no "
                "live evidence shows the workload ran (not its previous revision's template, "
                "nor what its pods run). It stays on what it runs; roll it back by hand "
                "(kubectl rollout undo), then reset the policy if its status was edited: "
                f"imagerefresh reset {decision.ctx.policy}",
            )
        digest = parse(chosen).digest
        if digest is not None and digest in failed:
            return RollbackRefused(
                reasons.ROLLBACK_NOT_ALLOWED,
                f"{decision.key} is not rolled back: {name} would go back to {chosen}, a build "
                "that failed here. It stays on what it runs; roll it back by hand, or push a "
                "fixed build",
            )
        images[name] = chosen
    return images


def _verified(
    decision: Decision, name: str, image: str, proven: frozenset[str], new: str | None
) -> str | None:
    """Under ``verify``: ``image`` if it is a verified digest; else the verified digest the
    workload is proven to have run in its place — a platform manifest's index, or for a tag
    the digest its pods run (most pods first) other than the refresh's ``new`` one."""
    repository = decision.tracked[name]
    verified = decision.ctx.verified
    ref = parse(image)
    digests: list[str] = []
    if ref.digest is not None:
        digests.append(ref.digest)
    else:
        counts = Counter(
            d for pod in decision.evidence.pods if (d := pod.running.get(name)) and d != new
        )
        digests += [d for d, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    for digest in digests:
        indexes = sorted(x for x, c in decision.evidence.children.items() if digest in c)
        for candidate in (digest, *indexes):
            pinned = f"{repository}@{candidate}"
            if (repository, candidate) in verified and pinned in proven:
                return ref.pinned(candidate).familiar
    return None
