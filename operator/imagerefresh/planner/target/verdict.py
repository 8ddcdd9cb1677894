"""The verdict on a refresh of ours that landed: success, failure, or still rolling out.

The spec's step b for a refresh whose images the workload carries. Settled with them, and its
pods healthy through its health window after that (:mod:`.health`; ``pending.settledAt`` is
when the window started), is a success: ``refreshAttempts`` falls back to the contests a success
never clears, ``lastGood`` records the images, a Normal event. The controller reporting the
rollout failed (``ProgressDeadlineExceeded``), no progress within ``rolloutTimeout``, or a crash
of the new build inside the window, is a failure: one more attempt, a Warning event, with
``rollbackOnFailure`` a rollback to the images it replaced, and Locked at
``maxRefreshAttempts``. A failed build whose pods got the image (they report running it: they
crashed, never became ready, or stalled) enters the target's ``failed`` list and is not tried
here again until a reset — after a crash, only the builds that crashed; one whose pods never
pulled it (ErrImagePull, a 429, a missing secret, a pod never scheduled) is not the build's
fault and enters nothing.

With lockstep, peers bind the verdict: a refresh healthy through its window while a peer still
rolls out is held (Refreshing, not yet a success), and a peer's failure rolls this one back too
without an attempt counted against it.
"""

from __future__ import annotations

from collections.abc import Collection

from imagerefresh.models import FailedBuild, PendingRefresh, Phase, format_duration
from imagerefresh.models.status import MAX_FAILED_BUILDS
from imagerefresh.planner import reasons
from imagerefresh.planner.evidence import Resolved, Workload
from imagerefresh.planner.lockstep import Judged, Result
from imagerefresh.planner.target.deadline import (
    controller_failed,
    stalled,
    timed_out,
    track_progress,
)
from imagerefresh.planner.target.decision import Decision, TargetOutcome, short
from imagerefresh.planner.target.gates import report_verified, screen_bystanders
from imagerefresh.planner.target.health import (
    crashes_of,
    failure_message,
    health_window,
    watching_message,
)
from imagerefresh.planner.target.rollback import (
    RollbackRefused,
    refused_rollback,
    send_rollback,
)
from imagerefresh.reference import parse

__all__ = ["judge_refresh"]


def judge_refresh(
    decision: Decision, workload: Workload, pending: PendingRefresh
) -> TargetOutcome | None:
    """The verdict on our landed refresh; None when it succeeded and the decision goes on."""
    now = decision.ctx.now
    # A refresh in flight (for its health window, a minute by default) still reports which key
    # verified what it pins.
    report_verified(decision)
    if pending.settled_at is None:
        pending = track_progress(decision, workload, pending)
        if workload.verdict.settled and decision.healthy_for:
            # Settled: the health window starts, and the progress deadline is over.
            pending = pending.model_copy(update={"settled_at": now})
            decision.update(pending=pending)
    window = health_window(decision, pending)
    # Settled and healthy through the window (with none, settled alone); with lockstep, one
    # that got there while its peers rolled on has done its part.
    rolled = workload.verdict.settled or pending.settled_at is not None
    # A crash inside the window fails it even when it is first seen after the window's end.
    crashed = crashes_of(decision, pending, window)
    healthy = rolled and not crashed and (not window.length or window.over(now))
    stuck = not rolled and (controller_failed(workload, pending) or timed_out(decision, pending))
    failed = bool(crashed) or stuck
    result = Result.SETTLED if healthy else Result.FAILED if failed else Result.IN_FLIGHT
    decision.outcome.judged = Judged(pending, result)
    peers_failed = decision.orders.roll_back
    spec = decision.ctx.spec
    rolls_back = spec.rollback_on_failure and not spec.dry_run
    if result is not Result.FAILED and peers_failed is not None and rolls_back:
        return _roll_back_with_peers(decision, workload, pending, peers_failed)
    if healthy and decision.orders.hold_success is not None:
        return _hold_success(decision, workload, pending, decision.orders.hold_success)
    if healthy:
        _succeed(decision, pending)
        return None
    if crashed:
        why = failure_message(crashed, window, decision.key.kind)
        blamed = {crash.container for crash in crashed}
        return _fail_refresh(decision, workload, pending, why, blamed)
    if rolled:
        held = screen_bystanders(decision, workload, pending)
        return decision.finish(Phase.REFRESHING, watching_message(window) + held)
    if controller_failed(workload, pending):
        return _fail_refresh(decision, workload, pending, workload.verdict.message)
    if timed_out(decision, pending):
        return _fail_refresh(decision, workload, pending, stalled(decision, pending))
    held = screen_bystanders(decision, workload, pending)
    return decision.finish(
        Phase.REFRESHING, f"rolling out our refresh: {workload.verdict.message}{held}"
    )


