"""One target's decision in a tick, independent of every other target.

The steps run in the spec's order and each may end the decision:

a. scope and shape — a namespace the policy may not reach, an absent workload, a declared
   container missing from the pod template, a live repository other than the tracked one, or an
   OnDelete workload: nothing is patched (Conflict / Missing);
b. a pending patch of ours (refresh or rollback, recorded in status before it was sent) is
   judged first, by what the workload carries now: our images — the patch landed, so judge its
   rollout (a refresh settled is a success; failed, or without progress for the progress
   deadline, is a flap: attempts + 1, a rollback, Locked at the ceiling); the images it
   replaced — it never landed (a refresh is planned afresh, a rollback is owed and sent
   again); anything else — another writer moved them (a contested attempt, naming that
   writer);
c. not settled without a refresh of ours — a skip (Skipping, Frozen at the ceiling);
d. settled — compare live images (and, for tags, the digests the pods run) with the desired
   digests;
e. drift — Locked targets wait for a reset; the pull budget may defer; otherwise one guarded
   patch for every drifted container of the workload, recorded as ``pending`` first. Re-pinning
   images another writer moved away from what we last wrote counts as a contested attempt.

Locked is sticky: once attempts reach the ceiling the target records ``lockedAt``, and only a
reset clears it — raising ``maxRefreshAttempts`` does not.

Unreadable evidence never becomes a patch: an API read error makes the target Error, and a
container whose digest could not be resolved is left alone (the others still refresh).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from imagerefresh.models import (
    ContainerSpec,
    ContainerStatus,
    PendingPurpose,
    PendingRefresh,
    Phase,
    PolicySpec,
    ProgressMark,
    TargetSpec,
    TargetStatus,
    format_duration,
)
from imagerefresh.models.base import format_timestamp
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import Event, ImageChange, ImagePatch
from imagerefresh.planner.evidence import (
    ANONYMOUS,
    Account,
    Resolved,
    TargetEvidence,
    TargetKey,
    Unresolved,
    Workload,
)
from imagerefresh.planner.follow import owed_retry_at
from imagerefresh.planner.guard import unsafe_changes
from imagerefresh.planner.lockstep import (
    NO_ORDERS,
    Judged,
    LockstepOrders,
    LockstepReport,
    Result,
    held_message,
)
from imagerefresh.planner.windows import OPEN, WINDOW_OVERRIDE_ANNOTATION, WindowState
from imagerefresh.reference import InvalidReference, parse, registry_host
from imagerefresh.rollout import RolloutProgress, RolloutState

__all__ = ["TargetContext", "TargetOutcome", "plan_target"]


@dataclass(frozen=True, slots=True)
class TargetContext:
    """What every target of one tick shares. Nothing in it changes while the tick decides:
    each target's decision depends on its own evidence and orders only (the pull budget is
    spent afterwards, by :mod:`.budget`)."""

    spec: PolicySpec
    policy: str  # namespace/name, for messages
    now: datetime
    reset: bool
    window: WindowState = OPEN  # whether a refresh may start now (spec.windows, or an override)
    follow_up: bool = False  # a tick that follows rollouts: it judges, it starts no refresh


@dataclass(slots=True)
class TargetOutcome:
    status: TargetStatus
    patch: ImagePatch | None = None
    events: list[Event] = field(default_factory=list)
    window_opens: datetime | None = None  # the refresh waits for the window opening then
    degraded: bool = False
    rate_limited: bool = False
    # For the lockstep rules (planner.lockstep): what this decision moved, found, judged.
    starting: dict[str, str] = field(default_factory=dict)  # container → digest it now pins
    current: dict[str, str] = field(default_factory=dict)  # container → digest it runs
    judged: Judged | None = None
    decided: bool = True  # False: a follow-up tick carried this target's status as it was
    # The registry pulls the refresh it starts (or, in a dry run, would start) costs, per
    # account: the tick spends them from the budget, or defers it (planner.budget).
    pulls: dict[Account, int] = field(default_factory=dict)

    @property
    def report(self) -> LockstepReport:
        return LockstepReport(self.starting, self.current, self.judged, self.decided)


_CLOCK_SKEW = timedelta(minutes=5)  # what a status written by another replica may be ahead


def _short(digest: str | None) -> str:
    return digest[:19] + "…" if digest else "unknown"


def _normalised(image: str) -> str:
    try:
        return str(parse(image))
    except InvalidReference:
        return image


class _Decision:
    """The mutable working state of one target's decision; :meth:`run` returns the outcome."""

    def __init__(
        self,
        ctx: TargetContext,
        target: TargetSpec,
        key: TargetKey,
        previous: TargetStatus | None,
        evidence: TargetEvidence,
        orders: LockstepOrders,
    ) -> None:
        self.ctx, self.target, self.key, self.evidence = ctx, target, key, evidence
        self.orders = orders
        self.previous_phase = previous.phase if previous else None
        base = previous or TargetStatus(
            kind=key.kind, namespace=key.namespace, name=key.name, phase=Phase.CURRENT
        )
        if ctx.reset:
            base = replace_status(base, refresh_attempts=0, contested=0, locked_at=None)
        elif base.refresh_attempts >= ctx.spec.max_refresh_attempts and base.locked_at is None:
            # At the ceiling (a lowered maxRefreshAttempts, a status written by someone else)
            # the lock holds from now on: a refresh in flight that settles cannot lift it.
            base = replace_status(base, locked_at=ctx.now)
        self.status = base
        self.outcome = TargetOutcome(status=base)
        self.tracked = {c.name: c.tracked.repository for c in target.containers}

    # --- helpers -----------------------------------------------------------------------

    def _set(self, **changes: object) -> None:
        self.status = replace_status(self.status, **changes)

    def _event(self, kind: str, reason: str, message: str) -> None:
        self.outcome.events.append(Event(kind, reason, message, self.key))  # type: ignore[arg-type]

    def _finish(self, phase: Phase, message: str) -> TargetOutcome:
        if self._at_ceiling and self.status.locked_at is None:
            self._set(locked_at=self.ctx.now)
        self._set(phase=phase, message=message)
        if phase is not self.previous_phase:
            self._transition_event(phase, message)
        self.outcome.status = self.status
        return self.outcome

    def _transition_event(self, phase: Phase, message: str) -> None:
        warnings = {
            Phase.MISSING: reasons.WORKLOAD_MISSING,
            Phase.CONFLICT: reasons.CONFLICT,
            Phase.FROZEN: reasons.FROZEN,
            Phase.LOCKED: reasons.LOCKED,
        }
        if phase in warnings:
            self._event("Warning", warnings[phase], message)

    @property
    def _at_ceiling(self) -> bool:
        return self.status.refresh_attempts >= self.ctx.spec.max_refresh_attempts

    @property
    def _locked(self) -> bool:
        # Sticky: a ceiling raised after the lock does not lift it; only a reset does.
        return self._at_ceiling or self.status.locked_at is not None

    def _record_good(self) -> None:
        """The live images run the desired digests (our refresh, or an adoption): a later move
        away from them is what a contest is judged against, and it would be a new one."""
        self._set(
            last_good={c.name: c.live for c in self.status.containers if c.live},
            contested_images={},
        )

    def _count_attempt(self) -> int:
        attempts = self.status.refresh_attempts + 1
        self._set(refresh_attempts=attempts)
        return attempts

    def _count_contest(self, workload: Workload, names: Iterable[str]) -> int:
        """Count another writer's move as a failed attempt, once: the images it wrote are
        remembered (``contestedImages``), so re-pinning from them is not counted again."""
        moved = {name: _normalised(workload.containers[name].image) for name in names}
        self._set(
            refresh_attempts=self.status.refresh_attempts + 1,
            contested=self.status.contested + 1,
            contested_images={**self.status.contested_images, **moved},
        )
        return self.status.refresh_attempts

    # --- the steps -----------------------------------------------------------------------

    def run(self, allowed: bool, claimed: str | None) -> TargetOutcome:
        if self.ctx.spec.suspend:
            return self._finish(Phase.SUSPENDED, "the policy is suspended")
        if not allowed:
            return self._finish(
                Phase.CONFLICT,
                f"{self.key} is outside the policy's namespace and the operator's allow-list "
                "does not permit it; allow the namespace pair in the operator configuration "
                "or move the policy",
            )
        if claimed is not None:
            return self._finish(Phase.CONFLICT, claimed)
        if self.evidence.error is not None:
            self.outcome.degraded = True
            return self._finish(Phase.ERROR, f"could not read {self.key}: {self.evidence.error}")
        workload = self.evidence.workload
        if workload is None:
            self._set(pending=None)
            return self._finish(
                Phase.MISSING,
                f"{self.key} does not exist; create it or remove it from the policy",
            )
        self._set(
            containers=tuple(self._container_status(c, workload) for c in self.target.containers)
        )
        conflict = self._conflict(workload)
        if conflict is not None:
            return self._finish(Phase.CONFLICT, conflict)
        if self.status.pending is not None:
            problem = self._pending_problem(workload, self.status.pending)
            if problem is not None and not self.ctx.reset:
                self.outcome.degraded = True
                return self._finish(Phase.ERROR, problem)
            judged = self._judge_pending(workload) if problem is None else None
            if problem is not None:
                self._set(pending=None)  # a reset rebuilds from live evidence
            if judged is not None:
                return judged
        if not workload.verdict.settled:
            return self._skip(workload)
        self._set(skip_streak=0)
        return self._compare(workload)

    def _container_status(self, container: ContainerSpec, workload: Workload) -> ContainerStatus:
        live = workload.containers.get(container.name)
        running = sorted(
            {
                digest
                for pod in self.evidence.pods
                if (digest := pod.running.get(container.name)) is not None
            }
        )
        return ContainerStatus(
            name=container.name,
            tracked=str(container.tracked),
            desired=self._desired(container),
            live=_normalised(live.image) if live else None,
            running=tuple(running),
            pull_policy=live.pull_policy if live else None,
        )

    def _desired(self, container: ContainerSpec) -> str | None:
        if container.digest is not None:
            return container.digest
        outcome = self.evidence.digests.get(container.name)
        return outcome.digest if isinstance(outcome, Resolved) else None

    def _conflict(self, workload: Workload) -> str | None:
        for container in self.target.containers:
            live = workload.containers.get(container.name)
            if live is None:
                names = ", ".join(workload.containers) or "none"
                return (
                    f"container {container.name!r} is not in the pod template of {self.key} "
                    f"(it has: {names}); fix the policy"
                )
            try:
                live_repository = parse(live.image).repository
            except InvalidReference as error:
                return f"container {container.name!r} runs an unparseable image: {error}"
            if live_repository != container.tracked.repository:
                return (
                    f"container {container.name!r} runs {live_repository}, but the policy tracks "
                    f"{container.tracked.repository}; imagerefresh never changes repositories — "
                    "fix the policy or the workload"
                )
        if workload.verdict.state is RolloutState.UNSUPPORTED:
            return f"{workload.verdict.message}; use RollingUpdate to have it refreshed"
        return None

    def _pending_problem(self, workload: Workload, pending: PendingRefresh) -> str | None:
        """Why a pending patch read back from status cannot be ours for this target."""
        strangers = sorted(set(pending.images) - set(self.tracked))
        if strangers:
            why = f"names containers the policy does not declare ({', '.join(strangers)})"
        elif pending.started_at > self.ctx.now + _CLOCK_SKEW:
            # A start in the future would never reach its progress deadline.
            why = f"starts in the future ({pending.started_at.isoformat()})"
        elif (
            pending.progressed_at is not None and pending.progressed_at > self.ctx.now + _CLOCK_SKEW
        ):
            why = f"progressed in the future ({pending.progressed_at.isoformat()})"
        elif pending.settled_at is not None and pending.settled_at > self.ctx.now + _CLOCK_SKEW:
            why = f"settled in the future ({pending.settled_at.isoformat()})"
        elif pending.refused_at is not None and pending.refused_at > self.ctx.now + _CLOCK_SKEW:
            why = f"was refused in the future ({pending.refused_at.isoformat()})"
        else:
            # The write guard's own rule, applied to both directions of the recorded patch.
            both = (pending, pending.model_copy(update={"images": pending.previous}))
            unsafe = [p for side in both for p in unsafe_changes(self._patch(workload, side))]
            if not unsafe:
                return None
            why = f"names images outside the tracked repository ({'; '.join(unsafe)})"
        return (
            f"status.pending of {self.key} {why}: it was not written by imagerefresh for this "
            "target, so nothing is patched on it; reset the policy to rebuild its status: "
            f"imagerefresh reset {self.ctx.policy}"
        )

    def _images_now(self, workload: Workload, pending: PendingRefresh) -> dict[str, str]:
        return {name: workload.containers[name].image for name in pending.images}

    def _judge_pending(self, workload: Workload) -> TargetOutcome | None:
        """Judge our recorded patch by what the workload carries now (see the module docs)."""
        pending = self.status.pending
        assert pending is not None
        now = self._images_now(workload, pending)
        if now == pending.images:
            if pending.purpose is PendingPurpose.ROLLBACK:
                return self._judge_rollback(workload, pending)
            return self._judge_refresh(workload, pending)
        # Back at the images it replaced: a patch that never landed (a crash, a lost refusal) —
        # unless it is known to have landed (its generation was recorded), when someone
        # reverted it, as a GitOps self-heal does.
        reverted = now == pending.previous and pending.generation is not None
        if now == pending.previous and not reverted:
            if pending.purpose is PendingPurpose.ROLLBACK:
                return self._owe_rollback(workload, pending)
            self._set(pending=None)
            return None
        self._set(pending=None)
        writers = self._writers(workload, now)
        if pending.purpose is PendingPurpose.ROLLBACK:
            what = (
                f"{self.key} was reverted by {writers} after our rollback landed"
                if reverted
                else f"the images of {self.key} were changed by {writers} during our rollback"
            )
            self._event(
                "Normal",
                reasons.ROLLBACK_SUPERSEDED,
                f"{what}; it is dropped and the target is judged afresh",
            )
            return None
        self.outcome.judged = Judged(pending, Result.FAILED)
        attempts = self._count_contest(workload, pending.images)
        what = (
            f"reverted {self.key} to the images our refresh replaced, after it landed"
            if reverted
            else f"changed the images of {self.key} during our refresh"
        )
        self._event(
            "Warning",
            reasons.CONTESTED,
            f"{writers} {what}: contested attempt {attempts} of "
            f"{self.ctx.spec.max_refresh_attempts}. Two writers on one image end Locked: stop the "
            "other writer (a CronJob, GitOps self-heal, another policy) or remove the target "
            "from this policy",
        )
        return None

    def _writers(self, workload: Workload, containers: Iterable[str]) -> str:
        managers = sorted(
            {workload.image_managers.get(name, "an unknown writer") for name in containers}
        )
        return ", ".join(f"field manager {m!r}" for m in managers)

    def _judge_refresh(self, workload: Workload, pending: PendingRefresh) -> TargetOutcome | None:
        pending = self._track_progress(workload, pending)
        # A refresh that settled while its lockstep peers rolled on has done its part.
        settled = workload.verdict.settled or pending.settled_at is not None
        failed = workload.verdict.state is RolloutState.FAILED or self._timed_out(pending)
        result = Result.SETTLED if settled else Result.FAILED if failed else Result.IN_FLIGHT
        self.outcome.judged = Judged(pending, result)
        peers_failed = self.orders.roll_back
        spec = self.ctx.spec
        rolls_back = spec.rollback_on_failure and not spec.dry_run
        if result is not Result.FAILED and peers_failed is not None and rolls_back:
            return self._roll_back_with_peers(workload, pending, peers_failed)
        if settled and self.orders.hold_success is not None:
            return self._hold_success(pending, self.orders.hold_success)
        if settled:
            self._set(
                pending=None,
                refresh_attempts=self.status.contested,  # a success never clears contests
                last_refresh=self.ctx.now,
            )
            self._record_good()
            changed = ", ".join(
                f"{n} → {_short(i.rpartition('@')[2])}" for n, i in pending.images.items()
            )
            self._event("Normal", reasons.REFRESHED, f"{self.key} rolled out {changed}")
            return None
        if workload.verdict.state is RolloutState.FAILED:
            return self._fail_refresh(workload, pending, workload.verdict.message)
        if self._timed_out(pending):
            return self._fail_refresh(workload, pending, self._stalled(pending))
        return self._finish(
            Phase.REFRESHING, f"rolling out our refresh: {workload.verdict.message}"
        )

    @property
    def _rollout_timeout(self) -> timedelta:
        return self.target.rollout_timeout or self.ctx.spec.rollout_timeout

    def _track_progress(self, workload: Workload, pending: PendingRefresh) -> PendingRefresh:
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
            changes["progressed_at"] = self.ctx.now
        tracked = pending.model_copy(update=changes)
        self._set(pending=tracked)
        return tracked

    def _timed_out(self, pending: PendingRefresh) -> bool:
        since = pending.progressed_at or pending.started_at
        return self.ctx.now - since > self._rollout_timeout

    def _stalled(self, pending: PendingRefresh) -> str:
        """Why a rollout ran out of time, with what it had reached: the SRE's first question."""
        timeout = format_duration(self._rollout_timeout)
        mark = pending.progress
        reached = (
            f"; it reached {mark.updated} updated and {mark.available} available"
            if mark is not None
            else "; the controller never reported it under way"
        )
        since = (pending.progressed_at or pending.started_at).isoformat()
        return f"it made no progress for rolloutTimeout {timeout} (since {since}){reached}"

    def _hold_success(self, pending: PendingRefresh, why: str) -> TargetOutcome:
        """Settled, but a lockstep peer is still rolling out: not a success yet."""
        if pending.settled_at is None:
            self._set(pending=pending.model_copy(update={"settled_at": self.ctx.now}))
        return self._finish(
            Phase.REFRESHING,
            f"our refresh rolled out; {why}: it counts as refreshed once they have",
        )

    def _roll_back_with_peers(
        self, workload: Workload, pending: PendingRefresh, why: str
    ) -> TargetOutcome:
        """A lockstep peer's refresh failed: this one rolls back too, no attempt counted."""
        restored = self._send_rollback(workload, pending, f": {why}")
        message = (
            f"{why}; rolling back to {restored} with them (no attempt counted against this target)"
        )
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(message))
        return self._finish(Phase.ROLLING_BACK, message)

    def _send_rollback(self, workload: Workload, pending: PendingRefresh, because: str = "") -> str:
        """Record and plan the rollback of ``pending``: the images it replaced, restored."""
        rollback = PendingRefresh(
            purpose=PendingPurpose.ROLLBACK,
            images=pending.previous,
            previous=pending.images,
            started_at=self.ctx.now,
        )
        self._set(pending=rollback)
        self.outcome.patch = self._patch(workload, rollback)
        restored = ", ".join(f"{n}={i}" for n, i in sorted(rollback.images.items()))
        self._event(
            "Warning", reasons.ROLLING_BACK, f"rolling {self.key} back to {restored}{because}"
        )
        return restored

    def _fail_refresh(self, workload: Workload, pending: PendingRefresh, why: str) -> TargetOutcome:
        attempts = self._count_attempt()
        ceiling = self.ctx.spec.max_refresh_attempts
        self._event(
            "Warning",
            reasons.REFRESH_FAILED,
            f"refresh of {self.key} failed (attempt {attempts} of {ceiling}): {why}",
        )
        if not self.ctx.spec.rollback_on_failure or self.ctx.spec.dry_run:
            self._set(pending=None)
            if self._locked:
                return self._finish(Phase.LOCKED, self._locked_message(why))
            return self._finish(
                Phase.SKIPPING, f"refresh failed (attempt {attempts} of {ceiling}): {why}"
            )
        self._send_rollback(workload, pending)
        detail = f"refresh failed (attempt {attempts} of {ceiling}): {why}; rolling back"
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(f"{why}; rolling back"))
        return self._finish(Phase.ROLLING_BACK, detail)

    def _judge_rollback(self, workload: Workload, pending: PendingRefresh) -> TargetOutcome | None:
        pending = self._track_progress(workload, pending)
        restored = ", ".join(f"{n}={i}" for n, i in sorted(pending.images.items()))
        if workload.verdict.settled:
            self._set(pending=None)
            self._event("Normal", reasons.ROLLED_BACK, f"{self.key} rolled back to {restored}")
            return None
        if workload.verdict.state is RolloutState.FAILED or self._timed_out(pending):
            # Never roll back a rollback: stop following it; the skip streak takes over.
            self._set(pending=None)
            failed = workload.verdict.state is RolloutState.FAILED
            why = workload.verdict.message if failed else self._stalled(pending)
            self._event(
                "Warning",
                reasons.ROLLBACK_STALLED,
                f"the rollback of {self.key} to {restored} has not settled: {why}",
            )
            return None
        message = f"rolling back to {restored}: {workload.verdict.message}"
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(message))
        return self._finish(Phase.ROLLING_BACK, message)

    def _owe_rollback(self, workload: Workload, pending: PendingRefresh) -> TargetOutcome:
        """A rollback recorded but not (yet) landed: owed, sent again every tick until it is —
        by a follow-up only once its back-off after a refusal has passed."""
        retry = owed_retry_at(pending, self.ctx.spec.interval)
        if self.ctx.follow_up and retry is not None and self.ctx.now < retry:
            return self._finish(self.status.phase, self.status.message)
        self.outcome.patch = self._patch(workload, pending)
        restored = ", ".join(f"{n}={i}" for n, i in sorted(pending.images.items()))
        message = f"rollback to {restored} owed: sending it again"
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(message))
        return self._finish(Phase.ROLLING_BACK, message)

    def _patch(self, workload: Workload, pending: PendingRefresh) -> ImagePatch:
        """The guarded patch that carries out ``pending``: its images over its previous ones."""
        return ImagePatch(
            self.key,
            pending.purpose,
            tuple(
                ImageChange(
                    name,
                    workload.containers[name].json_path,
                    expected=pending.previous[name],
                    image=pending.images[name],
                    repository=self.tracked[name],
                )
                for name in sorted(pending.images)
            ),
        )

    def _locked_message(self, detail: str) -> str:
        return (
            f"locked after {self.status.refresh_attempts} failed or contested refreshes "
            f"({detail}); no re-imaging until a reset: imagerefresh reset {self.ctx.policy}"
        )

    def _skip(self, workload: Workload) -> TargetOutcome:
        ceiling = self.ctx.spec.max_skip_ticks
        # Capped at the ceiling: a frozen target must not rewrite status every tick.
        streak = min(self.status.skip_streak + 1, ceiling)
        self._set(skip_streak=streak)
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(workload.verdict.message))
        if streak >= ceiling:
            containers = ", ".join(c.name for c in self.target.containers)
            return self._finish(
                Phase.FROZEN,
                f"{self.key} (containers {containers}) has not settled for {streak} "
                f"consecutive ticks: {workload.verdict.message}. Likely cause: its pods never "
                "become Ready (check readiness probes and `kubectl rollout status`). Refreshes "
                "of this target wait; it resumes by itself once it settles",
            )
        return self._finish(
            Phase.SKIPPING,
            f"not settled ({streak} of {ceiling} ticks before Frozen): {workload.verdict.message}",
        )

    def _compare(self, workload: Workload) -> TargetOutcome:
        drifted: dict[str, str] = {}  # container → desired digest
        unresolved: list[str] = []
        for container in self.target.containers:
            desired = self._desired(container)
            if desired is None:
                outcome = self.evidence.digests.get(container.name)
                detail = outcome.message if isinstance(outcome, Unresolved) else "not resolved"
                unresolved.append(f"{container.name}: {detail}")
                continue
            if not self._is_current(container, workload, desired):
                drifted[container.name] = desired
            else:
                self.outcome.current[container.name] = desired
        if unresolved:
            self.outcome.degraded = True
        note = f"; not resolved, left alone: {'; '.join(unresolved)}" if unresolved else ""
        if not drifted:
            if unresolved:
                return self._finish(Phase.ERROR, f"registry unreadable, nothing patched{note}")
            self._record_good()
            if self._locked:
                return self._finish(Phase.LOCKED, self._locked_message("now current"))
            return self._finish(Phase.CURRENT, "running the desired digests")
        return self._refresh(workload, drifted, note)

    def _is_current(self, container: ContainerSpec, workload: Workload, desired: str) -> bool:
        live = parse(workload.containers[container.name].image)
        if live.digest is not None:
            return live.digest == desired
        # A tag: adopt it when every pod already runs the desired digest (no rollout needed) —
        # or one of its platform manifests, which is what containers/image runtimes report.
        outcome = self.evidence.digests.get(container.name)
        wanted = outcome if isinstance(outcome, Resolved) else Resolved(desired)
        running = [pod.running.get(container.name) for pod in self.evidence.pods]
        return bool(running) and all(wanted.is_content_of(digest) for digest in running)

    def _plan_text(self, workload: Workload, drifted: Mapping[str, str]) -> str:
        return ", ".join(
            f"{name} {_short(self._live_digest(workload, name))} → {_short(digest)}"
            for name, digest in sorted(drifted.items())
        )

    def _refresh(self, workload: Workload, drifted: dict[str, str], note: str) -> TargetOutcome:
        plan = self._plan_text(workload, drifted)
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(f"drift: {plan}"))
        if not self.ctx.window.open:
            return self._wait_for_window(plan, note)
        if self.ctx.follow_up:
            # Following rollouts only judges them: a refresh starts at a tick of the interval
            # (or a prompt one), so a digest that just failed and was rolled back is not
            # retried the moment its rollback settles, and the registry is asked afresh first.
            return self._finish(
                Phase.WAITING, f"drift: {plan}; the refresh starts at the next tick{note}"
            )
        held = sorted(name for name in drifted if name in self.orders.held)
        if held:
            why = held_message(self.orders, held)
            if len(held) == len(drifted):
                return self._wait_for_peers(plan, why, note)
            drifted = {n: d for n, d in drifted.items() if n not in self.orders.held}
            plan = self._plan_text(workload, drifted)
            note = f"; {', '.join(held)} held back ({why}){note}"
        if self.orders.deferred is not None:
            self.outcome.rate_limited = True
            return self._finish(Phase.DEFERRED, f"deferred: {self.orders.deferred}{note}")
        if self.ctx.spec.dry_run:
            self._starts(workload, drifted)  # what would start, for lockstep and the budget
            return self._finish(Phase.DRIFTED, f"dry run, would patch {plan}{note}")
        moved = self._moved_since_our_write(workload, drifted)
        contest = ""
        if moved:
            writers = self._writers(workload, moved)
            attempts = self._count_contest(workload, moved)
            # The status message names the other writer too: events expire, status does not.
            contest = (
                f"; contested by {writers} (attempt {attempts} of "
                f"{self.ctx.spec.max_refresh_attempts})"
            )
            self._event(
                "Warning",
                reasons.CONTESTED,
                f"{writers} changed {', '.join(moved)} of "
                f"{self.key} away from what imagerefresh last wrote: re-pinning is contested "
                f"attempt {attempts} of {self.ctx.spec.max_refresh_attempts}. Two writers on "
                "one image end Locked: stop the other writer (a CronJob, GitOps self-heal, "
                "another policy) or remove the target from this policy",
            )
            if self._locked:
                # Locked by this contest: nothing starts, so its lockstep peers must wait.
                return self._finish(
                    Phase.LOCKED, self._locked_message(f"contested by {writers}: {plan}")
                )
        self._starts(workload, drifted)
        adopted = {
            n: d for n, d in self._adopted_tags(workload).items() if n not in self.orders.held
        }
        pins = {**adopted, **drifted}
        pending = PendingRefresh(
            images={
                name: parse(workload.containers[name].image).pinned(digest).familiar
                for name, digest in pins.items()
            },
            previous={name: workload.containers[name].image for name in pins},
            started_at=self.ctx.now,
            adopted=tuple(sorted(set(adopted) - set(drifted))),
        )
        patch = self._patch(workload, pending)
        self.outcome.patch = replace(patch, pulls=tuple(sorted(self.outcome.pulls.items())))
        self._set(pending=pending)
        self._event("Normal", reasons.REFRESHING, f"patching {self.key}: {plan}")
        return self._finish(Phase.REFRESHING, f"refreshing {plan}{contest}{note}")

    def _wait_for_peers(self, plan: str, why: str, note: str) -> TargetOutcome:
        """Every drifted container is held back by a lockstep peer that cannot move now."""
        message = f"drift: {plan}; {why}{note}"
        if self.previous_phase is not Phase.WAITING or self.status.message != message:
            self._event("Normal", reasons.LOCKSTEP_WAITING, message)
        return self._finish(Phase.WAITING, message)

    def _wait_for_window(self, plan: str, note: str) -> TargetOutcome:
        """Outside every refresh window: the refresh starts when the next one opens.

        The message names that instant, so it — and the status — change only when it does: an
        idle tick outside a window writes nothing. One event per next start, never per tick.
        """
        opens = self.ctx.window.next_start
        assert opens is not None  # a closed window always says when the next one opens
        message = (
            f"drift: {plan}; outside the refresh windows (spec.windows): the refresh starts "
            f"when the next window opens, at {format_timestamp(opens)}; to refresh once now: "
            f"imagerefresh refresh-now {self.ctx.policy} --outside-window (a new value of the "
            f"annotation {WINDOW_OVERRIDE_ANNOTATION}){note}"
        )
        if self.previous_phase is not Phase.WAITING or self.status.message != message:
            self._event("Normal", reasons.WAITING_FOR_WINDOW, message)
        self.outcome.window_opens = opens
        return self._finish(Phase.WAITING, message)

    def _moved_since_our_write(self, workload: Workload, drifted: Mapping[str, str]) -> list[str]:
        """Drifted containers whose live image is not what imagerefresh last wrote there, nor
        a move already counted as a contest (re-pinning from it is the same fight)."""
        moved = []
        for name in sorted(drifted):
            live = _normalised(workload.containers[name].image)
            ours = self.status.last_good.get(name)
            if ours is not None and live not in (ours, self.status.contested_images.get(name)):
                moved.append(name)
        return moved

    def _adopted_tags(self, workload: Workload) -> dict[str, str]:
        """Containers still on a tag whose pods already run the desired digest.

        They need no rollout of their own, but the workload rolls anyway: pinning them in the
        same patch is free and keeps a rescheduled pod from pulling whatever the tag is by then.
        """
        adopted = {}
        for container in self.target.containers:
            desired = self._desired(container)
            live = parse(workload.containers[container.name].image)
            if desired is not None and live.digest is None:
                adopted[container.name] = desired
        return adopted

    def _live_digest(self, workload: Workload, name: str) -> str | None:
        live = parse(workload.containers[name].image)
        if live.digest is not None:
            return live.digest
        running = {pod.running.get(name) for pod in self.evidence.pods}
        return running.pop() if len(running) == 1 else None

    def _starts(self, workload: Workload, drifted: Mapping[str, str]) -> None:
        """This decision starts a refresh of ``drifted``: what it pins, and the pulls it costs
        per account — each distinct digest once per pod (per node, for a DaemonSet)."""
        self.outcome.starting = dict(drifted)
        images: dict[Account, set[str]] = {}
        for name, digest in drifted.items():
            host = registry_host(parse(workload.containers[name].image).domain)
            identity = self.evidence.identities.get(host, ANONYMOUS)
            images.setdefault((host, identity), set()).add(digest)
        self.outcome.pulls = {
            account: len(digests) * workload.expected_pods for account, digests in images.items()
        }


def replace_status(status: TargetStatus, **changes: object) -> TargetStatus:
    return status.model_copy(update=changes)


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
    ``orders`` what its lockstep peers ask of it (:mod:`.lockstep`).
    """
    return _Decision(ctx, target, key, previous, evidence, orders).run(allowed, claimed)
