"""Pre-pull helper pods: what one looks like, and what one proves.

With ``prePull`` a refresh first puts the new digests on the workload's nodes. One short-lived
pod per node does it: pinned to the node (``nodeName``), carrying the workload's pull secrets
and tolerations (and its ``hostNetwork``, the only way some edge nodes run pods), with one
container per image. Its command is a path the tracked images do not carry, so the kubelet
pulls the image, fails to start the container and never runs the image's entrypoint — it works
for images without a shell. (An image that does carry that path runs it, fenced as the helper
is: no token, no volumes, every capability dropped, a few millicores, a deadline — nothing the
tracked repository's own workload could not run anyway.) The kubelet's report of the container
is the proof: an ``imageID`` at the digest means the node holds it; a waiting reason such as
``ErrImagePull`` is the kubelet's word on why it cannot.

A helper pod is found again by an owner reference to its workload *and* a label naming that
workload's uid, never by a label alone: anyone may label a pod, only the API server's garbage
collector and the workload's owner set owner references that resolve. Its name is a hash of
the workload, node and images, so creating it twice (a restart, a new leader) is a 409, not a
second pod.

Pure: the shell creates the manifests built here, after :mod:`~imagerefresh.planner.podguard`
let them through.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from imagerefresh.offline import running_digest

__all__ = [
    "COMMAND",
    "DEFAULT_RUN_AS",
    "HELPER_RESOURCES",
    "LABEL",
    "MAX_DEADLINE",
    "NAME_PREFIX",
    "HelperPod",
    "Placement",
    "RunAs",
    "helper_manifest",
    "helper_name",
]

LABEL = "images.tracebloc.io/pre-pull"  # value: the uid of the workload it pre-pulls for
NAME_PREFIX = "imagerefresh-prepull-"
COMMAND = "/imagerefresh-pre-pull"  # exists in no image: the start fails after the pull
MANAGED_BY = ("app.kubernetes.io/managed-by", "imagerefresh")
# Seconds a helper pod may live (activeDeadlineSeconds): the operator's --pre-pull-max-deadline
# chooses the most within these.
MIN_DEADLINE, MAX_DEADLINE = 60, 86_400
MAX_PULL_SECRETS = 16
MAX_TOLERATIONS = 64
# What each helper container asks for and may use: the kubelet pulls; what the image may run
# if it carries the helper's command path is held to this.
HELPER_RESOURCES: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "requests": MappingProxyType({"cpu": "1m", "memory": "4Mi"}),
        "limits": MappingProxyType({"cpu": "10m", "memory": "16Mi"}),
    }
)
# Waiting reasons of a container whose image the kubelet could not pull (or may not).
PULL_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
# The kubelet pulled the image but will not create the container, so it reports no imageID:
# with no user of its own (RunAs.platform) a helper runs as the image's USER, and the kubelet
# refuses runAsNonRoot for an image that runs as root or names its user by name.
START_FAILURES = frozenset({"CreateContainerConfigError"})
_START_ADVICE = (
    " (the helper pod names no user, so it runs as the image's own, which must be a numeric "
    "non-root USER; give helpers a user: the chart's prePull.runAsUser, imagerefresh run "
    "--pre-pull-user UID:GID)"
)
_EMPTY: Mapping[Any, Any] = MappingProxyType({})
_MAX_MESSAGE = 512


@dataclass(frozen=True, slots=True)
class RunAs:
    """The numeric user and group a helper pod asks for; None leaves it to the platform.

    A fixed user makes the helper independent of the images it pulls (the kubelet refuses
    ``runAsNonRoot`` for an image that runs as root before it creates the container, and only
    a created container reports the ``imageID`` that proves the pull). Platforms that assign
    each namespace its own user range (OpenShift's ``restricted-v2``) refuse a user outside it:
    there the helper names none and the platform assigns one.
    """

    user: int | None = 65_534  # nobody
    group: int | None = 65_534

    def __post_init__(self) -> None:
        for value in (self.user, self.group):
            if value is not None and not 1 <= value <= _MAX_ID:
                raise ValueError(f"a helper's user and group are 1 to {_MAX_ID}, not {value}")

    @classmethod
    def parse(cls, text: str) -> RunAs:
        """``UID:GID``, ``UID`` (the image's group) or ``platform`` (neither)."""
        if text.strip() == "platform":
            return cls(None, None)
        user, _, group = text.strip().partition(":")
        try:
            return cls(int(user), int(group) if group else None)
        except ValueError as error:
            raise ValueError(
                f"{text!r} is not UID:GID, UID or platform (numbers from 1 to {_MAX_ID})"
            ) from error

    def __str__(self) -> str:
        if self.user is None:
            return "platform"
        return f"{self.user}:{self.group}" if self.group is not None else str(self.user)


_MAX_ID = 2_147_483_647
DEFAULT_RUN_AS = RunAs()


@dataclass(frozen=True, slots=True)
class Placement:
    """What a helper pod needs from its workload to land where the workload's pods run."""

    api_version: str
    kind: str
    name: str
    uid: str
    pull_secrets: tuple[str, ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    host_network: bool = False

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Placement | None:
        """None when the workload has no uid (nothing could own a helper pod)."""
        metadata = obj.get("metadata") or {}
        uid = metadata.get("uid")
        if not isinstance(uid, str) or not uid:
            return None
        pod_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        secrets = [
            s["name"]
            for s in pod_spec.get("imagePullSecrets") or ()
            if isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"]
        ]
        tolerations = [t for t in pod_spec.get("tolerations") or () if isinstance(t, dict)]
        return cls(
            api_version=str(obj.get("apiVersion") or "apps/v1"),
            kind=str(obj.get("kind") or ""),
            name=str(metadata.get("name") or ""),
            uid=uid,
            pull_secrets=tuple(secrets[:MAX_PULL_SECRETS]),
            tolerations=tuple(MappingProxyType(dict(t)) for t in tolerations[:MAX_TOLERATIONS]),
            host_network=pod_spec.get("hostNetwork") is True,
        )


@dataclass(frozen=True, slots=True)
class HelperPod:
    """A helper pod found for a workload, and what its kubelet reported.

    ``pulled``: image → the digest the kubelet reports for its container (the node holds it);
    ``failure``: the kubelet's reason when an image could not be pulled or the pod could not
    run on its node.
    """

    name: str
    uid: str
    node: str | None
    images: tuple[str, ...]
    pulled: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    failure: str | None = None

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> HelperPod:
        metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        status = obj.get("status") or {}
        images = {
            str(c.get("name")): str(c.get("image") or "")
            for c in spec.get("containers") or ()
            if isinstance(c, dict)
        }
        pulled: dict[str, str] = {}
        failures: list[str] = []
        for report in status.get("containerStatuses") or ():
            if not isinstance(report, dict):
                continue
            image = images.get(str(report.get("name")))
            digest = running_digest(report.get("imageID"))
            if image is not None and digest is not None:
                pulled[image] = digest
            waiting = (report.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in PULL_FAILURES:
                failures.append(_said(waiting))
            elif waiting.get("reason") in START_FAILURES and digest is None:
                failures.append(_said(waiting) + _START_ADVICE)
        if not failures and status.get("phase") == "Failed" and len(pulled) < len(images):
            failures.append(_said(status) or "the pod failed before its images were pulled")
        node = spec.get("nodeName")
        return cls(
            name=str(metadata.get("name") or ""),
            uid=str(metadata.get("uid") or ""),
            node=node if isinstance(node, str) and node else None,
            images=tuple(sorted(images.values())),
            pulled=MappingProxyType(pulled),
            failure="; ".join(failures)[:_MAX_MESSAGE] if failures else None,
        )

    def holds(self, image: str, digests: frozenset[str]) -> bool:
        """Whether its kubelet reports ``image`` pulled at one of ``digests``."""
        return self.pulled.get(image) in digests


def _said(report: Mapping[str, Any]) -> str:
    reason, message = report.get("reason"), report.get("message")
    return ": ".join(str(part) for part in (reason, message) if part)[:_MAX_MESSAGE]


def helper_name(uid: str, node: str, images: Sequence[str]) -> str:
    """One name per (workload, node, images): a second create is a 409, never a second pod."""
    text = "\n".join((uid, node, *sorted(images)))
    return NAME_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:20]


def deadline_seconds(timeout: timedelta, most: int) -> int:
    """The target's progress deadline, within what a helper pod may live."""
    most = max(MIN_DEADLINE, min(MAX_DEADLINE, most))
    return max(MIN_DEADLINE, min(most, int(timeout.total_seconds())))


def helper_manifest(
    namespace: str,
    placement: Placement,
    node: str,
    images: Sequence[str],
    timeout: timedelta,
    most: int = 3_600,
    run_as: RunAs = DEFAULT_RUN_AS,
) -> dict[str, Any]:
    """The helper pod that pulls ``images`` onto ``node`` for ``placement``'s workload, as
    ``run_as``'s user (none: the platform's, or the image's)."""
    security: dict[str, Any] = {"runAsNonRoot": True}
    if run_as.user is not None:
        security["runAsUser"] = run_as.user
    if run_as.group is not None:
        security["runAsGroup"] = run_as.group
    security["seccompProfile"] = {"type": "RuntimeDefault"}
    spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline_seconds(timeout, most),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": security,
        "containers": [_container(index, image) for index, image in enumerate(sorted(images))],
    }
    if placement.host_network:
        spec["hostNetwork"] = True
    if placement.pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in placement.pull_secrets]
    if placement.tolerations:
        spec["tolerations"] = [dict(t) for t in placement.tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": helper_name(placement.uid, node, images),
            "namespace": namespace,
            "labels": {LABEL: placement.uid, MANAGED_BY[0]: MANAGED_BY[1]},
            "ownerReferences": [
                {
                    "apiVersion": placement.api_version,
                    "kind": placement.kind,
                    "name": placement.name,
                    "uid": placement.uid,
                }
            ],
        },
        "spec": spec,
    }


def _container(index: int, image: str) -> dict[str, Any]:
    return {
        "name": f"pull-{index}",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [COMMAND],
        "resources": {kind: dict(amounts) for kind, amounts in HELPER_RESOURCES.items()},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
