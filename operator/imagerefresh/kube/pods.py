"""The API calls of pre-pull helper pods: list them, create one through the pod guard, delete
one by uid.

Pods are a power the operator has only with ``--pre-pull-pods`` (the chart's
``prePull.enabled``), and only for the helper shape: :meth:`HelperPodApi.create` is the one
place a pod is created; it sends only a pod the write guard cleared (its images) and runs
:func:`~imagerefresh.planner.podguard.check_helper_pod` (its shape), whatever built it, and a
pod that fails either is never sent. A delete carries the pod's uid as a
precondition, so a pod of the same name created since is never touched.

A create that admission refuses — Pod Security Admission's level on the namespace, OpenShift's
security context constraints, the chart's own fence, a webhook — raises :class:`HelperRefused`,
whose message names the admission and what to do about it (:func:`explain_refusal`): the
generic "grant RBAC" advice of a 403 would send the reader the wrong way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import structlog

from imagerefresh.kube.api import FIELD_MANAGER, KubeApi
from imagerefresh.kube.errors import ErrorAnswer, KubeError, NotFound, ResourceConflict
from imagerefresh.planner import Cleared
from imagerefresh.planner.actions import HelperPodCreate, HelperPodDelete
from imagerefresh.planner.helperpod import LABEL
from imagerefresh.planner.podguard import check_helper_pod

__all__ = ["AlreadyExists", "HelperPodApi", "HelperRefused", "explain_refusal"]

log = structlog.get_logger(__name__)
_PODS = "/api/v1/namespaces/{namespace}/pods"


class AlreadyExists(KubeError):
    """The helper pod exists already (a restart, a new leader): nothing to do."""


class HelperRefused(KubeError):
    """Admission refused the helper pod; the message names which and what to do."""


# pods "x" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)
_POD_SECURITY = re.compile(
    r'violates PodSecurity "(?P<level>[a-z]+):(?P<version>[^"]+)": (?P<why>.+)'
)
_SCC = "unable to validate against any security context constraint"
_FENCE = "imagerefresh pre-pull fence:"
_WEBHOOK = re.compile(r'admission webhook "(?P<name>[^"]+)" denied the request')
_POLICY = re.compile(r"ValidatingAdmissionPolicy '(?P<name>[^']+)'")


def explain_refusal(message: str, namespace: str, pod: Mapping[str, Any]) -> str | None:
    """What refused the helper ``pod`` in ``namespace`` and what to do, from the API server's
    ``message``; None when it was no admission (RBAC, validation: the message says enough)."""
    host_network = (pod.get("spec") or {}).get("hostNetwork") is True
    found = _POD_SECURITY.search(message)
    if found is not None:
        level, why = found["level"], _clip(found["why"], 300)
        head = (
            f"Pod Security Admission refused the helper pod: namespace {namespace} enforces "
            f"the {level!r} level (label pod-security.kubernetes.io/enforce={level}), which "
            f"forbids {why}"
        )
        if host_network:
            return (
                f"{head}. The helper runs on the host's network because the workload's pods do "
                "(hostNetwork: true), and only the 'privileged' level allows that; the "
                "workload's running pods were admitted before. Label the namespace "
                "pod-security.kubernetes.io/enforce=privileged, or set prePull: false for this "
                "target (its refreshes then switch without pulling first)"
            )
        return (
            f"{head}. Helper pods are otherwise within the 'restricted' level; check what "
            "changed the pod after the operator built it (a mutating webhook or policy)"
        )
    if _SCC in message:
        return (
            "OpenShift's security context constraints refused the helper pod "
            f"({_clip(message)}). Under restricted-v2 (each namespace its own user range) set "
            "the chart's prePull.runAsUser and prePull.runAsGroup to null, so that the platform "
            "assigns the helpers' user (imagerefresh run --pre-pull-user platform)"
            + (
                "; a workload on the host's network needs an SCC that allows it (e.g. "
                "hostnetwork-v2) for the namespace's default ServiceAccount, or prePull: false"
                if host_network
                else ""
            )
        )
    if _FENCE in message:
        policy = _POLICY.search(message)
        name = f" ({policy['name']})" if policy is not None else ""
        return (
            f"the chart's pre-pull admission policy{name} refused the helper pod: "
            f"{_clip(message[message.index(_FENCE) + len(_FENCE) :])}. The operator built it "
            "as that policy admits, so something changed it on the way (a mutating webhook or "
            "policy, a platform default such as a globalDefault PriorityClass: "
            "prePull.defaultPriorityClassName), or the chart's prePull values and the "
            "operator's --pre-pull-* flags disagree"
        )
    webhook = _WEBHOOK.search(message) or _POLICY.search(message)
    if webhook is not None:
        return (
            f"admission ({webhook['name']}) refused the helper pod: {_clip(message)}. Let that "
            "admission rule admit imagerefresh's helper pods (named imagerefresh-prepull-…, "
            "labelled app.kubernetes.io/managed-by=imagerefresh), or set prePull: false"
        )
    return None


def _api_message(error: KubeError) -> str:
    """The API server's own message (the Status body's), else the error's."""
    cause = error.__cause__
    body = getattr(cause, "body", None) if isinstance(cause, ErrorAnswer) else None
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    try:
        status = json.loads(body) if isinstance(body, str) else None
    except ValueError:
        status = None
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) and message else str(error)


def _clip(text: str, most: int = 600) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


class HelperPodApi:
    """Helper pods through ``api`` (its client, timeouts and leader-election write gate)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def list(self, namespace: str) -> list[dict[str, Any]]:
        """Every pod in ``namespace`` carrying the pre-pull label (whose value and owner
        reference the caller matches against a workload: a label alone proves nothing)."""
        return self.api.list_pods(
            namespace, {"matchExpressions": [{"key": LABEL, "operator": "Exists"}]}
        )

    def create(self, cleared: Cleared[HelperPodCreate]) -> None:
        if not isinstance(cleared, Cleared) or not isinstance(cleared.write, HelperPodCreate):
            raise TypeError("only a pod the write guard cleared is created")
        create = cleared.write
        check_helper_pod(create.manifest, create.repositories)
        metadata = create.manifest["metadata"]
        what = f"create pre-pull pod {metadata['namespace']}/{metadata['name']}"
        try:
            self.api._request(
                what,
                "POST",
                _PODS.format(namespace=metadata["namespace"]),
                query=[("fieldManager", FIELD_MANAGER)],
                body=dict(create.manifest),
                answer=False,
            )
        except KubeError as error:
            if error.status == 409 and not isinstance(error, ResourceConflict):
                raise AlreadyExists(str(error), status=409) from error
            if error.status in (400, 403, 422):
                said = _api_message(error)
                explained = explain_refusal(said, metadata["namespace"], create.manifest)
                if explained is not None:
                    raise HelperRefused(explained, status=error.status) from error
            raise
        log.info("pre-pull pod created", pod=metadata["name"], node=create.node)

    def delete(self, delete: HelperPodDelete) -> None:
        """Delete it if it is still the pod of that uid; gone already is done."""
        what = f"delete pre-pull pod {delete.namespace}/{delete.name}"
        try:
            self.api._request(
                what,
                "DELETE",
                f"{_PODS.format(namespace=delete.namespace)}/{delete.name}",
                body={"preconditions": {"uid": delete.uid}, "gracePeriodSeconds": 0},
                answer=False,
            )
        except (NotFound, ResourceConflict):
            return  # gone, or another pod of that name: not ours to touch
        log.info("pre-pull pod deleted", pod=delete.name)
