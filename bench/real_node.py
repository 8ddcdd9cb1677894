"""The latency rows on the real node (a kubelet with containerd), next to the same on kwok.

Two one-replica Deployments on the same tag, each in a policy of its own: one on the real node,
whose kubelet pulls the pinned digest and starts a real container, and one on kwok, whose pods
are Ready as soon as they are scheduled. Each change pushes a new build, ticks both policies
once, and measures, never ticking again:

- push → pods Running the new digest: from the push to the workload's only pod Ready on the
  new digest (on the real node, its ``imageID`` as containerd reports it);
- health window end → verdict: from the end of the refresh's health window (``healthyFor``
  after ``pending.settledAt``, as the operator recorded it) to its target ``Current`` in status.

The difference between the two columns is what a real node adds: a pull, a container start.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import kubernetes.client
from harness import note, wait_for

from support.operator_env import kwok_pod_template
from support.realnode_env import SLEEP, RealNode
from support.registry_env import ImagePusher

NAMESPACE = "bench-node"
PLACES = ("node", "kwok")
HEALTHY_FOR = 5  # seconds: the policies' health window


def workloads(node: RealNode, registry: str) -> list[dict[str, Any]]:
    tag = f"{registry}/{NAMESPACE}/app:prod"
    templates = {
        "node": node.template({"app": tag}, labels={"app": "node"}),
        "kwok": kwok_pod_template({"app": tag}, labels={"app": "kwok"}),
    }
    objects: list[dict[str, Any]] = []
    for place, template in templates.items():
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": place},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": place}},
                    "strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                    "template": template,
                },
            }
        )
        objects.append(
            {
                "apiVersion": "images.tracebloc.io/v1alpha1",
                "kind": "ImageRefreshPolicy",
                "metadata": {"name": place},
                "spec": {
                    "interval": "15m",
                    "healthyFor": f"{HEALTHY_FOR}s",
                    "targets": [
                        {
                            "kind": "Deployment",
                            "name": place,
                            "containers": [{"name": "app", "image": tag}],
                        }
                    ],
                },
            }
        )
    return objects


class NodeLatency:
    """Measures both placements; ``bump`` asks for a tick of the given policies."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        node: RealNode,
        pusher: ImagePusher,
        bump: Callable[[list[tuple[str, str]]], object],
    ) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.node, self.pusher, self.bump = node, pusher, bump
        self.running: dict[str, list[float]] = {p: [] for p in PLACES}
        self.verdicts: dict[str, list[float]] = {p: [] for p in PLACES}

    def change(self, seed: str) -> None:
        pushed = self.pusher.push(f"{NAMESPACE}/app", "prod", seed=seed, entrypoint=SLEEP)
        pushed_at = time.monotonic()
        self.bump([(NAMESPACE, p) for p in PLACES])
        pending = set(PLACES)
        settled: dict[str, float] = {}
        ends: dict[str, float] = {}  # the window's end, epoch seconds
        deadline = time.monotonic() + 300
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no verdict for {sorted(pending)} within 300 s")
            for place in sorted(pending):
                if place not in settled and self._running(place, pushed.digest):
                    settled[place] = time.monotonic()
                    self.running[place].append(settled[place] - pushed_at)
                target = self._target(place)
                recorded = (target.get("pending") or {}).get("settledAt")
                if recorded:
                    at = datetime.fromisoformat(recorded.replace("Z", "+00:00")).timestamp()
                    ends[place] = at + HEALTHY_FOR
                elif place in ends and target.get("phase") == "Current":
                    self.verdicts[place].append(time.time() - ends[place])
                    pending.discard(place)
            time.sleep(0.05)

    def _running(self, place: str, digest: str) -> bool:
        deployment = self.apps.read_namespaced_deployment(place, NAMESPACE)
        status = deployment.status
        if (status.observed_generation or 0) < (deployment.metadata.generation or 0):
            return False
        if (status.updated_replicas or 0) != 1 or (status.replicas or 0) != 1:
            return False
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"app={place}").items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        if len(live) != 1 or not live[0].status.container_statuses:
            return False
        container = live[0].status.container_statuses[0]
        seen = container.image_id if place == "node" else live[0].spec.containers[0].image
        return bool(container.ready) and str(seen or "").endswith(f"@{digest}")

    def _current(self, place: str) -> bool:
        return self._target(place).get("phase") == "Current"

    def _target(self, place: str) -> dict[str, Any]:
        obj = self.custom.get_namespaced_custom_object(
            "images.tracebloc.io", "v1alpha1", NAMESPACE, "imagerefreshpolicies", place
        )
        targets = (obj.get("status") or {}).get("targets") or []
        return dict(targets[0]) if targets else {}

    def rows(self) -> list[tuple[str, str, str]]:
        """(figure, real node, kwok), each a median / max over the changes."""

        def text(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} s / {max(values):.2f} s"

        changes = len(self.running["node"])
        return [
            (
                f"push → pods Running the new digest, median / max ({changes} changes)",
                text(self.running["node"]),
                text(self.running["kwok"]),
            ),
            (
                f"health window end → verdict (Current), median / max ({changes} changes, "
                f"healthyFor {HEALTHY_FOR}s)",
                text(self.verdicts["node"]),
                text(self.verdicts["kwok"]),
            ),
        ]


def measure(
    client: kubernetes.client.ApiClient,
    node: RealNode,
    pusher: ImagePusher,
    bump: Callable[[list[tuple[str, str]]], object],
    changes: int,
) -> list[tuple[str, str, str]]:
    """Set both placements up on a first build (adopted), then time ``changes`` new builds."""
    pusher.push(f"{NAMESPACE}/app", "prod", seed="node-0", entrypoint=SLEEP)
    node.cluster.apply(*workloads(node, pusher.host), namespace=NAMESPACE)
    latency = NodeLatency(client, node, pusher, bump)

    def adopted() -> bool:
        # A tick while the real node still pulls the first build finds it unsettled (a skip,
        # and no tick again for an interval): ask again until both are adopted.
        if all(latency._current(p) for p in PLACES):
            return True
        bump([(NAMESPACE, p) for p in PLACES])
        return False

    wait_for(adopted, "both targets Current", 180, 5)
    for cycle in range(1, changes + 1):
        note(f"real node: change {cycle} of {changes}")
        latency.change(f"node-{cycle}")
    return latency.rows()
