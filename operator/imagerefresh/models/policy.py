"""The ``ImageRefreshPolicy`` spec: what to keep fresh, and the ceilings that make it fail loudly.

These models mirror the CRD's structural schema in ``crds/`` (a test keeps the two in step): the
API server applies the defaults and rejects malformed policies at admission; the models parse
what it stored and add the typed views the planner needs.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from imagerefresh.models.base import ApiModel
from imagerefresh.models.durations import Duration
from imagerefresh.reference import ImageReference, parse, parse_digest

__all__ = [
    "MIN_INTERVAL",
    "MIN_ROLLOUT_TIMEOUT",
    "ContainerSpec",
    "PolicySpec",
    "PullBudgetSpec",
    "TargetSpec",
    "WorkloadKind",
]

MIN_INTERVAL = timedelta(seconds=30)
MIN_ROLLOUT_TIMEOUT = timedelta(seconds=30)
SHA256_DIGEST_PATTERN = r"^sha256:[a-f0-9]{64}$"


class WorkloadKind(StrEnum):
    DEPLOYMENT = "Deployment"
    DAEMONSET = "DaemonSet"
    STATEFULSET = "StatefulSet"


class ContainerSpec(ApiModel):
    """One container (or init container) of a workload and the tag it tracks."""

    name: Annotated[str, Field(min_length=1)]
    image: Annotated[str, Field(min_length=1)]
    digest: Annotated[str | None, Field(pattern=SHA256_DIGEST_PATTERN)] = None

    @field_validator("image")
    @classmethod
    def _image_is_a_tag_reference(cls, value: str) -> str:
        if parse(value).digest is not None:
            raise ValueError(
                f"image {value!r} carries a digest; track a tag here and pin with `digest:`"
            )
        return value

    @field_validator("digest")
    @classmethod
    def _digest_is_valid(cls, value: str | None) -> str | None:
        return parse_digest(value) if value is not None else None

    @property
    def tracked(self) -> ImageReference:
        """The tracked reference, normalised, with ``latest`` when no tag is written."""
        return parse(self.image).tracked()


class TargetSpec(ApiModel):
    """A workload whose containers the policy keeps fresh."""

    kind: WorkloadKind
    name: Annotated[str, Field(min_length=1)]
    namespace: str | None = None
    containers: Annotated[tuple[ContainerSpec, ...], Field(min_length=1)]
    rollout_timeout: Duration | None = None  # overrides the policy's progress deadline

    @field_validator("rollout_timeout")
    @classmethod
    def _timeout_above_minimum(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < MIN_ROLLOUT_TIMEOUT:
            raise ValueError("rolloutTimeout must be at least 30s")
        return value

    @field_validator("containers")
    @classmethod
    def _container_names_unique(cls, value: tuple[ContainerSpec, ...]) -> tuple[ContainerSpec, ...]:
        names = [container.name for container in value]
        if len(names) != len(set(names)):
            raise ValueError("each container may be declared once per target")
        return value


class PullBudgetSpec(ApiModel):
    """How much of a registry's pull budget is never spent on refreshes."""

    reserve: Annotated[int, Field(ge=0)] = 2


class PolicySpec(ApiModel):
    """``spec`` of an ImageRefreshPolicy."""

    interval: Duration = timedelta(minutes=15)
    max_skip_ticks: Annotated[int, Field(ge=1)] = 8
    max_refresh_attempts: Annotated[int, Field(ge=1)] = 3
    rollout_timeout: Duration = timedelta(minutes=10)
    rollback_on_failure: bool = True
    suspend: bool = False
    dry_run: bool = False
    pull_budget: PullBudgetSpec = PullBudgetSpec()
    targets: Annotated[tuple[TargetSpec, ...], Field(min_length=1)]

    @model_validator(mode="after")
    def _durations_above_minimum(self) -> PolicySpec:
        if self.interval < MIN_INTERVAL:
            raise ValueError("interval must be at least 30s")
        if self.rollout_timeout < MIN_ROLLOUT_TIMEOUT:
            raise ValueError("rolloutTimeout must be at least 30s")
        return self

    @field_validator("targets")
    @classmethod
    def _targets_unique(cls, value: tuple[TargetSpec, ...]) -> tuple[TargetSpec, ...]:
        keys = [(t.kind, t.namespace, t.name) for t in value]
        if len(keys) != len(set(keys)):
            raise ValueError("each workload may be targeted once per policy")
        return value
