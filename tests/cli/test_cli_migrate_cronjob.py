"""`imagerefresh migrate-cronjob` on an edge rendered as the edge chart renders it (SPEC §10).

The real CLI runs against the local API server; the real operator (`imagerefresh run`) watches
the policy namespace the whole time, so the order of --apply's writes is what keeps a carried
lockout from being lost. Images are pushed to the test registry, which to the CronJob is a
mirror (IMAGE_REGISTRY is not docker.io).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from support.cluster_env import Cluster, eventually
from support.edge import Edge
from support.helm_env import CHART, CRD_FROM_THE_TESTS, helm
from support.operator_env import IMAGEREFRESH, Operator
from support.registry_env import ImagePusher

pytestmark = pytest.mark.cluster

CRONJOB = "r-image-refresh"
POLICY = CRONJOB
WORKLOADS = (
    ("deployment", "r-jobs-manager", False),
    ("deployment", "r-requests-proxy", False),
    ("daemonset", "r-resource-monitor", True),
)


@pytest.fixture(scope="module")
def edge_operator(operator: Operator) -> Iterator[Operator]:
    """The module's operator, allowed to reach the node-agents namespace of each edge."""
    operator.stop()
    operator.extra_args = ("--allow-namespace-pair", "*=*")
    operator.start()
    yield operator
    operator.stop()
    operator.extra_args = ()
    operator.start()


@pytest.fixture
def agents_namespace(cluster: Cluster, policy_namespace: str) -> Iterator[str]:
    name = f"{policy_namespace[:50]}-agents"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(IMAGEREFRESH), "migrate-cronjob", *args],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=120,
        check=False,
    )


