"""Leader election on a ``coordination.k8s.io/v1`` Lease: the decision, with no I/O.

The semantics are client-go's ``leaderelection`` package, so the operator behaves like every
other controller on the cluster. A candidate reads the Lease and decides:

- no Lease, or no holder (a leader released it) → **take** it;
- it holds the Lease itself → **renew** it (keeping ``acquireTime`` and the transition count);
- another holder whose lease has not expired → **wait**;
- another holder whose lease has expired → **take** it (one more ``leaseTransitions``).

Expiry is judged on the candidate's own clock, never on the ``renewTime`` written by another
machine's clock: a record is expired once it has stayed *unchanged* for
``leaseDurationSeconds`` since this candidate first saw it (:func:`observe`), exactly as
client-go keeps ``observedTime``. Two nodes' clocks may disagree by minutes; a monotonic clock
and an observed change may not. The write that follows a decision carries the Lease's
``resourceVersion``, so of two candidates deciding to take, the API server lets one win.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any

__all__ = [
    "Action",
    "LeaseRecord",
    "Observation",
    "claim",
    "decide",
    "expires_at",
    "observe",
    "record_from_api",
    "record_to_api",
    "released",
]


class Action(Enum):
    TAKE = "take"
    RENEW = "renew"
    WAIT = "wait"


@dataclass(frozen=True)
class LeaseRecord:
    """The part of a Lease's spec that leader election reads and writes."""

    holder: str = ""
    duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0


@dataclass(frozen=True)
class Observation:
    """A record as this candidate last saw it, and when (its monotonic clock) it first did."""

    record: LeaseRecord
    since: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """The observation after reading ``record`` at ``now``: its clock restarts on any change."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def decide(
    record: LeaseRecord | None,
    observed_since: float,
    now: float,
    identity: str,
    default_duration: int,
) -> Action:
    """What ``identity`` does about ``record`` (None: no Lease exists) at ``now``.

    ``observed_since`` is when this candidate first saw ``record`` unchanged (see
    :func:`observe`). A record whose ``leaseDurationSeconds`` is absent or not positive is
    judged by ``default_duration`` (ours): a malformed Lease never hands leadership over early.
    """
    if record is None or not record.holder:
        return Action.TAKE
    if record.holder == identity:
        return Action.RENEW
    if now < expires_at(record, observed_since, default_duration):
        return Action.WAIT
    return Action.TAKE


def expires_at(record: LeaseRecord, observed_since: float, default_duration: int) -> float:
    """When (this candidate's clock) ``record``, unchanged since ``observed_since``, expires.

    A ``leaseDurationSeconds`` that is absent or not positive counts as ``default_duration``.
    """
    duration = record.duration_seconds if record.duration_seconds > 0 else default_duration
    return observed_since + duration


def claim(
    record: LeaseRecord | None, action: Action, identity: str, duration: int, stamp: datetime
) -> LeaseRecord:
    """The record ``identity`` writes to carry out ``action`` (TAKE or RENEW) at ``stamp``."""
    if action is Action.WAIT:
        raise ValueError("a candidate that waits writes nothing")
    time = _micro_time(stamp)
    if record is not None and action is Action.RENEW:
        return replace(record, duration_seconds=duration, renew_time=time)
    return LeaseRecord(
        holder=identity,
        duration_seconds=duration,
        acquire_time=time,
        renew_time=time,
        transitions=record.transitions + 1 if record is not None else 0,
    )


def released(record: LeaseRecord, stamp: datetime) -> LeaseRecord:
    """The record a leader writes when it stops on purpose: no holder, so a standby takes at
    once instead of waiting out the lease (client-go's ``ReleaseOnCancel``)."""
    time = _micro_time(stamp)
    return replace(record, holder="", duration_seconds=1, acquire_time=time, renew_time=time)


def record_from_api(lease: Mapping[str, Any]) -> LeaseRecord:
    """A Lease (raw API JSON) as a record; fields of the wrong type read as absent."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    return LeaseRecord(
        holder=holder if isinstance(holder, str) else "",
        duration_seconds=_count(spec.get("leaseDurationSeconds")),
        acquire_time=_text(spec.get("acquireTime")),
        renew_time=_text(spec.get("renewTime")),
        transitions=_count(spec.get("leaseTransitions")),
    )


def record_to_api(record: LeaseRecord) -> dict[str, Any]:
    """The Lease ``spec`` carrying ``record``."""
    spec: dict[str, Any] = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.duration_seconds,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time is not None:
        spec["acquireTime"] = record.acquire_time
    if record.renew_time is not None:
        spec["renewTime"] = record.renew_time
    return spec


def _micro_time(stamp: datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 in UTC with microseconds."""
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _count(value: object) -> int:
    """A non-negative integer field; 0 when absent or of another type."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
