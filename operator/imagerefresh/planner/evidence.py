"""What a tick knows: the evidence the planner decides on, gathered by the shell beforehand.

Everything here is plain, immutable data. The shell reads workloads, pods and digests, turns
them into these types (the ``from_api`` constructors take the API server's JSON), and hands
them to :func:`imagerefresh.planner.plan_tick`, which never performs I/O. Unreadable evidence
is represented explicitly (:class:`Unresolved`, ``TargetEvidence.error``) so that the planner
can fail closed on it instead of mistaking it for an empty answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

from imagerefresh.models import PolicySpec, PolicyStatus, WorkloadKind
from imagerefresh.offline import (
    ALWAYS,
    NodeInventory,
    PodImages,
    TemplateImage,
    effective_pull_policy,
    running_digest,
)
from imagerefresh.planner.helperpod import DEFAULT_RUN_AS, HelperPod, Placement, RunAs
from imagerefresh.planner.podhealth import ContainerHealth, container_health, timestamp
from imagerefresh.ratelimit import BudgetSnapshot
from imagerefresh.rollout import RolloutProgress, RolloutVerdict, rollout_progress, rollout_verdict
from imagerefresh.signatures import Untrusted, Verified

__all__ = [
    "ALWAYS",
    "ANONYMOUS",
    "NOT_READ",
    "OPERATOR_FIELD_MANAGER",
    "Account",
    "DigestOutcome",
    "ImageOwner",
    "LiveContainer",
    "NamespacePolicy",
    "ObservedPod",
    "PolicyView",
    "Resolved",
    "SignatureOutcome",
    "SignaturesUnreadable",
    "SignaturesWaiting",
    "TargetEvidence",
    "TargetKey",
    "TickInput",
    "Unresolved",
    "Workload",
    "effective_pull_policy",
    "image_owners",
    "running_digest",
]

ANONYMOUS = "anonymous"
Account = tuple[str, str]  # (registry host, the identity status names it by: a pull secret)
OPERATOR_FIELD_MANAGER = "imagerefresh"  # the fieldManager of every write the operator makes
_MAX_MANAGER = 128
_EMPTY: Mapping[Any, Any] = MappingProxyType({})
_POD_OVER = frozenset({"Failed", "Succeeded"})


@dataclass(frozen=True, slots=True, order=True)
class TargetKey:
    kind: WorkloadKind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class LiveContainer:
    """A container of the pod template as it is now; ``index`` locates it for a JSON Patch."""

    name: str
    image: str
    index: int
    init: bool = False
    pull_policy: str | None = None  # the effective imagePullPolicy; None when unknowable

    @property
    def template_image(self) -> TemplateImage:
        return TemplateImage(self.name, self.image, self.pull_policy, self.init)

    @property
    def json_path(self) -> str:
        kind = "initContainers" if self.init else "containers"
        return f"/spec/template/spec/{kind}/{self.index}"


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment, DaemonSet or StatefulSet, reduced to what a tick decides on."""

    key: TargetKey
    generation: int
    containers: Mapping[str, LiveContainer]
    verdict: RolloutVerdict
    expected_pods: int  # replicas, or scheduled nodes for a DaemonSet: the pulls one image costs
    image_managers: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # who set images
    progress: RolloutProgress | None = None  # counts of the observed rollout (progress deadline)
    placement: Placement | None = None  # what a pre-pull helper pod needs to land on its nodes

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Workload:
        metadata, spec = obj["metadata"], obj["spec"]
        pod_spec = spec["template"]["spec"]
        containers: dict[str, LiveContainer] = {}
        for init, section in ((True, "initContainers"), (False, "containers")):
            for index, container in enumerate(pod_spec.get(section) or ()):
                # An absent or null image reads as empty: the planner reports it unparseable.
                image = container.get("image") or ""
                containers[container["name"]] = LiveContainer(
                    container["name"],
                    image,
                    index,
                    init,
                    effective_pull_policy(image, container.get("imagePullPolicy")),
                )
        kind = WorkloadKind(obj["kind"])
        if kind is WorkloadKind.DAEMONSET:
            expected = int((obj.get("status") or {}).get("desiredNumberScheduled") or 0)
        else:
            replicas = spec.get("replicas")
            expected = int(replicas) if replicas is not None else 1
        return cls(
            key=TargetKey(kind, metadata["namespace"], metadata["name"]),
            generation=int(metadata.get("generation") or 0),
            containers=MappingProxyType(containers),
            verdict=rollout_verdict(obj),
            expected_pods=expected,
            image_managers=MappingProxyType(_image_managers(metadata.get("managedFields"))),
            progress=rollout_progress(obj),
            placement=Placement.from_api(obj),
        )


def _image_managers(entries: object) -> dict[str, str]:
    """Container → the field manager that last set its image, from ``managedFields``.

    For messages only (naming who else writes the image): anything malformed is skipped.
    """
    return {
        name: str(owner.manager or "an unnamed client")[:_MAX_MANAGER]
        for name, owner in image_owners(entries).items()
    }


