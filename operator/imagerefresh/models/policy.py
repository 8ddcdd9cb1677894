"""The ``ImageRefreshPolicy`` spec: what to keep fresh, and the ceilings that make it fail loudly.

These models mirror the CRD's structural schema in ``crds/`` (a test keeps the two in step): the
API server applies the defaults and rejects malformed policies at admission; the models parse
what it stored and add the typed views the planner needs.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from imagerefresh.models.base import ApiModel
from imagerefresh.models.durations import Duration
from imagerefresh.reference import ImageReference, parse, parse_digest, tracked_reference
from imagerefresh.signatures import MAX_KEYS, MAX_PEM_CHARS, PublicKey, parse_public_keys

__all__ = [
    "DEFAULT_HEALTHY_FOR",
    "MAX_CONTAINERS_PER_TARGET",
    "MAX_HEALTHY_FOR",
    "MAX_MINIMUM_AGE",
    "MAX_POLICY_CONTAINERS",
    "MAX_TARGETS",
    "MIN_INTERVAL",
    "MIN_ROLLOUT_TIMEOUT",
    "ContainerSpec",
    "PolicySpec",
    "PullBudgetSpec",
    "TargetSpec",
    "VerifySpec",
    "Weekday",
    "WindowSpec",
    "WorkloadKind",
]

MIN_INTERVAL = timedelta(seconds=30)
# The size of the largest policy: what the CRD admits, so that planning it stays well under
# 0.1 s of CPU (make bench measures the worst policies within these bounds).
MAX_TARGETS = 64
MAX_CONTAINERS_PER_TARGET = 16
MAX_POLICY_CONTAINERS = 256
MIN_ROLLOUT_TIMEOUT = timedelta(seconds=30)
# A cooldown is a safety delay for a bad push, not a release schedule: a month at most.
MAX_MINIMUM_AGE = timedelta(days=30)
# How long a refresh's pods must stay up after its rollout settled before it counts as a
# success. Long enough for a build that exits after starting to be caught; an hour at most,
# because the target stays Refreshing (and its pods followed) for that long.
DEFAULT_HEALTHY_FOR = timedelta(seconds=60)
MAX_HEALTHY_FOR = timedelta(hours=1)
# What the CRD admits as one key: the PEM block cosign.pub holds, and nothing else.
PEM_PUBLIC_KEY_PATTERN = (
    r"^\s*-----BEGIN PUBLIC KEY-----\s+[A-Za-z0-9+/=\s]+-----END PUBLIC KEY-----\s*$"
)
SHA256_DIGEST_PATTERN = r"^sha256:[a-f0-9]{64}$"
CLOCK_TIME_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"  # HH:MM, 00:00 to 23:59
# IANA names (Europe/Berlin, America/Argentina/Buenos_Aires, Etc/GMT+5, UTC): whether the name
# exists is zoneinfo's to say; the pattern keeps paths (`..`, absolute) out of the lookup.
TIME_ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9][A-Za-z0-9_+-]*)*$"


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
        return tracked_reference(self.image)


class TargetSpec(ApiModel):
    """A workload whose containers the policy keeps fresh."""

    kind: WorkloadKind
    name: Annotated[str, Field(min_length=1)]
    namespace: str | None = None
    containers: Annotated[
        tuple[ContainerSpec, ...], Field(min_length=1, max_length=MAX_CONTAINERS_PER_TARGET)
    ]
    rollout_timeout: Duration | None = None  # overrides the policy's progress deadline
    healthy_for: Duration | None = None  # overrides the policy's health window
    pre_pull: bool | None = None  # overrides the policy's prePull

    @field_validator("rollout_timeout")
    @classmethod
    def _timeout_above_minimum(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < MIN_ROLLOUT_TIMEOUT:
            raise ValueError("rolloutTimeout must be at least 30s")
        return value

    @field_validator("healthy_for")
    @classmethod
    def _health_window_bounded(cls, value: timedelta | None) -> timedelta | None:
        if value is not None:
            _check_healthy_for(value)
        return value

    @field_validator("containers")
    @classmethod
    def _container_names_unique(cls, value: tuple[ContainerSpec, ...]) -> tuple[ContainerSpec, ...]:
        names = [container.name for container in value]
        if len(names) != len(set(names)):
            raise ValueError("each container may be declared once per target")
        return value


def _check_healthy_for(value: timedelta) -> None:
    if not timedelta(0) <= value <= MAX_HEALTHY_FOR:
        raise ValueError("healthyFor must be between 0s and 1h")


class Weekday(StrEnum):
    """A day a refresh window starts on; declared in ``date.weekday()`` order."""

    MON = "Mon"
    TUE = "Tue"
    WED = "Wed"
    THU = "Thu"
    FRI = "Fri"
    SAT = "Sat"
    SUN = "Sun"

    @property
    def weekday(self) -> int:
        """Monday is 0, as ``date.weekday()``."""
        return list(Weekday).index(self)


class WindowSpec(ApiModel):
    """A weekly refresh window: refreshes START only between ``start`` and ``end`` local time.

    ``end`` at or before ``start`` ends the next day (``start == end`` is a full day); ``days``
    are the days the window starts on. The planner's :mod:`~imagerefresh.planner.windows` says
    how a wall time skipped or repeated by a DST change is read.
    """

    days: Annotated[tuple[Weekday, ...], Field(min_length=1, max_length=7)]
    start: Annotated[str, Field(pattern=CLOCK_TIME_PATTERN)]
    end: Annotated[str, Field(pattern=CLOCK_TIME_PATTERN)]
    time_zone: Annotated[str, Field(min_length=1, max_length=64, pattern=TIME_ZONE_PATTERN)]

    @field_validator("days")
    @classmethod
    def _days_unique(cls, value: tuple[Weekday, ...]) -> tuple[Weekday, ...]:
        if len(value) != len(set(value)):
            raise ValueError("each day may be listed once per window")
        return value

    @field_validator("time_zone")
    @classmethod
    def _time_zone_known(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError) as error:  # OSError: a directory
            raise ValueError(
                f"timeZone {value!r} is not an IANA time zone this operator knows "
                "(e.g. Europe/Berlin, America/New_York, UTC); fix the policy"
            ) from error
        return value

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    @staticmethod
    def _minutes(clock: str) -> int:
        hours, minutes = clock.split(":")
        return int(hours) * 60 + int(minutes)

    @property
    def start_minute(self) -> int:
        """``start`` as minutes after local midnight."""
        return self._minutes(self.start)

    @property
    def end_minute(self) -> int:
        """``end`` as minutes after local midnight."""
        return self._minutes(self.end)


class PullBudgetSpec(ApiModel):
    """How much of a registry's pull budget is never spent on refreshes."""

    reserve: Annotated[int, Field(ge=0)] = 2


