"""A DaemonSet on every kwok node and the pre-pull helper pods of its namespace, for the
prePull tests on the real API server."""

from __future__ import annotations

from typing import Any

from support.cluster_env import Cluster
from support.operator_env import kwok_pod_template

PREFIX = "imagerefresh-prepull-"
LABEL = "images.tracebloc.io/pre-pull"


def agents(cluster: Cluster, ns: str, image: str) -> dict[str, Any]:
    """DaemonSet `agents` on every kwok node, rolled out; the object as the API server has it."""
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agents"},
            "spec": {
                "selector": {"matchLabels": {"app": "agents"}},
                "template": kwok_pod_template({"agent": image}, None, {"app": "agents"}),
            },
        },
        namespace=ns,
    )
    cluster.kubectl("rollout", "status", "-n", ns, "daemonset/agents", "--timeout=90s")
    return cluster.get("daemonset", "agents", "-n", ns)


def helper_pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    pods = cluster.get("pods", "-n", ns)["items"]
    return [p for p in pods if p["metadata"]["name"].startswith(PREFIX)]


def template_image(cluster: Cluster, ns: str) -> str:
    obj = cluster.get("daemonset", "agents", "-n", ns)
    return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])
