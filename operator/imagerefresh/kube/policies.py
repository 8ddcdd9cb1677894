"""ImageRefreshPolicies: read one, replace its status as of what was read, annotate it, list
them, and read the kind's schema as the API server serves it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagerefresh.kube.errors import KubeError, NotFound
from imagerefresh.kube.transport import (
    FIELD_MANAGER,
    MERGE_PATCH,
    Transport,
    scope,
    segment,
)

__all__ = [
    "POLICY_GROUP",
    "POLICY_KIND",
    "POLICY_PLURAL",
    "POLICY_VERSION",
    "PolicyRequests",
    "kind_schema",
]

POLICY_GROUP = "images.tracebloc.io"
POLICY_VERSION = "v1alpha1"
POLICY_PLURAL = "imagerefreshpolicies"
POLICY_KIND = "ImageRefreshPolicy"
_POLICIES = f"/apis/{POLICY_GROUP}/{POLICY_VERSION}/namespaces/{{namespace}}/{POLICY_PLURAL}"
# The group version's OpenAPI v3 document: every authenticated client may read it (the
# ClusterRole system:discovery), so reading the installed schema needs no RBAC of our own.
_OPENAPI = f"/openapi/v3/apis/{POLICY_GROUP}/{POLICY_VERSION}"


class PolicyRequests(Transport):
    """The operator's own kind."""

    def read_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ImageRefreshPolicy as raw API JSON, or None when it does not exist."""
        try:
            return self._request(
                f"get {POLICY_KIND} {namespace}/{name}", "GET", _policy_path(namespace, name)
            )
        except NotFound:
            return None

    def replace_policy_status(
        self, policy: Mapping[str, Any], status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT ``status`` as of ``policy``'s resourceVersion; ResourceConflict when it is stale."""
        metadata = policy["metadata"]
        if not metadata.get("resourceVersion"):
            raise ValueError("replace_policy_status needs the policy's metadata.resourceVersion")
        body = {
            **policy,
            "apiVersion": policy.get("apiVersion") or f"{POLICY_GROUP}/{POLICY_VERSION}",
            "kind": policy.get("kind") or POLICY_KIND,
            "status": dict(status),
        }
        return self._request(
            f"update {POLICY_KIND} {metadata['namespace']}/{metadata['name']} status",
            "PUT",
            _policy_path(metadata["namespace"], metadata["name"]) + "/status",
            query=[("fieldManager", FIELD_MANAGER)],
            body=body,
        )

    def annotate_policy(self, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation on the policy (a merge patch; other annotations stay)."""
        self._request(
            f"patch {POLICY_KIND} {namespace}/{name} annotation {key}",
            "PATCH",
            _policy_path(namespace, name),
            query=[("fieldManager", FIELD_MANAGER)],
            body={"metadata": {"annotations": {key: value}}},
            content_type=MERGE_PATCH,
        )

    def read_policy_schema(self) -> dict[str, Any]:
        """The ImageRefreshPolicy's structural schema as the API server serves it now.

        Read from the group version's OpenAPI v3 document, not from the CRD object: any
        authenticated client may read the document, while reading CRDs would need a
        cluster-wide grant. A KubeError when it cannot be read or describes no such kind (the
        CRD is not installed, or the answer is not an OpenAPI document).
        """
        what = f"read the OpenAPI v3 schema of {POLICY_PLURAL}.{POLICY_GROUP}/{POLICY_VERSION}"
        return kind_schema(self._request(what, "GET", _OPENAPI), what)

    def list_policies(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every ImageRefreshPolicy in ``namespace`` (None: all)."""
        base = f"/apis/{POLICY_GROUP}/{POLICY_VERSION}"
        where = f"/namespaces/{segment(namespace)}" if namespace is not None else ""
        return self._list(
            f"list {POLICY_PLURAL}.{POLICY_GROUP} {scope(namespace)}",
            f"{base}{where}/{POLICY_PLURAL}",
        )


def _policy_path(namespace: str, name: str) -> str:
    return _POLICIES.format(namespace=segment(namespace)) + f"/{segment(name)}"


def kind_schema(document: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The schema of ImageRefreshPolicy in an OpenAPI v3 document: the one whose
    ``x-kubernetes-group-version-kind`` names it (its List kind is another)."""
    components = document.get("components")
    schemas = components.get("schemas") if isinstance(components, Mapping) else None
    if not isinstance(schemas, Mapping):
        raise KubeError(f"{what}: the answer is not an OpenAPI v3 document; retried next tick")
    wanted = {"group": POLICY_GROUP, "version": POLICY_VERSION, "kind": POLICY_KIND}
    for schema in schemas.values():
        kinds = schema.get("x-kubernetes-group-version-kind") if isinstance(schema, dict) else None
        if isinstance(kinds, list) and wanted in kinds:
            return schema  # type: ignore[no-any-return]
    raise KubeError(f"{what}: it describes no {POLICY_KIND}; is the CRD installed?")