class ImageOwner(NamedTuple):
    """The ``managedFields`` entry that last set a container's image."""

    time: str  # as the entry spells it ("" when it has none)
    manager: object  # as the entry has it: anything, or None
    section: str  # "f:containers" or "f:initContainers"


def image_owners(entries: object) -> dict[str, ImageOwner]:
    """Of ``managedFields``, for each container whose image some manager owns, the newest such
    entry (a later entry wins a tie); anything malformed is skipped. The watch copies keep
    exactly these, so the writer a message names is the same from a copy as from the object."""
    owners: dict[str, ImageOwner] = {}
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        when = str(entry.get("time") or "")
        template = _field(entry.get("fieldsV1"), "f:spec", "f:template", "f:spec")
        for section in ("f:containers", "f:initContainers"):
            for item, fields in _field(template, section).items():
                name = _keyed_name(item)
                owns_image = isinstance(fields, dict) and "f:image" in fields
                if name is not None and owns_image and when >= owners.get(name, ("",))[0]:
                    owners[name] = ImageOwner(when, entry.get("manager"), section)
    return owners


def _field(value: object, *path: str) -> dict[str, Any]:
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _keyed_name(item: str) -> str | None:
    """``k:{"name":"api"}`` → ``api``."""
    if not item.startswith("k:"):
        return None
    try:
        key = json.loads(item[2:])
    except ValueError:
        return None
    name = key.get("name") if isinstance(key, dict) else None
    return name if isinstance(name, str) else None


@dataclass(frozen=True, slots=True)
class ObservedPod:
    """One pod of a workload: what digest each container runs (None when unknown), and what it
    proves about its node's images (``node`` None when it proves nothing: see
    :class:`~imagerefresh.offline.PodImages`); for a refresh's health window, when it was
    created and the containers that restarted, ended or back off (:mod:`.podhealth`)."""

    name: str
    running: Mapping[str, str | None]
    node: str | None = None
    pulled: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # container → its image
    scheduled: str | None = None  # the node it runs on (spec.nodeName), whatever it proves
    created: datetime | None = None  # metadata.creationTimestamp
    health: Mapping[str, ContainerHealth] = field(default_factory=lambda: _EMPTY)
    # Being deleted, or over (Failed, Succeeded: evicted, its node shut down): its containers
    # end because they were told to, not of themselves.
    stopping: bool = False

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> ObservedPod:
        status = obj.get("status") or {}
        running: dict[str, str | None] = {}
        health: dict[str, ContainerHealth] = {}
        for section in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(section) or ():
                running[container["name"]] = running_digest(container.get("imageID"))
                found = container_health(container, init=section == "initContainerStatuses")
                if found is not None:
                    health[container["name"]] = found
        proof = PodImages.from_api(obj, running)
        node = (obj.get("spec") or {}).get("nodeName")
        scheduled = node if isinstance(node, str) and node else None
        return cls(
            obj["metadata"]["name"],
            MappingProxyType(running),
            proof.node,
            proof.pulled,
            scheduled,
            timestamp(obj["metadata"].get("creationTimestamp")),
            MappingProxyType(health) if health else _EMPTY,
            bool(obj["metadata"].get("deletionTimestamp")) or status.get("phase") in _POD_OVER,
        )

    @property
    def proof(self) -> PodImages:
        return PodImages(self.node, self.pulled, self.running)


@dataclass(frozen=True, slots=True)
class Resolved:
    """The registry's answer for a tracked tag.

    ``children`` are the platform manifests of ``digest`` when it is a multi-platform index and
    pods were seen reporting another digest (runtimes built on containers/image, CRI-O and
    podman, report the platform manifest they pulled, not the index); otherwise empty.
    """

    digest: str
    children: frozenset[str] = frozenset()

    def is_content_of(self, digest: str | None) -> bool:
        """Whether a pod reporting ``digest`` runs what this resolution names."""
        return digest is not None and (digest == self.digest or digest in self.children)


@dataclass(frozen=True, slots=True)
class Unresolved:
    """The registry could not be read for a tracked tag; ``message`` says why and what to do."""

    reason: str
    message: str


DigestOutcome = Resolved | Unresolved


@dataclass(frozen=True, slots=True)
class SignaturesUnreadable:
    """The registry could not be read for ``digest``'s signatures: nothing is pinned on it.

    Only a 404 at every place a signature may be stored means unsigned (an
    :class:`~imagerefresh.signatures.Untrusted` verdict); any other failure is this.
    """

    digest: str
    message: str


@dataclass(frozen=True, slots=True)
class SignaturesWaiting:
    """``digest``'s signatures were not looked up this tick, and not for any fault: the policy
    used up its verifications for the tick, or the lookup would take the account's pull budget
    below its reserve (``budget``). Nothing is pinned on it; it is not unreadable evidence.
    """

    digest: str
    message: str
    budget: bool = False


