"""KubeApi against a real API server: what it reads, what it writes, how it fails.

Everything here runs against the local control plane (RBAC on, the ServiceAccount admission
plugin, the Deployment controller, kwok nodes). Permission failures are real 403s, obtained by
impersonating ServiceAccounts that lack the right; nothing is mocked. Waits are bounded polls.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest

from imagerefresh.credentials import credentials_for
from imagerefresh.kube import (
    Forbidden,
    KubeApi,
    KubeUnavailable,
    PreconditionFailed,
    ResourceConflict,
)
from imagerefresh.kube.kubeconfig import from_kubeconfig
from imagerefresh.kube.login import TOKEN_REREAD_SECONDS, Login, read_token
from imagerefresh.kube.transport import Connection
from imagerefresh.models import WorkloadKind
from imagerefresh.planner.actions import ImageChange, ImagePatch, PatchPurpose
from imagerefresh.planner.evidence import ObservedPod, TargetKey, Workload
from imagerefresh.reference import parse

from support.accounts import impersonating as acting_as
from support.cluster_env import Cluster, eventually
from support.guarded import unguarded

TIMEOUT = 30.0

Json = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Fixtures and manifests


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[KubeApi]:
    kube = KubeApi.from_environment(cluster.kubeconfig)
    yield kube
    kube.close()


@pytest.fixture(scope="module")
def crd(crd_installed: Cluster) -> Cluster:
    """The project's CRD, installed once (support/operator_env.py)."""
    return crd_installed


def impersonating(cluster: Cluster, namespace: str, account: str) -> KubeApi:
    """A KubeApi that acts as ServiceAccount ``namespace/account`` (admin impersonates it)."""
    return acting_as(cluster.kubeconfig, f"system:serviceaccount:{namespace}:{account}")


def pod_spec(*containers: Json, **extra: Any) -> Json:
    """Lands on kwok's fake nodes (their taint tolerated, their label selected)."""
    return {
        "containers": list(containers),
        "nodeSelector": {"type": "kwok"},
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "terminationGracePeriodSeconds": 0,
        **extra,
    }


def workload(kind: str, name: str, spec: Json, *, replicas: int = 1, **extra: Any) -> Json:
    body: Json = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        **extra,
    }
    if kind != "DaemonSet":
        body["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": body}


def naked_pod(name: str, labels: dict[str, str], spec: Json | None = None) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec or pod_spec({"name": "c", "image": "busybox:1"}),
    }


def docker_secret(name: str, auths: dict[str, tuple[str, str]], *, legacy: bool = False) -> Json:
    entries = {
        server: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
        for server, (user, password) in auths.items()
    }
    document: Json = entries if legacy else {"auths": entries}
    kind, key = (
        ("kubernetes.io/dockercfg", ".dockercfg")
        if legacy
        else ("kubernetes.io/dockerconfigjson", ".dockerconfigjson")
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": kind,
        "data": {key: base64.b64encode(json.dumps(document).encode()).decode()},
    }


def policy(name: str) -> Json:
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": name, "annotations": {"team": "edge"}},
        "spec": {
            "targets": [
                {
                    "kind": "Deployment",
                    "name": "jobs-manager",
                    "containers": [{"name": "api", "image": "tracebloc/jobs-manager:prod"}],
                }
            ]
        },
    }


def template_images(obj: Json) -> dict[str, str]:
    spec = obj["spec"]["template"]["spec"]
    return {c["name"]: c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]]}


def assert_untouched_by_us(now: Json, before: Json) -> None:
    """The spec is as ``before`` (status may move: the controller writes it) and we never wrote."""
    assert now["spec"] == before["spec"]
    assert now["metadata"]["generation"] == before["metadata"]["generation"]
    managers = {entry["manager"] for entry in now["metadata"]["managedFields"]}
    assert "imagerefresh" not in managers


def change(live: Workload, container: str, image: str, *, expected: str | None = None) -> Any:
    current = live.containers[container]
    tracked = parse(image).repository  # the adapter's tests write within one repository
    return ImageChange(container, current.json_path, expected or current.image, image, tracked)


# ---------------------------------------------------------------------------------------------
# Workloads and pods


