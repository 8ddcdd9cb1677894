"""The decision core: a pure function from a tick's evidence to its actions and new status.

No kopf, no API or registry calls: :mod:`~imagerefresh.planner.evidence` defines what the shell
gathers, :func:`plan_tick` decides, :mod:`~imagerefresh.planner.actions` is what comes out.
"""

from imagerefresh.planner.actions import Event, ImageChange, ImagePatch, PatchPurpose, Plan
from imagerefresh.planner.evidence import (
    OPERATOR_FIELD_MANAGER,
    DigestOutcome,
    LiveContainer,
    NamespacePolicy,
    ObservedPod,
    PolicyView,
    Resolved,
    TargetEvidence,
    TargetKey,
    TickInput,
    Unresolved,
    Workload,
    running_digest,
)
from imagerefresh.planner.follow import NOTHING_IN_FLIGHT, InFlight, in_flight, owed_retry_at
from imagerefresh.planner.guard import Cleared, Permits, Refusal, clear_writes, unsafe_changes
from imagerefresh.planner.permits import permits
from imagerefresh.planner.tick import plan_tick, revise_target

__all__ = [
    "NOTHING_IN_FLIGHT",
    "OPERATOR_FIELD_MANAGER",
    "Cleared",
    "DigestOutcome",
    "Event",
    "ImageChange",
    "ImagePatch",
    "InFlight",
    "LiveContainer",
    "NamespacePolicy",
    "ObservedPod",
    "PatchPurpose",
    "Permits",
    "Plan",
    "PolicyView",
    "Refusal",
    "Resolved",
    "TargetEvidence",
    "TargetKey",
    "TickInput",
    "Unresolved",
    "Workload",
    "clear_writes",
    "in_flight",
    "owed_retry_at",
    "permits",
    "plan_tick",
    "revise_target",
    "running_digest",
    "unsafe_changes",
]
