"""Carry out a plan: record the intent, send the guarded patches, write the outcome, post events.

This is the write half of the imperative shell, and its order is the point:

1. A plan with patches first writes its status — which carries each patch as ``pending`` — and
   sends nothing unless that write landed. A patch that lands is then always recognised as the
   operator's own, even after a crash or a lost status write.
2. Each patch is sent through :meth:`~imagerefresh.kube.api.KubeApi.patch_images` (the write
   guard runs there) and its outcome is one of four, each with one meaning in status:
   *landed* (pending has the generation it produced: the one its intent predicted, so the
   outcome needs no write of its own unless someone else's write came in between, see
   :mod:`imagerefresh.planner.target.landing`); *precondition failed* (someone edited
   the workload since we read it: nothing was overwritten, the target keeps its previous phase
   and is read again next tick — not a refusal, not a flap); *refused for good* (400/401/403/
   404/422, admission, RBAC, or the write guard: phase ``Refused``, never ``Current``; a refused
   refresh's intent is cleared, a refused rollback stays owed); *unknown* (timeout, 5xx: the
   intent is kept and the workload is read again next tick).
3. The outcome status is written only if it differs from what the policy carries, so an idle
   tick makes no API write at all.

A status write that meets a 409 is retried on the fresh object only when nobody else changed
the status or the spec meanwhile (an annotation, kopf's bookkeeping); otherwise this tick's
view is stale and it is given up — never written blindly over someone else's status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

import structlog
from pydantic import ValidationError

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import (
    KubeError,
    KubeUnavailable,
    PreconditionFailed,
    ResourceConflict,
)
from imagerefresh.kube.pods import AlreadyExists, HelperPodApi
from imagerefresh.models import (
    ConditionType,
    PendingPurpose,
    Phase,
    PolicyStatus,
    PrePullFailure,
    TargetStatus,
)
from imagerefresh.models.base import format_timestamp
from imagerefresh.models.status import MAX_TEXT
from imagerefresh.planner import (
    Cleared,
    Event,
    ImagePatch,
    Permits,
    Plan,
    PolicyView,
    Refusal,
    TargetKey,
    owed_retry_at,
    reasons,
    revise_target,
)
from imagerefresh.planner.actions import HelperPodCreate, HelperPodDelete
from imagerefresh.planner.podguard import UnsafePod
from imagerefresh.runtime.clearance import Clearance, clear
from imagerefresh.runtime.events import EventRecorder, about_the_policy
from imagerefresh.runtime.gather import Gathered
from imagerefresh.runtime.policyview import PolicyUnreadable

__all__ = ["Applied", "apply_plan", "mark_unreadable"]

log = structlog.get_logger(__name__)

STATUS_WRITE_ATTEMPTS = 3
# What is unreadable (PolicyUnreadable.part) → the reason of Degraded; for the parts in
# _DOES_NOTHING the policy is not acted on at all, so Ready is False too.
_UNREADABLE_REASONS = {
    "spec": reasons.POLICY_INVALID,
    "status": reasons.STATUS_UNREADABLE,
    "crd": reasons.CRD_OUTDATED,
}
_DOES_NOTHING = frozenset({"spec", "crd"})
_ANNOUNCED = {reasons.REFRESHING, reasons.ROLLING_BACK}


class Sent(Enum):
    LANDED = "landed"
    PRECONDITION_FAILED = "precondition failed"
    REFUSED = "refused"
    UNKNOWN = "unknown"


@dataclass
class Applied:
    """What actually happened."""

    status: PolicyStatus
    patched: list[ImagePatch] = field(default_factory=list)
    refused: list[ImagePatch] = field(default_factory=list)  # refused for good
    conflicted: list[ImagePatch] = field(default_factory=list)  # preconditions failed
    unknown: list[ImagePatch] = field(default_factory=list)  # no answer: re-read next tick
    held: list[ImagePatch] = field(default_factory=list)  # not sent: intent not recorded
    guarded: list[Refusal] = field(default_factory=list)  # refused by the write guard: a bug
    # Pre-pull helper pods created (or found existing): their pulls stay reserved.
    created: list[HelperPodCreate] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    status_written: bool = False


@dataclass(frozen=True)
class _Written:
    policy: Mapping[str, Any]  # the policy as of the last write (or as read)
    written: bool = False
    error: str | None = None  # why the status could not be written


def _send(api: KubeApi, cleared: Cleared[ImagePatch]) -> tuple[Sent, str, int | None]:
    """Send one cleared patch: its outcome, a message, and the generation it produced."""
    patch = cleared.write
    try:
        obj = api.patch_images(cleared)
    except (PreconditionFailed, ResourceConflict) as error:
        return (
            Sent.PRECONDITION_FAILED,
            (
                f"{patch.target} changed between our read and our patch ({error}); "
                "nothing was overwritten, it is read again next tick"
            ),
            None,
        )
    except KubeUnavailable as error:
        return Sent.UNKNOWN, _unknown(patch, str(error)), None
    except KubeError as error:
        if error.status is None or not 400 <= error.status < 500:
            return Sent.UNKNOWN, _unknown(patch, str(error)), None
        return (
            Sent.REFUSED,
            (
                f"the API server refused the {patch.purpose} of {patch.target} for good: {error}. "
                "Nothing changed; it is tried again every tick until what refuses it (an admission "
                "policy, RBAC, validation) allows it"
            ),
            None,
        )
    generation = (obj.get("metadata") or {}).get("generation")
    return Sent.LANDED, "", generation if isinstance(generation, int) else None


def _unknown(patch: ImagePatch, error: str) -> str:
    return (
        f"no answer to the {patch.purpose} of {patch.target} ({error}); the intent is kept and "
        "whether it landed is read from the workload next tick"
    )


def _target(status: PolicyStatus, key: TargetKey) -> TargetStatus:
    wanted = (key.kind, key.namespace, key.name)
    return next(t for t in status.targets if (t.kind, t.namespace, t.name) == wanted)


def _previous_phase(view: PolicyView, patch: ImagePatch) -> Phase | None:
    key = (patch.target.kind, patch.target.namespace, patch.target.name)
    before = next((t for t in view.status.targets if (t.kind, t.namespace, t.name) == key), None)
    return before.phase if before is not None else None


def _revised(
    view: PolicyView,
    planned: TargetStatus,
    patch: ImagePatch,
    sent: Sent,
    message: str,
    gen: int | None,
    now: datetime,
) -> TargetStatus:
    """The target's status once ``patch``'s outcome is known."""
    pending = planned.pending
    rollback = patch.purpose is PendingPurpose.ROLLBACK
    if sent is Sent.LANDED:
        landed = (
            pending.model_copy(update={"generation": gen, "refusals": 0, "refused_at": None})
            if pending is not None
            else None
        )
        return planned.model_copy(update={"pending": landed})
    if sent is Sent.UNKNOWN:
        return planned.model_copy(update={"message": message})
    if sent is Sent.REFUSED and rollback and pending is not None:
        # A refused rollback is still owed: sent again at every tick, and by follow-ups
        # backing off (the status says when), never every few seconds. It produced nothing.
        owed = pending.model_copy(
            update={"refusals": pending.refusals + 1, "refused_at": now, "generation": None}
        )
        retry = owed_retry_at(owed, view.spec.interval)
        assert retry is not None  # a refused rollback always has its retry
        return planned.model_copy(
            update={
                "phase": Phase.REFUSED,
                "message": (
                    f"{message}; the rollback stays owed: refused {owed.refusals} time(s) in a "
                    f"row; it is sent again at {format_timestamp(retry)} (backing off up to the "
                    "interval) and at every interval tick"
                ),
                "pending": owed,
            }
        )
    if sent is Sent.REFUSED:
        # A refused refresh never happened.
        return planned.model_copy(
            update={"phase": Phase.REFUSED, "message": message, "pending": None}
        )
    # Precondition failed: nothing was overwritten and nothing is concluded from it. A
    # rollback's intent stays (the next tick sees who moved the images), having produced
    # nothing; a refresh's goes.
    kept = pending.model_copy(update={"generation": None}) if rollback and pending else None
    return planned.model_copy(
        update={
            "phase": _previous_phase(view, patch) or Phase.SKIPPING,
            "message": message,
            "pending": kept,
        }
    )


def _outcome_event(view: PolicyView, patch: ImagePatch, sent: Sent, message: str) -> Event | None:
    if sent is Sent.PRECONDITION_FAILED:
        return Event("Warning", reasons.PATCH_CONFLICT, message, patch.target)
    if sent is Sent.UNKNOWN:
        return Event("Warning", reasons.PATCH_OUTCOME_UNKNOWN, message, patch.target)
    if sent is Sent.REFUSED and _previous_phase(view, patch) is not Phase.REFUSED:
        return Event("Warning", reasons.PATCH_REFUSED, message, patch.target)
    return None


async def _patch(
    api: KubeApi,
    cleared: list[Cleared[ImagePatch]],
    gathered: Gathered,
    now: datetime,
    applied: Applied,
) -> None:
    view = gathered.tick.policy
    # Each patch is guarded on its own workload's images and no two name one workload: they
    # run concurrently, and what each outcome changes is then applied in the plan's order.
    outcomes = await asyncio.gather(*(asyncio.to_thread(_send, api, p) for p in cleared))
    patches = [c.write for c in cleared]
    for patch, (sent, message, generation) in zip(patches, outcomes, strict=True):
        {
            Sent.LANDED: applied.patched,
            Sent.REFUSED: applied.refused,
            Sent.PRECONDITION_FAILED: applied.conflicted,
            Sent.UNKNOWN: applied.unknown,
        }[sent].append(patch)
        if sent is not Sent.LANDED:
            _unannounce(applied, patch)
            event = _outcome_event(view, patch, sent, message)
            if event is not None:
                applied.events.append(event)
        planned = _target(applied.status, patch.target)
        target = _revised(view, planned, patch, sent, message, generation, now)
        applied.status = revise_target(view, applied.status, target, now)


async def _create_helpers(
    api: KubeApi,
    cleared: list[Cleared[HelperPodCreate]],
    gathered: Gathered,
    now: datetime,
    applied: Applied,
) -> None:
    """Create the plan's helper pods, once the status recording their pre-pull landed. A pod
    refused for good (the pod guard, RBAC, an admission policy) holds its pre-pull as a failed
    one, naming what refused it; no answer is read again next tick (a second create of the
    same name is a 409, never a second pod)."""
    pods = HelperPodApi(api)
    outcomes = await asyncio.gather(
        *(asyncio.to_thread(_create, pods, create) for create in cleared)
    )
    view = gathered.tick.policy
    failed: set[TargetKey] = set()
    for create, refusal in zip((c.write for c in cleared), outcomes, strict=True):
        if refusal is None:
            applied.created.append(create)
            continue
        if refusal == _NO_ANSWER or create.target in failed:
            continue
        failed.add(create.target)
        message = (
            f"the pre-pull could not create its helper pod on node {create.node}: {refusal}. "
            "Nothing was patched and no helper pod is left. Fix what refused it, then reset to "
            "try again: "
            f"imagerefresh reset {view.namespace}/{view.name}"
        )
        planned = _target(applied.status, create.target)
        intent = planned.pre_pull
        failure = PrePullFailure(node=create.node, reason=refusal[:2_048])
        revised = planned.model_copy(
            update={
                "phase": Phase.WAITING,
                "message": message,
                "pre_pull": intent.model_copy(update={"failure": failure}) if intent else None,
            }
        )
        applied.status = revise_target(view, applied.status, revised, now)
        applied.events.append(Event("Warning", reasons.PRE_PULL_FAILED, message, create.target))


_NO_ANSWER = "no answer"


def _create(pods: HelperPodApi, cleared: Cleared[HelperPodCreate]) -> str | None:
    """None when the pod exists now; why it was refused for good; or :data:`_NO_ANSWER`."""
    create = cleared.write
    try:
        pods.create(cleared)
    except AlreadyExists:
        return None
    except UnsafePod as error:
        return str(error)
    except KubeUnavailable as error:
        log.warning("pre-pull pod: no answer", node=create.node, error=str(error))
        return _NO_ANSWER
    except KubeError as error:
        if error.status is None or not 400 <= error.status < 500:
            log.warning("pre-pull pod: no answer", node=create.node, error=str(error))
            return _NO_ANSWER
        return str(error)
    return None


async def _delete_helpers(api: KubeApi, plan: Plan) -> None:
    """Delete the helper pods no pre-pull needs; one that fails is found again next tick."""
    pods = HelperPodApi(api)

    def delete(order: HelperPodDelete) -> None:
        try:
            pods.delete(order)
        except KubeError as error:
            log.warning("pre-pull pod not deleted", pod=order.name, error=str(error))

    await asyncio.gather(*(asyncio.to_thread(delete, d) for d in plan.pod_deletes))


def _unannounce(applied: Applied, patch: ImagePatch) -> None:
    """Drop the plan's "patching …" events for a patch that did not land."""
    applied.events = [
        e for e in applied.events if not (e.target == patch.target and e.reason in _ANNOUNCED)
    ]


