"""The local control plane behaves like a real cluster where the operator's tests rely on it.

Workloads roll (and stall) by kubectl's own rules on kwok's fake nodes; pods report imageIDs the
way a containerd kubelet does (see e2e/README.md for the kwok annotations); the API server
computes QoS classes, enforces RBAC and serves CRDs with schema validation. Every wait is a
bounded poll; nothing sleeps a fixed time.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.cluster_env import Cluster, eventually

pytestmark = pytest.mark.cluster

NEVER_READY = "imagerefresh.test/never-ready"
IMAGE_ID = "imagerefresh.test/image-id."
DIGEST_A = "sha256:" + "a1" * 32
DIGEST_B = "sha256:" + "b2" * 32
ROLLOUT_TIMEOUT = "60s"


# ---------------------------------------------------------------------------------------------
# Manifests


def pod_spec(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A pod spec that lands on kwok's fake nodes (their taint tolerated, their label selected)."""
    return {
        "containers": list(containers),
        "nodeSelector": {"type": "kwok"},
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "terminationGracePeriodSeconds": 0,
        **extra,
    }


def container(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


def template(
    app: str, spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}, "annotations": annotations or {}},
        "spec": spec,
    }


def deployment(
    name: str,
    image: str,
    *,
    replicas: int = 2,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": template(name, pod_spec(container("app", image)), annotations),
            **spec,
        },
    }


# ---------------------------------------------------------------------------------------------
# Reading state back


