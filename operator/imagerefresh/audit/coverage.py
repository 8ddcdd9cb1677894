"""Coverage: which containers the operator will never refresh, and why — the "quietly broken,
because nobody listed them" case. A pure function of what ``imagerefresh audit`` read; the CLI
does the reading.

A container is *covered* when exactly one policy that may reach it declares it (a target's
namespace defaulting to its policy's; reaching another namespace takes the operator's
allow-list, which the caller passes as ``reachable``), that policy is neither suspended nor
``dryRun``, and the workload runs the tracked repository. A Locked target is still covered: it
waits for a person's reset, and says so in its status. Everything else is a finding that says
why, judged as the operator's planner does, in its order:

- ``suspended``: the declaring policy is suspended (it refreshes nothing);
- ``out-of-reach``: the policy may not reach the target's namespace (the allow-list);
- ``conflict``: the target is declared twice by its policy (after namespace defaulting), or one
  of its containers by another policy that may reach it — the operator refreshes none of the
  target's containers then (two writers would write them in turns);
- ``missing-workload`` / ``missing-container``: a policy declares what does not exist;
- ``other-repository``: a policy declares it, but it runs another repository (never refreshed);
- ``dry-run``: the declaring policy only reports (``dryRun``), it never patches;
- ``uncovered``: it runs a repository that a policy which may reach it tracks, but no policy
  that may reach it declares it;
- ``mutable`` (only when asked): it runs a tag with no digest and no policy declares it;
- ``invalid-policy``: a policy whose spec cannot be read tracks nothing (yet still claims what
  can be read of its targets, as the operator's claim index does).

A declaration beyond a policy's reach has no effect on anyone else: it claims nothing (no
``conflict`` for the rightful owner), covers nothing, and makes nobody's container
``uncovered``; it is reported only where the policy itself is audited.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from imagerefresh.models import PolicySpec, TargetSpec
from imagerefresh.reference import InvalidReference, parse

__all__ = [
    "AuditedContainer",
    "AuditedPolicy",
    "AuditedWorkload",
    "Claim",
    "Finding",
    "FindingKind",
    "Reachable",
    "audit",
    "claimed",
    "same_namespace_only",
]

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")


class FindingKind(StrEnum):
    UNCOVERED = "uncovered"
    MUTABLE = "mutable"
    OTHER_REPOSITORY = "other-repository"
    MISSING_WORKLOAD = "missing-workload"
    MISSING_CONTAINER = "missing-container"
    INVALID_POLICY = "invalid-policy"
    CONFLICT = "conflict"
    SUSPENDED = "suspended"
    DRY_RUN = "dry-run"
    OUT_OF_REACH = "out-of-reach"
    NOT_OFFLINE_READY = "not-offline-ready"  # with --offline: see imagerefresh.audit.offline


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


Claim = tuple[str, str, str, str]  # kind, namespace (defaulted), workload, container


@dataclass(frozen=True, slots=True)
class AuditedPolicy:
    """A policy as read: its spec, or why it could not be read and what it still names."""

    namespace: str
    name: str
    spec: PolicySpec | None
    error: str | None = None
    claims: tuple[Claim, ...] = ()  # of an unreadable spec: the containers it still names

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    workload: str  # "Deployment ns/name", or "ImageRefreshPolicy ns/name"
    container: str  # "-" when the finding is about the whole object
    kind: FindingKind
    image: str  # the live image ("-" when there is none)
    detail: str  # what is wrong and what to do
    nodes: tuple[str, ...] = ()  # not-offline-ready: the nodes where readiness is not proven

    def as_json(self) -> dict[str, str | list[str]]:
        found: dict[str, str | list[str]] = {
            "kind": str(self.kind),
            "workload": self.workload,
            "container": self.container,
            "image": self.image,
            "detail": self.detail,
        }
        # Only the offline finding is about nodes; the coverage findings keep their shape.
        if self.kind is FindingKind.NOT_OFFLINE_READY:
            found["nodes"] = list(self.nodes)
        return found


# (policy namespace, target namespace) → may a policy there reach workloads there?
Reachable = Callable[[str, str], bool]


def same_namespace_only(policy_namespace: str, target_namespace: str) -> bool:
    """The operator's reach with an empty allow-list."""
    return policy_namespace == target_namespace