def _record_events(
    recorder: EventRecorder,
    policy: Mapping[str, Any],
    gathered: Gathered,
    events: list[Event],
    status: PolicyStatus,
) -> None:
    """Each event about a target on its workload, and about the policy once per type and
    reason (:func:`~imagerefresh.runtime.events.about_the_policy`); each as one log line
    (:func:`_log_decision`)."""
    for event in events:
        _log_decision(gathered, event, status)
        workload = gathered.workloads.get(event.target) if event.target is not None else None
        if workload is not None:
            recorder.record(workload, event.type, event.reason, event.message)
    for type_, reason, message in about_the_policy(events):
        recorder.record(policy, type_, reason, message)


def _log_decision(gathered: Gathered, event: Event, status: PolicyStatus) -> None:
    """A decision made known (an event) as one structured log line: policy, target, its phase
    and desired digests, reason and message. Events stay in the cluster (and expire); the log
    is what an edge's log collector ships off it (docs/migration.md, "The edge's telemetry")."""
    view, target = gathered.tick.policy, event.target
    key = (target.kind, target.namespace, target.name) if target is not None else None
    found = next((t for t in status.targets if (t.kind, t.namespace, t.name) == key), None)
    log.log(
        logging.WARNING if event.type == "Warning" else logging.INFO,
        "decision",
        policy=f"{view.namespace}/{view.name}",
        target=str(target) if target is not None else None,
        phase=str(found.phase) if found is not None else None,
        digests={c.name: c.desired for c in found.containers if c.desired} if found else {},
        reason=event.reason,
        message=event.message,
    )


