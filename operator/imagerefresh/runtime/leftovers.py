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
from imagerefresh.models import PolicyStatus
from imagerefresh.planner import TargetKey
from imagerefresh.planner.actions import HelperPodDelete
from imagerefresh.runtime.reads import owned_helper

__all__ = ["delete_leftover_helpers"]

log = structlog.get_logger(__name__)


def delete_leftover_helpers(api: KubeApi, status: Mapping[str, Any]) -> list[HelperPodDelete]:
    """Delete the helper pods of every target ``status`` (a deleted policy's last) records a
    pre-pull for; what was deleted. An unreadable status deletes nothing."""
    try:
        targets = PolicyStatus.model_validate(status or {}).targets
    except ValidationError:
        return []
    pods = HelperPodApi(api)
    deleted: list[HelperPodDelete] = []
    for target in targets:
        if target.pre_pull is None:
            continue
        key = TargetKey(target.kind, target.namespace, target.name)
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
