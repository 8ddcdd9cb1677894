"""Coverage: which workloads run what the policies track without being in one, and which
policy targets no longer run what they track — the "quietly broken, because nobody listed
them" case. A pure function of what ``imagerefresh audit`` read; the CLI does the reading.

Every container (and init container) of every Deployment, DaemonSet and StatefulSet read is
compared, by normalised repository (``nginx`` is ``docker.io/library/nginx``), with every
container every readable policy declares (a target's namespace defaulting to its policy's):

- ``uncovered``: it runs a repository some policy tracks, but no policy declares it;
- ``mutable`` (only when asked): it runs a tag with no digest and no policy declares it;
- ``other-repository``: a policy declares it, but it runs another repository (never refreshed);
- ``missing-workload`` / ``missing-container``: a policy declares what does not exist;
- ``invalid-policy``: a policy whose spec cannot be read tracks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from imagerefresh.models import PolicySpec
from imagerefresh.reference import InvalidReference, parse

__all__ = [
    "AuditedContainer",
    "AuditedPolicy",
    "AuditedWorkload",
    "Finding",
    "FindingKind",
    "audit",
]

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")


class FindingKind(StrEnum):
    UNCOVERED = "uncovered"
    MUTABLE = "mutable"
    OTHER_REPOSITORY = "other-repository"
    MISSING_WORKLOAD = "missing-workload"
    MISSING_CONTAINER = "missing-container"
    INVALID_POLICY = "invalid-policy"


@dataclass(frozen=True, slots=True)
class AuditedContainer:
    name: str
    image: str
    init: bool = False


@dataclass(frozen=True, slots=True)
class AuditedWorkload:
    kind: str
    namespace: str
    name: str
    containers: tuple[AuditedContainer, ...]

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> AuditedWorkload:
        metadata = obj["metadata"]
        pod_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        containers = tuple(
            AuditedContainer(str(c.get("name") or ""), str(c.get("image") or ""), init)
            for init, section in ((True, "initContainers"), (False, "containers"))
            for c in pod_spec.get(section) or ()
        )
        return cls(str(obj["kind"]), metadata["namespace"], metadata["name"], containers)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class AuditedPolicy:
    """A policy as read: its spec, or why it could not be read."""

    namespace: str
    name: str
    spec: PolicySpec | None
    error: str | None = None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    workload: str  # "Deployment ns/name", or "ImageRefreshPolicy ns/name"
    container: str  # "-" when the finding is about the whole object
    kind: FindingKind
    image: str  # the live image ("-" when there is none)
    detail: str  # what is wrong and what to do

    def as_json(self) -> dict[str, str]:
        return {
            "kind": str(self.kind),
            "workload": self.workload,
            "container": self.container,
            "image": self.image,
            "detail": self.detail,
        }


_Key = tuple[str, str, str, str]  # kind, namespace, workload, container


def _repository(image: str) -> str | None:
    try:
        return parse(image).repository
    except InvalidReference:
        return None


def audit(
    policies: Iterable[AuditedPolicy],
    workloads: Iterable[AuditedWorkload],
    *,
    namespaces: frozenset[str] | None = None,
    all_mutable: bool = False,
) -> list[Finding]:
    """Every finding, sorted by workload and container. ``namespaces``: the audited ones (None:
    all); targets elsewhere are not judged, since their workloads were not read."""
    policies = list(policies)
    in_scope = [w for w in workloads if namespaces is None or w.namespace in namespaces]
    findings = [
        Finding(
            f"ImageRefreshPolicy {p}",
            "-",
            FindingKind.INVALID_POLICY,
            "-",
            f"its spec cannot be read ({p.error}); it tracks nothing until it is fixed",
        )
        for p in policies
        if p.spec is None
    ]
    declared: dict[_Key, tuple[AuditedPolicy, str]] = {}  # → (policy, tracked repository)
    trackers: dict[str, str] = {}  # tracked repository → the first policy tracking it
    for policy in sorted((p for p in policies if p.spec is not None), key=str):
        assert policy.spec is not None
        for target in policy.spec.targets:
            namespace = target.namespace or policy.namespace
            for spec in target.containers:
                repository = spec.tracked.repository
                key = (str(target.kind), namespace, target.name, spec.name)
                declared.setdefault(key, (policy, repository))
                trackers.setdefault(repository, str(policy))
    by_key = {(w.kind, w.namespace, w.name): w for w in in_scope}
    findings += _targets(declared, by_key, namespaces)
    for workload in in_scope:
        for container in workload.containers:
            key = (workload.kind, workload.namespace, workload.name, container.name)
            if key not in declared:
                finding = _undeclared(workload, container, trackers, all_mutable)
                if finding is not None:
                    findings.append(finding)
    return sorted(findings)


def _label(container: AuditedContainer) -> str:
    return f"{container.name} (init)" if container.init else container.name


def _undeclared(
    workload: AuditedWorkload,
    container: AuditedContainer,
    trackers: Mapping[str, str],
    all_mutable: bool,
) -> Finding | None:
    try:
        reference = parse(container.image)
    except InvalidReference as error:
        if not all_mutable:
            return None
        return Finding(
            str(workload),
            _label(container),
            FindingKind.MUTABLE,
            container.image or "-",
            f"its image cannot be read as a reference ({error}); no policy declares it",
        )
    tracker = trackers.get(reference.repository)
    if tracker is not None:
        return Finding(
            str(workload),
            _label(container),
            FindingKind.UNCOVERED,
            container.image,
            f"runs {reference.repository}, which policy {tracker} tracks, but no policy "
            "declares this container: it is never refreshed; add it to a policy's targets",
        )
    if all_mutable and reference.digest is None:
        return Finding(
            str(workload),
            _label(container),
            FindingKind.MUTABLE,
            container.image,
            f"runs the tag {reference.tracked_tag!r} with no digest and no policy declares it: "
            "what it runs can change under it; add it to a policy or pin a digest",
        )
    return None


def _targets(
    declared: Mapping[_Key, tuple[AuditedPolicy, str]],
    workloads: Mapping[tuple[str, str, str], AuditedWorkload],
    namespaces: frozenset[str] | None,
) -> list[Finding]:
    findings = []
    for (kind, namespace, name, container), (policy, tracked) in declared.items():
        if namespaces is not None and namespace not in namespaces:
            continue
        label = f"{kind} {namespace}/{name}"
        workload = workloads.get((kind, namespace, name))
        if workload is None:
            findings.append(
                Finding(
                    label,
                    container,
                    FindingKind.MISSING_WORKLOAD,
                    "-",
                    f"policy {policy} targets it, but it does not exist; create it or fix the "
                    "policy",
                )
            )
            continue
        live = next((c for c in workload.containers if c.name == container), None)
        if live is None:
            names = ", ".join(c.name for c in workload.containers) or "none"
            findings.append(
                Finding(
                    label,
                    container,
                    FindingKind.MISSING_CONTAINER,
                    "-",
                    f"policy {policy} declares this container, but the pod template has: "
                    f"{names}; fix the policy",
                )
            )
            continue
        repository = _repository(live.image)
        if repository != tracked:
            runs = repository or f"an unreadable image {live.image!r}"
            findings.append(
                Finding(
                    label,
                    _label(live),
                    FindingKind.OTHER_REPOSITORY,
                    live.image or "-",
                    f"policy {policy} tracks {tracked}, but it runs {runs}: imagerefresh never "
                    "changes repositories, so it is never refreshed; fix the policy or the "
                    "workload",
                )
            )
    return findings
