"""The ``ImageRefreshPolicy`` status: what an operator reads to know where every target stands.

Status is written only when it changes: it carries no per-tick timestamp or counter, so an idle
tick writes nothing (when a policy last ticked is a metric). Conditions have the standard
``metav1.Condition`` shape; each condition and each phase means exactly one thing (see
:class:`Phase` and :class:`ConditionType`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from imagerefresh.models.base import ApiModel, Timestamp
from imagerefresh.models.policy import WorkloadKind
from imagerefresh.reference import parse

__all__ = [
    "MAX_FAILED_BUILDS",
    "MAX_NODES",
    "MAX_SEEN",
    "Condition",
    "ConditionType",
    "ContainerStatus",
    "FailedBuild",
    "OfflineStatus",
    "PendingPurpose",
    "PendingRefresh",
    "Phase",
    "PolicyStatus",
    "PrePullFailure",
    "PrePullIntent",
    "ProgressMark",
    "RegistryStatus",
    "SeenDigest",
    "TargetStatus",
]


class Phase(StrEnum):
    """Where one target stands after a tick. Declared from worst to best."""

    REFUSED = "Refused"  # the API server refused our patch for good (admission, RBAC, validation)
    UNTRUSTED = "Untrusted"  # with spec.verify: the desired digest carries no valid signature
    ERROR = "Error"  # evidence (API or registry) was unreadable: nothing was done on it
    LOCKED = "Locked"  # refresh attempts at their ceiling: no re-imaging until a reset
    FROZEN = "Frozen"  # the skip streak is at its ceiling: unsettled for too long
    CONFLICT = "Conflict"  # the policy cannot apply as declared (container, repository, scope)
    MISSING = "Missing"  # the workload does not exist
    ROLLING_BACK = "RollingBack"  # a failed refresh is being (or is owed to be) rolled back
    DEFERRED = "Deferred"  # drifted, but the pull budget would fall below the reserve
    WAITING = "Waiting"  # drifted; the refresh waits (a window, a peer, a cooldown, a failed build)
    REFRESHING = "Refreshing"  # our refresh is rolling out
    SKIPPING = "Skipping"  # not settled (a rollout in flight that is not ours): waiting
    DRIFTED = "Drifted"  # drifted, and the policy is a dry run: reported, not patched
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
    OFFLINE_READY = "OfflineReady"  # every target's pods would restart with no registry


# Bounds on what is read back: status is input anyone with `update` on the status subresource
# can write. Past these, a status is not ours and fails closed (nothing is patched on it).
MAX_COUNT = 1_000_000
MAX_IMAGE = 512
MAX_CONTAINERS = 64
MAX_TEXT = 32_768
# Failed builds kept per target (newest first), and tracked references a policy's seen list
# holds (one per container it may declare).
MAX_FAILED_BUILDS = 5
MAX_SEEN = 256
MAX_NODES = 16  # nodes an offline verdict names
MAX_REASON = 2_048
_DIGEST_PATTERN = r"^sha256:[a-f0-9]{64}$"


class StatusModel(ApiModel):
    """A status part: fields a newer version wrote are ignored, never fatal."""

    model_config = ConfigDict(extra="ignore")


class Condition(StatusModel):
    """``metav1.Condition``."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: str = ""
    last_transition_time: Timestamp
    observed_generation: int | None = None


class PendingPurpose(StrEnum):
    REFRESH = "refresh"  # pin the desired digests
    ROLLBACK = "rollback"  # restore the images a failed refresh replaced


