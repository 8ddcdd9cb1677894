"""The API calls of pre-pull helper pods: list them, create one through the pod guard, delete
one by uid.

Pods are a power the operator has only with ``--pre-pull-pods`` (the chart's
``prePull.enabled``), and only for the helper shape: :meth:`HelperPodApi.create` is the one
place a pod is created; it sends only a pod the write guard cleared (its images) and runs
:func:`~imagerefresh.planner.podguard.check_helper_pod` (its shape), whatever built it, and a
pod that fails either is never sent. A delete carries the pod's uid as a
precondition, so a pod of the same name created since is never touched.
"""

from __future__ import annotations

from typing import Any

import structlog

from imagerefresh.kube.api import FIELD_MANAGER, KubeApi
from imagerefresh.kube.errors import KubeError, NotFound, ResourceConflict
from imagerefresh.planner import Cleared
from imagerefresh.planner.actions import HelperPodCreate, HelperPodDelete
from imagerefresh.planner.helperpod import LABEL
from imagerefresh.planner.podguard import check_helper_pod

__all__ = ["AlreadyExists", "HelperPodApi"]

log = structlog.get_logger(__name__)
_PODS = "/api/v1/namespaces/{namespace}/pods"


class AlreadyExists(KubeError):
    """The helper pod exists already (a restart, a new leader): nothing to do."""


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