def _carries(policy: Mapping[str, Any], status: PolicyStatus) -> bool:
    try:
        current = PolicyStatus.model_validate(policy.get("status") or {})
    except ValidationError:
        return False  # an unreadable status is being rebuilt: it differs
    return current.to_api() == status.to_api()


def _unchanged_meanwhile(read: Mapping[str, Any], fresh: Mapping[str, Any]) -> bool:
    """Whether only what is not ours to judge (annotations, bookkeeping) changed since ``read``."""
    same_spec = read["metadata"].get("generation") == fresh["metadata"].get("generation")
    return same_spec and read.get("status") == fresh.get("status")


def _write_status(api: KubeApi, policy: Mapping[str, Any], status: PolicyStatus) -> _Written:
    """Write ``status`` unless the policy already carries it (see the module docstring)."""
    if _carries(policy, status):
        return _Written(policy)
    metadata = policy["metadata"]
    for _ in range(STATUS_WRITE_ATTEMPTS):
        try:
            return _Written(api.replace_policy_status(policy, status.to_api()), written=True)
        except ResourceConflict as error:
            fresh = api.read_policy(metadata["namespace"], metadata["name"])
            if fresh is None or not _unchanged_meanwhile(policy, fresh):
                return _Written(policy, error=f"{error}; the policy changed meanwhile")
            policy = fresh
        except KubeError as error:
            return _Written(policy, error=str(error))
    return _Written(policy, error="repeated conflicts writing the status")