_Workload = tuple[str, str, str]  # kind, namespace, name


@dataclass(frozen=True, slots=True)
class _Declared:
    """One target of one readable policy, its namespace defaulted."""

    policy: AuditedPolicy
    spec: PolicySpec
    target: TargetSpec
    kind: str
    namespace: str

    @property
    def key(self) -> _Workload:
        return self.kind, self.namespace, self.target.name

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.target.name}"


def _repository(image: str) -> str | None:
    try:
        return parse(image).repository
    except InvalidReference:
        return None


def _declared(policies: Iterable[AuditedPolicy]) -> list[_Declared]:
    return [
        _Declared(
            policy, policy.spec, target, str(target.kind), target.namespace or policy.namespace
        )
        for policy in sorted(policies, key=str)
        if policy.spec is not None
        for target in policy.spec.targets
    ]


def _claims(
    declared: list[_Declared], policies: list[AuditedPolicy], reachable: Reachable
) -> dict[Claim, set[str]]:
    """Every container claimed, by the policies claiming it: only from within their reach."""
    claims: dict[Claim, set[str]] = {}
    for entry in declared:
        if reachable(entry.policy.namespace, entry.namespace):
            for container in entry.target.containers:
                claims.setdefault((*entry.key, container.name), set()).add(str(entry.policy))
    for policy in policies:
        for claim in policy.claims if policy.spec is None else ():
            if reachable(policy.namespace, claim[1]):
                claims.setdefault(claim, set()).add(str(policy))
    return claims


def claimed(policies: Iterable[AuditedPolicy], reachable: Reachable) -> frozenset[Claim]:
    """Every container some policy claims from within its reach (an unreadable spec's too), as
    the operator's claim index has them: what ``audit --offline`` holds to the pinned rule."""
    policies = list(policies)
    return frozenset(_claims(_declared(policies), policies, reachable))


def audit(
    policies: Iterable[AuditedPolicy],
    workloads: Iterable[AuditedWorkload],
    *,
    namespaces: frozenset[str] | None = None,
    all_mutable: bool = False,
    reachable: Reachable = same_namespace_only,
) -> list[Finding]:
    """Every finding, sorted by workload and container. ``namespaces``: the audited ones (None:
    all); targets elsewhere are not judged, since their workloads were not read (a declaration
    beyond its policy's reach is judged where its policy is)."""
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
    declared = _declared(policies)
    claims = _claims(declared, policies, reachable)
    by_key = {(w.kind, w.namespace, w.name): w for w in in_scope}
    judge = _Judge(claims, by_key, reachable, Counter((str(d.policy), d.key) for d in declared))
    for entry in declared:
        judged_at = entry.namespace if judge.reaches(entry) else entry.policy.namespace
        if namespaces is None or judged_at in namespaces:
            findings += judge.target(entry)
    # Declared where its policy may reach: judged above. Anything else is undeclared.
    declaring = {
        (*entry.key, container.name)
        for entry in declared
        if judge.reaches(entry)
        for container in entry.target.containers
    }
    trackers: dict[str, dict[str, str]] = {}  # per namespace
    for workload in in_scope:
        for container in workload.containers:
            key = (workload.kind, workload.namespace, workload.name, container.name)
            if key in declaring:
                continue
            if workload.namespace not in trackers:
                trackers[workload.namespace] = _trackers(declared, workload.namespace, reachable)
            finding = _undeclared(workload, container, trackers[workload.namespace], all_mutable)
            if finding is not None:
                findings.append(finding)
    return sorted(findings)


def _trackers(declared: list[_Declared], namespace: str, reachable: Reachable) -> dict[str, str]:
    """Tracked repository → the first policy (by name) tracking it that may reach
    ``namespace``: a policy that could never refresh a workload there says nothing about it."""
    trackers: dict[str, str] = {}
    for entry in declared:
        if reachable(entry.policy.namespace, namespace):
            for spec in entry.target.containers:
                trackers.setdefault(spec.tracked.repository, str(entry.policy))
    return trackers


def _label(container: AuditedContainer) -> str:
    return f"{container.name} (init)" if container.init else container.name


