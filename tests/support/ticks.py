"""Builders for planner inputs: a policy, its targets' evidence, budgets, and a clock."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from imagerefresh.models import PolicySpec, PolicyStatus
from imagerefresh.offline import NodeInventory
from imagerefresh.planner import (
    Event,
    NamespacePolicy,
    ObservedPod,
    Plan,
    PolicyView,
    Resolved,
    TargetEvidence,
    TargetKey,
    TickInput,
    Unresolved,
    Workload,
    plan_tick,
)
from imagerefresh.planner.evidence import SignatureOutcome
from imagerefresh.planner.helperpod import HelperPod
from imagerefresh.ratelimit import BudgetSnapshot, RateLimitReport

from support.workloads import Json

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NS = "tracebloc"
JM = "tracebloc/jobs-manager:prod"
PM = "tracebloc/pods-monitor:prod"
RM = "tracebloc/resource-monitor:prod"


def digest(n: int | str) -> str:
    """A well-formed sha256 digest, distinct per ``n``."""
    return "sha256:" + hashlib.sha256(str(n).encode()).hexdigest()


def spec(*targets: dict[str, Any], **fields: Any) -> PolicySpec:
    return PolicySpec.model_validate({"targets": list(targets), **fields})


def target(
    name: str, kind: str = "Deployment", namespace: str | None = None, **containers: str
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "containers": [{"name": n, "image": i} for n, i in containers.items()],
    }
    if namespace is not None:
        entry["namespace"] = namespace
    return entry


def key(name: str, kind: str = "Deployment", namespace: str = NS) -> TargetKey:
    return TargetKey(kind, namespace, name)  # type: ignore[arg-type]


def evidence(
    workload: Json | None,
    pods: list[Json] | None = None,
    digests: Mapping[str, str | Resolved | Unresolved] | None = None,
    identities: Mapping[str, str] | None = None,
    error: str | None = None,
    signatures: Mapping[str, SignatureOutcome] | None = None,
    helpers: list[Json] | None = None,
) -> TargetEvidence:
    return TargetEvidence(
        workload=Workload.from_api(workload) if workload is not None else None,
        error=error,
        pods=tuple(ObservedPod.from_api(p) for p in pods or ()),
        digests={
            name: value if isinstance(value, Resolved | Unresolved) else Resolved(value)
            for name, value in (digests or {}).items()
        },
        identities=identities or {},
        signatures=signatures or {},
        helpers=tuple(HelperPod.from_api(h) for h in helpers) if helpers is not None else None,
    )


def budget(
    host: str,
    remaining: int | None,
    limit: int = 100,
    identity: str = "anonymous",
    blocked: str | None = None,
) -> BudgetSnapshot:
    report = RateLimitReport(limit=limit, remaining=remaining, window_seconds=21600)
    return BudgetSnapshot(host, identity, report, remaining, blocked)


class Tick:
    """A policy ticking over time: each :meth:`run` feeds the previous plan's status back."""

    def __init__(
        self,
        policy_spec: PolicySpec,
        *,
        generation: int = 1,
        namespaces: NamespacePolicy | None = None,
    ) -> None:
        self.spec = policy_spec
        self.generation = generation
        self.status = PolicyStatus()
        self.now = T0
        self.reset: str | None = None
        self.window_override: str | None = None  # the refresh-outside-window annotation
        self.namespaces = namespaces or NamespacePolicy()
        self.nodes: NodeInventory | None = None  # the nodes' image lists, when read
        self.pre_pull_pods = False  # the operator may create pre-pull helper pods
        self.pre_pull_max_deadline = 3_600
        # Per workload, the templates (container → image) it has had, oldest first: the
        # previous revision a controller keeps (ReplicaSet, ControllerRevision), which live
        # evidence of what a rollback may restore is read from.
        self.revisions: dict[TargetKey, list[dict[str, str]]] = {}
        self.verified: frozenset[tuple[str, str]] = frozenset()

    def _with_history(self, key: TargetKey, found: TargetEvidence) -> TargetEvidence:
        """``found`` with its workload's previous revision, as the controllers keep it."""
        workload = found.workload
        if workload is None:
            return found
        current = {name: c.image for name, c in workload.containers.items()}
        revisions = self.revisions.setdefault(key, [])
        if not revisions or revisions[-1] != current:
            revisions.append(current)
        if found.previous_template is not None or len(revisions) < 2:
            return found
        return replace(found, previous_template=revisions[-2])

    def input(
        self,
        targets: Mapping[TargetKey, TargetEvidence],
        budgets: Mapping[tuple[str, str], BudgetSnapshot] | None = None,
        *,
        follow_up: bool = False,
    ) -> TickInput:
        view = PolicyView(
            NS,
            "control-plane",
            self.generation,
            self.spec,
            self.status,
            self.reset,
            window_override=self.window_override,
        )
        return TickInput(
            view,
            {key: self._with_history(key, found) for key, found in targets.items()},
            budgets or {},
            self.now,
            self.namespaces,
            follow_up=follow_up,
            nodes=self.nodes,
            pre_pull_pods=self.pre_pull_pods,
            pre_pull_max_deadline=self.pre_pull_max_deadline,
            verified=self.verified,
        )

    def run(
        self,
        targets: Mapping[TargetKey, TargetEvidence],
        budgets: Mapping[tuple[str, str], BudgetSnapshot] | None = None,
        *,
        advance: timedelta = timedelta(minutes=15),
        follow_up: bool = False,
    ) -> Plan:
        plan = plan_tick(self.input(targets, budgets, follow_up=follow_up))
        self.status = plan.status
        self.now += advance
        return plan

    def target(self, name: str, kind: str = "Deployment", namespace: str = NS) -> Any:
        return next(
            t
            for t in self.status.targets
            if (t.kind, t.namespace, t.name) == (kind, namespace, name)
        )

    def condition(self, kind: str) -> Any:
        return next(c for c in self.status.conditions if c.type == kind)


OFFLINE_REASONS = frozenset({"RestartsOffline", "NeedsRegistryToRestart"})


def without_offline(events: Iterable[Event]) -> list[Event]:
    """``events`` but the OfflineReady condition's (tables that test something else)."""
    return [e for e in events if e.reason not in OFFLINE_REASONS]
