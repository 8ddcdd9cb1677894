"""One tick of one policy, as a pure function: (evidence, budget, now) → (actions, status).

:func:`plan_tick` honours a new reset request, decides every target independently (an
unsettled or broken target never blocks the others), then derives the summary, the
conditions and the policy-wide events from the targets in one place. A follow-up tick (run
between interval ticks while a rollout of ours is in flight) decides only the targets with a
pending patch and keeps every other target's status as it was. The shell applies the
patches, posts the events and writes the status only if it differs from the one it read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from datetime import datetime

from imagerefresh.models import (
    Condition,
    ConditionType,
    PendingPurpose,
    Phase,
    PolicyStatus,
    RegistryStatus,
    SeenDigest,
    TargetSpec,
    TargetStatus,
)
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import Event, HelperPodCreate, HelperPodDelete, Plan
from imagerefresh.planner.budget import spend, units
from imagerefresh.planner.conditions import (
    TickFlags,
    condition_events,
    derive_conditions,
    worst_phase,
)
from imagerefresh.planner.cooldown import observed_clock
from imagerefresh.planner.evidence import (
    NOT_READ,
    Account,
    PolicyView,
    TargetKey,
    TickInput,
)
from imagerefresh.planner.lockstep import (
    NO_ORDERS,
    LockstepOrders,
    lockstep_groups,
    lockstep_orders,
    order_bound,
)
from imagerefresh.planner.pullpolicy import pull_policy_events
from imagerefresh.planner.target import TargetContext, TargetOutcome, plan_target
from imagerefresh.planner.windows import OPEN, WindowState, window_state
from imagerefresh.ratelimit import BudgetSnapshot

__all__ = ["plan_tick", "revise_target"]


def _registries(budgets: dict[tuple[str, str], BudgetSnapshot]) -> tuple[RegistryStatus, ...]:
    statuses = []
    for (host, identity), budget in sorted(budgets.items()):
        report = budget.report
        if report is None:
            continue
        statuses.append(
            RegistryStatus(
                host=host,
                identity=identity,
                limit=report.limit,
                remaining=report.remaining,
                window_seconds=report.window_seconds,
                source=report.source,
            )
        )
    return tuple(statuses)


def _key(status: TargetStatus) -> TargetKey:
    return TargetKey(status.kind, status.namespace, status.name)


def _summary(
    policy: PolicyView, targets: tuple[TargetStatus, ...], conditions: tuple[Condition, ...]
) -> PolicyStatus:
    refreshed = [t.last_refresh for t in targets if t.last_refresh is not None]
    return policy.status.model_copy(
        update={
            "observed_generation": policy.generation,
            "phase": worst_phase(targets) if targets else Phase.CURRENT,
            "target_count": len(targets),
            "last_refresh": max(refreshed, default=None),
            "conditions": conditions,
            "targets": targets,
        }
    )


def revise_target(
    policy: PolicyView, status: PolicyStatus, target: TargetStatus, now: datetime
) -> PolicyStatus:
    """``status`` with one target replaced, and the summary and conditions derived again.

    For the shell, when the world disagreed with the plan (a guarded patch was refused).
    """
    targets = tuple(target if _key(t) == _key(target) else t for t in status.targets)
    # Degraded and RateLimited say what this tick read, which a revision does not change:
    # they are carried over as they are; the rest follows from the revised targets.
    derived = derive_conditions(
        targets, policy.spec, TickFlags(), status.conditions, policy.generation, now
    )
    conditions = _carry_read_conditions(status.conditions, derived, TickFlags())
    return _summary(policy, targets, conditions).model_copy(
        update={
            "registries": status.registries,
            "last_reset": status.last_reset,
            "last_window_override": status.last_window_override,
            "seen": status.seen,
        }
    )


def _carry_read_conditions(
    before: tuple[Condition, ...], derived: tuple[Condition, ...], flags: TickFlags
) -> tuple[Condition, ...]:
    """``derived``, with Degraded and RateLimited as they were unless ``flags`` raise them.

    Those two say what an interval tick read; a tick that did not read everything again (a
    revision, a follow-up) keeps them as they were, unless it found trouble of its own.
    """
    raised = {
        ConditionType.DEGRADED: flags.degraded,
        ConditionType.RATE_LIMITED: flags.rate_limited,
    }
    carried = {c.type: c for c in before if c.type in raised and not raised[ConditionType(c.type)]}
    return tuple(carried.get(c.type, c) for c in derived)


def _claimed(
    key: TargetKey, target: TargetSpec, twice: Collection[TargetKey], tick: TickInput
) -> str | None:
    """Why ``target``'s containers are not this target's alone (a Conflict), if they are not.

    Two targets naming one workload (one with an explicit namespace, one defaulted to the
    policy's; ``twice`` holds those) or two policies declaring one container would write the
    same images in turns.
    """
    if key in twice:
        return (
            f"{key} is targeted more than once by this policy (after defaulting the namespace); "
            "declare each workload once"
        )
    for container in target.containers:
        other = tick.claimed_elsewhere.get((key, container.name))
        if other is not None:
            return (
                f"container {container.name!r} of {key} is also declared by policy {other}; "
                "one container, one policy: remove it from one of them"
            )
    return None


class _Targets:
    """Every target's decision in this tick, each made on its own evidence and orders.

    A decision depends on nothing but its target's evidence, prior status and lockstep orders
    (the pull budget is spent afterwards), so a target is decided again only when its orders
    change; :attr:`decisions` counts every decision made.
    """

    def __init__(
        self, tick: TickInput, reset: bool, window: WindowState, seen: tuple[SeenDigest, ...]
    ) -> None:
        policy, spec = tick.policy, tick.policy.spec
        self.tick = tick
        self.keys = [policy.target_key(index) for index in range(len(spec.targets))]
        self.groups = lockstep_groups(spec, self.keys)
        self.ctx = TargetContext(
            spec,
            f"{policy.namespace}/{policy.name}",
            tick.now,
            reset,
            window=window,
            follow_up=tick.follow_up,
            seen={entry.tracked: entry for entry in seen},
            nodes=tick.nodes,
            pre_pull_pods=tick.pre_pull_pods,
            pre_pull_max_deadline=tick.pre_pull_max_deadline,
            pre_pull_run_as=tick.pre_pull_run_as,
            verified=tick.verified_digests() if spec.verify is not None else frozenset(),
        )
        self.twice = {key for key, count in Counter(self.keys).items() if count > 1}
        self.previous = {_key(status): status for status in policy.status.targets}
        self.digests = {key: tick.evidence.get(key, NOT_READ).digests for key in self.keys}
        self.orders: dict[TargetKey, LockstepOrders] = {}
        self.decisions = 0
        # By spec index; None for a target a follow-up does not decide and has no status for
        # (left out of decided(): lockstep counts such a member unknown, see .lockstep).
        self.outcomes: list[TargetOutcome | None] = [
            self._decide(index) for index in range(len(self.keys))
        ]

    def _decide(self, index: int) -> TargetOutcome | None:
        key, target, tick = self.keys[index], self.tick.policy.spec.targets[index], self.tick
        prior = self.previous.get(key)
        if tick.follow_up and (prior is None or prior.pending is None):
            # Not a rollout in flight: not read, so nothing is decided on it. A target the last
            # tick never saw (added to the spec since) waits for the tick that reads it.
            return TargetOutcome(status=prior, decided=False) if prior is not None else None
        self.decisions += 1
        allowed = tick.namespaces.allows(tick.policy.namespace, key.namespace)
        evidence = tick.evidence.get(key, NOT_READ)
        claimed = _claimed(key, target, self.twice, tick)
        orders = self.orders.get(key, NO_ORDERS)
        return plan_target(self.ctx, target, key, prior, evidence, allowed, claimed, orders)

    def decided(self) -> list[tuple[TargetKey, TargetOutcome]]:
        return [(k, o) for k, o in zip(self.keys, self.outcomes, strict=True) if o is not None]

    def order(self, wanted: Mapping[TargetKey, LockstepOrders]) -> set[TargetKey]:
        """Take ``wanted`` orders and decide again each target whose orders changed."""
        changed = {k for k, o in wanted.items() if o != self.orders.get(k, NO_ORDERS)}
        self.orders = dict(wanted)
        for index, key in enumerate(self.keys):
            if key in changed:
                self.outcomes[index] = self._decide(index)
        return changed

    def settle_lockstep(self, touched: set[TargetKey] | None = None) -> None:
        """Lockstep's rounds until its orders stop changing (see :mod:`.lockstep`)."""
        for _ in range(order_bound(self.groups)):
            decided = {key: (o.status, o.report) for key, o in self.decided()}
            wanted = lockstep_orders(self.groups, decided, self.digests, self.orders, touched)
            touched = self.order(wanted)
            if not touched:
                return

    def spend_budget(self) -> None:
        """Spend the pull budget on the refreshes that would start; defer what it cannot
        cover (:mod:`.budget`), then let lockstep answer the deferrals."""
        pulls = {key: o.pulls for key, o in self.decided() if o.pulls}
        reserve = self.tick.policy.spec.pull_budget.reserve
        ordered = units(self.keys, self.groups)
        # Rollbacks are charged first and never deferred: what they take is spent already.
        committed: Counter[Account] = Counter()
        for _, outcome in self.decided():
            patch = outcome.patch
            if patch is not None and patch.purpose is PendingPurpose.ROLLBACK:
                committed.update(dict(patch.pulls))
        deferred = spend(ordered, pulls, self.tick.budgets, reserve, self.groups, committed)
        if not deferred:
            return
        wanted = dict(self.orders)
        for key, why in deferred.items():
            wanted[key] = wanted.get(key, NO_ORDERS).merged(LockstepOrders(deferred=why))
        self.settle_lockstep(self.order(wanted))


def _helper_creates(outcomes: list[tuple[TargetKey, TargetOutcome]]) -> tuple[HelperPodCreate, ...]:
    """The helper pods to create, each charged the pulls it causes."""
    return tuple(create for _, outcome in outcomes for create in outcome.helper_creates)


def _helper_deletes(
    tick: TickInput, outcomes: list[tuple[TargetKey, TargetOutcome]]
) -> tuple[HelperPodDelete, ...]:
    """Every helper pod found for a target decided this tick that its decision does not keep:
    after a patch, a failure, a closed window, a crash or a failover, none is left behind."""
    deletes: list[HelperPodDelete] = []
    for key, outcome in outcomes:
        found = tick.evidence.get(key, NOT_READ).helpers
        if not outcome.decided or found is None:
            continue
        deletes += (
            HelperPodDelete(key, key.namespace, helper.name, helper.uid)
            for helper in found
            if helper.name not in outcome.helpers_kept
        )
    return tuple(deletes)


def plan_tick(tick: TickInput) -> Plan:
    """Decide one tick of one policy. Pure: the same input always gives the same plan."""
    policy, spec, before = tick.policy, tick.policy.spec, tick.policy.status
    # A reset (and an override) is honoured by a tick that reads every target. A follow-up reads
    # only the rollouts in flight and starts no refresh: it leaves both values for the next
    # tick that can honour them, rather than using them up on targets it did not read.
    reset = tick.honours_reset
    override = (
        not tick.follow_up
        and policy.window_override is not None
        and policy.window_override != before.last_window_override
    )
    window = OPEN if override else window_state(spec.windows, tick.now)
    seen = observed_clock(tick)
    planned = _Targets(tick, reset, window, seen)
    planned.settle_lockstep()
    planned.spend_budget()
    outcomes = planned.decided()
    targets = tuple(outcome.status for _, outcome in outcomes)
    flags = TickFlags(
        degraded=tuple(str(key) for key, outcome in outcomes if outcome.degraded),
        rate_limited=tuple(str(key) for key, outcome in outcomes if outcome.rate_limited),
    )
    conditions = derive_conditions(
        targets, spec, flags, before.conditions, policy.generation, tick.now
    )
    if tick.follow_up:
        conditions = _carry_read_conditions(before.conditions, conditions, flags)
    events: list[Event] = []
    if reset:
        events.append(
            Event(
                "Normal",
                reasons.RESET,
                f"reset {policy.reset_request!r} honoured: refresh attempts cleared on every "
                "target",
            )
        )
    if override:
        events.append(
            Event(
                "Normal",
                reasons.REFRESH_OUTSIDE_WINDOW,
                f"refresh-outside-window {policy.window_override!r} honoured: drifted targets "
                "refresh in this tick whatever spec.windows says; later refreshes wait for a "
                "window again",
            )
        )
    for _, outcome in outcomes:
        events += outcome.events
    events += pull_policy_events(before, targets, policy.generation)
    events += condition_events(before.conditions, conditions)
    status = _summary(policy, targets, conditions).model_copy(
        update={
            # A follow-up reads only the rollouts in flight: the budgets it saw are a part.
            "registries": before.registries if tick.follow_up else _registries(dict(tick.budgets)),
            "last_reset": policy.reset_request if reset else before.last_reset,
            "last_window_override": (
                policy.window_override if override else before.last_window_override
            ),
            "seen": seen,
        }
    )
    waits = [o.wake_at for _, o in outcomes if o.wake_at is not None]
    return Plan(
        patches=tuple(o.patch for _, o in outcomes if o.patch is not None),
        pod_creates=_helper_creates(outcomes),
        pod_deletes=_helper_deletes(tick, outcomes),
        events=tuple(events),
        status=status,
        degraded=bool(flags.degraded),
        rate_limited=bool(flags.rate_limited),
        wake_at=min(waits, default=None),
        decisions=planned.decisions,
    )
