"""The real node of e2e/local (a kubelet with containerd and runc): the ``real_node`` fixture.

Scenarios about what a node does — pulls, the image IDs a runtime reports, crashes, probes, a
restart with no registry — run their pods there. :meth:`RealNode.template` makes a pod
template that lands on it and only there (its toleration and node selector), on the host's
network, with exec probes only: anything that dials a pod or node address would dial the host's
private address, so no test reads logs, execs or port-forwards on this node; containers' state
is read from the API server. A cluster without the node is a failure, never a skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.cluster_env import LOCAL, Cluster, eventually

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
import realnode

__all__ = ["CRASH", "SLEEP", "RealNode"]

# Entrypoints of the busybox images the pusher makes runnable (ImagePusher.push(entrypoint=)).
SLEEP = ("/bin/busybox", "sleep", "2147483647")
CRASH = ("/bin/busybox", "false")  # exits 1 at once: CrashLoopBackOff


@dataclass(frozen=True)
class RealNode:
    cluster: Cluster
    name: str
    state: Path

    def trust(self, registry: str) -> None:
        """Let the node's containerd pull from the plain-HTTP registry ``registry``."""
        realnode.trust_registry(self.state, registry)

    def restart_containerd(self) -> None:
        """Stop the real containerd process and start it again (its containers keep running)."""
        done = subprocess.run(
            [str(LOCAL), "restart", "containerd"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**self.cluster.env, "IMAGEREFRESH_E2E_STATE": str(self.state)},
            check=False,
        )
        assert done.returncode == 0, f"e2e/local restart containerd failed:\n{done.stderr}"

    @contextlib.contextmanager
    def containerd_paused(self) -> Iterator[None]:
        """containerd frozen (SIGSTOP): the kubelet's calls to it wait, so nothing is pulled or
        started until it is thawed (SIGCONT) — a node stuck mid-pull, on demand."""
        pid = int(json.loads((self.state / "run" / "containerd.json").read_text())["pid"])
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def ctr(self, *args: str) -> str:
        """containerd's own client, on the node's socket (the k8s.io namespace)."""
        done = realnode.ctr(self.cluster.bin_dir, self.state, *args, check=False)
        assert done.returncode == 0, f"ctr {' '.join(args)}: {done.stderr}"
        return done.stdout

    def template(
        self,
        containers: dict[str, str],
        *,
        labels: dict[str, str],
        pull_policy: str = "IfNotPresent",
        readiness: list[str] | None = None,
        volumes: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A pod template for this node: exec probes only, host network, no token mounted.

        ``volumes`` maps a host directory to the path each container sees it at.
        """
        mounts = [
            {"name": f"host-{i}", "mountPath": path}
            for i, path in enumerate((volumes or {}).values())
        ]
        spec_containers = []
        for name, image in containers.items():
            container: dict[str, Any] = {
                "name": name,
                "image": image,
                "imagePullPolicy": pull_policy,
                "volumeMounts": mounts,
            }
            if readiness is not None:
                container["readinessProbe"] = {
                    "exec": {"command": readiness},
                    "periodSeconds": 1,
                    "failureThreshold": 1,
                }
            spec_containers.append(container)
        return {
            "metadata": {"labels": labels},
            "spec": {
                **realnode.pod_placement(),
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 0,
                "enableServiceLinks": False,
                "containers": spec_containers,
                "volumes": [
                    {"name": f"host-{i}", "hostPath": {"path": host, "type": "Directory"}}
                    for i, host in enumerate((volumes or {}).keys())
                ],
            },
        }

    def daemonset(self, name: str, image: str, **template: Any) -> dict[str, Any]:
        """A DaemonSet ``name`` (container ``app``) on this node alone."""
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": self.template({"app": image}, labels={"app": name}, **template),
            },
        }

    def deployment(self, name: str, image: str, **template: Any) -> dict[str, Any]:
        """A one-replica Deployment ``name`` (container ``app``) on this node whose rollouts
        never take the old pod away before the new one is Ready (``maxUnavailable: 0``)."""
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
                "template": self.template({"app": image}, labels={"app": name}, **template),
            },
        }

    def pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        found = self.cluster.get("pods", "-n", namespace, "-l", f"app={app}")["items"]
        return [p for p in found if p["spec"].get("nodeName") == self.name]

    def running(self, namespace: str, app: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait for ``count`` pods of ``app`` Ready on this node (no others) and return them."""

        def ready() -> list[dict[str, Any]] | None:
            pods = [
                p for p in self.pods(namespace, app) if "deletionTimestamp" not in p["metadata"]
            ]
            good = [
                p
                for p in pods
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p.get("status", {}).get("conditions", [])
                )
            ]
            return good if len(good) == count == len(pods) else None

        return eventually(ready, timeout=120, what=f"{count} pod(s) of {app} Ready on {self.name}")


def waiting_reason(pod: dict[str, Any]) -> str | None:
    """The reason the kubelet gives for a container of ``pod`` that is waiting, if any."""
    for status in pod.get("status", {}).get("containerStatuses", []):
        waiting = status.get("state", {}).get("waiting")
        if waiting:
            return str(waiting.get("reason"))
    return None


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> RealNode:
    if cluster.node is None or cluster.e2e_state is None:
        pytest.fail(
            "the test cluster has no real node: run these tests on e2e/local's cluster, whose "
            "`up` starts one and exports IMAGEREFRESH_TEST_NODE and IMAGEREFRESH_E2E_STATE",
            pytrace=False,
        )
    node = cluster.get("node", cluster.node)
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    if not ready or ready[0]["status"] != "True":
        pytest.fail(f"node {cluster.node} is not Ready: {ready}", pytrace=False)
    if cluster.registry:
        realnode.trust_registry(cluster.e2e_state, cluster.registry)
    return RealNode(cluster, cluster.node, cluster.e2e_state)
