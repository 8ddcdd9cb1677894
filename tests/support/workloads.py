"""Builders of workload and pod JSON as the API server returns them, for pure planner tests."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]


def deployment(
    name: str,
    images: dict[str, str],
    *,
    namespace: str = "tracebloc",
    generation: int = 1,
    observed: int | None = None,
    replicas: int = 1,
    updated: int | None = None,
    total: int | None = None,
    available: int | None = None,
    conditions: list[Json] | None = None,
    init_images: dict[str, str] | None = None,
) -> Json:
    """A Deployment; by default settled (observed, all replicas updated and available)."""
    updated = replicas if updated is None else updated
    return {
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {"replicas": replicas, "template": _template(images, init_images)},
        "status": {
            "observedGeneration": generation if observed is None else observed,
            "replicas": updated if total is None else total,
            "updatedReplicas": updated,
            "availableReplicas": updated if available is None else available,
            "readyReplicas": updated if available is None else available,
            "conditions": conditions or [],
        },
    }


def daemonset(
    name: str,
    images: dict[str, str],
    *,
    namespace: str = "tracebloc-node-agents",
    generation: int = 1,
    observed: int | None = None,
    desired: int = 3,
    updated: int | None = None,
    available: int | None = None,
    strategy: str = "RollingUpdate",
) -> Json:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {"updateStrategy": {"type": strategy}, "template": _template(images, None)},
        "status": {
            "observedGeneration": generation if observed is None else observed,
            "desiredNumberScheduled": desired,
            "updatedNumberScheduled": desired if updated is None else updated,
            "numberAvailable": desired if available is None else available,
        },
    }


def statefulset(
    name: str,
    images: dict[str, str],
    *,
    namespace: str = "tracebloc",
    generation: int = 1,
    observed: int | None = None,
    replicas: int = 2,
    ready: int | None = None,
    updated: int | None = None,
    partition: int | None = 0,
    rolling: bool = True,
    strategy: str = "RollingUpdate",
    current_revision: str = "r1",
    update_revision: str = "r1",
) -> Json:
    update_strategy: Json = {"type": strategy}
    if rolling and strategy == "RollingUpdate":
        update_strategy["rollingUpdate"] = {} if partition is None else {"partition": partition}
    return {
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {
            "replicas": replicas,
            "updateStrategy": update_strategy,
            "template": _template(images, None),
        },
        "status": {
            "observedGeneration": generation if observed is None else observed,
            "readyReplicas": replicas if ready is None else ready,
            "updatedReplicas": replicas if updated is None else updated,
            "currentRevision": current_revision,
            "updateRevision": update_revision,
        },
    }


def _template(images: dict[str, str], init_images: dict[str, str] | None) -> Json:
    spec: Json = {"containers": [{"name": n, "image": i} for n, i in images.items()]}
    if init_images:
        spec["initContainers"] = [{"name": n, "image": i} for n, i in init_images.items()]
    return {"metadata": {"labels": {"app": "x"}}, "spec": spec}


def pod(
    name: str,
    image_ids: dict[str, str | None],
    node: str | None = None,
    images: dict[str, str] | None = None,
) -> Json:
    """A pod reporting ``image_ids``; with ``node``, running there from ``images`` (its spec)."""
    obj: Json = {
        "metadata": {"name": name},
        "status": {
            "containerStatuses": [
                {"name": n, "imageID": i or "", "image": "x", "ready": True}
                for n, i in image_ids.items()
            ]
        },
    }
    if node is not None:
        obj["spec"] = {
            "nodeName": node,
            "containers": [{"name": n, "image": i} for n, i in (images or {}).items()],
        }
        obj["status"]["phase"] = "Running"
    return obj
