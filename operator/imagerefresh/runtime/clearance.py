"""Clear a plan's writes through the write guard before anything is recorded or sent.

The guard (:func:`imagerefresh.planner.clear_writes`) runs on every write of the plan — its
patches and its helper pods — over the snapshot of the tick
(:func:`imagerefresh.planner.permits`), before the intent is written: a refused write is
never sent, and its intent never recorded. The planner never plans a write the guard refuses,
so a refusal is a bug signal: the target is ``Refused`` with the guard's reasons, a Warning
event says so, and the ticker counts it (``imagerefresh_write_refusals_total``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import structlog

from imagerefresh.models import Phase, PolicyStatus, TargetStatus
from imagerefresh.models.status import MAX_TEXT
from imagerefresh.planner import (
    Cleared,
    Event,
    ImagePatch,
    Permits,
    Plan,
    PolicyView,
    Refusal,
    clear_writes,
    reasons,
    revise_target,
)
from imagerefresh.planner.actions import HelperPodCreate

__all__ = ["Clearance", "clear"]

log = structlog.get_logger(__name__)


@dataclass
class Clearance:
    """What may be sent of a plan, and the status once the refused writes are taken out."""

    status: PolicyStatus
    patches: list[Cleared[ImagePatch]] = field(default_factory=list)
    creates: list[Cleared[HelperPodCreate]] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def clear(plan: Plan, permits: Permits, view: PolicyView, now: datetime) -> Clearance:
    """The plan's writes the guard lets through; each refused one reported on its target."""
    guarded = clear_writes([*plan.patches, *plan.pod_creates], permits)
    clearance = Clearance(
        status=plan.status,
        patches=list(guarded.patches),
        creates=list(guarded.creates),
        refused=list(guarded.refused),
    )
    for refusal in guarded.refused:
        message = refusal.message[:MAX_TEXT]
        log.error("write refused by the guard", target=str(refusal.write.target), why=message)
        target = _target(clearance.status, refusal.write)
        if target is None:
            continue
        revised = target.model_copy(
            update={"phase": Phase.REFUSED, "message": message, "pending": None, "pre_pull": None}
        )
        clearance.status = revise_target(view, clearance.status, revised, now)
        clearance.events.append(
            Event("Warning", reasons.WRITE_REFUSED, message, refusal.write.target)
        )
    return clearance


def _target(status: PolicyStatus, write: ImagePatch | HelperPodCreate) -> TargetStatus | None:
    key = write.target
    wanted = (key.kind, key.namespace, key.name)
    return next((t for t in status.targets if (t.kind, t.namespace, t.name) == wanted), None)
