"""The ``ImageRefreshPolicy`` status: what an operator reads to know where every target stands.

Status is written only when it changes: it carries no per-tick timestamp or counter, so an idle
tick writes nothing (when a policy last ticked is a metric). Conditions have the standard
``metav1.Condition`` shape; each condition and each phase means exactly one thing (see
:class:`Phase` and :class:`ConditionType`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from imagerefresh.models.base import ApiModel, Timestamp
from imagerefresh.models.policy import WorkloadKind

__all__ = [
    "Condition",
    "ConditionType",
    "ContainerStatus",
    "PendingRefresh",
    "Phase",
    "PolicyStatus",
    "RegistryStatus",
    "TargetStatus",
]


class Phase(StrEnum):
    """Where one target stands after a tick. Declared from worst to best."""

    ERROR = "Error"  # evidence (API or registry) was unreadable: nothing was done on it
    LOCKED = "Locked"  # refresh attempts at their ceiling: no re-imaging until a reset
    FROZEN = "Frozen"  # the skip streak is at its ceiling: unsettled for too long
    CONFLICT = "Conflict"  # the policy cannot apply as declared (container, repository, scope)
    MISSING = "Missing"  # the workload does not exist
    DEFERRED = "Deferred"  # drifted, but the pull budget would fall below the reserve
    DRIFTED = "Drifted"  # drifted, and the policy is a dry run: reported, not patched
    SKIPPING = "Skipping"  # not settled (a rollout in flight that is not ours): waiting
    REFRESHING = "Refreshing"  # our refresh is rolling out
    SUSPENDED = "Suspended"  # the policy is suspended
    CURRENT = "Current"  # settled on the desired digests

    @property
    def severity(self) -> int:
        """Lower is worse; the printer column shows the worst phase across targets."""
        return list(Phase).index(self)


class ConditionType(StrEnum):
    READY = "Ready"  # every target runs its desired digests
    REFRESHING = "Refreshing"  # a rollout of ours is in flight
    FROZEN = "Frozen"  # a target's skip streak is at its ceiling
    LOCKED = "Locked"  # a target's refresh attempts are at their ceiling
    RATE_LIMITED = "RateLimited"  # a refresh was deferred for the pull budget this tick
    DEGRADED = "Degraded"  # evidence was unreadable this tick; nothing was patched on it


class Condition(ApiModel):
    """``metav1.Condition``."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: str = ""
    last_transition_time: Timestamp
    observed_generation: int | None = None


class PendingRefresh(ApiModel):
    """A refresh we started and have not yet judged."""

    images: dict[str, str]  # container → the image we wrote
    previous: dict[str, str]  # container → the image it replaced (the rollback target)
    started_at: Timestamp
    generation: int  # the workload generation our patch produced


class ContainerStatus(ApiModel):
    name: str
    tracked: str  # fully qualified repo:tag
    desired: str | None = None  # the resolved (or pinned) digest; absent when unknown
    live: str | None = None  # what the pod template says now, fully qualified
    running: tuple[str, ...] = ()  # distinct digests the pods report


class TargetStatus(ApiModel):
    kind: WorkloadKind
    namespace: str
    name: str
    phase: Phase
    message: str = ""
    skip_streak: Annotated[int, Field(ge=0)] = 0
    refresh_attempts: Annotated[int, Field(ge=0)] = 0
    last_refresh: Timestamp | None = None
    pending: PendingRefresh | None = None
    last_good: dict[str, str] = Field(default_factory=dict)
    containers: tuple[ContainerStatus, ...] = ()


class RegistryStatus(ApiModel):
    """A registry's pull budget for one identity, as it last reported it."""

    host: str
    identity: str
    limit: int | None = None
    remaining: int | None = None
    window_seconds: int | None = None
    source: str | None = None


class PolicyStatus(ApiModel):
    observed_generation: int | None = None
    phase: Phase | None = None  # the worst target phase (printer column)
    target_count: int | None = None  # printer column
    last_refresh: Timestamp | None = None  # the newest target lastRefresh (printer column)
    conditions: tuple[Condition, ...] = ()
    targets: tuple[TargetStatus, ...] = ()
    registries: tuple[RegistryStatus, ...] = ()
    last_reset: str | None = None
