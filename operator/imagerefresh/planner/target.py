"""One target's decision in a tick (SPEC §4.3), independent of every other target.

The steps run in the spec's order and each may end the decision:

a. scope and shape — a namespace the policy may not reach, an absent workload, a declared
   container missing from the pod template, a live repository other than the tracked one, or an
   OnDelete workload: nothing is patched (Conflict / Missing);
b. a pending refresh is judged first — settled on our images (success), failed or timed out
   (a flap: attempts + 1, rollback, Locked at the ceiling), superseded by someone else's change
   (dropped), or still rolling (Refreshing);
c. not settled without a refresh of ours — a skip (Skipping, Frozen at the ceiling);
d. settled — compare live images (and, for tags, the digests the pods run) with the desired
   digests;
e. drift — Locked targets wait for a reset; the pull budget may defer; otherwise one guarded
   patch for every drifted container of the workload.

Unreadable evidence never becomes a patch: an API read error makes the target Error, and a
container whose digest could not be resolved is left alone (the others still refresh).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from imagerefresh.models import (
    ContainerSpec,
    ContainerStatus,
    PendingRefresh,
    Phase,
    PolicySpec,
    TargetSpec,
    TargetStatus,
    format_duration,
)
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import Event, ImageChange, ImagePatch, PatchPurpose
from imagerefresh.planner.evidence import (
    ANONYMOUS,
    Resolved,
    TargetEvidence,
    TargetKey,
    Unresolved,
    Workload,
)
from imagerefresh.ratelimit import BudgetSnapshot
from imagerefresh.reference import InvalidReference, parse, registry_host
from imagerefresh.rollout import RolloutState

__all__ = ["TargetContext", "TargetOutcome", "plan_target"]


@dataclass(slots=True)
class TargetContext:
    """What every target of one tick shares; ``spent`` accumulates pulls planned this tick."""

    spec: PolicySpec
    policy: str  # namespace/name, for messages
    now: datetime
    budgets: Mapping[tuple[str, str], BudgetSnapshot]
    reset: bool
    spent: Counter[tuple[str, str]] = field(default_factory=Counter)


@dataclass(slots=True)
class TargetOutcome:
    status: TargetStatus
    patch: ImagePatch | None = None
    events: list[Event] = field(default_factory=list)
    degraded: bool = False
    rate_limited: bool = False


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
    ) -> None:
        self.ctx, self.target, self.key, self.evidence = ctx, target, key, evidence
        self.previous_phase = previous.phase if previous else None
        base = previous or TargetStatus(
            kind=key.kind, namespace=key.namespace, name=key.name, phase=Phase.CURRENT
        )
        if ctx.reset:
            base = replace_status(base, refresh_attempts=0)
        self.status = base
        self.outcome = TargetOutcome(status=base)

    # --- helpers -----------------------------------------------------------------------

    def _set(self, **changes: object) -> None:
        self.status = replace_status(self.status, **changes)

    def _event(self, kind: str, reason: str, message: str) -> None:
        self.outcome.events.append(Event(kind, reason, message, self.key))  # type: ignore[arg-type]

    def _finish(self, phase: Phase, message: str) -> TargetOutcome:
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
    def _locked(self) -> bool:
        return self.status.refresh_attempts >= self.ctx.spec.max_refresh_attempts

    # --- the steps -----------------------------------------------------------------------

    def run(self, allowed: bool) -> TargetOutcome:
        if self.ctx.spec.suspend:
            return self._finish(Phase.SUSPENDED, "the policy is suspended")
        if not allowed:
            return self._finish(
                Phase.CONFLICT,
                f"{self.key} is outside the policy's namespace and the operator's allow-list "
                "does not permit it; allow the namespace pair in the operator configuration "
                "or move the policy",
            )
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
            judged = self._judge_pending(workload)
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

    def _judge_pending(self, workload: Workload) -> TargetOutcome | None:
        pending = self.status.pending
        assert pending is not None
        live_now = {
            name: workload.containers[name].image
            for name in pending.images
            if name in workload.containers
        }
        if live_now != pending.images:
            self._set(pending=None)
            self._event(
                "Normal",
                reasons.REFRESH_SUPERSEDED,
                f"the images of {self.key} were changed by someone else during our refresh; "
                "it is dropped and the target is judged afresh",
            )
            return None
        if workload.verdict.settled:
            self._set(
                pending=None,
                refresh_attempts=0,
                last_refresh=self.ctx.now,
                last_good={c.name: c.live for c in self.status.containers if c.live},
            )
            changed = ", ".join(
                f"{n} → {_short(i.rpartition('@')[2])}" for n, i in pending.images.items()
            )
            self._event("Normal", reasons.REFRESHED, f"{self.key} rolled out {changed}")
            return None
        timed_out = self.ctx.now - pending.started_at > self.ctx.spec.rollout_timeout
        if workload.verdict.state is RolloutState.FAILED or timed_out:
            return self._fail_refresh(workload, pending, timed_out)
        return self._finish(
            Phase.REFRESHING, f"rolling out our refresh: {workload.verdict.message}"
        )

    def _fail_refresh(
        self, workload: Workload, pending: PendingRefresh, timed_out: bool
    ) -> TargetOutcome:
        attempts = self.status.refresh_attempts + 1
        ceiling = self.ctx.spec.max_refresh_attempts
        why = (
            "it did not settle within rolloutTimeout "
            f"{format_duration(self.ctx.spec.rollout_timeout)}"
            if timed_out
            else workload.verdict.message
        )
        self._set(pending=None, refresh_attempts=attempts)
        self._event(
            "Warning",
            reasons.REFRESH_FAILED,
            f"refresh of {self.key} failed (attempt {attempts} of {ceiling}): {why}",
        )
        rollback = ""
        if self.ctx.spec.rollback_on_failure and not self.ctx.spec.dry_run:
            self.outcome.patch = ImagePatch(
                self.key,
                PatchPurpose.ROLLBACK,
                tuple(
                    ImageChange(
                        name,
                        workload.containers[name].json_path,
                        expected=pending.images[name],
                        image=pending.previous[name],
                    )
                    for name in sorted(pending.images)
                ),
            )
            rollback = "; rolled back to the previous images"
            self._event(
                "Warning",
                reasons.ROLLING_BACK,
                f"rolling {self.key} back to "
                + ", ".join(f"{n}={i}" for n, i in sorted(pending.previous.items())),
            )
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(why))
        return self._finish(
            Phase.SKIPPING, f"refresh failed (attempt {attempts} of {ceiling}): {why}{rollback}"
        )

    def _locked_message(self, detail: str) -> str:
        return (
            f"locked after {self.status.refresh_attempts} failed refreshes ({detail}); no "
            f"re-imaging until a reset: imagerefresh reset {self.ctx.policy}"
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
        if unresolved:
            self.outcome.degraded = True
        note = f"; not resolved, left alone: {'; '.join(unresolved)}" if unresolved else ""
        if not drifted:
            if unresolved:
                return self._finish(Phase.ERROR, f"registry unreadable, nothing patched{note}")
            if self._locked:
                return self._finish(Phase.LOCKED, self._locked_message("now current"))
            return self._finish(Phase.CURRENT, "running the desired digests")
        return self._refresh(workload, drifted, note)

    def _is_current(self, container: ContainerSpec, workload: Workload, desired: str) -> bool:
        live = parse(workload.containers[container.name].image)
        if live.digest is not None:
            return live.digest == desired
        # A tag: adopt it when every pod already runs the desired digest (no rollout needed).
        running = [pod.running.get(container.name) for pod in self.evidence.pods]
        return bool(running) and all(digest == desired for digest in running)

    def _refresh(self, workload: Workload, drifted: dict[str, str], note: str) -> TargetOutcome:
        plan = ", ".join(
            f"{name} {_short(self._live_digest(workload, name))} → {_short(digest)}"
            for name, digest in sorted(drifted.items())
        )
        if self._locked:
            return self._finish(Phase.LOCKED, self._locked_message(f"drift: {plan}"))
        refusal = self._unaffordable(workload, drifted)
        if refusal is not None:
            self.outcome.rate_limited = True
            return self._finish(Phase.DEFERRED, f"deferred: {refusal}{note}")
        if self.ctx.spec.dry_run:
            return self._finish(Phase.DRIFTED, f"dry run, would patch {plan}{note}")
        changes = []
        for name, digest in sorted({**self._adopted_tags(workload), **drifted}.items()):
            live = workload.containers[name]
            image = parse(live.image).pinned(digest).familiar
            changes.append(ImageChange(name, live.json_path, expected=live.image, image=image))
        self.outcome.patch = ImagePatch(self.key, PatchPurpose.REFRESH, tuple(changes))
        self._set(
            pending=PendingRefresh(
                images={c.container: c.image for c in changes},
                previous={c.container: c.expected for c in changes},
                started_at=self.ctx.now,
                generation=workload.generation + 1,
            )
        )
        self._event("Normal", reasons.REFRESHING, f"patching {self.key}: {plan}")
        return self._finish(Phase.REFRESHING, f"refreshing {plan}{note}")

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

    def _unaffordable(self, workload: Workload, drifted: dict[str, str]) -> str | None:
        """Spend this refresh's predicted pulls per (registry, identity), or say why not."""
        images: dict[tuple[str, str], set[str]] = {}
        for name, digest in drifted.items():
            host = registry_host(parse(workload.containers[name].image).domain)
            identity = self.evidence.identities.get(host, ANONYMOUS)
            images.setdefault((host, identity), set()).add(digest)
        costs = {key: len(digests) * workload.expected_pods for key, digests in images.items()}
        reserve = self.ctx.spec.pull_budget.reserve
        for key, cost in sorted(costs.items()):
            budget = self.ctx.budgets.get(key) or BudgetSnapshot(*key)
            answer = budget.can_afford(cost, reserve, self.ctx.spent[key])
            if not answer.allowed:
                return answer.reason
        for key, cost in costs.items():
            self.ctx.spent[key] += cost
        return None


def replace_status(status: TargetStatus, **changes: object) -> TargetStatus:
    return status.model_copy(update=changes)


def plan_target(
    ctx: TargetContext,
    target: TargetSpec,
    key: TargetKey,
    previous: TargetStatus | None,
    evidence: TargetEvidence,
    allowed: bool,
) -> TargetOutcome:
    """Decide one target's tick; see the module docstring for the order of the rules."""
    return _Decision(ctx, target, key, previous, evidence).run(allowed)