def _succeed(decision: Decision, pending: PendingRefresh) -> None:
    decision.update(
        pending=None,
        refresh_attempts=decision.status.contested,  # a success never clears contests
        last_refresh=decision.ctx.now,
    )
    decision.record_good()
    changed = ", ".join(f"{n} → {short(i.rpartition('@')[2])}" for n, i in pending.images.items())
    window = decision.healthy_for
    healthy = f" and its pods stayed up for {format_duration(window)}" if window else ""
    decision.event("Normal", reasons.REFRESHED, f"{decision.key} rolled out {changed}{healthy}")


def _hold_success(
    decision: Decision, workload: Workload, pending: PendingRefresh, why: str
) -> TargetOutcome:
    """Settled, but a lockstep peer is still rolling out: not a success yet."""
    if pending.settled_at is None:
        decision.update(pending=pending.model_copy(update={"settled_at": decision.ctx.now}))
    held = screen_bystanders(decision, workload, pending)
    return decision.finish(
        Phase.REFRESHING,
        f"our refresh rolled out; {why}: it counts as refreshed once they have{held}",
    )


def _roll_back_with_peers(
    decision: Decision, workload: Workload, pending: PendingRefresh, why: str
) -> TargetOutcome:
    """A lockstep peer's refresh failed: this one rolls back too, no attempt counted."""
    restored = send_rollback(decision, workload, pending, f": {why}")
    if isinstance(restored, RollbackRefused):
        return refused_rollback(decision, f"{why}; {restored.message}")
    message = (
        f"{why}; rolling back to {restored} with them (no attempt counted against this target)"
    )
    if decision.locked:
        return decision.finish(Phase.LOCKED, decision.locked_message(message))
    return decision.finish(Phase.ROLLING_BACK, message)


def _fail_refresh(
    decision: Decision,
    workload: Workload,
    pending: PendingRefresh,
    why: str,
    blamed: Collection[str] | None = None,
) -> TargetOutcome:
    """``blamed``: the containers whose builds failed, when known (a crash); else all moved."""
    attempts = decision.count_attempt()
    ceiling = decision.ctx.spec.max_refresh_attempts
    decision.event(
        "Warning",
        reasons.REFRESH_FAILED,
        f"refresh of {decision.key} failed (attempt {attempts} of {ceiling}): {why}"
        f"{_record_failed_builds(decision, pending, blamed)}",
    )
    if not decision.ctx.spec.rollback_on_failure or decision.ctx.spec.dry_run:
        decision.update(pending=None)
        if decision.locked:
            return decision.finish(Phase.LOCKED, decision.locked_message(why))
        return decision.finish(
            Phase.SKIPPING, f"refresh failed (attempt {attempts} of {ceiling}): {why}"
        )
    sent = send_rollback(decision, workload, pending)
    if isinstance(sent, RollbackRefused):
        failed = f"refresh failed (attempt {attempts} of {ceiling}): {why}"
        return refused_rollback(decision, f"{failed}; {sent.message}")
    detail = f"refresh failed (attempt {attempts} of {ceiling}): {why}; rolling back"
    if decision.locked:
        return decision.finish(Phase.LOCKED, decision.locked_message(f"{why}; rolling back"))
    return decision.finish(Phase.ROLLING_BACK, detail)


def _record_failed_builds(
    decision: Decision, pending: PendingRefresh, blamed: Collection[str] | None = None
) -> str:
    """Enter the digests this refresh moved to whose pods got the image in the target's
    ``failed`` list (newest first, bounded) — of the ``blamed`` containers only, when the
    failure names them; what the event says of them."""
    builds = {}
    for name, image in sorted(pending.images.items()):
        if blamed is not None and name not in blamed:
            continue
        digest = parse(image).digest
        if name not in pending.adopted and digest is not None and _pulled(decision, name, digest):
            builds[digest] = FailedBuild(digest=digest, at=decision.ctx.now)
    if not builds:
        return "; no pod ran the new image, so the build is not blamed: it may be tried again"
    older = (build for build in decision.status.failed if build.digest not in builds)
    decision.update(failed=(*builds.values(), *older)[:MAX_FAILED_BUILDS])
    return (
        f"; {', '.join(short(d) for d in builds)} is not tried on this target again until a "
        f"reset (imagerefresh reset {decision.ctx.policy})"
    )


def _pulled(decision: Decision, name: str, digest: str) -> bool:
    """Whether a pod of the workload reports running ``digest`` (or a platform manifest of
    it) in container ``name``: the kubelet pulled it and started it."""
    outcome = decision.evidence.digests.get(name)
    wanted = outcome if isinstance(outcome, Resolved) and outcome.digest == digest else None
    image = wanted or Resolved(digest)
    return any(image.is_content_of(pod.running.get(name)) for pod in decision.evidence.pods)
