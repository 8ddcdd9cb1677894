"""`imagerefresh audit`, the real command against the local API server: it lists what no policy
covers and what a policy cannot refresh, and its exit status says so (for CI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster
from support.scenario import deployment, policy, target

pytestmark = pytest.mark.cluster

IMAGEREFRESH = Path(sys.executable).with_name("imagerefresh")
DIGEST = "sha256:" + "a" * 64
JM = "tracebloc/jobs-manager:prod"


def audit(
    cluster: Cluster, *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(cluster.env)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [str(IMAGEREFRESH), "audit", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def findings(result: subprocess.CompletedProcess[str]) -> list[tuple[str, str, str]]:
    return [(f["kind"], f["workload"], f["container"]) for f in json.loads(result.stdout)]


@pytest.fixture
def edge(crd_installed: Cluster, namespace: str) -> str:
    """A policy tracking jobs-manager's `api` and the workload it names, both covered."""
    crd_installed.apply(
        deployment("jobs-manager", {"api": f"docker.io/tracebloc/jobs-manager@{DIGEST}"}),
        policy("control-plane", target("jobs-manager", api=JM)),
        namespace=namespace,
    )
    return namespace


def test_a_covered_namespace_is_clean_and_exits_zero(cluster: Cluster, edge: str) -> None:
    result = audit(cluster, "--namespace", edge)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "0 finding(s) in 1 workloads (1 containers)" in result.stderr


def test_a_tracked_repository_in_an_unlisted_workload_is_listed_and_exits_one(
    cluster: Cluster, edge: str
) -> None:
    cluster.apply(deployment("requests-proxy", {"proxy": JM}), namespace=edge)
    result = audit(cluster, "--namespace", edge)
    assert result.returncode == 1, result.stderr
    header, row, _, detail = result.stdout.splitlines()
    assert header.split() == ["FINDING", "WORKLOAD", "CONTAINER", "IMAGE"]
    assert row.split() == ["uncovered", "Deployment", f"{edge}/requests-proxy", "proxy", JM]
    # The tracker named is the first by name: another test's policy may track it too.
    assert detail.startswith(
        f"Deployment {edge}/requests-proxy proxy: runs docker.io/tracebloc/jobs-manager, which "
        "policy "
    )
    assert "/control-plane tracks, but no policy declares this container" in detail
    # Without --namespace every namespace the caller can list is audited: it is there too.
    everywhere = audit(cluster, "-o", "json")
    assert everywhere.returncode == 1, everywhere.stderr
    assert ("uncovered", f"Deployment {edge}/requests-proxy", "proxy") in findings(everywhere)


def test_a_target_whose_workload_runs_another_repository_is_listed(
    cluster: Cluster, edge: str
) -> None:
    mirror = "mirror.example:5000/tracebloc/jobs-manager:prod"
    cluster.apply(deployment("jobs-manager", {"api": mirror}), namespace=edge)
    result = audit(cluster, "--namespace", edge, "-o", "json")
    assert result.returncode == 1, result.stderr
    (found,) = json.loads(result.stdout)
    assert found["kind"] == "other-repository"
    assert found["workload"] == f"Deployment {edge}/jobs-manager"
    assert found["image"] == mirror
    assert (
        "tracks docker.io/tracebloc/jobs-manager, but it runs mirror.example:5000/"
        in (found["detail"])
    )


def test_all_mutable_lists_tags_without_digests_that_no_policy_declares(
    cluster: Cluster, edge: str
) -> None:
    cluster.apply(deployment("web", {"nginx": "nginx:1.27"}), namespace=edge)
    assert audit(cluster, "--namespace", edge).returncode == 0
    result = audit(cluster, "--namespace", edge, "--all-mutable", "-o", "json")
    assert result.returncode == 1, result.stderr
    assert findings(result) == [("mutable", f"Deployment {edge}/web", "nginx")]


def test_no_such_namespace_is_an_error_of_its_own(cluster: Cluster, crd_installed: Cluster) -> None:
    result = audit(cluster, "--namespace", "no-such-namespace-7f3a")
    assert result.returncode == 3
    assert "namespace 'no-such-namespace-7f3a' does not exist" in result.stderr


def test_a_caller_without_rights_is_told_which_permission_is_missing(
    cluster: Cluster, crd_installed: Cluster, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = service_account_kubeconfig(cluster, namespace, "default", tmp_path / "kc")
    result = audit(cluster, "--namespace", namespace, kubeconfig=kubeconfig)
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    assert "list imagerefreshpolicies.images.tracebloc.io in all namespaces" in result.stderr
    assert "forbidden" in result.stderr
    assert "imagerefresh audit needs `list` on imagerefreshpolicies" in result.stderr
