"""The API calls of ``imagerefresh migrate-cronjob``: the edge's CronJob, its Jobs, the policy.

These run with the site engineer's kubeconfig, never the operator's ServiceAccount: the chart
grants the operator none of them (CronJobs, Jobs, creating or deleting policies). Writes carry
their own field manager, so the workloads' and policies' ``managedFields`` say who made them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from imagerefresh.kube.api import (
    MERGE_PATCH,
    POLICY_GROUP,
    POLICY_KIND,
    POLICY_PLURAL,
    POLICY_VERSION,
    KubeApi,
)
from imagerefresh.kube.errors import NotFound

__all__ = ["MIGRATE_FIELD_MANAGER", "EdgeApi"]

MIGRATE_FIELD_MANAGER = "imagerefresh-migrate"
_CRONJOBS = "/apis/batch/v1/namespaces/{namespace}/cronjobs"
_JOBS = "/apis/batch/v1/namespaces/{namespace}/jobs"
_POLICIES = f"/apis/{POLICY_GROUP}/{POLICY_VERSION}/namespaces/{{namespace}}/{POLICY_PLURAL}"
_MANAGER = [("fieldManager", MIGRATE_FIELD_MANAGER)]


class EdgeApi(KubeApi):
    """KubeApi plus what migrating an edge's CronJob reads and writes."""

    def read_cronjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The CronJob as raw API JSON, or None when it does not exist."""
        try:
            obj = self._request(
                f"get CronJob {namespace}/{name}", "GET", _cronjob_path(namespace, name)
            )
        except NotFound:
            return None
        obj.setdefault("apiVersion", "batch/v1")
        obj.setdefault("kind", "CronJob")
        return obj

    def patch_cronjob(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """A merge patch of the CronJob (its ``spec.suspend`` and our annotation)."""
        self._request(
            f"patch CronJob {namespace}/{name}",
            "PATCH",
            _cronjob_path(namespace, name),
            query=_MANAGER,
            body=dict(body),
            content_type=MERGE_PATCH,
            answer=False,
        )

    def list_jobs(self, namespace: str) -> list[dict[str, Any]]:
        """Every Job in ``namespace`` (a CronJob's runs are few and short-lived)."""
        page = self._request(
            f"list Jobs in {namespace}", "GET", _JOBS.format(namespace=_segment(namespace))
        )
        return [job for job in page.get("items") or () if isinstance(job, dict)]

    def create_policy(self, policy: Mapping[str, Any]) -> dict[str, Any]:
        metadata = policy["metadata"]
        return self._request(
            f"create {POLICY_KIND} {metadata['namespace']}/{metadata['name']}",
            "POST",
            _POLICIES.format(namespace=_segment(metadata["namespace"])),
            query=_MANAGER,
            body=dict(policy),
        )

    def patch_policy(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A merge patch of the policy (its ``spec.suspend`` and our annotations)."""
        return self._request(
            f"patch {POLICY_KIND} {namespace}/{name}",
            "PATCH",
            _policy_path(namespace, name),
            query=_MANAGER,
            body=dict(body),
            content_type=MERGE_PATCH,
        )

    def delete_policy(self, namespace: str, name: str, uid: str) -> None:
        """Delete the policy, only if it is still the object ``uid`` names (a precondition)."""
        self._request(
            f"delete {POLICY_KIND} {namespace}/{name}",
            "DELETE",
            _policy_path(namespace, name),
            body={"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}},
            answer=False,
        )


def _cronjob_path(namespace: str, name: str) -> str:
    return _CRONJOBS.format(namespace=_segment(namespace)) + f"/{_segment(name)}"


def _policy_path(namespace: str, name: str) -> str:
    return _POLICIES.format(namespace=_segment(namespace)) + f"/{_segment(name)}"


def _segment(value: str) -> str:
    return quote(str(value), safe="")