def _not_written(view: PolicyView, error: str, held: list[ImagePatch]) -> Event:
    what = (
        f"nothing was patched ({', '.join(str(p.target) for p in held)} held back: a patch is "
        "sent only once its intent is recorded)"
        if held
        else "the outcome of this tick is not recorded"
    )
    return Event(
        "Warning",
        reasons.STATUS_NOT_WRITTEN,
        f"could not write the status of {view.namespace}/{view.name}: {error}; {what}; "
        "retried next tick — grant update on imagerefreshpolicies/status and check admission "
        "policies on it",
    )


async def apply_plan(
    plan: Plan,
    policy: Mapping[str, Any],
    gathered: Gathered,
    api: KubeApi,
    now: datetime,
    events: EventRecorder,
    permits: Permits,
) -> Applied:
    """Apply ``plan`` to the cluster; returns what was done (its events are on their way).

    Every write is cleared by the write guard over ``permits`` first (:mod:`.clearance`)."""
    view = gathered.tick.policy
    clearance = clear(plan, permits, view, now)
    applied = _cleared(plan, clearance)
    if clearance.patches or clearance.creates:
        intent = await asyncio.to_thread(_write_status, api, policy, applied.status)
        if intent.error is not None:
            applied.held = [c.write for c in clearance.patches]
            for patch in applied.held:
                _unannounce(applied, patch)
            applied.events = [e for e in applied.events if e.reason != reasons.PRE_PULLING]
            applied.events.append(_not_written(view, intent.error, applied.held))
            _record_events(events, policy, gathered, applied.events, applied.status)
            return applied
        policy, applied.status_written = intent.policy, intent.written
        await _patch(api, clearance.patches, gathered, now, applied)
        await _create_helpers(api, clearance.creates, gathered, now, applied)
    outcome = await asyncio.to_thread(_write_status, api, policy, applied.status)
    if outcome.error is None:
        await _delete_helpers(api, plan)
    applied.status_written = applied.status_written or outcome.written
    if outcome.error is not None:
        log.warning(
            "status not written", policy=f"{view.namespace}/{view.name}", error=outcome.error
        )
        applied.events.append(_not_written(view, outcome.error, []))
    _record_events(events, policy, gathered, applied.events, applied.status)
    return applied


