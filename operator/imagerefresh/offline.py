"""Offline readiness: would every pod of a workload restart with the registry unreachable?

Pinning digests exists so that an edge's pods restart from the node's cache when the registry
cannot be reached. That holds only when three things hold together, for *every* container and
init container of the pod template — declared in a policy or not, because one sidecar that
cannot start keeps the whole pod down:

1. no container is pulled ``Always`` (the kubelet asks the registry before every start);
2. every node the workload runs on holds the image its template names — proven by a pod on that
   node that pulled it, or by the node's ``status.images``. A node whose list is at the
   kubelet's cap (``nodeStatusMaxImages``, 50 by default, largest first) and lacks the image is
   *unknown*, never "missing"; a node the operator could not list is unknown too;
3. there are pods to prove it: a workload scaled to zero proves nothing about any node.

A container a policy declares is ready only while pinned by digest: a cached tag restarts
offline, but with whichever build that node happened to pull. A container no policy declares
may stay on a tag the node holds (``audit --offline`` is stricter for workloads in no policy).

A pure function of plain data, shared by the planner (``status.targets[].containers[].offline``
and the ``OfflineReady`` condition) and ``imagerefresh audit --offline``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from imagerefresh.reference import InvalidReference, parse, parse_digest

__all__ = [
    "ALWAYS",
    "KUBELET_IMAGE_CAP",
    "MAX_NAMED_NODES",
    "NodeImages",
    "NodeInventory",
    "OfflineVerdict",
    "PodImages",
    "TemplateImage",
    "effective_pull_policy",
    "held_name",
    "node_images",
    "offline_readiness",
    "running_digest",
    "workload_readiness",
]

ALWAYS = "Always"  # the imagePullPolicy that is not offline-safe
_IF_NOT_PRESENT = "IfNotPresent"
_LATEST = "latest"
KUBELET_IMAGE_CAP = 50  # the kubelet's default nodeStatusMaxImages
MAX_NAMED_NODES = 16  # nodes a verdict names (status is bounded); the reason counts the rest
_NODE_IMAGES_READ = 1_024  # names read per node: a kubelet with no cap may list thousands
_ACTIVE_PHASES = frozenset({"Pending", "Running", "Unknown"})
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def held_name(image: str) -> str | None:
    """The name a node holds ``image`` by: ``repo@digest`` when pinned, else ``repo:tag``.

    A node lists both forms of what it pulled (``status.images[].names``), and a template that
    names ``repo:tag@digest`` starts from ``repo@digest``. None: the image cannot be parsed.
    """
    try:
        reference = parse(image)
    except InvalidReference:
        return None
    if reference.digest is not None:
        return f"{reference.repository}@{reference.digest}"
    return f"{reference.repository}:{reference.tracked_tag}"


def effective_pull_policy(image: str, declared: str | None) -> str | None:
    """The policy the kubelet applies: ``declared``, else the API server's default for ``image``.

    The API server stores the default on every pod template it admits (``Always`` for a
    ``:latest`` tag or an image with neither tag nor digest, else ``IfNotPresent``), so the
    fallback only matters for objects that did not pass its defaulting. None: unknowable (an
    image that cannot be parsed).
    """
    if declared:
        return declared
    try:
        reference = parse(image)
    except InvalidReference:
        return None
    untagged = reference.tag is None and reference.digest is None
    return ALWAYS if reference.tag == _LATEST or untagged else _IF_NOT_PRESENT


def running_digest(image_id: str | None) -> str | None:
    """The manifest digest a kubelet reports in ``imageID``, or None when it is not one.

    containerd reports ``docker.io/library/nginx@sha256:…`` (the digest the tag resolved to);
    cri-dockerd ``docker-pullable://nginx@sha256:…``. A bare ``sha256:…`` or ``docker://sha256:…``
    is an image (config) ID, not a manifest digest, so it is unknown — never a match.
    """
    if not image_id:
        return None
    text = image_id.removeprefix("docker-pullable://")
    # Names and digests never contain "@": whatever follows the first one must be the digest,
    # and a second "@" makes the whole ID unreadable rather than half-trusted.
    _, at, digest = text.partition("@")
    if "://" in text or not at:
        return None
    try:
        return parse_digest(digest)
    except InvalidReference:
        return None


@dataclass(frozen=True, slots=True)
class TemplateImage:
    """A container (or init container) of the pod template."""

    name: str
    image: str
    pull_policy: str | None  # as the kubelet applies it; None when unknowable
    init: bool = False


@dataclass(frozen=True, slots=True)
class PodImages:
    """What one pod proves about the node it runs on.

    ``node`` is None for a pod that proves nothing about any node (not scheduled, finished,
    terminating). ``pulled``: container → the image the pod's spec names, for each container
    whose status reports an image ID (its node pulled the image). ``running``: container → the
    manifest digest it reports.
    """

    node: str | None
    pulled: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    running: Mapping[str, str | None] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any], running: Mapping[str, str | None]) -> PodImages:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        active = status.get("phase") in _ACTIVE_PHASES and not (obj.get("metadata") or {}).get(
            "deletionTimestamp"
        )
        node = spec.get("nodeName") if active else None
        images = {
            c["name"]: c["image"]
            for section in ("initContainers", "containers")
            for c in spec.get(section) or ()
            if isinstance(c.get("image"), str)
        }
        pulled = {
            c["name"]: images[c["name"]]
            for section in ("initContainerStatuses", "containerStatuses")
            for c in status.get(section) or ()
            if c.get("imageID") and c["name"] in images
        }
        return cls(
            node if isinstance(node, str) and node else None,
            MappingProxyType(pulled),
            MappingProxyType(dict(running)),
        )


@dataclass(frozen=True, slots=True)
class NodeImages:
    """The images a node reports holding (``held_name`` forms). ``full``: its list is at the
    kubelet's cap, so an image absent from it may still be on the node."""

    images: frozenset[str]
    full: bool = False
    # Whether pods can start there now (a pre-pull skips, and names, the nodes that cannot).
    ready: bool = True
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """The nodes the operator listed. ``complete`` False: the list stopped at its cap, so a
    node not in it is unknown, not gone."""

    nodes: Mapping[str, NodeImages]
    complete: bool = True
    unreadable: str | None = None  # why the nodes could not be listed: every node is unknown

    @classmethod
    def failed(cls, message: str) -> NodeInventory:
        return cls(MappingProxyType({}), complete=False, unreadable=message)

    @classmethod
    def from_api(
        cls, items: Iterable[Mapping[str, Any]], complete: bool, cap: int = KUBELET_IMAGE_CAP
    ) -> NodeInventory:
        """``cap``: the kubelets' ``nodeStatusMaxImages`` (0 or less: no cap)."""
        nodes = dict(found for item in items if (found := node_images(item, cap)) is not None)
        return cls(MappingProxyType(nodes), complete)


