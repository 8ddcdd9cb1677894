"""Offline readiness from the nodes' image lists, on the real API server, via `imagerefresh run`.

One Deployment runs a pinned container (its pod proves its node holds it: the kubelet reports
the image ID) and an undeclared sidecar on a tag whose pod reports no image ID — so no pod
proves the sidecar is on the node, and only the node's own ``status.images`` (set here on the
kwok node through the status subresource, as a kubelet posts it) can. Three operators see it:

- with node reads on, the node's list proves the sidecar: the target is offline-ready
  (status, metric); before the node lists it, the verdict says the node lacks it;
- with node reads on but no RBAC to list nodes, the verdict is "could not be listed" — unknown,
  never ready, whatever the node holds — and says what to grant;
- with node reads off (the default), only pods prove anything: "may not read nodes".
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, running_operator
from support.registry_env import ImagePusher
from support.scenario import deployment, policy, target, target_status

pytestmark = pytest.mark.cluster

Hold = Callable[[str, list[str]], None]


@pytest.fixture
def hold(cluster: Cluster) -> Iterator[Hold]:
    """Make a node report holding images (its ``status.images``, as its kubelet posts it);
    every node touched is put back to listing none afterwards."""
    touched: set[str] = set()

    def set_images(node: str, images: list[str]) -> None:
        touched.add(node)
        listed = [{"names": [image], "sizeBytes": 1_000_000} for image in images]
        body = {"status": {"images": listed or None}}
        cluster.kubectl(
            "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(body)
        )

    yield set_images
    for node in touched:
        set_images(node, [])


def app_with_sidecar(
    cluster: Cluster, pusher: ImagePusher, registry: str, ns: str
) -> tuple[str, str]:
    """Deployment `app` (the declared, pinned container and an undeclared sidecar on a tag),
    rolled out, and the policy tracking `app`; the node its pod runs on, and the sidecar."""
    pushed = pusher.push(f"{ns}/app", "prod", seed=f"offline-{secrets.token_hex(3)}")
    sidecar = f"{registry}/{ns}/sidecar:1.0"
    workload = deployment(
        "app", {"app": f"{registry}/{ns}/app@{pushed.digest}", "sidecar": sidecar}, replicas=1
    )
    cluster.apply(
        workload,
        policy("control-plane", target("app", app=f"{registry}/{ns}/app:prod")),
        namespace=ns,
    )
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    (pod,) = cluster.get("pods", "-n", ns, "-l", "app=app")["items"]
    statuses = {c["name"]: c for c in pod["status"]["containerStatuses"]}
    assert statuses["sidecar"]["imageID"] == ""  # the pod proves nothing of the sidecar
    return pod["spec"]["nodeName"], sidecar


def offline_of(operator: Operator, cluster: Cluster, ns: str, *, ready: bool) -> dict[str, Any]:
    """Tick until the target's container reports ``offline.ready == ready``; its offline."""

    def reached() -> dict[str, Any] | None:
        operator.tick(ns, "control-plane")
        (container,) = target_status(cluster, ns, "app")["containers"]
        offline = container.get("offline")
        return offline if offline is not None and offline["ready"] is ready else None

    return eventually(reached, timeout=60, what=f"offline.ready {ready}", interval=0.5)


@pytest.fixture
def node_reader(
    crd_installed: Cluster, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(crd_installed, registry, log, extra_args=("--read-nodes",)) as running:
        yield running


def test_a_nodes_image_list_proves_what_no_pod_there_shows(
    node_reader: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    hold: Hold,
) -> None:
    ns = policy_namespace
    node, sidecar = app_with_sidecar(cluster, pusher, node_reader.registry, ns)
    node_reader.wait_first_tick(ns, "control-plane")
    missing = offline_of(node_reader, cluster, ns, ready=False)
    assert missing["nodes"] == [node]
    assert "the node does not hold the template's images" in missing["reason"]
    labels = {"namespace": ns, "policy": "control-plane", "target": f"{ns}/app"}
    assert node_reader.series(**labels)  # the target's series exist, the offline one among them
    assert node_reader.metric("imagerefresh_target_offline_ready", **labels) == 0
    assert any("imagerefresh_target_offline_ready" in s for s in node_reader.series(**labels))

    hold(node, [sidecar])
    ready = offline_of(node_reader, cluster, ns, ready=True)
    assert ready["reason"] == "every pod would restart from its node's cache"
    assert ready.get("nodes", []) == []
    assert node_reader.metric("imagerefresh_target_offline_ready", **labels) == 1
    (condition,) = [
        c
        for c in cluster.get("irp", "control-plane", "-n", ns)["status"]["conditions"]
        if c["type"] == "OfflineReady"
    ]
    assert condition["status"] == "True"


@pytest.fixture
def forbidden_node_reader(
    crd_installed: Cluster,
    registry: str,
    namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    """An operator with --read-nodes whose identity may do everything it needs but list nodes."""
    account, role = "operator", f"imagerefresh-test-no-nodes-{secrets.token_hex(3)}"
    rules = [
        {"apiGroups": ["images.tracebloc.io"], "resources": ["imagerefreshpolicies"],
         "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["images.tracebloc.io"], "resources": ["imagerefreshpolicies/status"],
         "verbs": ["get", "update", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments", "daemonsets", "statefulsets"],
         "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods", "serviceaccounts", "secrets", "namespaces"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
         "verbs": ["create", "patch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["get", "list", "watch"]},
    ]  # fmt: skip
    crd_installed.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
        namespace=namespace,
    )
    crd_installed.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )
    home = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(crd_installed, namespace, account, home / "kubeconfig")
    identity = f"system:serviceaccount:{namespace}:{account}"
    refused = crd_installed.kubectl("auth", "can-i", "list", "nodes", "--as", identity, check=False)
    assert refused.stdout.strip() == "no"
    args = ("--read-nodes", "--kubeconfig", str(kubeconfig))
    try:
        with running_operator(
            crd_installed, registry, home / "operator.log", extra_args=args
        ) as op:
            yield op
    finally:
        crd_installed.kubectl(
            "delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found"
        )


def test_a_node_list_the_rbac_forbids_is_unknown_and_never_ready(
    forbidden_node_reader: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    hold: Hold,
) -> None:
    ns, operator = policy_namespace, forbidden_node_reader
    node, sidecar = app_with_sidecar(cluster, pusher, operator.registry, ns)
    hold(node, [sidecar])  # the node holds it: only the list being refused keeps it unproven
    operator.wait_first_tick(ns, "control-plane")
    for _ in range(2):
        offline = offline_of(operator, cluster, ns, ready=False)
    assert offline["nodes"] == [node]
    reason = offline["reason"]
    assert "the nodes could not be listed" in reason
    assert "forbidden" in reason
    assert "unknown, not missing" in reason
    assert "offline.readNodes" in reason  # what to grant, or to turn off
    assert target_status(cluster, ns, "app")["phase"] == "Current"  # a report, not a failure


def test_with_node_reads_off_only_pods_prove_what_a_node_holds(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    hold: Hold,
) -> None:
    ns = policy_namespace
    node, sidecar = app_with_sidecar(cluster, pusher, operator.registry, ns)
    hold(node, [sidecar])
    operator.wait_first_tick(ns, "control-plane")
    offline = offline_of(operator, cluster, ns, ready=False)
    assert offline["nodes"] == [node]
    assert "the operator may not read nodes" in offline["reason"]
    assert "enable node reads" in offline["reason"]
