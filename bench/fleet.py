"""The workloads and policies the bench runs the operator over.

(a) ``edge``: the three control-plane workloads of the context documents — jobs-manager
(containers api and pods-monitor-container), requests-proxy (the jobs-manager image again) and
the resource-monitor DaemonSet in a second namespace — under one policy, as in the README.

(b) ``fleet``: P policies x T targets (Deployments of one container) sharing R unique tracked
references, spread over N namespaces. Target j of policy i tracks reference (T·i + j) mod R.

Every image is tracked through the counting front's host, so each registry request the operator
makes is one the front sees. Workloads start pinned at the tag's current digest (Current).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness import Json

from support.operator_env import kwok_pod_template

__all__ = [
    "EDGE_AGENTS",
    "EDGE_CP",
    "EDGE_HEALTHY_FOR",
    "Fleet",
    "edge_policy",
    "edge_workloads",
    "policy",
]

EDGE_CP, EDGE_AGENTS = "tracebloc", "tracebloc-node-agents"
EDGE_IMAGES = ("jobs-manager", "pods-monitor", "resource-monitor")


def deployment(name: str, containers: dict[str, str], replicas: int, labels: Json) -> Json:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name, **labels}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": kwok_pod_template(containers, None, {"app": name}),
        },
    }


def policy(name: str, targets: list[Json], interval: str = "15m", **spec: Any) -> Json:
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": name},
        "spec": {"interval": interval, "targets": targets, **spec},
    }


def target(kind: str, name: str, containers: dict[str, str], namespace: str | None = None) -> Json:
    found: Json = {
        "kind": kind,
        "name": name,
        "containers": [{"name": n, "image": i} for n, i in containers.items()],
    }
    if namespace:
        found["namespace"] = namespace
    return found


def edge_workloads(front: str, digests: dict[str, str]) -> tuple[list[Json], list[Json]]:
    """(objects in the control-plane namespace, objects in the node-agents namespace)."""

    def pinned(image: str) -> str:
        return f"{front}/tracebloc/{image}@{digests[image]}"

    control_plane = [
        deployment(
            "jobs-manager",
            {"api": pinned("jobs-manager"), "pods-monitor-container": pinned("pods-monitor")},
            1,
            {},
        ),
        deployment("requests-proxy", {"requests-proxy": pinned("jobs-manager")}, 1, {}),
    ]
    agents = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "resource-monitor"},
            "spec": {
                "selector": {"matchLabels": {"app": "resource-monitor"}},
                "template": kwok_pod_template(
                    {"tracebloc-resource-monitor": pinned("resource-monitor")},
                    None,
                    {"app": "resource-monitor"},
                ),
            },
        }
    ]
    return control_plane, agents


# The edge policies' health window (healthyFor): short, so that a change's verdict comes seconds
# after its rollout settled; its latency row measures from the window's end.
EDGE_HEALTHY_FOR = 5


def edge_policy(front: str) -> Json:
    def tag(image: str) -> str:
        return f"{front}/tracebloc/{image}:prod"

    return policy(
        "control-plane",
        [
            target(
                "Deployment",
                "jobs-manager",
                {"api": tag("jobs-manager"), "pods-monitor-container": tag("pods-monitor")},
            ),
            target("Deployment", "requests-proxy", {"requests-proxy": tag("jobs-manager")}),
            target(
                "DaemonSet",
                "resource-monitor",
                {"tracebloc-resource-monitor": tag("resource-monitor")},
                namespace=EDGE_AGENTS,
            ),
        ],
        healthyFor=f"{EDGE_HEALTHY_FOR}s",
    )


@dataclass(frozen=True)
class Fleet:
    policies: int
    targets: int
    references: int
    namespaces: int
    replicas: int
    prefix: str = "bench-fleet"
    interval: str = "15m"  # every policy's: they tick together on its grid

    def namespace(self, policy_index: int) -> str:
        per = -(-self.policies // self.namespaces)
        return f"{self.prefix}-{policy_index // per}"

    @property
    def namespace_names(self) -> list[str]:
        return sorted({self.namespace(i) for i in range(self.policies)})

    def reference_of(self, policy_index: int, target_index: int) -> int:
        return (self.targets * policy_index + target_index) % self.references

    @property
    def repositories(self) -> list[str]:
        """The repository paths of the fleet's references, as the registry serves them."""
        return [self.path(reference) for reference in range(self.references)]

    def path(self, reference: int) -> str:
        return f"fleet/app-{reference:02d}"

    def workload_name(self, policy_index: int, target_index: int) -> str:
        return f"w{policy_index:03d}-{target_index}"

    def policy_name(self, policy_index: int) -> str:
        return f"p{policy_index:03d}"

    @property
    def policy_keys(self) -> list[tuple[str, str]]:
        return [(self.namespace(i), self.policy_name(i)) for i in range(self.policies)]

    def objects(self, front: str, digests: dict[int, str]) -> dict[str, list[Json]]:
        """Namespace → the Deployments and policies to apply there."""
        found: dict[str, list[Json]] = {ns: [] for ns in self.namespace_names}
        for i in range(self.policies):
            targets = []
            for j in range(self.targets):
                ref = self.reference_of(i, j)
                name = self.workload_name(i, j)
                pinned = f"{front}/{self.path(ref)}@{digests[ref]}"
                found[self.namespace(i)].append(
                    deployment(name, {"app": pinned}, self.replicas, {"bench-ref": str(ref)})
                )
                targets.append(
                    target("Deployment", name, {"app": f"{front}/{self.path(ref)}:prod"})
                )
            found[self.namespace(i)].append(
                # Judged as they settle (healthyFor 0s): a round measures the ticks that patch,
                # and the next round's digests must find no refresh still in its window.
                policy(self.policy_name(i), targets, interval=self.interval, healthyFor="0s")
            )
        return found

    def warm_policy(self, front: str, digests: dict[int, str]) -> tuple[str, list[Json]]:
        """A dryRun policy in the first namespace tracking every reference found there once,
        on workloads of its own (a container belongs to one policy), and those workloads.

        Ticking it just before the fleet fills the resolution window, so that a timed round
        measures the Kubernetes side only (registry time excluded, as SPEC §10 asks).
        """
        namespace = self.namespace(0)
        refs = sorted(
            {
                self.reference_of(i, j)
                for i in range(self.policies)
                if self.namespace(i) == namespace
                for j in range(self.targets)
            }
        )
        objects: list[Json] = []
        targets = []
        for ref in refs:
            name = f"warm-{ref:02d}"
            pinned = f"{front}/{self.path(ref)}@{digests[ref]}"
            objects.append(deployment(name, {"app": pinned}, 0, {"bench-warm": str(ref)}))
            targets.append(target("Deployment", name, {"app": f"{front}/{self.path(ref)}:prod"}))
        return namespace, [*objects, policy("bench-warm", targets, dryRun=True)]
