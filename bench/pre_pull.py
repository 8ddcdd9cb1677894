"""A DaemonSet's unavailable time on the real node, with and without ``prePull``.

Two DaemonSets on the real node (kubelet and containerd), each tracking a repository of its own
in a policy of its own: ``plain`` switches as soon as the operator sees the new digest, so the
kubelet kills the old agent and then pulls; ``prepull`` has the build pulled by a helper pod
first, so its new agent's start needs no pull. Each change pushes a new build of one of them,
ticks its policy, and measures, polling the API server:

- unavailable: from the moment no agent pod of the DaemonSet is Ready to the moment one is
  Ready on the new digest (the node without its agent);
- what the kubelet said about the new agent's image (its ``Pulled`` event): a pull and its
  duration, or "already present on machine".
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import kubernetes.client
from harness import note, wait_for

from support.realnode_env import SLEEP, RealNode
from support.registry_env import ImagePusher

NAMESPACE = "bench-prepull"
KINDS = ("plain", "prepull")


def objects(node: RealNode, registry: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for kind in KINDS:
        tag = f"{registry}/{NAMESPACE}/{kind}:prod"
        found.append(node.daemonset(kind, tag))
        found.append(
            {
                "apiVersion": "images.tracebloc.io/v1alpha1",
                "kind": "ImageRefreshPolicy",
                "metadata": {"name": kind},
                "spec": {
                    "interval": "15m",
                    "healthyFor": "5s",  # Current seconds after the rollout settled
                    "prePull": kind == "prepull",
                    "targets": [
                        {
                            "kind": "DaemonSet",
                            "name": kind,
                            "containers": [{"name": "app", "image": tag}],
                        }
                    ],
                },
            }
        )
    return found


class Unavailability:
    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        pusher: ImagePusher,
        bump: Callable[[list[tuple[str, str]]], object],
    ) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.pusher, self.bump = pusher, bump
        self.down: dict[str, list[float]] = {k: [] for k in KINDS}
        self.pulled: dict[str, list[str]] = {k: [] for k in KINDS}

    def change(self, kind: str, seed: str) -> None:
        pushed = self.pusher.push(f"{NAMESPACE}/{kind}", "prod", seed=seed, entrypoint=SLEEP)
        self.bump([(NAMESPACE, kind)])
        down_at: float | None = None
        deadline = time.monotonic() + 300
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: the new agent not Ready within 300 s")
            pods = self._pods(kind)
            ready = [p for p in pods if _ready(p)]
            now = time.monotonic()
            new = [p for p in ready if _image_id(p).endswith(f"@{pushed.digest}")]
            if new:
                self.down[kind].append(now - down_at if down_at is not None else 0.0)
                self.pulled[kind].append(self._pulled(new[0]))
                break
            if not ready and down_at is None:
                down_at = now
            time.sleep(0.02)
        wait_for(lambda: self._current(kind), f"{kind} Current", 120)

    def _pods(self, kind: str) -> list[Any]:
        found = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"app={kind}").items
        return [p for p in found if p.metadata.deletion_timestamp is None]

    def _pulled(self, pod: Any) -> str:
        events = self.core.list_namespaced_event(
            NAMESPACE, field_selector=f"involvedObject.name={pod.metadata.name}"
        ).items
        said = [e.message for e in events if e.reason == "Pulled"]
        if not said:
            return "no Pulled event"
        return "already present" if "already present" in said[0] else "pulled"

    def _current(self, kind: str) -> bool:
        obj = self.custom.get_namespaced_custom_object(
            "images.tracebloc.io", "v1alpha1", NAMESPACE, "imagerefreshpolicies", kind
        )
        targets = (obj.get("status") or {}).get("targets") or []
        return bool(targets) and targets[0].get("phase") == "Current"

    def rows(self) -> list[tuple[str, str, str, str, bool | None]]:
        """(figure, with prePull, without, target, met)."""

        def text(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} s / {max(values):.2f} s"

        def starts(kind: str) -> str:
            said = self.pulled[kind]
            return ", ".join(f"{said.count(s)} x {s}" for s in sorted(set(said)))

        changes = len(self.down["prepull"])
        return [
            (
                f"DaemonSet agent unavailable on the real node, median / max ({changes} changes)",
                text(self.down["prepull"]),
                text(self.down["plain"]),
                "",
                None,
            ),
            (
                "the new agent's image, as its kubelet reports it (Pulled event)",
                starts("prepull"),
                starts("plain"),
                "with prePull: no pull",
                set(self.pulled["prepull"]) == {"already present"},
            ),
        ]


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or ())


def _image_id(pod: Any) -> str:
    statuses = pod.status.container_statuses or []
    return str(statuses[0].image_id or "") if statuses else ""


def measure(
    client: kubernetes.client.ApiClient,
    node: RealNode,
    pusher: ImagePusher,
    bump: Callable[[list[tuple[str, str]]], object],
    changes: int,
) -> list[tuple[str, str, str, str, bool | None]]:
    """Set both DaemonSets up on a first build (adopted), then time ``changes`` new builds of
    each, one DaemonSet at a time (their pulls never overlap)."""
    for kind in KINDS:
        pusher.push(f"{NAMESPACE}/{kind}", "prod", seed=f"{kind}-0", entrypoint=SLEEP)
    node.cluster.apply(*objects(node, pusher.host), namespace=NAMESPACE)
    measured = Unavailability(client, pusher, bump)
    # A tick of a DaemonSet still rolling out is a skip: tick once both agents are Ready.
    wait_for(lambda: all(any(map(_ready, measured._pods(k))) for k in KINDS), "agents Ready", 180)
    bump([(NAMESPACE, k) for k in KINDS])
    wait_for(lambda: all(measured._current(k) for k in KINDS), "both DaemonSets Current", 180)
    for cycle in range(1, changes + 1):
        for kind in KINDS:
            note(f"prePull: {kind}, change {cycle} of {changes}")
            measured.change(kind, f"{kind}-{cycle}")
    return measured.rows()