def test_read_workload_returns_camelcase_api_json_for_each_kind(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    spec = pod_spec(
        {"name": "app", "image": "nginx:1", "imagePullPolicy": "IfNotPresent"},
        initContainers=[{"name": "setup", "image": "busybox:1"}],
    )
    cluster.apply(
        workload("Deployment", "deploy", spec),
        workload("DaemonSet", "daemon", spec),
        workload("StatefulSet", "stateful", spec, serviceName="stateful"),
        namespace=namespace,
    )
    for kind, name in (
        ("Deployment", "deploy"),
        ("DaemonSet", "daemon"),
        ("StatefulSet", "stateful"),
    ):
        obj = api.read_workload(kind, namespace, name)
        assert obj is not None
        assert (obj["kind"], obj["apiVersion"]) == (kind, "apps/v1")
        template = obj["spec"]["template"]["spec"]
        assert template["terminationGracePeriodSeconds"] == 0  # camelCase, as served
        assert template["containers"][0]["imagePullPolicy"] == "IfNotPresent"
        assert obj["metadata"]["resourceVersion"]
        parsed = Workload.from_api(obj)
        assert parsed.key == TargetKey(WorkloadKind(kind), namespace, name)
        assert parsed.containers["setup"].json_path == "/spec/template/spec/initContainers/0"
        assert parsed.containers["app"].image == "nginx:1"


def test_read_workload_of_a_missing_workload_or_namespace_is_none(
    api: KubeApi, namespace: str
) -> None:
    assert api.read_workload("Deployment", namespace, "absent") is None
    assert api.read_workload("StatefulSet", f"{namespace}-gone", "absent") is None


def test_list_pods_by_match_labels_returns_exactly_the_workloads_pods(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        workload("Deployment", "web", pod_spec({"name": "app", "image": "nginx:1"}), replicas=2),
        naked_pod("decoy", {"app": "webby"}),
        naked_pod("unlabelled", {}),
        namespace=namespace,
    )

    def owned() -> set[str] | None:
        pods = cluster.get("pods", "-n", namespace)["items"]
        names = {
            p["metadata"]["name"]
            for p in pods
            if any(o["kind"] == "ReplicaSet" for o in p["metadata"].get("ownerReferences", []))
        }
        return names if len(names) == 2 else None

    expected = eventually(owned, timeout=TIMEOUT, what="the Deployment's two pods")
    obj = api.read_workload("Deployment", namespace, "web")
    assert obj is not None
    pods = api.list_pods(namespace, obj["spec"]["selector"])
    assert {p["metadata"]["name"] for p in pods} == expected
    assert all(p["kind"] == "Pod" and p["apiVersion"] == "v1" for p in pods)
    assert all("containerStatuses" in p["status"] or "phase" in p["status"] for p in pods)
    assert {ObservedPod.from_api(p).name for p in pods} == expected


def test_list_pods_by_match_expressions_honours_every_operator(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    selector = {
        "matchLabels": {"app": "api"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["web", "api"]},
            {"key": "track", "operator": "NotIn", "values": ["canary"]},
            {"key": "team", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    labels = {"app": "api", "tier": "web", "track": "stable", "team": "edge"}
    deployment = workload("Deployment", "api", pod_spec({"name": "app", "image": "nginx:1"}))
    deployment["spec"]["selector"] = selector
    deployment["spec"]["template"]["metadata"]["labels"] = labels
    cluster.apply(
        deployment,
        naked_pod("other-tier", {**labels, "tier": "db"}),
        naked_pod("canary", {**labels, "track": "canary"}),
        naked_pod("no-team", {k: v for k, v in labels.items() if k != "team"}),
        naked_pod("legacy", {**labels, "legacy": "yes"}),
        namespace=namespace,
    )

    def deployment_pod() -> list[Json] | None:
        pods = api.list_pods(namespace, selector)
        return pods if len(pods) == 1 else None

    (pod,) = eventually(deployment_pod, timeout=TIMEOUT, what="the Deployment's pod")
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert labels.items() <= pod["metadata"]["labels"].items()
    decoys = {p["metadata"]["name"] for p in cluster.get("pods", "-n", namespace)["items"]}
    assert {"other-tier", "canary", "no-team", "legacy"} <= decoys  # they exist, unselected


# ---------------------------------------------------------------------------------------------
# Pull secrets


def test_pull_secrets_of_the_template_come_in_order_with_docker_hub_aliases(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        docker_secret("hub", {"https://index.docker.io/v1/": ("first", "p1")}),
        docker_secret(
            "legacy",
            {"registry-1.docker.io": ("second", "p2"), "127.0.0.1:5000": ("local", "p3")},
            legacy=True,
        ),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "opaque"}, "type": "Opaque"},
        namespace=namespace,
    )
    spec = pod_spec(
        {"name": "app", "image": "nginx:1"},
        imagePullSecrets=[
            {"name": "hub"},
            {"name": "ghost"},
            {"name": "opaque"},
            {"name": "legacy"},
        ],
    )

    configs = api.read_pull_secrets(namespace, spec)

    assert [{k: c.username for k, c in config.items()} for config in configs] == [
        {"docker.io": "first"},
        {"docker.io": "second", "127.0.0.1:5000": "local"},
    ]
    for alias in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        found = credentials_for(alias, configs)
        assert found is not None
        assert found.username == "first"
    local = credentials_for("127.0.0.1:5000", configs)
    assert local is not None
    assert local.password == "p3"


def test_pull_secrets_come_from_the_service_account_only_when_the_template_names_none(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    """What the ServiceAccount admission plugin gives a pod is what the kubelet pulls with."""
    cluster.apply(
        docker_secret("own", {"docker.io": ("template-user", "x")}),
        docker_secret("from-sa", {"docker.io": ("sa-user", "y")}),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "builder"},
            "imagePullSecrets": [{"name": "from-sa"}, {"name": "sa-ghost"}],
        },
        namespace=namespace,
    )
    container = {"name": "app", "image": "nginx:1"}
    inherits = pod_spec(container, serviceAccountName="builder")
    names_own = pod_spec(
        container, serviceAccountName="builder", imagePullSecrets=[{"name": "own"}]
    )
    cluster.apply(
        naked_pod("inherits", {}, inherits), naked_pod("own", {}, names_own), namespace=namespace
    )

    for pod, spec, user in (("inherits", inherits, "sa-user"), ("own", names_own, "template-user")):
        admitted = cluster.get("pod", pod, "-n", namespace)["spec"]["imagePullSecrets"]
        configs = api.read_pull_secrets(namespace, spec)
        assert [c["docker.io"].username for c in configs] == [user]
        expected_name = "from-sa" if pod == "inherits" else "own"
        assert admitted[0] == {"name": expected_name}

    # The default ServiceAccount is used when none is named; a missing one has no secrets.
    sa_patch = json.dumps({"imagePullSecrets": [{"name": "from-sa"}]})
    cluster.kubectl("patch", "serviceaccount", "default", "-n", namespace, "-p", sa_patch)
    default = api.read_pull_secrets(namespace, pod_spec(container))
    assert [c["docker.io"].username for c in default] == ["sa-user"]
    assert api.read_pull_secrets(namespace, pod_spec(container, serviceAccountName="nobody")) == []


def test_a_pull_secret_the_operator_may_not_read_raises_forbidden(
    cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        docker_secret("hub", {"docker.io": ("user", "secret-password")}),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "accounts-only"},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "accounts-only",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
        namespace=namespace,
    )
    reader = impersonating(cluster, namespace, "reader")
    spec = pod_spec({"name": "app", "image": "nginx:1"}, imagePullSecrets=[{"name": "hub"}])

    def forbidden() -> Forbidden | None:
        try:
            reader.read_pull_secrets(namespace, spec)
        except Forbidden as error:
            return error
        return None  # RBAC caches may lag a moment behind the new Role

    error = eventually(forbidden, timeout=TIMEOUT, what="a Forbidden secret read")
    assert error.status == 403
    assert f"grant get on secrets in namespace {namespace}" in str(error)
    assert "secret-password" not in str(error)

    # The service account it may read; a nameless one it may not (nobody) fails closed too.
    nobody = impersonating(cluster, namespace, "nobody")
    with pytest.raises(Forbidden, match="grant get on serviceaccounts"):
        nobody.read_pull_secrets(namespace, pod_spec({"name": "app", "image": "nginx:1"}))
    reader.close()
    nobody.close()