def pods(cluster: Cluster, namespace: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", namespace, "-l", f"app={app}")["items"]
    return items


def live_pods(cluster: Cluster, namespace: str, app: str) -> list[dict[str, Any]]:
    return [p for p in pods(cluster, namespace, app) if "deletionTimestamp" not in p["metadata"]]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            found: dict[str, Any] = c
            return found
    return None


def is_ready(pod: dict[str, Any]) -> bool:
    ready = condition(pod, "Ready")
    statuses = pod["status"].get("containerStatuses", [])
    return (
        pod["status"].get("phase") == "Running"
        and ready is not None
        and ready["status"] == "True"
        and (c := condition(pod, "ContainersReady")) is not None
        and c["status"] == "True"
        and len(statuses) == len(pod["spec"]["containers"])
        and all(s["ready"] for s in statuses)
    )


def kwok_nodes(cluster: Cluster) -> set[str]:
    nodes = cluster.get("nodes", "-l", "type=kwok")["items"]
    return {
        n["metadata"]["name"]
        for n in nodes
        if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"
    }


def rollout_status(
    cluster: Cluster, namespace: str, ref: str, timeout: str = ROLLOUT_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(
        "rollout", "status", ref, "-n", namespace, f"--timeout={timeout}", check=False
    )


def assert_rolled_out(cluster: Cluster, namespace: str, ref: str) -> None:
    proc = rollout_status(cluster, namespace, ref)
    assert proc.returncode == 0, f"rollout status {ref}: {proc.stderr}{proc.stdout}"


def pods_all_on_image(
    cluster: Cluster, namespace: str, app: str, image: str, count: int
) -> list[dict[str, Any]] | None:
    """The app's pods once exactly `count` exist, all Ready and on `image` (old ones gone)."""
    current = pods(cluster, namespace, app)
    if len(current) != count:
        return None
    if all(p["spec"]["containers"][0]["image"] == image and is_ready(p) for p in current):
        return current
    return None


# ---------------------------------------------------------------------------------------------
# Deployments


def test_deployment_rolls_out_on_kwok_nodes_and_again_after_an_image_change(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(deployment("web", "example.test/web:1", replicas=3), namespace=namespace)
    assert_rolled_out(cluster, namespace, "deployment/web")

    dep = cluster.get("deployment", "web", "-n", namespace)
    assert dep["status"]["observedGeneration"] == dep["metadata"]["generation"]
    assert dep["status"]["readyReplicas"] == 3
    first = pods(cluster, namespace, "web")
    assert len(first) == 3
    assert all(is_ready(p) for p in first)
    assert {p["spec"]["nodeName"] for p in first} <= kwok_nodes(cluster)
    (old_rs,) = cluster.get("replicasets", "-n", namespace, "-l", "app=web")["items"]

    cluster.kubectl("set", "image", "deployment/web", "app=example.test/web:2", "-n", namespace)
    assert_rolled_out(cluster, namespace, "deployment/web")

    dep = cluster.get("deployment", "web", "-n", namespace)
    assert dep["metadata"]["generation"] == 2
    assert dep["status"]["observedGeneration"] == 2
    assert dep["status"]["updatedReplicas"] == dep["status"]["availableReplicas"] == 3
    sets = {
        rs["metadata"]["name"]: rs
        for rs in cluster.get("replicasets", "-n", namespace, "-l", "app=web")["items"]
    }
    assert len(sets) == 2
    assert sets[old_rs["metadata"]["name"]]["spec"]["replicas"] == 0
    (new_rs,) = (rs for name, rs in sets.items() if name != old_rs["metadata"]["name"])
    assert new_rs["spec"]["template"]["spec"]["containers"][0]["image"] == "example.test/web:2"
    assert new_rs["status"]["readyReplicas"] == 3
    eventually(
        lambda: pods_all_on_image(cluster, namespace, "web", "example.test/web:2", 3),
        timeout=30,
        what="3 Ready pods on example.test/web:2 and the old ones gone",
    )


def test_rollout_to_never_ready_pods_stalls_while_old_pods_keep_serving(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(deployment("api", "example.test/api:1", replicas=2), namespace=namespace)
    assert_rolled_out(cluster, namespace, "deployment/api")

    bad_template = {
        "metadata": {"annotations": {NEVER_READY: "true"}},
        "spec": {"containers": [container("app", "example.test/api:2")]},
    }
    cluster.kubectl(
        "patch", "deployment", "api", "-n", namespace, "--type=strategic",
        "-p", json.dumps({"spec": {"template": bad_template}}),
    )  # fmt: skip

    stalled = rollout_status(cluster, namespace, "deployment/api", timeout="5s")
    assert stalled.returncode != 0
    assert "timed out" in stalled.stderr, stalled.stderr

    def new_pod_running_unready() -> dict[str, Any] | None:
        new = [
            p
            for p in live_pods(cluster, namespace, "api")
            if p["spec"]["containers"][0]["image"] == "example.test/api:2"
        ]
        if len(new) == 1 and new[0]["status"].get("phase") == "Running":
            return new[0]
        return None

    pod = eventually(new_pod_running_unready, timeout=30, what="the new pod Running")
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is False
    assert "running" in status["state"]
    for kind in ("Ready", "ContainersReady"):
        cond = condition(pod, kind)
        assert cond is not None
        assert cond["status"] == "False", cond
    assert not is_ready(pod)

    old = [
        p
        for p in live_pods(cluster, namespace, "api")
        if p["spec"]["containers"][0]["image"] == "example.test/api:1"
    ]
    assert len(old) == 2
    assert all(is_ready(p) for p in old)
    dep = cluster.get("deployment", "api", "-n", namespace)
    assert dep["status"]["observedGeneration"] == dep["metadata"]["generation"]
    assert dep["status"]["updatedReplicas"] == 1
    assert dep["status"]["availableReplicas"] == 2
    assert dep["status"].get("unavailableReplicas") == 1
    # Still stalled a little later: kwok never turns such a pod Ready.
    assert rollout_status(cluster, namespace, "deployment/api", timeout="2s").returncode != 0
    assert not is_ready(cluster.get("pod", pod["metadata"]["name"], "-n", namespace))


def test_never_ready_deployment_reports_progress_deadline_exceeded(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        deployment(
            "stuck",
            "example.test/stuck:1",
            replicas=1,
            annotations={NEVER_READY: "true"},
            progressDeadlineSeconds=5,
        ),
        namespace=namespace,
    )

    def deadline_exceeded() -> dict[str, Any] | None:
        dep = cluster.get("deployment", "stuck", "-n", namespace)
        progressing = condition(dep, "Progressing")
        if progressing and progressing["reason"] == "ProgressDeadlineExceeded":
            return progressing
        return None

    progressing = eventually(deadline_exceeded, timeout=45, what="ProgressDeadlineExceeded")
    assert progressing["status"] == "False"

    failed = rollout_status(cluster, namespace, "deployment/stuck", timeout="20s")
    assert failed.returncode != 0
    assert "exceeded its progress deadline" in failed.stderr, failed.stderr
    (pod,) = live_pods(cluster, namespace, "stuck")
    assert pod["status"]["phase"] == "Running"
    assert not is_ready(pod)


# ---------------------------------------------------------------------------------------------
# DaemonSets and StatefulSets


def test_daemonset_covers_every_kwok_node_and_rolls_after_an_image_change(
    cluster: Cluster, namespace: str
) -> None:
    nodes = kwok_nodes(cluster)
    assert nodes
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "updateStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "100%"},
                },
                "template": template("agent", pod_spec(container("agent", "example.test/agent:1"))),
            },
        },
        namespace=namespace,
    )
    assert_rolled_out(cluster, namespace, "daemonset/agent")
    ds = cluster.get("daemonset", "agent", "-n", namespace)
    assert ds["status"]["desiredNumberScheduled"] == len(nodes)
    assert ds["status"]["numberReady"] == len(nodes)
    assert {p["spec"]["nodeName"] for p in live_pods(cluster, namespace, "agent")} == nodes

    cluster.kubectl(
        "set", "image", "daemonset/agent", "agent=example.test/agent:2", "-n", namespace
    )
    assert_rolled_out(cluster, namespace, "daemonset/agent")
    rolled = eventually(
        lambda: pods_all_on_image(cluster, namespace, "agent", "example.test/agent:2", len(nodes)),
        timeout=30,
        what="one Ready example.test/agent:2 pod per node",
    )
    assert {p["spec"]["nodeName"] for p in rolled} == nodes


