"""Typed models of the ImageRefreshPolicy API (spec and status), mirroring the CRD in crds/."""

from imagerefresh.models.durations import Duration, format_duration, parse_duration
from imagerefresh.models.policy import (
    MAX_CONTAINERS_PER_TARGET,
    MAX_POLICY_CONTAINERS,
    MAX_TARGETS,
    ContainerSpec,
    PolicySpec,
    PullBudgetSpec,
    TargetSpec,
    Weekday,
    WindowSpec,
    WorkloadKind,
)
from imagerefresh.models.status import (
    Condition,
    ConditionType,
    ContainerStatus,
    PendingPurpose,
    PendingRefresh,
    Phase,
    PolicyStatus,
    ProgressMark,
    RegistryStatus,
    TargetStatus,
)

__all__ = [
    "MAX_CONTAINERS_PER_TARGET",
    "MAX_POLICY_CONTAINERS",
    "MAX_TARGETS",
    "Condition",
    "ConditionType",
    "ContainerSpec",
    "ContainerStatus",
    "Duration",
    "PendingPurpose",
    "PendingRefresh",
    "Phase",
    "PolicySpec",
    "PolicyStatus",
    "ProgressMark",
    "PullBudgetSpec",
    "RegistryStatus",
    "TargetSpec",
    "TargetStatus",
    "Weekday",
    "WindowSpec",
    "WorkloadKind",
    "format_duration",
    "parse_duration",
]
