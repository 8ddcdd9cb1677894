"""The working state of one target's decision, and the rules more than one step applies.

A decision starts from the target's prior status: a reset clears its counters, and a ceiling
already reached (a lowered ``maxRefreshAttempts``, a status written by someone else) locks it at
once. Each step then edits that status and fills in the outcome as it goes; :class:`Decision`
holds both. What every step shares lives here: ending the decision with a phase (and the Warning
event a move into a bad phase deserves), the lock rules, counting a failed attempt, the good
images a later contest is judged against, and the guarded patch that carries out a recorded
intent. The steps themselves are functions of their own modules, run in order by
:func:`~imagerefresh.planner.target.plan_target`.

Locked is sticky: once attempts reach the ceiling the target records ``lockedAt``, and only a
reset clears it — raising ``maxRefreshAttempts`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType

from imagerefresh.models import (
    ContainerSpec,
    PendingRefresh,
    Phase,
    PolicySpec,
    PrePullIntent,
    SeenDigest,
    TargetSpec,
    TargetStatus,
)
from imagerefresh.offline import NodeInventory
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import Event, HelperPodCreate, ImageChange, ImagePatch
from imagerefresh.planner.evidence import Account, Resolved, TargetEvidence, TargetKey, Workload
from imagerefresh.planner.helperpod import DEFAULT_RUN_AS, RunAs
from imagerefresh.planner.lockstep import Judged, LockstepOrders, LockstepReport
from imagerefresh.planner.windows import OPEN, WindowState
from imagerefresh.reference import InvalidReference, parse

__all__ = [
    "Decision",
    "Hold",
    "TargetContext",
    "TargetOutcome",
    "normalised",
    "replace_status",
    "short",
]


@dataclass(frozen=True, slots=True)
class TargetContext:
    """What every target of one tick shares. Nothing in it changes while the tick decides:
    each target's decision depends on its own evidence and orders only (the pull budget is
    spent afterwards, by :mod:`~imagerefresh.planner.budget`)."""

    spec: PolicySpec
    policy: str  # namespace/name, for messages
    now: datetime
    reset: bool
    window: WindowState = OPEN  # whether a refresh may start now (spec.windows, or an override)
    follow_up: bool = False  # a tick that follows rollouts: it judges, it starts no refresh
    # The cooldown's clock after this tick's answers: tracked reference → since when its tag
    # has answered its digest (planner.cooldown).
    seen: Mapping[str, SeenDigest] = field(default_factory=lambda: MappingProxyType({}))
    nodes: NodeInventory | None = None  # the nodes' image lists; None: node reads are off
    pre_pull_pods: bool = False  # the operator may create pre-pull helper pods
    pre_pull_max_deadline: int = 3_600  # seconds a helper pod may live, at most
    pre_pull_run_as: RunAs = DEFAULT_RUN_AS  # the helper pods' user and group
    # With spec.verify: (repository, digest) verified in the operator's memory (a rollback's
    # digest must be one).
    verified: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True, slots=True)
class Hold:
    """A container a gate of step j keeps where it is this tick (planner.target.gates)."""

    phase: Phase  # what it makes the target, at least (the worst phase wins)
    reason: str  # the event's reason
    message: str  # "<container>: why, and what to do", for the status and the event
    warning: bool = False
    until: datetime | None = None  # when it may pass (a cooldown's end): the policy ticks then
    degraded: bool = False  # unreadable evidence: the tick is Degraded
    rate_limited: bool = False  # held for the pull budget: the tick is RateLimited


@dataclass(slots=True)
class TargetOutcome:
    status: TargetStatus
    patch: ImagePatch | None = None
    events: list[Event] = field(default_factory=list)
    wake_at: datetime | None = None  # the refresh waits until then (a window, a cooldown)
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
    # Pre-pull helper pods: those to create, and the names of those found that are still
    # needed (every other one found is deleted).
    helper_creates: list[HelperPodCreate] = field(default_factory=list)
    helpers_kept: set[str] = field(default_factory=set)
    pre_pulled: bool = False  # the refresh it starts follows a pre-pull: its pulls were charged

    @property
    def report(self) -> LockstepReport:
        return LockstepReport(self.starting, self.current, self.judged, self.decided)


def short(digest: str | None) -> str:
    return digest[:19] + "…" if digest else "unknown"


def normalised(image: str) -> str:
    try:
        return str(parse(image))
    except InvalidReference:
        return image


def replace_status(status: TargetStatus, **changes: object) -> TargetStatus:
    return status.model_copy(update=changes)


class Decision:
    """The mutable working state of one target's decision: the status as the steps edit it,
    and the outcome they fill in; :meth:`finish` ends it."""

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
        self.pre_pull: PrePullIntent | None
        self.previous_phase = previous.phase if previous else None
        self.previous_message = previous.message if previous else ""
        self.holds: list[Hold] = []
        base = previous or TargetStatus(
            kind=key.kind, namespace=key.namespace, name=key.name, phase=Phase.CURRENT
        )
        if ctx.reset:
            base = replace_status(base, refresh_attempts=0, contested=0, locked_at=None, failed=())
        elif base.refresh_attempts >= ctx.spec.max_refresh_attempts and base.locked_at is None:
            # At the ceiling (a lowered maxRefreshAttempts, a status written by someone else)
            # the lock holds from now on: a refresh in flight that settles cannot lift it.
            base = replace_status(base, locked_at=ctx.now)
        # A pre-pull in flight is carried on only by the step that decides it (planner.target.
        # prepull): a decision that ends anywhere else drops it, and its helper pods go.
        self.pre_pull = None if ctx.reset else base.pre_pull
        base = replace_status(base, pre_pull=None)
        self.status = base
        self.outcome = TargetOutcome(status=base)
        self.tracked = {c.name: c.tracked.repository for c in target.containers}

    def update(self, **changes: object) -> None:
        self.status = replace_status(self.status, **changes)

    def event(self, kind: str, reason: str, message: str) -> None:
        self.outcome.events.append(Event(kind, reason, message, self.key))  # type: ignore[arg-type]

    def hold(self, hold: Hold) -> None:
        """A gate keeps one container where it is: the target's phase is at least
        ``hold.phase``; its event is posted when the hold is new (its message not already
        in the target's), so a hold that lasts posts once."""
        self.holds.append(hold)
        if hold.degraded:
            self.outcome.degraded = True
        if hold.rate_limited:
            self.outcome.rate_limited = True
        if hold.until is not None:
            wake = self.outcome.wake_at
            self.outcome.wake_at = hold.until if wake is None else min(wake, hold.until)
        if hold.message not in self.previous_message:
            self.event("Warning" if hold.warning else "Normal", hold.reason, hold.message)

    def held(self) -> str:
        """What the gates hold, for the target's message ("" when nothing)."""
        return "; ".join(hold.message for hold in self.holds)

    def finish(self, phase: Phase, message: str) -> TargetOutcome:
        if self.at_ceiling and self.status.locked_at is None:
            self.update(locked_at=self.ctx.now)
        # A container a gate holds makes the target at least that bad (the worst phase wins).
        phase = min((phase, *(h.phase for h in self.holds)), key=lambda p: p.severity)
        self.update(phase=phase, message=message)
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
            self.event("Warning", warnings[phase], message)

    @property
    def at_ceiling(self) -> bool:
        return self.status.refresh_attempts >= self.ctx.spec.max_refresh_attempts

    @property
    def locked(self) -> bool:
        # Sticky: a ceiling raised after the lock does not lift it; only a reset does.
        return self.at_ceiling or self.status.locked_at is not None

    @property
    def rollout_timeout(self) -> timedelta:
        return self.target.rollout_timeout or self.ctx.spec.rollout_timeout

    @property
    def healthy_for(self) -> timedelta:
        """How long a refresh's pods must stay up after it settled (planner.target.health)."""
        return self.ctx.spec.healthy_for_of(self.target)

    def locked_message(self, detail: str) -> str:
        return (
            f"locked after {self.status.refresh_attempts} failed or contested refreshes "
            f"({detail}); no re-imaging until a reset: imagerefresh reset {self.ctx.policy}"
        )

    def record_good(self) -> None:
        """The live images run the desired digests (our refresh, or an adoption): a later move
        away from them is what a contest is judged against, and it would be a new one."""
        self.update(
            last_good={c.name: c.live for c in self.status.containers if c.live},
            contested_images={},
        )

    def count_attempt(self) -> int:
        attempts = self.status.refresh_attempts + 1
        self.update(refresh_attempts=attempts)
        return attempts

    def desired(self, container: ContainerSpec) -> str | None:
        """The digest ``container`` should run: its explicit pin, or what its tag resolved to."""
        if container.digest is not None:
            return container.digest
        outcome = self.evidence.digests.get(container.name)
        return outcome.digest if isinstance(outcome, Resolved) else None

    def patch(self, workload: Workload, pending: PendingRefresh) -> ImagePatch:
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
