"""The helper pods of a policy deleted mid-pre-pull: deleted with it.

A pre-pull's helper pods are found and deleted by the policy's own ticks; a policy deleted while
one is in flight has no next tick. Its last status (the deletion event carries it) names the
targets that recorded a pre-pull: their workloads' helper pods — found, as always, by owner
reference *and* label, never by the label alone — are deleted then. Nothing else of the policy's
is touched; failures are logged (the helpers end at their deadline and go with their workload).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from pydantic import ValidationError

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.kube.pods import HelperPodApi
from imagerefresh.models import PolicySpec, PolicyStatus
from imagerefresh.planner import NamespacePolicy, TargetKey
from imagerefresh.planner.actions import HelperPodDelete
from imagerefresh.runtime.reads import owned_helper

__all__ = ["delete_leftover_helpers"]

log = structlog.get_logger(__name__)


def leftover_targets(policy: Mapping[str, Any], namespaces: NamespacePolicy) -> list[TargetKey]:
    """The targets of a deleted policy whose helper pods are to go: those its last status
    records a pre-pull for — and, since anyone who may update the status may write that, only
    those its spec declares in a namespace the policy may reach. Anything unreadable: none."""
    metadata = policy.get("metadata") or {}
    home = str(metadata.get("namespace") or "")
    try:
        spec = PolicySpec.model_validate(policy.get("spec") or {})
        status = PolicyStatus.model_validate(policy.get("status") or {})
    except ValidationError:
        return []
    declared = {
        TargetKey(t.kind, t.namespace or home, t.name)
        for t in spec.targets
        if namespaces.allows(home, t.namespace or home)
    }
    recorded = [
        TargetKey(t.kind, t.namespace, t.name) for t in status.targets if t.pre_pull is not None
    ]
    return [key for key in recorded if key in declared]


def delete_leftover_helpers(
    api: KubeApi, policy: Mapping[str, Any], namespaces: NamespacePolicy
) -> list[HelperPodDelete]:
    """Delete the helper pods of :func:`leftover_targets`; what was deleted."""
    pods = HelperPodApi(api)
    deleted: list[HelperPodDelete] = []
    for key in leftover_targets(policy, namespaces):
        try:
            deleted += _delete_helpers(api, pods, key)
        except KubeError as error:
            log.warning("pre-pull pods not deleted", target=str(key), error=str(error))
    return deleted


def _delete_helpers(api: KubeApi, pods: HelperPodApi, key: TargetKey) -> list[HelperPodDelete]:
    workload = api.read_workload(key.kind, key.namespace, key.name)
    uid = ((workload or {}).get("metadata") or {}).get("uid")
    if not isinstance(uid, str) or not uid:
        return []  # the workload is gone: the garbage collector deletes its helpers
    orders = [
        HelperPodDelete(key, key.namespace, pod["metadata"]["name"], pod["metadata"]["uid"])
        for pod in pods.list(key.namespace)
        if owned_helper(pod, uid)
    ]
    for order in orders:
        pods.delete(order)
    return orders
