"""`imagerefresh audit`, the real command against the local API server: it lists what no policy
covers and what a policy cannot refresh, and its exit status says so (for CI)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    (line,) = result.stderr.splitlines()
    assert line == (
        "Error: namespace 'no-such-namespace-7f3a' does not exist; check the --namespace value"
    )


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


# --- declared, yet never refreshed ---------------------------------------------------------------


@pytest.fixture
def tenant(cluster: Cluster, namespace: str) -> Iterator[str]:
    """A second namespace, whose policies may reach the first only if the operator allows it."""
    name = f"{namespace[:50]}-tenant"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def cross(name: str, namespace: str, **containers: str) -> dict[str, Any]:
    return {**target(name, **containers), "namespace": namespace}


def test_a_container_two_policies_declare_is_a_conflict_on_both_and_exits_one(
    cluster: Cluster, edge: str
) -> None:
    cluster.apply(policy("second", target("jobs-manager", api=JM)), namespace=edge)
    result = audit(cluster, "--namespace", edge, "-o", "json")
    assert result.returncode == 1, result.stderr
    found = json.loads(result.stdout)
    assert findings(result) == [("conflict", f"Deployment {edge}/jobs-manager", "api")] * 2
    assert {f["detail"] for f in found} == {
        f"container 'api' is declared by policy {edge}/{a} and by {edge}/{b}, so this target is "
        "never refreshed; one container, one policy: remove it from all but one"
        for a, b in (("control-plane", "second"), ("second", "control-plane"))
    }


def test_a_workload_one_policy_targets_twice_after_namespace_defaulting_is_a_conflict(
    cluster: Cluster, edge: str
) -> None:
    twice = policy(
        "control-plane", target("jobs-manager", api=JM), cross("jobs-manager", edge, api=JM)
    )
    cluster.apply(twice, namespace=edge)
    result = audit(cluster, "--namespace", edge, "-o", "json")
    assert result.returncode == 1, result.stderr
    assert findings(result) == [("conflict", f"Deployment {edge}/jobs-manager", "api")] * 2


@pytest.mark.parametrize(("field", "kind"), [("suspend", "suspended"), ("dryRun", "dry-run")])
def test_a_suspended_or_dry_run_policy_covers_nothing(
    cluster: Cluster, edge: str, field: str, kind: str
) -> None:
    paused = policy("control-plane", target("jobs-manager", api=JM), **{field: True})
    cluster.apply(paused, namespace=edge)
    result = audit(cluster, "--namespace", edge, "-o", "json")
    assert result.returncode == 1, result.stderr
    assert findings(result) == [(kind, f"Deployment {edge}/jobs-manager", "api")]


def test_a_locked_target_is_still_covered(cluster: Cluster, edge: str) -> None:
    locked = {
        "kind": "Deployment",
        "namespace": edge,
        "name": "jobs-manager",
        "phase": "Locked",
        "message": "3 failed refreshes; reset it",
        "refreshAttempts": 3,
    }
    cluster.kubectl(
        "patch", "irp", "control-plane", "-n", edge, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"targets": [locked]}}),
    )  # fmt: skip
    assert cluster.get("irp", "control-plane", "-n", edge)["status"]["targets"][0]["phase"] == (
        "Locked"
    )
    result = audit(cluster, "--namespace", edge)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_policy_beyond_its_reach_covers_nothing_until_the_operators_pair_allows_it(
    cluster: Cluster, crd_installed: Cluster, namespace: str, tenant: str
) -> None:
    cluster.apply(
        deployment("jobs-manager", {"api": f"docker.io/tracebloc/jobs-manager@{DIGEST}"}),
        namespace=namespace,
    )
    cluster.apply(policy("reach", cross("jobs-manager", namespace, api=JM)), namespace=tenant)
    both = ("--namespace", namespace, "--namespace", tenant, "-o", "json")
    beyond = audit(cluster, *both)
    assert beyond.returncode == 1, beyond.stderr
    assert findings(beyond) == [("out-of-reach", f"Deployment {namespace}/jobs-manager", "api")]
    (found,) = json.loads(beyond.stdout)
    assert found["detail"] == (
        f"policy {tenant}/reach may not reach namespace {namespace}: the operator's allow-list "
        f"has no pair {tenant}={namespace}, so it is never refreshed; allow the pair in the "
        f"operator's configuration, or declare it in a policy in {namespace}"
    )
    allowed = audit(cluster, *both, "--allow-namespace-pair", f"{tenant}={namespace}")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_a_declaration_beyond_reach_is_no_conflict_for_the_rightful_owner(
    cluster: Cluster, edge: str, tenant: str
) -> None:
    cluster.apply(policy("squatter", cross("jobs-manager", edge, api=JM)), namespace=tenant)
    owner = audit(cluster, "--namespace", edge)
    assert owner.returncode == 0, owner.stdout + owner.stderr
    both = audit(cluster, "--namespace", edge, "--namespace", tenant, "-o", "json")
    assert findings(both) == [("out-of-reach", f"Deployment {edge}/jobs-manager", "api")]
    # Were the pair allowed, the squatter would claim it: a conflict on both.
    allowed = audit(
        cluster, "--namespace", edge, "--allow-namespace-pair", f"{tenant}={edge}", "-o", "json"
    )
    assert allowed.returncode == 1
    assert findings(allowed) == [("conflict", f"Deployment {edge}/jobs-manager", "api")] * 2


@pytest.fixture
def auditor(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for an account that may list policies and workloads everywhere, but may not
    get namespaces: it cannot tell a mistyped namespace from an empty one."""
    name = f"auditor-{namespace}"
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
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
            ],
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
    yield service_account_kubeconfig(cluster, namespace, "default", tmp_path / "auditor")
    cluster.kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found")


def test_a_namespace_it_may_not_look_up_is_never_audited_as_clean(
    cluster: Cluster, edge: str, auditor: Path
) -> None:
    typo = audit(cluster, "--namespace", "tracebloc-typo-3c1f", kubeconfig=auditor)
    assert typo.returncode == 3, typo.stdout + typo.stderr
    assert typo.stdout == ""
    (line,) = typo.stderr.splitlines()
    assert line.startswith(
        "Error: cannot tell whether namespace 'tracebloc-typo-3c1f' exists: get namespace "
        "tracebloc-typo-3c1f: forbidden"
    )
    assert line.endswith(
        "it holds no workload you can list, which is also how a mistyped name looks. Check the "
        "--namespace value, or grant `get` on namespaces to the account you run it as"
    )
    # A workload it can list proves the namespace exists: audited as usual.
    real = audit(cluster, "--namespace", edge, kubeconfig=auditor)
    assert real.returncode == 0, real.stdout + real.stderr