@dataclass(frozen=True, slots=True)
class _Judge:
    """Judges each declared target as the planner would: the first reason it is never
    refreshed, for each of its containers."""

    claims: Mapping[Claim, set[str]]
    workloads: Mapping[_Workload, AuditedWorkload]
    reachable: Reachable
    targeted: Counter[tuple[str, _Workload]]  # (policy, workload) → how often it targets it

    def reaches(self, entry: _Declared) -> bool:
        return self.reachable(entry.policy.namespace, entry.namespace)

    def target(self, entry: _Declared) -> list[Finding]:
        workload = self.workloads.get(entry.key)
        why = self._policy_wide(entry)
        if why is not None:
            kind, detail = why
            return [
                self._as_it_runs(workload, c.name, kind, entry.label, detail)
                for c in entry.target.containers
            ]
        if workload is None:
            detail = (
                f"policy {entry.policy} targets it, but it does not exist; create it or fix "
                "the policy"
            )
            return [
                Finding(entry.label, c.name, FindingKind.MISSING_WORKLOAD, "-", detail)
                for c in entry.target.containers
            ]
        found = [self._container(entry, workload, c.name) for c in entry.target.containers]
        return [finding for finding in found if finding is not None]

    @staticmethod
    def _as_it_runs(
        workload: AuditedWorkload | None, name: str, kind: FindingKind, label: str, detail: str
    ) -> Finding:
        """The finding, with the container's live image when its workload was read."""
        live = next((c for c in workload.containers if c.name == name), None) if workload else None
        if live is None:
            return Finding(label, name, kind, "-", detail)
        return Finding(label, _label(live), kind, live.image or "-", detail)

    def _policy_wide(self, entry: _Declared) -> tuple[FindingKind, str] | None:
        """Why no container of the target is ever refreshed, whatever the workload runs."""
        policy = entry.policy
        if entry.spec.suspend:
            return (
                FindingKind.SUSPENDED,
                f"policy {policy} is suspended: it refreshes nothing; set spec.suspend to false, "
                "or move the container to a policy that runs",
            )
        if not self.reaches(entry):
            return (
                FindingKind.OUT_OF_REACH,
                f"policy {policy} may not reach namespace {entry.namespace}: the operator's "
                f"allow-list has no pair {policy.namespace}={entry.namespace}, so it is never "
                "refreshed; allow the pair in the operator's configuration, or declare it in a "
                f"policy in {entry.namespace}",
            )
        if self.targeted[(str(policy), entry.key)] > 1:
            return (
                FindingKind.CONFLICT,
                f"policy {policy} targets {entry.label} more than once (after defaulting the "
                "namespace), so neither is refreshed; declare each workload once",
            )
        for container in entry.target.containers:
            others = sorted(self.claims.get((*entry.key, container.name), set()) - {str(policy)})
            if others:
                return (
                    FindingKind.CONFLICT,
                    f"container {container.name!r} is declared by policy {policy} and by "
                    f"{', '.join(others)}, so this target is never refreshed; one container, "
                    "one policy: remove it from all but one",
                )
        return None

    def _container(self, entry: _Declared, workload: AuditedWorkload, name: str) -> Finding | None:
        policy, label = entry.policy, entry.label
        live = next((c for c in workload.containers if c.name == name), None)
        if live is None:
            names = ", ".join(c.name for c in workload.containers) or "none"
            return Finding(
                label,
                name,
                FindingKind.MISSING_CONTAINER,
                "-",
                f"policy {policy} declares this container, but the pod template has: {names}; "
                "fix the policy",
            )
        tracked = next(c for c in entry.target.containers if c.name == name).tracked.repository
        repository = _repository(live.image)
        if repository != tracked:
            runs = repository or f"an unreadable image {live.image!r}"
            return Finding(
                label,
                _label(live),
                FindingKind.OTHER_REPOSITORY,
                live.image or "-",
                f"policy {policy} tracks {tracked}, but it runs {runs}: imagerefresh never "
                "changes repositories, so it is never refreshed; fix the policy or the workload",
            )
        if entry.spec.dry_run:
            return Finding(
                label,
                _label(live),
                FindingKind.DRY_RUN,
                live.image,
                f"policy {policy} is dryRun: it reports what it would do and never patches; "
                "set spec.dryRun to false when its plan is what you want",
            )
        return None


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