# ---------------------------------------------------------------------------------------------
# Image patches


def test_a_guarded_patch_changes_exactly_the_images_and_the_controller_rolls_out(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    spec = pod_spec(
        {"name": "app", "image": "nginx:1"},
        {"name": "sidecar", "image": "redis:7"},
        initContainers=[{"name": "setup", "image": "busybox:1"}],
    )
    cluster.apply(workload("Deployment", "web", spec), namespace=namespace)
    first = eventually(
        lambda: cluster.get("replicasets", "-n", namespace)["items"] or None,
        timeout=TIMEOUT,
        what="the first ReplicaSet",
    )
    before = api.read_workload("Deployment", namespace, "web")
    assert before is not None
    live = Workload.from_api(before)
    digest = "sha256:" + "ab" * 32
    patch = ImagePatch(
        live.key,
        PatchPurpose.REFRESH,
        (
            change(live, "app", f"docker.io/library/nginx@{digest}"),
            change(live, "setup", f"docker.io/library/busybox@{digest}"),
        ),
    )

    patched = api.patch_images(unguarded(patch))

    wanted = {
        "setup": f"docker.io/library/busybox@{digest}",
        "app": f"docker.io/library/nginx@{digest}",
        "sidecar": "redis:7",
    }
    assert template_images(patched) == wanted
    stored = cluster.get("deployment", "web", "-n", namespace, "--show-managed-fields")
    assert template_images(stored) == wanted
    assert stored["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert stored["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 0  # untouched
    assert "imagerefresh" in {entry["manager"] for entry in stored["metadata"]["managedFields"]}

    def new_replicaset() -> Json | None:
        sets = cluster.get("replicasets", "-n", namespace)["items"]
        fresh = [s for s in sets if template_images(s) == wanted]
        return fresh[0] if len(sets) == len(first) + 1 and fresh else None

    eventually(new_replicaset, timeout=TIMEOUT, what="the Deployment controller's new ReplicaSet")


@pytest.mark.parametrize("kind", ["DaemonSet", "StatefulSet"])
def test_patch_images_reaches_daemonsets_and_statefulsets(
    api: KubeApi, cluster: Cluster, namespace: str, kind: str
) -> None:
    extra: Json = {"serviceName": "svc"} if kind == "StatefulSet" else {}
    cluster.apply(
        workload(kind, "agent", pod_spec({"name": "app", "image": "nginx:1"}), **extra),
        namespace=namespace,
    )
    obj = api.read_workload(kind, namespace, "agent")
    assert obj is not None
    live = Workload.from_api(obj)
    api.patch_images(
        unguarded(ImagePatch(live.key, PatchPurpose.ROLLBACK, (change(live, "app", "nginx:2"),)))
    )
    assert template_images(cluster.get(kind.lower(), "agent", "-n", namespace)) == {
        "app": "nginx:2"
    }


def test_a_stale_patch_raises_precondition_failed_and_leaves_the_object_as_kubectl_left_it(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        workload("Deployment", "web", pod_spec({"name": "app", "image": "nginx:1"})),
        namespace=namespace,
    )
    obj = api.read_workload("Deployment", namespace, "web")
    assert obj is not None
    live = Workload.from_api(obj)
    cluster.kubectl("set", "image", "-n", namespace, "deployment/web", "app=nginx:3")
    after_kubectl = cluster.get("deployment", "web", "-n", namespace, "--show-managed-fields")

    with pytest.raises(PreconditionFailed, match="changed since it was read") as raised:
        api.patch_images(
            unguarded(ImagePatch(live.key, PatchPurpose.REFRESH, (change(live, "app", "nginx:9"),)))
        )

    assert raised.value.status == 422
    now = cluster.get("deployment", "web", "-n", namespace, "--show-managed-fields")
    assert template_images(now) == {"app": "nginx:3"}
    assert_untouched_by_us(now, after_kubectl)


def test_test_ops_guard_init_containers_and_container_names_too(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    spec = pod_spec(
        {"name": "app", "image": "nginx:1"},
        {"name": "sidecar", "image": "redis:7"},
        initContainers=[{"name": "setup", "image": "busybox:1"}],
    )
    cluster.apply(workload("Deployment", "web", spec), namespace=namespace)
    obj = api.read_workload("Deployment", namespace, "web")
    assert obj is not None
    live = Workload.from_api(obj)
    cluster.kubectl("set", "image", "-n", namespace, "deployment/web", "setup=busybox:2")
    after_kubectl = cluster.get("deployment", "web", "-n", namespace, "--show-managed-fields")

    # The app change alone would still apply; the stale init container fails the whole patch.
    stale_init = (change(live, "app", "nginx:9"), change(live, "setup", "busybox:9"))
    # A container now at another index: its name no longer matches the path.
    moved = (
        ImageChange(
            "sidecar",
            live.containers["app"].json_path,
            "nginx:1",
            "redis:9",
            parse("redis").repository,
        ),
    )
    for changes in (stale_init, moved):
        with pytest.raises(PreconditionFailed):
            api.patch_images(unguarded(ImagePatch(live.key, PatchPurpose.REFRESH, changes)))

    now = cluster.get("deployment", "web", "-n", namespace, "--show-managed-fields")
    assert template_images(now) == {"setup": "busybox:2", "app": "nginx:1", "sidecar": "redis:7"}
    assert_untouched_by_us(now, after_kubectl)


def test_a_forbidden_patch_names_the_verb_and_resource_to_grant(
    cluster: Cluster, namespace: str, api: KubeApi
) -> None:
    cluster.apply(
        workload("Deployment", "web", pod_spec({"name": "app", "image": "nginx:1"})),
        namespace=namespace,
    )
    obj = api.read_workload("Deployment", namespace, "web")
    assert obj is not None
    live = Workload.from_api(obj)
    outsider = impersonating(cluster, namespace, "default")

    with pytest.raises(Forbidden) as raised:
        outsider.patch_images(
            unguarded(ImagePatch(live.key, PatchPurpose.REFRESH, (change(live, "app", "nginx:2"),)))
        )

    message = str(raised.value)
    assert raised.value.status == 403
    assert f"patch Deployment {namespace}/web" in message
    assert f"grant patch on deployments.apps in namespace {namespace}" in message
    assert "ServiceAccount" in message
    assert template_images(cluster.get("deployment", "web", "-n", namespace)) == {"app": "nginx:1"}
    outsider.close()


# ---------------------------------------------------------------------------------------------
# Policies


def test_read_policy_returns_the_policy_and_none_when_missing(
    api: KubeApi, crd: Cluster, namespace: str
) -> None:
    crd.apply(policy("control-plane"), namespace=namespace)
    read = api.read_policy(namespace, "control-plane")
    assert read is not None
    assert read["kind"] == "ImageRefreshPolicy"
    assert read["apiVersion"] == "images.tracebloc.io/v1alpha1"
    assert read["spec"]["maxSkipTicks"] == 8  # defaults filled by the API server, camelCase
    assert api.read_policy(namespace, "absent") is None


def test_replace_policy_status_writes_the_status_subresource(
    api: KubeApi, crd: Cluster, namespace: str
) -> None:
    crd.apply(policy("control-plane"), namespace=namespace)
    read = api.read_policy(namespace, "control-plane")
    assert read is not None
    status = {
        "observedGeneration": read["metadata"]["generation"],
        "phase": "Current",
        "targetCount": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Current",
                "message": "every target runs its desired digests",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ],
        "targets": [
            {
                "kind": "Deployment",
                "namespace": namespace,
                "name": "jobs-manager",
                "phase": "Current",
            }
        ],
    }

    written = api.replace_policy_status(read, status)

    assert written["status"] == status
    stored = crd.get("irp", "control-plane", "-n", namespace)
    assert stored["status"] == status
    assert stored["spec"] == read["spec"]
    assert stored["metadata"]["generation"] == read["metadata"]["generation"]  # status only


def test_replace_policy_status_with_a_stale_resource_version_raises_resource_conflict(
    api: KubeApi, crd: Cluster, namespace: str
) -> None:
    crd.apply(policy("control-plane"), namespace=namespace)
    stale = api.read_policy(namespace, "control-plane")
    assert stale is not None
    crd.kubectl("annotate", "-n", namespace, "irp/control-plane", "touched=yes")

    with pytest.raises(ResourceConflict, match="read it again") as raised:
        api.replace_policy_status(stale, {"phase": "Error", "targetCount": 1})

    assert raised.value.status == 409
    assert "status" not in crd.get("irp", "control-plane", "-n", namespace)


def test_annotate_policy_sets_one_annotation_and_keeps_the_others(
    api: KubeApi, crd: Cluster, namespace: str
) -> None:
    crd.apply(policy("control-plane"), namespace=namespace)
    api.annotate_policy(namespace, "control-plane", "images.tracebloc.io/reset", "2025-06-01")
    annotations = crd.get("irp", "control-plane", "-n", namespace)["metadata"]["annotations"]
    assert annotations["images.tracebloc.io/reset"] == "2025-06-01"
    assert annotations["team"] == "edge"


# ---------------------------------------------------------------------------------------------
# Events


def events_about(cluster: Cluster, namespace: str, name: str) -> list[Json]:
    items: list[Json] = cluster.get(
        "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return items


def test_post_event_about_a_policy_and_a_deployment_is_visible_to_kubectl(
    api: KubeApi, crd: Cluster, namespace: str
) -> None:
    crd.apply(
        policy("control-plane"),
        workload("Deployment", "web", pod_spec({"name": "app", "image": "nginx:1"})),
        namespace=namespace,
    )
    irp = api.read_policy(namespace, "control-plane")
    deployment = api.read_workload("Deployment", namespace, "web")
    assert irp is not None
    assert deployment is not None

    api.post_event(irp, "Warning", "Frozen", "x" * 3000)
    api.post_event(deployment, "Normal", "Refreshed", "app: nginx:1 → nginx@sha256:…")

    (frozen,) = events_about(crd, namespace, "control-plane")
    assert (frozen["type"], frozen["reason"]) == ("Warning", "Frozen")
    assert len(frozen["message"]) <= 1024
    assert frozen["source"]["component"] == "imagerefresh"
    involved = frozen["involvedObject"]
    assert involved["kind"] == "ImageRefreshPolicy"
    assert involved["apiVersion"] == "images.tracebloc.io/v1alpha1"
    assert involved["uid"] == irp["metadata"]["uid"]
    assert involved["namespace"] == namespace

    refreshed = [e for e in events_about(crd, namespace, "web") if e["reason"] == "Refreshed"]
    assert len(refreshed) == 1
    assert refreshed[0]["type"] == "Normal"
    assert refreshed[0]["involvedObject"]["kind"] == "Deployment"
    assert refreshed[0]["involvedObject"]["uid"] == deployment["metadata"]["uid"]
    assert refreshed[0]["message"] == "app: nginx:1 → nginx@sha256:…"


def test_post_event_never_raises(api: KubeApi, cluster: Cluster, namespace: str) -> None:
    ghost = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": f"{namespace}-does-not-exist"},
    }
    api.post_event(ghost, "Warning", "Missing", "no such namespace")  # 404: logged, swallowed
    outsider = impersonating(cluster, namespace, "default")
    here = {**ghost, "metadata": {"name": "web", "namespace": namespace}}
    outsider.post_event(here, "Warning", "Missing", "may not create events")  # 403: swallowed
    outsider.close()
    assert events_about(cluster, namespace, "web") == []


# ---------------------------------------------------------------------------------------------
# Transport failures


def test_an_unreachable_api_server_is_kube_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    login = Login(kopf.ConnectionInfo(server=f"https://127.0.0.1:{port}"))
    api = KubeApi(Connection(login), timeout=(2.0, 2.0))

    with pytest.raises(KubeUnavailable, match="could not be reached") as raised:
        api.read_workload("Deployment", "default", "web")

    assert raised.value.status is None
    assert "get Deployment default/web" in str(raised.value)
    api.post_event({"kind": "Deployment", "metadata": {"name": "web"}}, "Normal", "X", "y")


def test_a_rotated_token_file_is_read_again_a_minute_later_and_sent(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    # As the kubelet rotates a projected ServiceAccount token: the file changes under us.
    tokens = {}
    for account in ("before", "after"):
        cluster.apply(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
            namespace=namespace,
        )
        tokens[account] = cluster.kubectl("create", "token", account, "-n", namespace).stdout
    token_file = tmp_path / "token"
    token_file.write_text(tokens["before"])
    # The admin's server and CA, without its client certificate: the token alone authenticates.
    admin = from_kubeconfig(cluster.kubeconfig).info()
    base = dataclasses.replace(admin, certificate_data=None, private_key_data=None)
    now = [0.0]
    login = Login(
        base,
        lambda: (read_token(token_file), None),
        reread_seconds=TOKEN_REREAD_SECONDS,
        clock=lambda: now[0],
    )
    api = KubeApi(Connection(login))
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

    def who() -> str:
        answer = api._request("who am I", "POST", path, body=review, gated=False)
        return str(answer["status"]["userInfo"]["username"])

    assert who() == f"system:serviceaccount:{namespace}:before"
    token_file.write_text(tokens["after"])
    now[0] += TOKEN_REREAD_SECONDS - 1
    assert who() == f"system:serviceaccount:{namespace}:before"
    now[0] += 1
    assert who() == f"system:serviceaccount:{namespace}:after"
    api.close()