def _cleared(plan: Plan, clearance: Clearance) -> Applied:
    """What is applied of ``plan`` once the guard has cleared its writes: the refused ones'
    announcements dropped, their refusals reported."""
    applied = Applied(
        status=clearance.status,
        events=[*plan.events, *clearance.events],
        guarded=list(clearance.refused),
    )
    for refusal in clearance.refused:
        if isinstance(refusal.write, ImagePatch):
            _unannounce(applied, refusal.write)
        else:
            applied.events = [
                e
                for e in applied.events
                if not (e.target == refusal.write.target and e.reason == reasons.PRE_PULLING)
            ]
    return applied


def _raw_condition(
    old: Mapping[str, Any] | None,
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> dict[str, Any]:
    """A condition as JSON, keeping ``old``'s transition time while its status holds."""
    since = format_timestamp(now)
    if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
        since = old["lastTransitionTime"]
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def mark_unreadable(
    api: KubeApi, policy: Mapping[str, Any], error: PolicyUnreadable, now: datetime
) -> tuple[bool, list[Event]]:
    """Say, in status, that the policy could not be read — and change nothing else of it.

    Only conditions are written: ``Degraded`` True and, when the policy does nothing at all
    (its spec is invalid, or the installed CRD would drop fields: part ``crd``), ``Ready``
    False (so an old Ready True never stays green over a policy that does nothing). The rest
    of the status stays as it is: an unreadable status is not ours to overwrite; a reset
    rebuilds it. Returns whether a write happened and the events to post.
    """
    metadata = policy["metadata"]
    raw = dict(policy.get("status") or {})
    conditions = raw.get("conditions")
    existing = (
        [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []
    )
    by_type = {c.get("type"): c for c in existing}
    reason = _UNREADABLE_REASONS[error.part]
    message = str(error)[:MAX_TEXT]
    generation = int(metadata.get("generation") or 0)
    wanted = [(ConditionType.DEGRADED.value, "True")]
    if error.part in _DOES_NOTHING:
        wanted.append((ConditionType.READY.value, "False"))
    updated = dict(by_type)
    for kind, status in wanted:
        updated[kind] = _raw_condition(
            by_type.get(kind), kind, status, reason, message, now, generation
        )
    if updated == by_type:
        return False, []
    raw["conditions"] = [updated[c.get("type")] for c in existing] + [
        updated[kind] for kind, _ in wanted if kind not in by_type
    ]
    degraded = by_type.get(ConditionType.DEGRADED.value) or {}
    events = []
    if (degraded.get("status"), degraded.get("reason")) != ("True", reason):
        events.append(Event("Warning", reason, message))
    try:
        api.replace_policy_status(policy, raw)
    except KubeError as failure:
        log.warning(
            "unreadable policy not marked",
            policy=f"{metadata['namespace']}/{metadata['name']}",
            error=str(failure),
        )
        return False, events
    return True, events
