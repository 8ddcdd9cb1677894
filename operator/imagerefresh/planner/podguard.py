"""The last guard before a pod is created: a pre-pull helper, and nothing else.

Pods are a power the operator has only for ``prePull``, and a pod can do what a patch cannot
(mount a secret, run a command, take a node's network). The manifest is built by
:func:`~imagerefresh.planner.helperpod.helper_manifest` from evidence and from status that
anyone with ``update`` on the status subresource may have written, so its shape is not left to
the code that builds it: :func:`check_helper_pod` runs at the single place pods are created
(:meth:`imagerefresh.kube.api.KubeApi.create_helper_pod`) and lets through exactly the helper
shape — every image the tracked repository at a digest, no volumes, no service account token,
a restricted security context, a deadline, an owner reference to the workload — and a pod that
fails it is never sent. Everything is an allow-list: a field the helper does not set (a
priority class, a node selector or affinity, pod-level resources, ``hostUsers``, a DNS
configuration, …) is refused by its absence from the list, not by a rule someone had to think
of. Only the user and group are open within bounds (any non-root number, or none: the platform
assigns one), because that is the one thing the operator's configuration chooses. The chart's
ValidatingAdmissionPolicy holds the same line on the API server for anything else the
operator's ServiceAccount might send.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from imagerefresh.planner.helperpod import (
    COMMAND,
    HELPER_RESOURCES,
    LABEL,
    MANAGED_BY,
    MAX_DEADLINE,
    MAX_PULL_SECRETS,
    MAX_TOLERATIONS,
    NAME_PREFIX,
)
from imagerefresh.reference import InvalidReference, parse

__all__ = ["UnsafePod", "check_helper_pod", "unsafe_pod"]

_WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet", "StatefulSet"})
_POD_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})
_METADATA_KEYS = frozenset({"name", "namespace", "labels", "ownerReferences"})
_SPEC_KEYS = frozenset(
    {
        "nodeName",
        "restartPolicy",
        "activeDeadlineSeconds",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "securityContext",
        "containers",
        "hostNetwork",
        "imagePullSecrets",
        "tolerations",
    }
)
_CONTAINER_KEYS = frozenset(
    {"name", "image", "imagePullPolicy", "command", "resources", "securityContext"}
)
_POD_SECURITY_KEYS = frozenset({"runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"})
_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_MAX_ID = 2_147_483_647  # the largest user or group id the API accepts
_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}
_MAX_CONTAINERS = 16


class UnsafePod(ValueError):
    """A pod is not the pre-pull helper shape; it was not created."""


def unsafe_pod(pod: Mapping[str, Any], repositories: Collection[str]) -> tuple[str, ...]:
    """Why ``pod`` must not be created; empty when it is a helper pulling only images of
    ``repositories`` (the tracked repositories of its target) by digest."""
    problems: list[str] = []
    _keys(problems, "the pod", pod, _POD_KEYS)
    if pod.get("apiVersion") != "v1" or pod.get("kind") != "Pod":
        problems.append("it is not a v1 Pod")
    metadata, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    _keys(problems, "metadata", metadata, _METADATA_KEYS)
    _metadata(problems, metadata)
    _keys(problems, "spec", spec, _SPEC_KEYS)
    _spec(problems, spec)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not 1 <= len(containers) <= _MAX_CONTAINERS:
        problems.append(f"it needs 1 to {_MAX_CONTAINERS} containers")
        containers = []
    for index, container in enumerate(containers):
        _container(problems, index, _mapping(container), repositories)
    return tuple(problems)


def check_helper_pod(pod: Mapping[str, Any], repositories: Collection[str]) -> None:
    """Raise :class:`UnsafePod` unless ``pod`` is the helper shape (see :func:`unsafe_pod`)."""
    problems = unsafe_pod(pod, repositories)
    if problems:
        name = _mapping(pod.get("metadata")).get("name")
        raise UnsafePod(
            f"refused to create pre-pull pod {name!r}: {'; '.join(problems)}. imagerefresh "
            "creates only helper pods that pull a tracked repository's digest and run nothing; "
            "its images came from the policy's status, which someone other than the operator "
            "wrote — inspect who can update imagerefreshpolicies/status, then reset the policy"
        )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _keys(
    problems: list[str], where: str, value: Mapping[str, Any], allowed: frozenset[str]
) -> None:
    extra = sorted(set(value) - allowed)
    if extra:
        problems.append(f"{where} carries {', '.join(extra)}")


def _metadata(problems: list[str], metadata: Mapping[str, Any]) -> None:
    name = metadata.get("name")
    if not isinstance(name, str) or not name.startswith(NAME_PREFIX):
        problems.append(f"its name does not start with {NAME_PREFIX}")
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        problems.append("it names no namespace")
    labels = _mapping(metadata.get("labels"))
    if set(labels) != {LABEL, MANAGED_BY[0]} or labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
        problems.append(
            f"its labels are not exactly {LABEL}=<the workload's uid> and "
            f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
        )
    owners = metadata.get("ownerReferences")
    owner = _mapping(owners[0]) if isinstance(owners, list) and len(owners) == 1 else {}
    if (
        owner.get("apiVersion") != "apps/v1"
        or owner.get("kind") not in _WORKLOAD_KINDS
        or not owner.get("uid")
        or owner.get("controller") is True
        or set(owner) - {"apiVersion", "kind", "name", "uid"}
    ):
        problems.append("it is not owned by exactly one workload")
    elif labels.get(LABEL) != owner.get("uid"):
        problems.append(f"its {LABEL} label does not name its owner")


def _spec(problems: list[str], spec: Mapping[str, Any]) -> None:
    if not isinstance(spec.get("nodeName"), str) or not spec.get("nodeName"):
        problems.append("it names no node")
    if spec.get("restartPolicy") != "Never":
        problems.append("its restartPolicy is not Never")
    deadline = spec.get("activeDeadlineSeconds")
    if (
        not isinstance(deadline, int)
        or isinstance(deadline, bool)
        or not 1 <= deadline <= MAX_DEADLINE
    ):
        problems.append(f"its activeDeadlineSeconds is not 1 to {MAX_DEADLINE}")
    if spec.get("automountServiceAccountToken") is not False:
        problems.append("it would mount a service account token")
    if spec.get("enableServiceLinks") is not False:
        problems.append("its service links are on")
    if not isinstance(spec.get("hostNetwork", False), bool):
        problems.append("its hostNetwork is not a boolean")
    security = _mapping(spec.get("securityContext"))
    if (
        security.get("runAsNonRoot") is not True
        or _mapping(security.get("seccompProfile")) != {"type": "RuntimeDefault"}
        or set(security) - _POD_SECURITY_KEYS
    ):
        problems.append("its pod security context is not the restricted one")
    for key in ("runAsUser", "runAsGroup"):
        if key in security and not _non_root_id(security[key]):
            problems.append(f"its {key} is not a number from 1 to {_MAX_ID}")
    secrets = spec.get("imagePullSecrets", [])
    if not isinstance(secrets, list) or len(secrets) > MAX_PULL_SECRETS:
        problems.append("its imagePullSecrets are malformed")
    elif any(set(_mapping(s)) != {"name"} for s in secrets):
        problems.append("an imagePullSecret carries more than a name")
    tolerations = spec.get("tolerations", [])
    if not isinstance(tolerations, list) or len(tolerations) > MAX_TOLERATIONS:
        problems.append("its tolerations are malformed")
    elif any(not isinstance(t, Mapping) or not t or set(t) - _TOLERATION_KEYS for t in tolerations):
        problems.append("a toleration carries more than key, operator, value, effect, seconds")


def _non_root_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= _MAX_ID


def _container(
    problems: list[str], index: int, container: Mapping[str, Any], repositories: Collection[str]
) -> None:
    name = container.get("name")
    _keys(problems, f"container {name}", container, _CONTAINER_KEYS)
    if name != f"pull-{index}":
        problems.append(f"container {name}: it is not named pull-{index}")
    image = container.get("image")
    try:
        reference = parse(image) if isinstance(image, str) else None
    except InvalidReference:
        reference = None
    if reference is None or reference.digest is None or reference.tag is not None:
        problems.append(f"container {name}: {image!r} is not an image by digest alone")
    elif reference.repository not in repositories:
        problems.append(
            f"container {name}: {reference.repository} is not a tracked repository of the target"
        )
    if container.get("command") != [COMMAND]:
        problems.append(f"container {name}: its command is not {COMMAND}")
    if container.get("imagePullPolicy") != "IfNotPresent":
        problems.append(f"container {name}: its imagePullPolicy is not IfNotPresent")
    if _mapping(container.get("securityContext")) != _CONTAINER_SECURITY:
        problems.append(f"container {name}: its security context is not the restricted one")
    if container.get("resources") != HELPER_RESOURCES:
        problems.append(
            f"container {name}: its resources are not requests cpu 1m, memory 4Mi and "
            "limits cpu 10m, memory 16Mi"
        )
