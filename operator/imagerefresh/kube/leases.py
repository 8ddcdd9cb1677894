"""The leader-election Lease: read, watch by name, create and replace as of what was read.

Never gated: taking and renewing the Lease is how a process earns the right to write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from imagerefresh.kube.errors import KubeError, NotFound, translate
from imagerefresh.kube.transport import (
    FIELD_MANAGER,
    Transport,
    segment,
    send,
)

__all__ = ["LeaseRequests"]

_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


class LeaseRequests(Transport):
    """coordination.k8s.io/v1 Leases."""

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease as raw API JSON, or None when it does not exist."""
        try:
            return self._request(
                f"get Lease {namespace}/{name}", "GET", _lease_path(namespace, name)
            )
        except NotFound:
            return None

    def watch_lease(
        self, namespace: str, name: str, resource_version: str, seconds: int
    ) -> dict[str, Any] | None:
        """The Lease's next change after ``resource_version`` (the event: ``type``, ``object``),
        or None when ``seconds`` pass without one.

        A watch of one object by name (``fieldSelector=metadata.name``), which RBAC allows with
        ``resourceNames``: a standby sees each renewal as it is written, so it judges the
        lease's expiry from the moment of the holder's last renewal, not from its own next
        poll. A watch the API server ends with an error (410: that version is too old) raises.
        """
        what = f"watch Lease {namespace}/{name}"
        query = [
            ("watch", "true"),
            ("fieldSelector", f"metadata.name={name}"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(max(1, seconds))),
        ]
        path = _LEASES.format(namespace=segment(namespace))
        timeout = (self._timeout[0], max(1, seconds) + self._timeout[1])
        try:
            response = send(
                self.connection, "GET", path, query, {"Accept": "application/json"}, None, timeout
            )
            try:
                event = _first_change(response)
            finally:
                response.release_conn()
        except Exception as error:
            raise translate(error, what=what) from error
        if event is not None and event.get("type") == "ERROR":
            status = (event.get("object") or {}).get("code")
            raise KubeError(
                f"{what}: the API server ended the watch: "
                f"{(event.get('object') or {}).get('message', 'no message')}",
                status=status if isinstance(status, int) else None,
            )
        return event

    def create_lease(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease; a 409 (someone created it first) raises a KubeError of status 409."""
        return self._request(
            f"create Lease {namespace}/{name}",
            "POST",
            _LEASES.format(namespace=segment(namespace)),
            query=[("fieldManager", FIELD_MANAGER)],
            body={
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": dict(spec),
            },
            gated=False,
        )

    def replace_lease(
        self, namespace: str, name: str, resource_version: str, spec: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT the Lease's spec as of ``resource_version``: ResourceConflict when it moved on."""
        if not resource_version:
            raise ValueError("replace_lease needs the Lease's metadata.resourceVersion")
        return self._request(
            f"update Lease {namespace}/{name}",
            "PUT",
            _lease_path(namespace, name),
            query=[("fieldManager", FIELD_MANAGER)],
            body={
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "resourceVersion": resource_version,
                },
                "spec": dict(spec),
            },
            gated=False,
        )


def _first_change(response: Any) -> dict[str, Any] | None:
    """The first event of a watch stream that is not a bookmark, or None if it ends first."""
    for line in response:
        if not line.strip():
            continue
        event = json.loads(line)
        if isinstance(event, dict) and event.get("type") != "BOOKMARK":
            return event
    return None


def _lease_path(namespace: str, name: str) -> str:
    return _LEASES.format(namespace=segment(namespace)) + f"/{segment(name)}"
