"""Carry out a plan: the guarded patches, the events, and the status — only if it changed.

This is the write half of the imperative shell. A patch whose preconditions fail (someone edited
the workload between our read and our write) overwrites nothing: the target keeps its previous
status with a message saying so, and the next tick reads afresh — neither a skip nor a flap.
The status is compared with what the policy already carries and written once, with the
resourceVersion it was read at; an idle tick therefore makes no API write at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError, PreconditionFailed, ResourceConflict
from imagerefresh.models import Phase, PolicyStatus, TargetStatus
from imagerefresh.planner import (
    Event,
    ImagePatch,
    PatchPurpose,
    Plan,
    PolicyView,
    reasons,
    revise_target,
)
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.gather import Gathered

__all__ = ["Applied", "apply_plan"]

log = structlog.get_logger(__name__)

STATUS_WRITE_ATTEMPTS = 3


@dataclass
class Applied:
    """What actually happened."""

    status: PolicyStatus
    patched: list[ImagePatch] = field(default_factory=list)
    refused: list[ImagePatch] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    status_written: bool = False


def _reverted(
    view: PolicyView, plan_status: PolicyStatus, patch: ImagePatch, message: str
) -> TargetStatus:
    """The target as it stood before this tick, for a refresh the API server refused."""
    key = (patch.target.kind, patch.target.namespace, patch.target.name)
    before = next((t for t in view.status.targets if (t.kind, t.namespace, t.name) == key), None)
    planned = next(t for t in plan_status.targets if (t.kind, t.namespace, t.name) == key)
    base = before or planned.model_copy(update={"phase": Phase.SKIPPING})
    return base.model_copy(update={"pending": None, "message": message})


def _try_patch(api: KubeApi, patch: ImagePatch) -> tuple[str, str] | None:
    """Apply one guarded patch; None when it landed, else why not (reason, message)."""
    try:
        api.patch_images(patch)
    except PreconditionFailed as error:
        return reasons.PATCH_CONFLICT, (
            f"{patch.target} changed between our read and our patch ({error}); "
            "nothing was overwritten, it is read again next tick"
        )
    except KubeError as error:
        return "PatchFailed", f"could not patch {patch.target}: {error}"
    return None


async def _patch(
    api: KubeApi, plan: Plan, gathered: Gathered, now: datetime, applied: Applied
) -> None:
    view = gathered.tick.policy
    # Each patch is guarded on its own workload's images and no two name one workload: they
    # run concurrently, and what each outcome changes is then applied in the plan's order.
    outcomes = await asyncio.gather(
        *(asyncio.to_thread(_try_patch, api, patch) for patch in plan.patches)
    )
    for patch, refusal in zip(plan.patches, outcomes, strict=True):
        if refusal is None:
            applied.patched.append(patch)
            continue
        reason, message = refusal
        applied.refused.append(patch)
        announced = {reasons.REFRESHING, reasons.ROLLING_BACK}
        applied.events = [
            e for e in applied.events if not (e.target == patch.target and e.reason in announced)
        ]
        applied.events.append(Event("Warning", reason, message, patch.target))
        if patch.purpose is PatchPurpose.REFRESH:
            applied.status = revise_target(
                view, applied.status, _reverted(view, applied.status, patch, message), now
            )


def _record_events(
    recorder: EventRecorder, policy: Mapping[str, Any], gathered: Gathered, events: list[Event]
) -> None:
    """Each event about the policy and, when it concerns a target, about that workload too."""
    for event in events:
        recorder.record(policy, event.type, event.reason, event.message)
        workload = gathered.workloads.get(event.target) if event.target is not None else None
        if workload is not None:
            recorder.record(workload, event.type, event.reason, event.message)


def _write_status(api: KubeApi, policy: Mapping[str, Any], status: PolicyStatus) -> bool:
    """Write ``status`` unless the policy already carries it; True when a write happened."""
    current = PolicyStatus.model_validate(policy.get("status") or {})
    if current.to_api() == status.to_api():
        return False
    metadata = policy["metadata"]
    for _ in range(STATUS_WRITE_ATTEMPTS):
        try:
            api.replace_policy_status(policy, status.to_api())
            return True
        except ResourceConflict:
            # Someone wrote the policy (an annotation, the spec) since we read it. The status
            # is ours alone and still true of this tick: write it at the new version.
            fresh = api.read_policy(metadata["namespace"], metadata["name"])
            if fresh is None:
                return False
            policy = fresh
    log.warning(
        "status not written after repeated conflicts; retried next tick",
        policy=f"{metadata['namespace']}/{metadata['name']}",
    )
    return False


async def apply_plan(
    plan: Plan,
    policy: Mapping[str, Any],
    gathered: Gathered,
    api: KubeApi,
    now: datetime,
    events: EventRecorder,
) -> Applied:
    """Apply ``plan`` to the cluster; returns what was done (its events are on their way)."""
    applied = Applied(status=plan.status, events=list(plan.events))
    await _patch(api, plan, gathered, now, applied)
    applied.status_written = await asyncio.to_thread(_write_status, api, policy, applied.status)
    _record_events(events, policy, gathered, applied.events)
    return applied
