"""``imagerefresh audit``'s judgement, a pure function of what it read (the CLI reads).

Two questions, one finding shape: which containers the operator will never refresh
(:mod:`~imagerefresh.audit.coverage`), and, with ``--offline``, which workloads would not
restart with the registry unreachable (:mod:`~imagerefresh.audit.offline`).
"""

from __future__ import annotations

from imagerefresh.audit.coverage import (
    WORKLOAD_KINDS,
    AuditedContainer,
    AuditedPolicy,
    AuditedWorkload,
    Claim,
    Finding,
    FindingKind,
    Reachable,
    audit,
    claimed,
    same_namespace_only,
)
from imagerefresh.audit.offline import OfflineWorkload, audit_offline

__all__ = [
    "WORKLOAD_KINDS",
    "AuditedContainer",
    "AuditedPolicy",
    "AuditedWorkload",
    "Claim",
    "Finding",
    "FindingKind",
    "OfflineWorkload",
    "Reachable",
    "audit",
    "audit_offline",
    "claimed",
    "same_namespace_only",
]
