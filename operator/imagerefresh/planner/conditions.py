"""Conditions, the summary phase and condition events: derived from target statuses in one place.

Each condition means one thing (see :class:`~imagerefresh.models.ConditionType`). A condition
keeps its ``lastTransitionTime`` while its status stays the same, so an idle tick derives
exactly the conditions it already had and writes nothing. Events about the policy as a whole
come from comparing the old and new conditions here, never from scattered call sites.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from imagerefresh.models import Condition, ConditionType, Phase, PolicySpec, TargetStatus
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import Event

__all__ = ["TickFlags", "condition_events", "derive_conditions", "worst_phase"]


@dataclass(frozen=True, slots=True)
class TickFlags:
    """What this tick saw that target phases alone do not carry."""

    degraded: tuple[str, ...] = ()  # targets whose evidence was unreadable
    rate_limited: tuple[str, ...] = ()  # targets deferred for the pull budget


def _names(targets: Sequence[TargetStatus]) -> str:
    return ", ".join(f"{t.kind} {t.namespace}/{t.name}" for t in targets)


def worst_phase(targets: Sequence[TargetStatus]) -> Phase | None:
    return min((t.phase for t in targets), key=lambda phase: phase.severity, default=None)


def _flag(
    kind: ConditionType, active: bool, reason_true: str, reason_false: str, message: str
) -> tuple[ConditionType, bool, str, str]:
    return kind, active, reason_true if active else reason_false, message if active else ""


def derive_conditions(
    targets: Sequence[TargetStatus],
    spec: PolicySpec,
    flags: TickFlags,
    previous: Sequence[Condition],
    generation: int,
    now: datetime,
) -> tuple[Condition, ...]:
    """The policy's conditions after a tick, keeping transition times that did not change."""
    not_current = [t for t in targets if t.phase is not Phase.CURRENT]
    pending = [t for t in targets if t.pending is not None]
    frozen = [t for t in targets if t.skip_streak >= spec.max_skip_ticks]
    locked = [t for t in targets if t.locked_at is not None]
    if spec.suspend:
        ready = (ConditionType.READY, False, reasons.SUSPENDED, "the policy is suspended")
    elif not_current:
        detail = "; ".join(f"{t.kind} {t.namespace}/{t.name} is {t.phase}" for t in not_current)
        ready = (ConditionType.READY, False, reasons.NOT_CURRENT, detail)
    else:
        ready = (
            ConditionType.READY,
            True,
            reasons.ALL_CURRENT,
            f"all {len(targets)} targets run their desired digests",
        )
    wanted = [
        ready,
        _flag(
            ConditionType.REFRESHING,
            bool(pending),
            reasons.ROLLOUT_IN_FLIGHT,
            reasons.NO_ROLLOUT,
            f"rolling out: {_names(pending)}",
        ),
        _flag(
            ConditionType.FROZEN,
            bool(frozen),
            reasons.SKIP_CEILING,
            reasons.SETTLING,
            f"unsettled for {spec.max_skip_ticks} ticks or more: {_names(frozen)}",
        ),
        _flag(
            ConditionType.LOCKED,
            bool(locked),
            reasons.ATTEMPT_CEILING,
            reasons.UNLOCKED,
            f"failed or contested refreshes reached their ceiling, waiting for a reset: "
            f"{_names(locked)}",
        ),
        _flag(
            ConditionType.RATE_LIMITED,
            bool(flags.rate_limited),
            reasons.BUDGET_BELOW_RESERVE,
            reasons.WITHIN_BUDGET,
            f"deferred for the pull budget: {', '.join(flags.rate_limited)}",
        ),
        _flag(
            ConditionType.DEGRADED,
            bool(flags.degraded),
            reasons.EVIDENCE_UNREADABLE,
            reasons.EVIDENCE_READ,
            f"evidence unreadable, nothing patched on it: {', '.join(flags.degraded)}",
        ),
    ]
    old = {c.type: c for c in previous}
    conditions = []
    for kind, active, reason, message in [*wanted, _offline_ready(targets, spec)]:
        status = active if isinstance(active, str) else "True" if active else "False"
        before = old.get(kind)
        since = before.last_transition_time if before and before.status == status else now
        conditions.append(
            Condition(
                type=kind,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    return tuple(conditions)


_MAX_NAMED = 5  # targets a condition message spells out; the rest are counted


def _offline_ready(
    targets: Sequence[TargetStatus], spec: PolicySpec
) -> tuple[ConditionType, str, str, str]:
    """OfflineReady: True when every target's containers would restart with no registry;
    False naming those that would not; Unknown while any target is not assessed (suspended,
    unreadable, missing, out of reach)."""
    kind = ConditionType.OFFLINE_READY
    not_ready = [
        f"{t.kind} {t.namespace}/{t.name}: {c.name}: {c.offline.reason}"
        for t in targets
        for c in t.containers
        if c.offline is not None and not c.offline.ready
    ]
    if not_ready:
        return kind, "False", reasons.NOT_OFFLINE_READY, _bounded(not_ready)
    unassessed = [
        f"{t.kind} {t.namespace}/{t.name}"
        for t in targets
        if not t.containers or any(c.offline is None for c in t.containers)
    ]
    if spec.suspend or unassessed or not targets:
        why = "the policy is suspended" if spec.suspend else _bounded(unassessed)
        return kind, "Unknown", reasons.OFFLINE_NOT_ASSESSED, f"not assessed: {why}"
    return (
        kind,
        "True",
        reasons.OFFLINE_READY,
        f"the pods of all {len(targets)} targets would restart with the registry unreachable",
    )


def _bounded(items: Sequence[str]) -> str:
    more = f"; and {len(items) - _MAX_NAMED} more" if len(items) > _MAX_NAMED else ""
    return "; ".join(items[:_MAX_NAMED]) + more


_WARN_WHEN_TRUE = {ConditionType.DEGRADED, ConditionType.RATE_LIMITED}
# What a condition not set before counts as, for its first event.
_FIRST_STATUS = {ConditionType.OFFLINE_READY: "Unknown"}


def condition_events(old: Sequence[Condition], new: Sequence[Condition]) -> list[Event]:
    """Events for the policy-wide conditions that changed status this tick."""
    before = {c.type: c.status for c in old}
    events = []
    for condition in new:
        kind = ConditionType(condition.type)
        if before.get(condition.type, _FIRST_STATUS.get(kind, "False")) == condition.status:
            continue
        if kind is ConditionType.OFFLINE_READY:
            # A verdict either way is news; not assessed (Unknown) is not.
            if condition.status != "Unknown":
                warning = condition.status == "False"
                events.append(
                    Event("Warning" if warning else "Normal", condition.reason, condition.message)
                )
        elif kind in _WARN_WHEN_TRUE and condition.status == "True":
            events.append(Event("Warning", condition.reason, condition.message))
        elif kind in _WARN_WHEN_TRUE or (
            kind is ConditionType.READY and condition.status == "True"
        ):
            events.append(Event("Normal", condition.reason, condition.message or condition.type))
    return events
