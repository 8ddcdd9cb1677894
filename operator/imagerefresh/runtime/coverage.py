"""The reading half of ``imagerefresh audit``: policies and workloads, as the caller may see them
(with ``--offline``, their pods and the nodes' image lists too).

Policies are always read in every namespace: a policy may target workloads outside its own, so
a narrower read would report covered workloads as uncovered. Workloads are read in the audited
namespaces (``--namespace``), else in every namespace. Anything the caller may not read is an
:class:`AuditUnreadable` naming the permission to grant: an audit never reports "clean" on
evidence it could not see — a namespace it may not look up (no ``get`` on namespaces) counts as
existing only when it holds a workload the caller can list, since a list in a namespace that
does not exist answers, like an empty one, with nothing.

With ``--offline``, each workload's pods are listed as the operator lists them (one LIST per
namespace when the selectors share a label key); pods it may not list are an
:class:`AuditUnreadable` too. The nodes' image lists are extra evidence, not required: a caller
refused the node LIST (403) is audited on what its pods prove alone, and told so once; any other
failure to list nodes is an :class:`AuditUnreadable`, since it says nothing about the caller's
rights and "ready" is never judged on evidence that merely failed to arrive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from imagerefresh.audit import (
    WORKLOAD_KINDS,
    AuditedPolicy,
    AuditedWorkload,
    Claim,
    OfflineWorkload,
)
from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import Forbidden, KubeError
from imagerefresh.models import PolicySpec
from imagerefresh.offline import NodeInventory, PodImages, node_images, running_digest

__all__ = ["AuditUnreadable", "Coverage", "OfflineEvidence", "read_coverage"]

_FORBIDDEN = 403  # a 401 is a Forbidden too, but it says the credentials are bad: never skipped


class AuditUnreadable(Exception):
    """What the audit could not read, and what to grant or fix."""


@dataclass(frozen=True)
class OfflineEvidence:
    """What ``audit --offline`` judges: each workload with its pods, and the nodes' image lists
    (a failed inventory when the caller may not list nodes: ``note`` then says so, once)."""

    workloads: list[OfflineWorkload]
    nodes: NodeInventory
    note: str | None = None


@dataclass(frozen=True)
class Coverage:
    policies: list[AuditedPolicy]
    workloads: list[AuditedWorkload]
    offline: OfflineEvidence | None = None  # read only when asked


def _policy(obj: dict[str, Any]) -> AuditedPolicy:
    metadata = obj["metadata"]
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    spec = obj.get("spec") or {}
    try:
        return AuditedPolicy(namespace, name, PolicySpec.model_validate(spec))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        return AuditedPolicy(namespace, name, None, problems, _lenient_claims(namespace, spec))


def _lenient_claims(namespace: str, spec: Mapping[str, Any]) -> tuple[Claim, ...]:
    """What an unreadable spec still names, read as the operator's claim index reads it: it
    claims those containers (a Conflict for any other policy declaring them) though it
    refreshes none."""
    claims: list[Claim] = []
    targets = spec.get("targets")
    for target in targets if isinstance(targets, list) else ():
        if not isinstance(target, dict) or target.get("kind") not in WORKLOAD_KINDS:
            continue
        if not isinstance(target.get("name"), str):
            continue
        where = str(target.get("namespace") or namespace)
        containers = target.get("containers")
        for container in containers if isinstance(containers, list) else ():
            if isinstance(container, dict) and isinstance(container.get("name"), str):
                claims.append((target["kind"], where, target["name"], container["name"]))
    return tuple(claims)


def _denied(error: KubeError) -> AuditUnreadable:
    # The API's own message names the verb, resource and scope refused (and who was refused).
    return AuditUnreadable(
        f"{error.for_one_shot()}. imagerefresh audit needs `list` on "
        "imagerefreshpolicies.images.tracebloc.io in all namespaces, and `list` on "
        "deployments, daemonsets and statefulsets (apps) in every audited namespace (all of "
        "them without --namespace): grant them to the account you run it as, or narrow the "
        "audit with --namespace"
    )


def _unknown(namespace: str, error: Forbidden) -> AuditUnreadable:
    return AuditUnreadable(
        f"cannot tell whether namespace {namespace!r} exists: {error.for_one_shot()}; it holds "
        "no workload you can list, which is also how a mistyped name looks. Check the "
        "--namespace value, or grant `get` on namespaces to the account you run it as"
    )


def read_coverage(api: KubeApi, namespaces: tuple[str, ...], *, offline: bool = False) -> Coverage:
    """The policies (all namespaces) and the workloads of ``namespaces`` (all when empty); with
    ``offline``, the workloads' pods and the nodes' image lists too."""
    try:
        unknown: dict[str, Forbidden] = {}
        for namespace in namespaces:
            try:
                exists = api.namespace_exists(namespace)
            except Forbidden as refusal:
                unknown[namespace] = refusal  # the workloads it holds, if any, will tell
                continue
            if not exists:
                raise AuditUnreadable(
                    f"namespace {namespace!r} does not exist; check the --namespace value"
                )
        policies = [_policy(p) for p in api.list_policies()]
        scopes: tuple[str | None, ...] = namespaces or (None,)
        objects = [
            obj
            for scope in scopes
            for kind in WORKLOAD_KINDS
            for obj in api.list_workloads(kind, scope)
        ]
    except Forbidden as error:
        raise _denied(error) from error
    except KubeError as error:
        raise AuditUnreadable(error.for_one_shot()) from error
    workloads = [AuditedWorkload.from_api(obj) for obj in objects]
    seen = {workload.namespace for workload in workloads}
    for namespace, forbidden in unknown.items():
        if namespace not in seen:
            raise _unknown(namespace, forbidden)
    return Coverage(policies, workloads, _read_offline(api, objects) if offline else None)


def _read_offline(api: KubeApi, objects: list[dict[str, Any]]) -> OfflineEvidence:
    nodes, note = _node_images(api)
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_namespace.setdefault(obj["metadata"]["namespace"], []).append(obj)
    judged: list[OfflineWorkload] = []
    for namespace, group in by_namespace.items():
        selectors = [(obj.get("spec") or {}).get("selector") or {} for obj in group]
        for obj, pods in zip(group, api.list_pods_of(namespace, selectors), strict=True):
            if isinstance(pods, KubeError):
                raise _pods_unreadable(pods)
            judged.append(OfflineWorkload.from_api(obj, [_pod_images(pod) for pod in pods]))
    return OfflineEvidence(judged, nodes, note)


def _pod_images(pod: dict[str, Any]) -> PodImages:
    status = pod.get("status") or {}
    running = {
        str(container.get("name")): running_digest(container.get("imageID"))
        for section in ("initContainerStatuses", "containerStatuses")
        for container in status.get(section) or ()
    }
    return PodImages.from_api(pod, running)


def _node_images(api: KubeApi) -> tuple[NodeInventory, str | None]:
    """The nodes' image lists, or, when the caller may not list nodes, a failed inventory (every
    node unknown: only pods prove what a node holds) and the note saying so."""
    try:
        found, complete = api.list_nodes(node_images)
    except KubeError as error:
        if isinstance(error, Forbidden) and error.status == _FORBIDDEN:
            note = (
                f"node image lists were not used: {error.for_one_shot()}; only pods prove what "
                "a node holds, so a node whose pods do not run an image counts as unknown"
            )
            return NodeInventory.failed("you may not list nodes"), note
        raise AuditUnreadable(
            f"{error.for_one_shot()}. imagerefresh audit --offline reads the nodes' image "
            "lists (`list` on nodes; without that right it goes on without them): fix what "
            "the message says, or run it again once the API server answers"
        ) from error
    return NodeInventory(MappingProxyType(dict(found)), complete), None


def _pods_unreadable(error: KubeError) -> AuditUnreadable:
    if isinstance(error, Forbidden):
        return AuditUnreadable(
            f"{error.for_one_shot()}. imagerefresh audit --offline needs `list` on pods in "
            "every audited namespace (all of them without --namespace): grant it to the "
            "account you run it as, or narrow the audit with --namespace"
        )
    return AuditUnreadable(error.for_one_shot())