def ok(cluster: Cluster, *args: str) -> str:
    done = cli(cluster, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(cluster: Cluster, edge: Edge) -> None:
    cluster.apply(*edge.cronjob_parts(), edge.cronjob(), edge.jobs_manager(), edge.requests_proxy())
    cluster.apply(edge.resource_monitor())
    for kind, name, remote in WORKLOADS:
        ns = edge.node_agents if remote else edge.namespace
        cluster.kubectl("rollout", "status", "-n", ns, f"{kind}/{name}", "--timeout=90s")


def templates(cluster: Cluster, edge: Edge) -> dict[str, tuple[int, dict[str, str]]]:
    """Each workload's generation and container images: what any patch would change."""
    found = {}
    for kind, name, remote in WORKLOADS:
        obj = cluster.get(kind, name, "-n", edge.node_agents if remote else edge.namespace)
        containers = obj["spec"]["template"]["spec"]["containers"]
        found[name] = (obj["metadata"]["generation"], {c["name"]: c["image"] for c in containers})
    return found


def targets(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    status = cluster.get("irp", POLICY, "-n", ns).get("status") or {}
    return {t["name"]: t for t in status.get("targets") or ()}


def cronjob(cluster: Cluster, ns: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.get("cronjob", CRONJOB, "-n", ns)
    return obj


def push_edge(pusher: ImagePusher, ns: str, seed: str) -> dict[str, str]:
    return {
        image: pusher.push(f"{ns}/tracebloc/{image}", "prod", seed=f"{seed}-{image}").digest
        for image in ("jobs-manager", "pods-monitor", "resource-monitor")
    }


def still_running_job(edge: Edge, uid: str) -> dict[str, Any]:
    """A run of the CronJob whose pod is never scheduled (no kwok toleration): it never ends."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "r-image-refresh-29000000",
            "namespace": edge.namespace,
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "CronJob", "name": CRONJOB, "uid": uid}
            ],
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "refresh", "image": "docker.io/bitnami/kubectl:1.31"}],
                }
            }
        },
    }


def test_an_edge_switches_with_one_command_and_the_operator_adopts_it_without_a_rollout(
    edge_operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    agents_namespace: str,
) -> None:
    ns, reg = policy_namespace, edge_operator.registry
    digests = push_edge(pusher, ns, "adopt")
    mirror = f"{reg}/{ns}"
    monitor = f"{mirror}/tracebloc/resource-monitor@{digests['resource-monitor']}"
    edge = Edge(
        release="r",
        namespace=ns,
        node_agents=agents_namespace,
        registry=mirror,
        images={"resource-monitor": monitor},  # the CronJob's `set image` pinned it
        running=digests,
        state={
            "tracebloc.io/refresh-skip-streak": "2",
            "tracebloc.io/last-refreshed-resource-monitor-digest": digests["resource-monitor"],
        },
    )
    render(cluster, edge)
    before = templates(cluster, edge)

    # Dry: prints the policy and the values; changes nothing.
    printed = ok(cluster, f"{ns}/{CRONJOB}")
    policy, values, notes = yaml.safe_load_all(printed.split("# nothing was changed")[0])
    assert policy["metadata"] == {
        "name": POLICY,
        "namespace": ns,
        "annotations": {
            "images.tracebloc.io/migrated-from": f"CronJob/{ns}/{CRONJOB}",
            "images.tracebloc.io/migrated-state": policy["metadata"]["annotations"][
                "images.tracebloc.io/migrated-state"
            ],
        },
    }
    assert [c["image"] for t in policy["spec"]["targets"] for c in t["containers"]] == [
        f"{mirror}/tracebloc/jobs-manager:prod",
        f"{mirror}/tracebloc/pods-monitor:prod",
        f"{mirror}/tracebloc/jobs-manager:prod",
        f"{mirror}/tracebloc/resource-monitor:prod",
    ]
    assert values["allowNamespacePairs"] == [
        {"policyNamespace": ns, "targetNamespace": agents_namespace}
    ]
    assert values["rbac"] == {"pullSecrets": {"names": ["tracebloc-regcred"]}}
    assert notes is None  # the notes are YAML comments
    assert "a mirror" in printed
    assert "`imageRefresh.suspend: true`" in printed
    assert "not `imageRefresh.enabled: false`" in printed
    assert cluster.kubectl("get", "irp", POLICY, "-n", ns, check=False).returncode != 0
    assert cronjob(cluster, ns)["spec"].get("suspend") is not True

    # A refresh Job still running: --apply suspends the CronJob, waits, and stops.
    uid = cronjob(cluster, ns)["metadata"]["uid"]
    cluster.apply(still_running_job(edge, uid))
    stopped = cli(cluster, f"{ns}/{CRONJOB}", "--apply", "--job-wait", "1")
    assert stopped.returncode == 1
    assert "r-image-refresh-29000000" in stopped.stderr
    assert "still running" in stopped.stderr
    assert cronjob(cluster, ns)["spec"]["suspend"] is True
    assert cluster.kubectl("get", "irp", POLICY, "-n", ns, check=False).returncode != 0
    cluster.kubectl("delete", "job", "r-image-refresh-29000000", "-n", ns, "--wait=true")

    applied = ok(cluster, f"{ns}/{CRONJOB}", "--apply")
    assert "wrote the carried status" in applied
    assert "edge chart: set `imageRefresh.suspend: true`" in applied
    suspended = cronjob(cluster, ns)
    assert suspended["spec"]["suspend"] is True  # suspended, never deleted
    created = cluster.get("irp", POLICY, "-n", ns)
    assert created["spec"].get("suspend") is False
    assert created["metadata"]["annotations"]["images.tracebloc.io/migration"] == "done"

    # The operator takes over: every target Current, adopted — no workload was patched.
    def all_current() -> dict[str, dict[str, Any]] | None:
        edge_operator.tick(ns, POLICY)
        found = targets(cluster, ns)
        return found if {t["phase"] for t in found.values()} == {"Current"} else None

    current = eventually(all_current, timeout=90, what="every migrated target to be Current")
    assert templates(cluster, edge) == before
    assert current["r-resource-monitor"]["lastGood"] == {"tracebloc-resource-monitor": monitor}
    assert current["r-jobs-manager"]["skipStreak"] == 0  # settled: the carried streak ends

    # Idempotent: a second --apply changes nothing and says so.
    version = cluster.get("irp", POLICY, "-n", ns)["metadata"]["generation"]
    again = ok(cluster, f"{ns}/{CRONJOB}", "--apply")
    assert again.startswith("nothing to change")
    assert cluster.get("irp", POLICY, "-n", ns)["metadata"]["generation"] == version
    assert (
        cronjob(cluster, ns)["metadata"]["resourceVersion"]
        == (suspended["metadata"]["resourceVersion"])
    )

    # The operator's chart installed with the printed values adopts the policy --apply made:
    # the same object (uid), its status kept — no second policy, no lost state.
    adopted = helm(
        "install",
        "imagerefresh",
        str(CHART),
        "--namespace",
        ns,
        values={**values, **CRD_FROM_THE_TESTS, "replicaCount": 0},
        env=cluster.env,
    )
    assert adopted.returncode == 0, adopted.stderr
    owned = cluster.get("irp", POLICY, "-n", ns)
    assert owned["metadata"]["uid"] == created["metadata"]["uid"]
    assert owned["metadata"]["annotations"]["meta.helm.sh/release-name"] == "imagerefresh"
    assert {t["name"] for t in owned["status"]["targets"]} == set(current)

    # --revert: the policy goes, the CronJob runs again; the workloads stay as they are.
    reverted = ok(cluster, f"{ns}/{CRONJOB}", "--revert")
    assert "deleted ImageRefreshPolicy" in reverted
    eventually(
        lambda: cluster.kubectl("get", "irp", POLICY, "-n", ns, check=False).returncode != 0,
        timeout=30,
        what="the policy to be deleted",
    )
    resumed = cronjob(cluster, ns)
    assert resumed["spec"]["suspend"] is False
    assert not {
        "images.tracebloc.io/migrated-to",
        "images.tracebloc.io/suspended-by",
    } & set(resumed["metadata"].get("annotations") or {})
    assert templates(cluster, edge) == before
    assert ok(cluster, f"{ns}/{CRONJOB}", "--revert").startswith("nothing to revert")


def test_a_migrated_flap_lockout_keeps_every_target_untouched_until_a_reset(
    edge_operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    agents_namespace: str,
) -> None:
    ns, reg = policy_namespace, edge_operator.registry
    running = push_edge(pusher, ns, "old")
    edge = Edge(
        release="r",
        namespace=ns,
        node_agents=agents_namespace,
        registry=f"{reg}/{ns}",
        running=running,
        state={"tracebloc.io/refresh-flap-detected": "3", "tracebloc.io/refresh-attempt": "3"},
    )
    render(cluster, edge)
    newer = push_edge(pusher, ns, "new")  # every tag moved on: drift everywhere
    before = templates(cluster, edge)

    applied = ok(cluster, f"{ns}/{CRONJOB}", "--apply")
    assert "every target Locked, as the CronJob was" in applied
    assert f"carried: flap lockout (tracebloc.io/refresh-flap-detected=3 on Deployment {ns}/" in (
        applied
    )
    carried = targets(cluster, ns)
    assert set(carried) == {"r-jobs-manager", "r-requests-proxy", "r-resource-monitor"}
    for status in carried.values():
        assert status["refreshAttempts"] == 3
        assert status["lockedAt"]

    for _ in range(2):  # the operator's ticks: Locked, nothing patched
        edge_operator.tick(ns, POLICY)
        assert {t["phase"] for t in targets(cluster, ns).values()} == {"Locked"}
    assert templates(cluster, edge) == before

    reset = subprocess.run(
        [str(IMAGEREFRESH), "reset", f"{ns}/{POLICY}"],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
        check=True,
    )
    assert "reset requested" in reset.stdout

    def refreshed() -> bool:
        edge_operator.tick(ns, POLICY)
        images = templates(cluster, edge)["r-jobs-manager"][1]
        return images["api"].endswith(newer["jobs-manager"])

    eventually(refreshed, timeout=90, what="the reset to let the refresh through")