def node_images(
    item: Mapping[str, Any], cap: int = KUBELET_IMAGE_CAP
) -> tuple[str, NodeImages] | None:
    """A node object (raw API JSON) reduced to its name and the images it holds; None when it
    has no usable name. A node that lists no images holds none; one whose list cannot be read
    is full (unknown, never "does not hold"). ``cap``: as for :meth:`NodeInventory.from_api`."""
    metadata, status = item.get("metadata"), item.get("status")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        return None
    spec = item.get("spec")
    schedulable = not (isinstance(spec, Mapping) and spec.get("unschedulable") is True)
    if not isinstance(status, Mapping):
        return name, NodeImages(frozenset(), full=True, schedulable=schedulable)
    ready = _ready(status.get("conditions"))
    listed = status.get("images")
    if listed is None:
        return name, NodeImages(frozenset(), ready=ready, schedulable=schedulable)
    if not isinstance(listed, list):
        return name, NodeImages(frozenset(), full=True, ready=ready, schedulable=schedulable)
    held: set[str] = set()
    for entry in listed[:_NODE_IMAGES_READ]:
        names = entry.get("names") if isinstance(entry, dict) else None
        for text in names if isinstance(names, list) else ():
            if isinstance(text, str) and (normal := held_name(text)) is not None:
                held.add(normal)
    full = len(listed) >= _NODE_IMAGES_READ or (cap > 0 and len(listed) >= cap)
    return name, NodeImages(frozenset(held), full, ready, schedulable)


def _ready(conditions: object) -> bool:
    """False only when the node says it is not Ready: a pre-pull skips a node on its word, and
    tries one that says nothing (its helper pod then proves or fails it)."""
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


@dataclass(frozen=True, slots=True)
class OfflineVerdict:
    """Whether a container's pods would restart offline; ``reason`` says why not and what to
    do; ``nodes`` where it is not proven (at most :data:`MAX_NAMED_NODES`)."""

    ready: bool
    reason: str
    nodes: tuple[str, ...] = ()


_READY = OfflineVerdict(True, "every pod would restart from its node's cache")


def offline_readiness(
    template: Sequence[TemplateImage],
    pods: Sequence[PodImages],
    declared: Iterable[str],
    inventory: NodeInventory | None,
    scheduled: int | None = None,
    *,
    pinned_only: bool = False,
) -> dict[str, OfflineVerdict]:
    """The verdict for each ``declared`` container of a workload with this pod ``template``.

    ``inventory`` None: the operator may not read nodes (only pods prove anything).
    ``scheduled``: for a DaemonSet, the nodes it is scheduled on (each must prove it).
    ``pinned_only``: every container must be pinned by digest, not only the declared ones
    (the audit's rule for a workload in no policy).
    """
    shared = workload_readiness(template, pods, inventory, scheduled, pinned_only=pinned_only)
    verdicts: dict[str, OfflineVerdict] = {}
    for name in declared:
        container = next((c for c in template if c.name == name), None)
        if container is not None and _on_tag(container):
            verdicts[name] = OfflineVerdict(
                False,
                f"template on a tag: {container.image} restarts offline with whichever build "
                "the node cached; pin it by digest (the policy pins it when it refreshes)",
            )
        else:
            verdicts[name] = shared
    return verdicts