def test_statefulset_rolls_after_an_image_change(cluster: Cluster, namespace: str) -> None:
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "replicas": 2,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "db"}},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": template("db", pod_spec(container("db", "example.test/db:1"))),
            },
        },
        namespace=namespace,
    )
    assert_rolled_out(cluster, namespace, "statefulset/db")

    cluster.kubectl("set", "image", "statefulset/db", "db=example.test/db:2", "-n", namespace)
    assert_rolled_out(cluster, namespace, "statefulset/db")
    rolled = eventually(
        lambda: pods_all_on_image(cluster, namespace, "db", "example.test/db:2", 2),
        timeout=30,
        what="both StatefulSet pods Ready on example.test/db:2",
    )
    assert sorted(p["metadata"]["name"] for p in rolled) == ["db-0", "db-1"]
    sts = cluster.get("statefulset", "db", "-n", namespace)
    assert sts["status"]["observedGeneration"] == sts["metadata"]["generation"]
    assert sts["status"]["updatedReplicas"] == 2


# ---------------------------------------------------------------------------------------------
# What kwok reports as the kubelet


def ready_pod(cluster: Cluster, namespace: str, app: str) -> dict[str, Any]:
    assert_rolled_out(cluster, namespace, f"deployment/{app}")
    (pod,) = live_pods(cluster, namespace, app)
    assert is_ready(pod)
    return pod


def statuses_by_name(pod: dict[str, Any], key: str = "containerStatuses") -> dict[str, Any]:
    return {s["name"]: s for s in pod["status"].get(key, [])}


def test_pod_from_a_digest_image_reports_that_image_as_image_id(
    cluster: Cluster, namespace: str
) -> None:
    image = f"example.test/pinned@{DIGEST_A}"
    init_image = f"example.test/setup@{DIGEST_B}"
    dep = deployment("pinned", image, replicas=1)
    dep["spec"]["template"]["spec"]["initContainers"] = [container("setup", init_image)]
    cluster.apply(dep, namespace=namespace)

    pod = ready_pod(cluster, namespace, "pinned")
    app = statuses_by_name(pod)["app"]
    assert app["image"] == image
    assert app["imageID"] == image
    setup = statuses_by_name(pod, "initContainerStatuses")["setup"]
    assert setup["imageID"] == init_image
    assert setup["state"]["terminated"]["reason"] == "Completed"


def test_image_id_annotation_on_the_template_is_reported_for_a_tagged_image(
    cluster: Cluster, namespace: str
) -> None:
    resolved = f"example.test/tagged@{DIGEST_B}"
    dep = deployment(
        "tagged", "example.test/tagged:1.0", replicas=1, annotations={f"{IMAGE_ID}app": resolved}
    )
    # A second container without an annotation: its imageID stays unknown (empty).
    dep["spec"]["template"]["spec"]["containers"].append(
        container("sidecar", "example.test/sidecar:latest")
    )
    cluster.apply(dep, namespace=namespace)

    pod = ready_pod(cluster, namespace, "tagged")
    statuses = statuses_by_name(pod)
    assert statuses["app"]["image"] == "example.test/tagged:1.0"
    assert statuses["app"]["imageID"] == resolved
    assert statuses["sidecar"]["image"] == "example.test/sidecar:latest"
    assert statuses["sidecar"]["imageID"] == ""


# ---------------------------------------------------------------------------------------------
# The API server's own behaviour