Image = Annotated[str, Field(min_length=1, max_length=MAX_IMAGE)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class ProgressMark(StatusModel):
    """The most replicas (or nodes) a rollout has had updated and available so far."""

    updated: Count
    available: Count


ImagesByContainer = Annotated[dict[str, Image], Field(min_length=1, max_length=MAX_CONTAINERS)]


class PendingRefresh(StatusModel):
    """A patch of ours (a refresh or a rollback) recorded before it is sent, until judged.

    ``images`` is what the patch writes, ``previous`` what it replaces; both are read back
    from status, so both must be image references for the same containers. Whether they name
    the tracked repository is the write guard's to decide, at the one place patches are sent.
    """

    purpose: PendingPurpose = PendingPurpose.REFRESH
    images: ImagesByContainer  # container → the image the patch writes
    previous: ImagesByContainer  # container → the image it replaces (a rollback's target)
    started_at: Timestamp
    # What the patch produces: predicted in the intent (the workload's generation as read, plus
    # one), what it did produce once it landed; None once it is known to have produced nothing.
    generation: Annotated[int, Field(ge=0)] | None = None
    # The progress deadline runs from the last time the rollout reached a new high-water mark
    # (from startedAt until the first): kept here so it survives a restart or a new leader.
    progressed_at: Timestamp | None = None
    progress: ProgressMark | None = None
    # With spec.lockstep, a refresh that settled while a peer tracking the same reference is
    # still rolling out is not yet a success: when it settled (it has no deadline left to run).
    settled_at: Timestamp | None = None
    # Containers pinned in the same patch whose pods already ran the digest (an adoption): the
    # pin moves nothing, so it never counts as their lockstep group moving.
    adopted: Annotated[tuple[str, ...], Field(max_length=MAX_CONTAINERS)] = ()
    # A rollback the API server refused for good is owed: how many times in a row, and when
    # last. Follow-ups send it again backing off (planner.follow), never every few seconds.
    refusals: Count = 0
    refused_at: Timestamp | None = None

    @field_validator("images", "previous")
    @classmethod
    def _references(cls, value: dict[str, str]) -> dict[str, str]:
        for image in value.values():
            parse(image)  # InvalidReference is a ValueError: a validation error
        return value

    @model_validator(mode="after")
    def _same_containers(self) -> PendingRefresh:
        if set(self.images) != set(self.previous):
            raise ValueError("pending images and previous must name the same containers")
        if not set(self.adopted) <= set(self.images):
            raise ValueError("pending adopted must name containers of its images")
        return self


Digest = Annotated[str, Field(pattern=_DIGEST_PATTERN)]


NodeName = Annotated[str, Field(max_length=253)]


class OfflineStatus(StatusModel):
    """Would the workload's pods restart with the registry unreachable? A report: recomputed
    every interval tick from pods and nodes, never read back as evidence."""

    ready: bool
    reason: Annotated[str, Field(max_length=MAX_REASON)] = ""
    nodes: Annotated[tuple[NodeName, ...], Field(max_length=MAX_NODES)] = ()  # where not proven


class PrePullFailure(StatusModel):
    """A node that could not pull: the refresh holds until a reset or a new digest."""

    node: NodeName
    reason: Annotated[str, Field(max_length=MAX_REASON)]


class PrePullIntent(StatusModel):
    """A pre-pull of ours, recorded before its first helper pod is created: which images go onto
    the workload's nodes, since when (its progress deadline), and a node whose pull failed.

    Read back after a restart or by a new leader, it resumes the pre-pull without charging the
    pull budget again. Its images must be pinned references; whether they name the tracked
    repository is the pod guard's to decide, at the one place helper pods are created.
    """

    images: ImagesByContainer  # container → the image (repo@digest) its nodes must hold
    started_at: Timestamp
    failure: PrePullFailure | None = None

    @field_validator("images")
    @classmethod
    def _pinned(cls, value: dict[str, str]) -> dict[str, str]:
        for image in value.values():
            if parse(image).digest is None:
                raise ValueError("a pre-pull names images by digest")
        return value


class ContainerStatus(StatusModel):
    name: str
    tracked: str  # fully qualified repo:tag
    desired: str | None = None  # the resolved (or pinned) digest; absent when unknown
    live: str | None = None  # what the pod template says now, fully qualified
    running: tuple[str, ...] = ()  # distinct digests the pods report
    # The live imagePullPolicy: Always is not offline-safe (a PullPolicyAlways event says so).
    pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    # With spec.verify: the fingerprint of the key that verified the desired digest. A report
    # for people: the operator never reads it as evidence (verdicts live in its memory only).
    verified_by: Annotated[str, Field(max_length=80)] | None = None
    offline: OfflineStatus | None = None  # absent: not assessed this generation


class FailedBuild(StatusModel):
    """A digest whose refresh of this target failed in its rollout: never tried again here
    until a reset."""

    digest: Digest
    at: Timestamp


class SeenDigest(StatusModel):
    """What a tracked tag answered and since when: the clock of ``spec.minimumAge``."""

    tracked: Annotated[str, Field(min_length=1, max_length=MAX_IMAGE)]
    digest: Digest
    since: Timestamp


class TargetStatus(StatusModel):
    kind: WorkloadKind
    namespace: str
    name: str
    phase: Phase
    message: Annotated[str, Field(max_length=MAX_TEXT)] = ""
    skip_streak: Count = 0
    refresh_attempts: Count = 0  # failed and contested refreshes since the last reset/success
    contested: Count = 0  # of those, refreshes another writer undid: a success keeps these
    locked_at: Timestamp | None = None  # when attempts reached the ceiling; only a reset clears
    last_refresh: Timestamp | None = None
    pending: PendingRefresh | None = None
    pre_pull: PrePullIntent | None = None  # a pre-pull in flight, or one that failed
    last_good: Annotated[dict[str, Image], Field(max_length=MAX_CONTAINERS)] = Field(
        default_factory=dict
    )
    # The images another writer put in place in the last contest counted: re-pinning from them
    # is that same contest, never a second one. Cleared by a success.
    contested_images: Annotated[dict[str, Image], Field(max_length=MAX_CONTAINERS)] = Field(
        default_factory=dict
    )
    containers: tuple[ContainerStatus, ...] = ()
    # Builds whose rollout failed here, newest first: never retried on this target until a
    # reset, even when the tag moves away and back.
    failed: Annotated[tuple[FailedBuild, ...], Field(max_length=MAX_FAILED_BUILDS)] = ()


class RegistryStatus(StatusModel):
    """A registry's pull budget for one identity, as it last reported it."""

    host: str
    identity: str
    limit: int | None = None
    remaining: int | None = None
    window_seconds: int | None = None
    source: str | None = None


class PolicyStatus(StatusModel):
    observed_generation: int | None = None
    phase: Phase | None = None  # the worst target phase (printer column)
    target_count: int | None = None  # printer column
    last_refresh: Timestamp | None = None  # the newest target lastRefresh (printer column)
    conditions: tuple[Condition, ...] = ()
    targets: tuple[TargetStatus, ...] = ()
    registries: tuple[RegistryStatus, ...] = ()
    last_reset: str | None = None
    # The value of the refresh-outside-window annotation last honoured (once per value).
    last_window_override: str | None = None
    # Per tracked reference: the digest the tag answers and since when (the cooldown's clock).
    seen: Annotated[tuple[SeenDigest, ...], Field(max_length=MAX_SEEN)] = ()
