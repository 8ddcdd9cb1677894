"""Offline readiness of whole namespaces: every workload whose pods would not restart with the
registry unreachable, and why — in a policy or not. A pure function of what ``imagerefresh audit
--offline`` read; the CLI does the reading.

Each workload is judged as the operator judges its targets (:mod:`imagerefresh.offline`): every
container and init container of its pod template, declared or not (one that cannot start keeps
the whole pod down), the pods that prove what their nodes hold, the nodes' image lists when they
could be read, and for a DaemonSet the number of nodes it is scheduled on. What differs is who
must run a digest:

- a container that a policy claims from within its reach (the coverage audit's claim logic)
  must be pinned: a cached tag restarts offline, but with whichever build that node pulled;
- in a workload none of whose containers is claimed, *every* container must be pinned: nobody
  keeps its tags current, so offline each node restarts whatever it happened to cache — the
  quietly broken case this audit exists to find;
- the other containers of a claimed workload may run a tag the nodes hold.

One ``not-offline-ready`` finding for what the whole workload fails on (container ``-``; the
first reason, and the nodes where it is not proven), and one for each claimed container on a tag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from imagerefresh.audit.coverage import (
    AuditedPolicy,
    Claim,
    Finding,
    FindingKind,
    Reachable,
    claimed,
    same_namespace_only,
)
from imagerefresh.offline import (
    NodeInventory,
    PodImages,
    TemplateImage,
    effective_pull_policy,
    offline_readiness,
    workload_readiness,
)

__all__ = ["OfflineWorkload", "audit_offline"]


@dataclass(frozen=True, slots=True)
class OfflineWorkload:
    """A workload as ``audit --offline`` judges it: its pod template, its pods, and for a
    DaemonSet how many nodes it is scheduled on (None for the other kinds)."""

    kind: str
    namespace: str
    name: str
    template: tuple[TemplateImage, ...]
    pods: tuple[PodImages, ...] = ()
    scheduled: int | None = None

    @classmethod
    def from_api(cls, obj: Mapping[str, Any], pods: Iterable[PodImages]) -> OfflineWorkload:
        metadata = obj["metadata"]
        pod_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        template = tuple(
            TemplateImage(
                str(c.get("name") or ""),
                str(c.get("image") or ""),
                effective_pull_policy(str(c.get("image") or ""), c.get("imagePullPolicy")),
                init,
            )
            for init, section in ((True, "initContainers"), (False, "containers"))
            for c in pod_spec.get(section) or ()
        )
        scheduled = None
        if obj["kind"] == "DaemonSet":
            scheduled = _count((obj.get("status") or {}).get("desiredNumberScheduled"))
        return cls(
            str(obj["kind"]),
            metadata["namespace"],
            metadata["name"],
            template,
            tuple(pods),
            scheduled,
        )

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _count(value: object) -> int:
    # Not yet observed by its controller (absent), or nonsense: no node is known to need it.
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def audit_offline(
    policies: Iterable[AuditedPolicy],
    workloads: Iterable[OfflineWorkload],
    nodes: NodeInventory | None,
    *,
    namespaces: frozenset[str] | None = None,
    reachable: Reachable = same_namespace_only,
) -> list[Finding]:
    """Every ``not-offline-ready`` finding, sorted by workload and container. ``nodes``: the
    nodes' image lists (None, or a failed inventory: only pods prove what a node holds);
    ``namespaces``: the audited ones (None: all)."""
    claims = claimed(policies, reachable)
    findings: list[Finding] = []
    for workload in workloads:
        if namespaces is None or workload.namespace in namespaces:
            findings += _judge(workload, claims, nodes)
    return sorted(findings)


def _judge(
    workload: OfflineWorkload,
    claims: frozenset[Claim],
    nodes: NodeInventory | None,
) -> list[Finding]:
    key = (workload.kind, workload.namespace, workload.name)
    declared = [c.name for c in workload.template if (*key, c.name) in claims]
    shared = workload_readiness(
        workload.template, workload.pods, nodes, workload.scheduled, pinned_only=not declared
    )
    findings = []
    if not shared.ready:
        findings.append(_finding(workload, "-", "-", shared.reason, shared.nodes))
    verdicts = offline_readiness(
        workload.template, workload.pods, declared, nodes, workload.scheduled
    )
    for container in workload.template:
        verdict = verdicts.get(container.name)
        # A claimed container shares the workload's verdict unless its own rule fails it.
        if verdict is not None and not verdict.ready and verdict != shared:
            label = f"{container.name} (init)" if container.init else container.name
            findings.append(
                _finding(workload, label, container.image, verdict.reason, verdict.nodes)
            )
    return findings


def _finding(
    workload: OfflineWorkload, container: str, image: str, reason: str, nodes: tuple[str, ...]
) -> Finding:
    return Finding(str(workload), container, FindingKind.NOT_OFFLINE_READY, image, reason, nodes)