def test_api_server_computes_qos_class_from_requests_and_limits(
    cluster: Cluster, namespace: str
) -> None:
    equal = {"cpu": "100m", "memory": "64Mi"}

    def pod(name: str, *resources: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": pod_spec(
                *(
                    container(f"c{i}", "example.test/qos:1", resources=r)
                    for i, r in enumerate(resources)
                )
            ),
        }

    cluster.apply(
        pod("guaranteed", {"requests": equal, "limits": equal}, {"limits": equal}),
        pod(
            "burstable",
            {"requests": equal, "limits": {"cpu": "200m", "memory": "128Mi"}},
            {"requests": equal, "limits": equal},
        ),
        pod("besteffort", {}),
        namespace=namespace,
    )
    qos = {
        name: cluster.get("pod", name, "-n", namespace)["status"]["qosClass"]
        for name in ("guaranteed", "burstable", "besteffort")
    }
    assert qos == {"guaranteed": "Guaranteed", "burstable": "Burstable", "besteffort": "BestEffort"}


def test_rbac_resource_names_allow_patching_one_deployment_and_forbid_another(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        deployment("allowed", "example.test/app:1", replicas=0),
        deployment("other", "example.test/app:1", replicas=0),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "refresher"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "patch-allowed"},
            "rules": [
                {
                    "apiGroups": ["apps"],
                    "resources": ["deployments"],
                    "resourceNames": ["allowed"],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "refresher-patch-allowed"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "patch-allowed",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "refresher", "namespace": namespace}],
        },
        namespace=namespace,
    )
    as_sa = f"--as=system:serviceaccount:{namespace}:refresher"

    def can(verb: str, what: str) -> bool:
        proc = cluster.kubectl("auth", "can-i", verb, what, "-n", namespace, as_sa, check=False)
        return proc.stdout.strip() == "yes"

    # The authorizer sees the new binding once its informer has it.
    eventually(lambda: can("patch", "deployment/allowed"), timeout=15, what="the RoleBinding")
    assert not can("patch", "deployment/other")
    assert not can("get", "deployment/other")
    assert can("get", "deployment/allowed")
    assert not can("list", "deployments")

    patch = json.dumps({"metadata": {"annotations": {"imagerefresh.test/touched": "yes"}}})
    cluster.kubectl(
        "patch", "deployment", "allowed", "-n", namespace, as_sa, "--type=merge", "-p", patch
    )
    denied = cluster.kubectl(
        "patch", "deployment", "other", "-n", namespace, as_sa, "--type=merge", "-p", patch,
        check=False,
    )  # fmt: skip
    assert denied.returncode != 0
    # (kubectl reads the object before patching, so the refusal names the first verb denied.)
    assert "Error from server (Forbidden)" in denied.stderr, denied.stderr
    assert 'deployments.apps "other" is forbidden' in denied.stderr, denied.stderr
    assert f"system:serviceaccount:{namespace}:refresher" in denied.stderr, denied.stderr

    annotations = {
        name: cluster.get("deployment", name, "-n", namespace)["metadata"].get("annotations", {})
        for name in ("allowed", "other")
    }
    assert annotations["allowed"].get("imagerefresh.test/touched") == "yes"
    assert "imagerefresh.test/touched" not in annotations["other"]


def test_crd_applied_from_a_file_is_served_and_its_schema_rejects_a_bad_object(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    group = f"e2e{secrets.token_hex(4)}.imagerefresh.test"
    crd_name = f"widgets.{group}"
    crd_file = tmp_path / "crd.yaml"
    crd_file.write_text(
        f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {crd_name}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            required: [image]
            properties:
              image: {{type: string, minLength: 1}}
              replicas: {{type: integer, minimum: 1, maximum: 10}}
"""
    )
    cluster.kubectl("apply", "-f", str(crd_file))
    try:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd_name}", "--timeout=30s")

        def widget(name: str, spec: dict[str, Any]) -> str:
            return json.dumps(
                {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name},
                 "spec": spec}
            )  # fmt: skip

        good = widget("good", {"image": "example.test/app:1", "replicas": 2})
        # Discovery of the new group may lag the Established condition by a moment.
        eventually(
            lambda: cluster.kubectl("apply", "-n", namespace, "-f", "-", input=good),
            timeout=20,
            what="the Widget kind to be served",
        )
        served = cluster.get(f"widgets.{group}", "good", "-n", namespace)
        assert served["spec"] == {"image": "example.test/app:1", "replicas": 2}

        bad = widget("bad", {"replicas": 0})
        rejected = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=bad, check=False)
        assert rejected.returncode != 0
        assert "spec.replicas" in rejected.stderr, rejected.stderr
        assert "spec.image: Required value" in rejected.stderr, rejected.stderr
        missing = cluster.kubectl(
            "get", f"widgets.{group}", "bad", "-n", namespace, "--ignore-not-found", "-o", "name"
        )
        assert missing.stdout.strip() == ""
    finally:
        cluster.kubectl("delete", "-f", str(crd_file), "--wait=false", "--ignore-not-found")