def _on_tag(container: TemplateImage) -> bool:
    try:
        return parse(container.image).digest is None
    except InvalidReference:
        return False  # not a tag: the workload's verdict says the image is unreadable


def workload_readiness(
    template: Sequence[TemplateImage],
    pods: Sequence[PodImages],
    inventory: NodeInventory | None,
    scheduled: int | None = None,
    *,
    pinned_only: bool = False,
) -> OfflineVerdict:
    """The verdict every container of the workload shares (one container that cannot start
    keeps the whole pod down): the first reason its pods would not restart offline, ignoring
    only the declared containers' own rule (pinned by digest), which
    :func:`offline_readiness` adds."""
    for container in template:
        what = _describe(container)
        if container.pull_policy == ALWAYS:
            return OfflineVerdict(
                False,
                f"imagePullPolicy: Always on {what}: every start asks the registry; set "
                "IfNotPresent",
            )
        if container.pull_policy is None or held_name(container.image) is None:
            return OfflineVerdict(False, f"{what} names an unreadable image: fix the template")
        if pinned_only and _on_tag(container):
            return OfflineVerdict(
                False,
                f"template on a tag: {what} runs {container.image}, and no policy pins it; "
                "offline, a restart runs whichever build the node cached",
            )
    nodes = sorted({pod.node for pod in pods if pod.node is not None})
    if not nodes:
        return OfflineVerdict(
            False, "no pods prove it: no pod of the workload runs on any node (scaled to zero?)"
        )
    unproven = [node for node in nodes if not _proven(node, template, pods, inventory)]
    if scheduled is not None and len(nodes) < scheduled:
        missing = scheduled - len(nodes)
        detail = f"{missing} scheduled node(s) have no pod of it to prove it"
        return _not_proven(unproven, inventory, extra=detail)
    if unproven:
        return _not_proven(unproven, inventory)
    return _READY


def _describe(container: TemplateImage) -> str:
    return f"{'init container' if container.init else 'container'} {container.name!r}"


def _proven(
    node: str,
    template: Sequence[TemplateImage],
    pods: Sequence[PodImages],
    inventory: NodeInventory | None,
) -> bool:
    here = [pod for pod in pods if pod.node == node]
    held = inventory.nodes.get(node) if inventory is not None else None
    for container in template:
        wanted = held_name(container.image)
        if any(_pod_proves(pod, container, wanted) for pod in here):
            continue
        if held is not None and wanted in held.images:
            continue
        return False
    return True


def _pod_proves(pod: PodImages, container: TemplateImage, wanted: str | None) -> bool:
    image = pod.pulled.get(container.name)
    if image is None or wanted is None:
        return False
    name = held_name(image)
    if name is None:
        return False
    if name == wanted:
        return True
    # A pod started from a tag of the same repository proves the digest its kubelet reports.
    digest = pod.running.get(container.name)
    return digest is not None and wanted == f"{parse(image).repository}@{digest}"


def _not_proven(
    unproven: list[str], inventory: NodeInventory | None, extra: str | None = None
) -> OfflineVerdict:
    named = unproven[:MAX_NAMED_NODES]
    parts = []
    if named:
        more = f" and {len(unproven) - len(named)} more" if len(unproven) > len(named) else ""
        parts.append(f"not proven on node {', '.join(named)}{more}: {_why(named, inventory)}")
    if extra:
        parts.append(extra)
    return OfflineVerdict(False, "; ".join(parts), tuple(named))


def _why(nodes: list[str], inventory: NodeInventory | None) -> str:
    if inventory is None:
        return (
            "no pod there runs the template's images and the operator may not read nodes "
            "(enable node reads in the chart to use their image lists)"
        )
    if inventory.unreadable is not None:
        return f"the nodes could not be listed ({inventory.unreadable}): unknown, not missing"
    capped = [n for n in nodes if (held := inventory.nodes.get(n)) is not None and held.full]
    unlisted = [n for n in nodes if n not in inventory.nodes]
    if unlisted and not inventory.complete:
        return "the node list stopped at its cap before these nodes; unknown, not missing"
    if capped:
        return (
            "the node's image list is at the kubelet's cap (nodeStatusMaxImages) and does not "
            "name the image: unknown, not missing; a pod running there will prove it"
        )
    return "the node does not hold the template's images; a restart there needs the registry"
