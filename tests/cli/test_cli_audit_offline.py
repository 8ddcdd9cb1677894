"""`imagerefresh audit --offline`, the real command against the local API server: which
workloads would not restart with the registry unreachable. Pods land on kwok's nodes, which
report a pinned container's digest as its image ID (e2e/kwok/pod-ready.yaml): the proof that
the node holds it. kwok's nodes list no images, so only pods prove anything here."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually
from support.scenario import deployment, policy, target

pytestmark = pytest.mark.cluster

IMAGEREFRESH = Path(sys.executable).with_name("imagerefresh")
DIGEST = "sha256:" + "a" * 64
JM = "tracebloc/jobs-manager:prod"
PINNED = f"docker.io/tracebloc/jobs-manager@{DIGEST}"
PROXY = f"docker.io/tracebloc/proxy@{DIGEST}"  # a repository no policy tracks
NODES_NOTE = "Note: node image lists were not used: list nodes"


def audit(
    cluster: Cluster, *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(cluster.env)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [str(IMAGEREFRESH), "audit", "--offline", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def rolled_out(cluster: Cluster, namespace: str, *names: str) -> None:
    for name in names:
        cluster.kubectl("rollout", "status", f"deployment/{name}", "-n", namespace, "--timeout=60s")


@pytest.fixture
def edge(crd_installed: Cluster, namespace: str) -> str:
    """jobs-manager pinned, its `api` declared by a policy, its pods running on kwok nodes."""
    crd_installed.apply(
        deployment("jobs-manager", {"api": PINNED}),
        policy("control-plane", target("jobs-manager", api=JM)),
        namespace=namespace,
    )
    rolled_out(crd_installed, namespace, "jobs-manager")
    return namespace


def test_a_pinned_workload_whose_pods_run_is_offline_ready_and_exits_zero(
    cluster: Cluster, edge: str
) -> None:
    result = audit(cluster, "--namespace", edge)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert "Note:" not in result.stderr  # an admin may list nodes


def test_a_tag_in_no_policy_and_a_workload_scaled_to_zero_are_listed_as_json_and_exit_one(
    cluster: Cluster, edge: str
) -> None:
    cluster.apply(
        deployment("web", {"nginx": "nginx:1.27"}),
        deployment("idle", {"app": PROXY}, replicas=0),
        namespace=edge,
    )
    rolled_out(cluster, edge, "web", "idle")
    # Without --offline, neither is a finding: no policy tracks either repository.
    plain = subprocess.run(
        [str(IMAGEREFRESH), "audit", "--namespace", edge],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
        check=False,
    )
    assert plain.returncode == 0, plain.stdout + plain.stderr
    result = audit(cluster, "--namespace", edge, "-o", "json")
    assert result.returncode == 1, result.stderr
    idle, web = json.loads(result.stdout)
    assert idle == {
        "kind": "not-offline-ready",
        "workload": f"Deployment {edge}/idle",
        "container": "-",
        "image": "-",
        "detail": "no pods prove it: no pod of the workload runs on any node (scaled to zero?)",
        "nodes": [],
    }
    assert (web["kind"], web["workload"], web["container"]) == (
        "not-offline-ready",
        f"Deployment {edge}/web",
        "-",
    )
    assert web["detail"].startswith(
        "template on a tag: container 'nginx' runs nginx:1.27, and no policy pins it"
    )


def test_a_declared_container_on_a_tag_is_listed_in_the_table(cluster: Cluster, edge: str) -> None:
    # Its pods ran the tag (their kubelet resolved it): the nodes hold it, but which build?
    resolved = {"imagerefresh.test/image-id.api": PINNED}
    cluster.apply(deployment("jobs-manager", {"api": JM}, annotations=resolved), namespace=edge)
    rolled_out(cluster, edge, "jobs-manager")
    result = audit(cluster, "--namespace", edge)
    assert result.returncode == 1, result.stderr
    header, row, _, detail = result.stdout.splitlines()
    assert header.split() == ["FINDING", "WORKLOAD", "CONTAINER", "IMAGE"]
    assert row.split() == ["not-offline-ready", "Deployment", f"{edge}/jobs-manager", "api", JM]
    assert detail.startswith(
        f"Deployment {edge}/jobs-manager api: template on a tag: {JM} restarts offline"
    )


# --- what the caller may read ------------------------------------------------------------------

Account = Callable[..., Path]


@pytest.fixture
def account(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Account]:
    """Makes a kubeconfig for an account that may list policies and workloads everywhere, and
    pods only if asked — never nodes."""
    name = f"offline-auditor-{namespace}"

    def make(*, pods: bool) -> Path:
        rules: list[dict[str, Any]] = [
            {
                "apiGroups": ["images.tracebloc.io"],
                "resources": ["imagerefreshpolicies"],
                "verbs": ["list"],
            },
            {
                "apiGroups": ["apps"],
                "resources": ["deployments", "daemonsets", "statefulsets"],
                "verbs": ["list"],
            },
        ]
        if pods:
            rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})
        cluster.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
            },
        )
        user = f"system:serviceaccount:{namespace}:default"
        # RBAC takes a moment to see a new binding.
        eventually(
            lambda: cluster.kubectl(
                "auth", "can-i", "list", "deployments.apps", "-n", namespace, "--as", user,
                check=False,
            ).stdout.strip() == "yes",
            timeout=30,
            what=f"{user} may list deployments",
        )  # fmt: skip
        return service_account_kubeconfig(cluster, namespace, "default", tmp_path / "auditor")

    yield make
    cluster.kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found")


def test_a_caller_who_may_not_list_nodes_is_judged_on_pods_and_told_once(
    cluster: Cluster, edge: str, account: Account
) -> None:
    kubeconfig = account(pods=True)
    result = audit(cluster, "--namespace", edge, kubeconfig=kubeconfig)
    # Its pods prove the one node it runs on: ready without any node list.
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.count(NODES_NOTE) == 1, result.stderr
    assert "forbidden" in result.stderr
    # A sidecar on a tag whose pods report no image ID proves nothing about their nodes: with
    # no node list to ask, those nodes are unknown, not missing (still a finding).
    sidecar = {"api": PINNED, "sidecar": "busybox:1.36"}
    cluster.apply(deployment("jobs-manager", sidecar), namespace=edge)
    rolled_out(cluster, edge, "jobs-manager")
    found = audit(cluster, "--namespace", edge, "-o", "json", kubeconfig=kubeconfig)
    assert found.returncode == 1, found.stderr
    assert found.stderr.count(NODES_NOTE) == 1, found.stderr
    (finding,) = json.loads(found.stdout)
    assert finding["workload"] == f"Deployment {edge}/jobs-manager"
    assert (
        "the nodes could not be listed (you may not list nodes): unknown, not missing"
        in (finding["detail"])
    )
    assert finding["nodes"], finding
    assert {node.removeprefix("kwok-node-").isdigit() for node in finding["nodes"]} == {True}


def test_a_caller_who_may_not_list_pods_cannot_audit_offline_and_exits_three(
    cluster: Cluster, edge: str, account: Account
) -> None:
    kubeconfig = account(pods=False)
    result = audit(cluster, "--namespace", edge, kubeconfig=kubeconfig)
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: list pods in {edge}")
    assert "forbidden" in line
    assert "imagerefresh audit --offline needs `list` on pods in every audited namespace" in line