# With spec.verify, what the shell found for a container's desired digest: verified by a listed
# key, signed by none (which check failed), not readable, or not looked up yet.
SignatureOutcome = Verified | Untrusted | SignaturesUnreadable | SignaturesWaiting


@dataclass(frozen=True, slots=True)
class TargetEvidence:
    """Everything read for one target. ``workload`` None with no ``error`` means it is absent."""

    workload: Workload | None = None
    error: str | None = None  # the API could not be read: fail closed
    pods: tuple[ObservedPod, ...] = ()
    digests: Mapping[str, DigestOutcome] = field(default_factory=lambda: _EMPTY)
    identities: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # registry → identity
    # With spec.verify: container → what its desired digest's signatures say (absent: not read,
    # which the planner treats as unreadable — nothing is pinned on it).
    signatures: Mapping[str, SignatureOutcome] = field(default_factory=lambda: _EMPTY)
    # The pre-pull helper pods found for the workload (owner reference and label); None when
    # they were not read (the operator may not create pods, or the read failed).
    helpers: tuple[HelperPod, ...] | None = None
    helpers_error: str | None = None  # why they could not be read
    # With a rollout of ours in flight: container → the image the workload's previous revision
    # (ReplicaSet, ControllerRevision) names — what a rollback may restore. None: not read.
    previous_template: Mapping[str, str] | None = None
    # Index digest → its platform manifests, read this tick for rollback candidates (a pod
    # reporting one of them proves the index ran).
    children: Mapping[str, frozenset[str]] = field(default_factory=lambda: _EMPTY)


NOT_READ = TargetEvidence(error="the workload was not read this tick")


@dataclass(frozen=True, slots=True)
class NamespacePolicy:
    """Which namespaces a policy may reach beyond its own (the confused-deputy guard)."""

    allowed_pairs: frozenset[tuple[str, str]] = frozenset()  # (policy ns, target ns); "*" = any

    def allows(self, policy_namespace: str, target_namespace: str) -> bool:
        if policy_namespace == target_namespace:
            return True
        return any(
            source in (policy_namespace, "*") and target in (target_namespace, "*")
            for source, target in self.allowed_pairs
        )


@dataclass(frozen=True, slots=True)
class PolicyView:
    """The ImageRefreshPolicy as the planner sees it."""

    namespace: str
    name: str
    generation: int
    spec: PolicySpec
    status: PolicyStatus
    reset_request: str | None = None  # the value of the reset annotation, if set
    window_override: str | None = None  # the value of the refresh-outside-window annotation

    def target_key(self, index: int) -> TargetKey:
        target = self.spec.targets[index]
        return TargetKey(target.kind, target.namespace or self.namespace, target.name)


@dataclass(frozen=True, slots=True)
class TickInput:
    """Everything one tick decides on."""

    policy: PolicyView
    evidence: Mapping[TargetKey, TargetEvidence]
    budgets: Mapping[Account, BudgetSnapshot]  # (registry host, identity) → budget
    now: datetime
    namespaces: NamespacePolicy = NamespacePolicy()
    # (workload, container) → another policy (namespace/name) that declares it too
    claimed_elsewhere: Mapping[tuple[TargetKey, str], str] = field(default_factory=lambda: _EMPTY)
    # A follow-up tick judges only the rollouts in flight (a target with ``pending``); every
    # other target keeps its status, so skip streaks count interval ticks, not follow-ups.
    follow_up: bool = False
    # The nodes' image lists (offline evidence); None when the operator may not read nodes.
    nodes: NodeInventory | None = None
    pre_pull_pods: bool = False  # the operator may create pre-pull helper pods
    pre_pull_max_deadline: int = 3_600  # seconds a helper pod may live, at most
    pre_pull_run_as: RunAs = DEFAULT_RUN_AS  # the helper pods' user and group
    # With spec.verify: (repository, digest) of every digest a Verified verdict in the
    # operator's memory covers for the policy's keys this tick — desired digests and rollback
    # candidates alike. Status is never evidence of a signature.
    verified: frozenset[tuple[str, str]] = frozenset()

    @property
    def honours_reset(self) -> bool:
        """Whether this tick honours a new reset request: only a tick that reads every target
        does (a follow-up leaves it for the next one)."""
        request = self.policy.reset_request
        return (
            not self.follow_up and request is not None and request != self.policy.status.last_reset
        )

    def verified_digests(self) -> frozenset[tuple[str, str]]:
        """:attr:`verified`, and every Verified verdict the targets' evidence carries."""
        found = set(self.verified)
        for index, target in enumerate(self.policy.spec.targets):
            evidence = self.evidence.get(self.policy.target_key(index))
            if evidence is None:
                continue
            for container in target.containers:
                verdict = evidence.signatures.get(container.name)
                if isinstance(verdict, Verified):
                    found.add((container.tracked.repository, verdict.digest))
        return frozenset(found)
