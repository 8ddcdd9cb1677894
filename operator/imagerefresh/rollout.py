"""Whether a workload's rollout has settled — exactly what ``kubectl rollout status`` means.

The replaced CronJob judged readiness from ``Ready`` alone, and old pods stay Ready while a new
spec never lands. kubectl's rules (``pkg/polymorphichelpers/rollout_status.go``) do not make
that mistake: nothing is judged until the controller has observed the current generation, and
then every replica must be *updated* and available. These functions apply those rules, in
kubectl's order, to a workload object as the API server returns it (a JSON dict), so they are
pure and table-testable.

Progress, for the progress deadline (a rollout fails when it has made no progress for
``rolloutTimeout``, not when it is merely long): :func:`rollout_progress` reads how many replicas
(or scheduled nodes) are updated and how many are available, once the controller has observed
the current generation — before that the counts still describe the previous rollout.

One deliberate difference: kubectl refuses OnDelete workloads with an error. Here that is the
:attr:`RolloutState.UNSUPPORTED` verdict, which the planner reports as a Conflict: an OnDelete
workload never rolls by itself after a patch, so waiting for it would wait forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "RolloutProgress",
    "RolloutState",
    "RolloutVerdict",
    "rollout_progress",
    "rollout_verdict",
]

Workload = Mapping[str, Any]


class RolloutState(StrEnum):
    COMPLETE = "Complete"  # settled: observed, every replica updated and available
    PROGRESSING = "Progressing"  # not settled yet
    FAILED = "Failed"  # the controller gave up (ProgressDeadlineExceeded)
    UNSUPPORTED = "Unsupported"  # OnDelete: no rollout happens without a human


@dataclass(frozen=True, slots=True)
class RolloutVerdict:
    state: RolloutState
    message: str
    # When the controller reported a FAILED verdict (its condition's lastUpdateTime).
    reported_at: datetime | None = None

    def failed_since(self, started_at: datetime) -> bool:
        """Whether the controller reports a failure of the rollout started at ``started_at``.

        A Deployment keeps its ProgressDeadlineExceeded condition until it sees progress, so
        right after a new rollout starts (and the controller observed its spec) the condition
        may still be the previous rollout's. One reported no later than the new rollout's
        start is that: a rollout's own deadline is at least a second after its start, and
        both instants are whole seconds.
        """
        if self.state is not RolloutState.FAILED:
            return False
        return self.reported_at is None or self.reported_at > started_at

    @property
    def settled(self) -> bool:
        return self.state is RolloutState.COMPLETE


def _timestamp(value: object) -> datetime | None:
    """An RFC 3339 time of the API (``2026-12-04T14:20:16Z``); None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        # Python reads the API's "Z" itself (3.11 on, the floor this package requires).
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _int(mapping: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = mapping.get(key)
    return int(value) if value is not None else default


def _waiting(message: str) -> RolloutVerdict:
    return RolloutVerdict(RolloutState.PROGRESSING, message)


_SPEC_NOT_OBSERVED = "waiting for the controller to observe the new spec"


def deployment_verdict(workload: Workload) -> RolloutVerdict:
    metadata, spec, status = workload["metadata"], workload["spec"], workload.get("status", {})
    if _int(metadata, "generation") > _int(status, "observedGeneration"):
        return _waiting(_SPEC_NOT_OBSERVED)
    for condition in status.get("conditions") or ():
        if (
            condition.get("type") == "Progressing"
            and condition.get("reason") == "ProgressDeadlineExceeded"
        ):
            detail = condition.get("message")
            return RolloutVerdict(
                RolloutState.FAILED,
                "the Deployment exceeded its progress deadline" + (f": {detail}" if detail else ""),
                _timestamp(condition.get("lastUpdateTime")),
            )
    desired = _int(spec, "replicas", 1)
    updated = _int(status, "updatedReplicas")
    if updated < desired:
        return _waiting(f"{updated} of {desired} new replicas have been updated")
    total = _int(status, "replicas")
    if total > updated:
        return _waiting(f"{total - updated} old replicas are pending termination")
    available = _int(status, "availableReplicas")
    if available < updated:
        return _waiting(f"{available} of {updated} updated replicas are available")
    return RolloutVerdict(RolloutState.COMPLETE, "successfully rolled out")


def daemonset_verdict(workload: Workload) -> RolloutVerdict:
    metadata, spec, status = workload["metadata"], workload["spec"], workload.get("status", {})
    strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy != "RollingUpdate":
        return RolloutVerdict(
            RolloutState.UNSUPPORTED,
            f"the DaemonSet uses the {strategy} update strategy: it never rolls by itself",
        )
    if _int(metadata, "generation") > _int(status, "observedGeneration"):
        return _waiting(_SPEC_NOT_OBSERVED)
    desired = _int(status, "desiredNumberScheduled")
    updated = _int(status, "updatedNumberScheduled")
    if updated < desired:
        return _waiting(f"{updated} of {desired} updated pods are scheduled")
    available = _int(status, "numberAvailable")
    if available < desired:
        return _waiting(f"{available} of {desired} updated pods are available")
    return RolloutVerdict(RolloutState.COMPLETE, "successfully rolled out")


def statefulset_verdict(workload: Workload) -> RolloutVerdict:
    metadata, spec, status = workload["metadata"], workload["spec"], workload.get("status", {})
    strategy = spec.get("updateStrategy") or {}
    kind = strategy.get("type", "RollingUpdate")
    if kind != "RollingUpdate":
        return RolloutVerdict(
            RolloutState.UNSUPPORTED,
            f"the StatefulSet uses the {kind} update strategy: it never rolls by itself",
        )
    observed = _int(status, "observedGeneration")
    if observed == 0 or _int(metadata, "generation") > observed:
        return _waiting(_SPEC_NOT_OBSERVED)
    desired = _int(spec, "replicas", 1)
    ready = _int(status, "readyReplicas")
    if ready < desired:
        return _waiting(f"{ready} of {desired} pods are ready")
    rolling = strategy.get("rollingUpdate")
    if rolling is not None:
        partition = rolling.get("partition")
        updated = _int(status, "updatedReplicas")
        if partition is not None and updated < desired - int(partition):
            return _waiting(
                f"partitioned roll out: {updated} of {desired - int(partition)} new pods updated"
            )
        return RolloutVerdict(RolloutState.COMPLETE, "partitioned roll out complete")
    if status.get("updateRevision") != status.get("currentRevision"):
        return _waiting(f"waiting for pods to reach revision {status.get('updateRevision')}")
    return RolloutVerdict(RolloutState.COMPLETE, "rolling update complete")


_VERDICTS = {
    "Deployment": deployment_verdict,
    "DaemonSet": daemonset_verdict,
    "StatefulSet": statefulset_verdict,
}


def rollout_verdict(workload: Workload) -> RolloutVerdict:
    """Judge a Deployment, DaemonSet or StatefulSet as ``kubectl rollout status`` would."""
    return _VERDICTS[workload["kind"]](workload)


@dataclass(frozen=True, slots=True, order=True)
class RolloutProgress:
    """How far a rollout has come: replicas (or scheduled nodes) updated, and available."""

    updated: int
    available: int

    def beyond(self, other: RolloutProgress) -> bool:
        """Whether either count has passed ``other``'s — a new maximum, i.e. progress."""
        return self.updated > other.updated or self.available > other.available

    def highest(self, other: RolloutProgress | None) -> RolloutProgress:
        """The count-wise maximum of the two: the high-water mark to compare progress with."""
        if other is None:
            return self
        return RolloutProgress(
            max(self.updated, other.updated), max(self.available, other.available)
        )


# Which status fields count a rollout's updated and available replicas, per kind.
_PROGRESS_FIELDS = {
    "Deployment": ("updatedReplicas", "availableReplicas"),
    "DaemonSet": ("updatedNumberScheduled", "numberAvailable"),
    "StatefulSet": ("updatedReplicas", "availableReplicas"),
}


def rollout_progress(workload: Workload) -> RolloutProgress | None:
    """The rollout's counts, or None while the controller has not observed the current spec."""
    metadata, status = workload["metadata"], workload.get("status") or {}
    observed = _int(status, "observedGeneration")
    if observed == 0 or _int(metadata, "generation") > observed:
        return None
    updated, available = _PROGRESS_FIELDS[workload["kind"]]
    return RolloutProgress(_int(status, updated), _int(status, available))