class VerifySpec(ApiModel):
    """Pin only digests signed by one of these keys (cosign's key-based signatures, offline)."""

    public_keys: Annotated[
        tuple[
            Annotated[
                str, Field(min_length=1, max_length=MAX_PEM_CHARS, pattern=PEM_PUBLIC_KEY_PATTERN)
            ],
            ...,
        ],
        Field(min_length=1, max_length=MAX_KEYS),
    ]

    @field_validator("public_keys")
    @classmethod
    def _keys_usable(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_public_keys(value)  # InvalidPublicKey is a ValueError naming the key and why
        return value

    @cached_property
    def keys(self) -> tuple[PublicKey, ...]:
        """The listed keys, parsed (the validator has proven that they parse)."""
        return parse_public_keys(self.public_keys)


class PolicySpec(ApiModel):
    """``spec`` of an ImageRefreshPolicy."""

    interval: Duration = timedelta(minutes=15)
    # None: refreshes start at any tick. Otherwise only inside one of these (verdicts,
    # rollbacks and adoptions never wait).
    windows: Annotated[tuple[WindowSpec, ...], Field(min_length=1, max_length=32)] | None = None
    max_skip_ticks: Annotated[int, Field(ge=1)] = 8
    max_refresh_attempts: Annotated[int, Field(ge=1)] = 3
    rollout_timeout: Duration = timedelta(minutes=10)
    # A refresh succeeds only once its pods stayed up this long after its rollout settled
    # (planner.target.health); 0: settled alone is a success.
    healthy_for: Duration = DEFAULT_HEALTHY_FOR
    rollback_on_failure: bool = True
    suspend: bool = False
    dry_run: bool = False
    # True: the targets tracking one reference (pinned containers aside) start a refresh to a
    # new digest in the same tick or not at all, and roll back together (planner.lockstep).
    lockstep: bool = False
    pull_budget: PullBudgetSpec = PullBudgetSpec()
    # A new digest of a tag is pinned only once the tag has answered it this long (0: at once).
    minimum_age: Duration = timedelta(0)
    verify: VerifySpec | None = None  # pin only digests signed by one of these keys
    # True: a refresh first pulls the new digests onto the workload's nodes, with one helper pod
    # per node, and patches only once every node holds them (planner.target.prepull).
    pre_pull: bool = False
    targets: Annotated[tuple[TargetSpec, ...], Field(min_length=1, max_length=MAX_TARGETS)]

    def healthy_for_of(self, target: TargetSpec) -> timedelta:
        """``target``'s health window: its own healthyFor, else the policy's."""
        return target.healthy_for if target.healthy_for is not None else self.healthy_for

    def pre_pulls(self, target: TargetSpec) -> bool:
        """Whether ``target``'s refreshes pre-pull: its own prePull, else the policy's."""
        return target.pre_pull if target.pre_pull is not None else self.pre_pull

    @model_validator(mode="after")
    def _durations_above_minimum(self) -> PolicySpec:
        if self.interval < MIN_INTERVAL:
            raise ValueError("interval must be at least 30s")
        if self.rollout_timeout < MIN_ROLLOUT_TIMEOUT:
            raise ValueError("rolloutTimeout must be at least 30s")
        if not timedelta(0) <= self.minimum_age <= MAX_MINIMUM_AGE:
            raise ValueError("minimumAge must be between 0s and 720h")
        _check_healthy_for(self.healthy_for)
        return self

    @field_validator("targets")
    @classmethod
    def _targets_unique(cls, value: tuple[TargetSpec, ...]) -> tuple[TargetSpec, ...]:
        keys = [(t.kind, t.namespace, t.name) for t in value]
        if len(keys) != len(set(keys)):
            raise ValueError("each workload may be targeted once per policy")
        if sum(len(t.containers) for t in value) > MAX_POLICY_CONTAINERS:
            raise ValueError(
                f"a policy declares at most {MAX_POLICY_CONTAINERS} containers in all; split it "
                "into several policies"
            )
        return value
