"""The chart's pre-pull fence on a real API server: the RBAC and the ValidatingAdmissionPolicy
that `prePull.enabled` renders.

The chart is installed with `helm install`, and pods are created with a token of the chart's
ServiceAccount (the operator's identity): the helper pods' exact shape is admitted and can be
deleted; every other shape is refused with the fence's message; only helper pods can be deleted;
another user's pods are not looked at; and without the value the ServiceAccount cannot create a
pod at all. The pods here name a kwok node, so no kubelet ever starts them.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.pods import AlreadyExists, HelperPodApi, HelperRefused
from imagerefresh.models import WorkloadKind
from imagerefresh.planner import TargetKey
from imagerefresh.planner.actions import HelperPodCreate, HelperPodDelete
from imagerefresh.planner.helperpod import Placement, helper_manifest
from imagerefresh.reference import parse

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually
from support.guarded import unguarded_pod
from support.helm_env import CHART, CRD_FROM_THE_TESTS, KWOK_SCHEDULING, helm

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crd_installed")]

RELEASE = "pp"
FULLNAME = f"{RELEASE}-imagerefresh"
FENCE = "imagerefresh pre-pull fence:"
DIGEST = "sha256:" + "9f" * 32
IMAGE = f"registry.example.test:5000/tracebloc/resource-monitor@{DIGEST}"
NODE = "kwok-node-0"
INSTALL_TIMEOUT = "90s"


@dataclass
class Fenced:
    """A release of the chart in `namespace`, its operator's token, and a DaemonSet to own pods."""

    cluster: Cluster
    namespace: str
    kubeconfig: Path
    owner_uid: str

    @property
    def identity(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{FULLNAME}"

    def as_operator(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(
            "--kubeconfig", str(self.kubeconfig), *args, input=input, check=False
        )

    def create_as_operator(self, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.as_operator("create", "-n", self.namespace, "-f", "-", input=json.dumps(pod))

    def helper(self) -> dict[str, Any]:
        return helper_pod(self.owner_uid)


def helper_pod(owner_uid: str, containers: int = 1) -> dict[str, Any]:
    """The one shape the fence admits (the operator's pre-pull helper), with a fresh name."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"imagerefresh-prepull-{secrets.token_hex(5)}",
            "labels": {
                "app.kubernetes.io/managed-by": "imagerefresh",
                "images.tracebloc.io/pre-pull": owner_uid,
            },
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": owner_uid}
            ],
        },
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 600,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": True,
            "imagePullSecrets": [{"name": "regcred"}],
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": f"pull-{i}",
                    "image": IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/imagerefresh-pre-pull"],
                    "resources": {
                        "requests": {"cpu": "1m", "memory": "4Mi"},
                        "limits": {"cpu": "10m", "memory": "16Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
                for i in range(containers)
            ],
        },
    }


def install(cluster: Cluster, namespace: str, values: dict[str, Any]) -> None:
    result = helm(
        "install", RELEASE, str(CHART), "--namespace", namespace, "--wait",
        "--timeout", INSTALL_TIMEOUT,
        values={**KWOK_SCHEDULING, **CRD_FROM_THE_TESTS, **values},
        env=cluster.env,
    )  # fmt: skip
    assert result.returncode == 0, f"helm install failed:\n{result.stderr}"


def make_namespace(cluster: Cluster, purpose: str) -> str:
    name = f"t-pre-pull-{purpose}-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    eventually(
        lambda: cluster.get("serviceaccount", "default", "-n", name),
        timeout=30,
        what=f"ServiceAccount default in {name}",
    )
    return name


def drop_namespace(cluster: Cluster, name: str) -> None:
    helm("uninstall", RELEASE, "--namespace", name, env=cluster.env)
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture(scope="module")
def fenced(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fenced]:
    """The chart installed with prePull.enabled, once for this module's tests."""
    namespace = make_namespace(cluster, "on")
    try:
        install(cluster, namespace, {"prePull": {"enabled": True, "maxDeadlineSeconds": 900}})
        # The helpers' owner, a real one (the garbage collector deletes pods whose owner is
        # gone); it selects no node, so it has no pods of its own.
        cluster.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent"},
                "spec": {
                    "selector": {"matchLabels": {"app": "agent"}},
                    "template": {
                        "metadata": {"labels": {"app": "agent"}},
                        "spec": {
                            "nodeSelector": {"imagerefresh.test/no-such-node": "true"},
                            "containers": [{"name": "agent", "image": IMAGE}],
                        },
                    },
                },
            },
            namespace=namespace,
        )
        uid = cluster.get("daemonset", "agent", "-n", namespace)["metadata"]["uid"]
        path = tmp_path_factory.mktemp("pre-pull") / "operator.kubeconfig"
        yield Fenced(
            cluster,
            namespace,
            service_account_kubeconfig(cluster, namespace, FULLNAME, path),
            uid,
        )
    finally:
        drop_namespace(cluster, namespace)


def test_pre_pull_grants_the_operator_pod_create_and_delete_in_its_namespace_only(
    fenced: Fenced,
) -> None:
    def allowed(*request: str) -> bool:
        answer = fenced.cluster.kubectl(
            "auth", "can-i", *request, "--as", fenced.identity, check=False
        )
        assert answer.stdout.strip() in {"yes", "no"}, answer.stdout + answer.stderr
        return answer.stdout.strip() == "yes"

    assert allowed("create", "pods", "-n", fenced.namespace)
    assert allowed("delete", "pods", "-n", fenced.namespace)
    assert not allowed("create", "pods", "-n", "default")
    # (list and watch on pods are watchEvidence's reads: tests/chart/test_chart_watch_rbac.py.)
    for verb in ("update", "patch", "deletecollection", "get"):
        assert not allowed(verb, "pods", "-n", fenced.namespace), verb
    assert not allowed("create", "pods", "--subresource=exec", "-n", fenced.namespace)
    assert not allowed(
        "create", "pods", "--subresource=ephemeralcontainers", "-n", fenced.namespace
    )
    args = fenced.cluster.get("deployment", FULLNAME, "-n", fenced.namespace)["spec"]["template"][
        "spec"
    ]["containers"][0]["args"]
    assert "--pre-pull-pods" in args


@pytest.mark.parametrize("containers", [1, 16])
def test_pre_pull_helper_of_the_exact_shape_is_admitted_and_deleted_as_the_operator(
    fenced: Fenced, containers: int
) -> None:
    pod = helper_pod(fenced.owner_uid, containers)
    created = fenced.create_as_operator(pod)
    assert created.returncode == 0, created.stderr
    name = pod["metadata"]["name"]
    live = fenced.cluster.get("pod", name, "-n", fenced.namespace)
    # What the API server stored is the helper as sent (mutating admission added no volume).
    assert "volumes" not in live["spec"]
    assert live["spec"]["serviceAccountName"] == "default"
    assert len(live["spec"]["containers"]) == containers
    deleted = fenced.as_operator("delete", "pod", name, "-n", fenced.namespace, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr


def test_the_operator_s_own_helper_passes_its_guard_and_the_fence_and_is_deleted_by_uid(
    fenced: Fenced,
) -> None:
    """What the operator builds (planner.helperpod) is what the fence admits: created and
    deleted through the operator's own adapter, with the chart ServiceAccount's token."""
    workload = fenced.cluster.get("daemonset", "agent", "-n", fenced.namespace)
    placement = Placement.from_api(workload)
    assert placement is not None
    images = [IMAGE, IMAGE.replace("resource-monitor", "pods-monitor")]
    manifest = helper_manifest(fenced.namespace, placement, NODE, images, timedelta(minutes=10))
    key = TargetKey(WorkloadKind.DAEMONSET, fenced.namespace, "agent")
    repositories = frozenset(parse(image).repository for image in images)
    pods = HelperPodApi(KubeApi.from_environment(str(fenced.kubeconfig)))
    pods.create(unguarded_pod(HelperPodCreate(key, NODE, manifest, repositories)))
    (found,) = [
        p
        for p in pods.list(fenced.namespace)
        if p["metadata"]["name"] == manifest["metadata"]["name"]
    ]
    with pytest.raises(AlreadyExists):  # a second create is the same pod, never another
        pods.create(unguarded_pod(HelperPodCreate(key, NODE, manifest, repositories)))
    name, uid = found["metadata"]["name"], found["metadata"]["uid"]
    pods.delete(HelperPodDelete(key, fenced.namespace, name, "not-its-uid"))  # not ours: kept
    assert fenced.cluster.get("pod", name, "-n", fenced.namespace)["metadata"]["uid"] == uid
    pods.delete(HelperPodDelete(key, fenced.namespace, name, uid))
    eventually(
        lambda: name not in {p["metadata"]["name"] for p in pods.list(fenced.namespace)} or None,
        timeout=30,
        what="the helper deleted",
    )


Mutation = Callable[[dict[str, Any]], Any]


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["spec"]["containers"][0])


def _set(path: str, value: Any) -> Mutation:
    """Set a dotted path (`spec.containers.0.image`), creating maps on the way."""

    def mutate(pod: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = pod
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = pod
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[last]

    return mutate


def _init_container(pod: dict[str, Any]) -> None:
    pod["spec"]["initContainers"] = [{**_container(pod), "name": "pull-init"}]


BAD_SHAPES: dict[str, tuple[Mutation, str]] = {
    "image-by-tag": (
        _set("spec.containers.0.image", "registry.example.test/tracebloc/resource-monitor:prod"),
        "pinned by digest alone",
    ),
    "image-by-tag-and-digest": (
        _set("spec.containers.0.image", f"registry.example.test:5000/x:prod@{DIGEST}"),
        "pinned by digest alone",
    ),
    "an-emptydir-volume": (
        _set("spec.volumes", [{"name": "scratch", "emptyDir": {}}]),
        "has no volumes",
    ),
    "a-hostpath-volume": (
        _set("spec.volumes", [{"name": "root", "hostPath": {"path": "/"}}]),
        "has no volumes",
    ),
    "env-from-a-secret": (
        _set(
            "spec.containers.0.env",
            [
                {
                    "name": "TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": "regcred", "key": "token"}},
                }
            ],
        ),
        "no env, envFrom",
    ),
    "envfrom-a-secret": (
        _set("spec.containers.0.envFrom", [{"secretRef": {"name": "regcred"}}]),
        "no env, envFrom",
    ),
    "privileged": (
        # (The API server's own validation refuses privileged with allowPrivilegeEscalation false.)
        lambda pod: pod["spec"]["containers"][0]["securityContext"].update(
            privileged=True, allowPrivilegeEscalation=True
        ),
        "nothing privileged or added",
    ),
    "an-added-capability": (
        _set("spec.containers.0.securityContext.capabilities.add", ["NET_ADMIN"]),
        "nothing privileged or added",
    ),
    "privilege-escalation": (
        _set("spec.containers.0.securityContext.allowPrivilegeEscalation", True),
        "allowPrivilegeEscalation false",
    ),
    "no-owner-reference": (_drop("metadata.ownerReferences"), "exactly one ownerReference"),
    "a-controller-owner-reference": (
        _set("metadata.ownerReferences.0.controller", True),
        "not as its controller",
    ),
    "an-owner-of-another-kind": (
        _set("metadata.ownerReferences.0.kind", "ReplicaSet"),
        "exactly one ownerReference",
    ),
    "no-pre-pull-label": (
        lambda pod: pod["metadata"]["labels"].pop("images.tracebloc.io/pre-pull"),
        "images.tracebloc.io/pre-pull=<the workload's uid>",
    ),
    "no-managed-by-label": (
        lambda pod: pod["metadata"]["labels"].pop("app.kubernetes.io/managed-by"),
        "app.kubernetes.io/managed-by=imagerefresh",
    ),
    "another-name": (_set("metadata.name", "pull-agent-0"), "named imagerefresh-prepull-"),
    "no-node": (_drop("spec.nodeName"), "names its node"),
    "restart-on-failure": (_set("spec.restartPolicy", "OnFailure"), "restartPolicy Never"),
    "no-deadline": (_drop("spec.activeDeadlineSeconds"), "activeDeadlineSeconds from 1 to 900"),
    "a-deadline-above-the-max": (
        _set("spec.activeDeadlineSeconds", 901),
        "activeDeadlineSeconds from 1 to 900",
    ),
    "automount-true": (
        _set("spec.automountServiceAccountToken", True),
        "automountServiceAccountToken false",
    ),
    "automount-unset": (
        _drop("spec.automountServiceAccountToken"),
        "automountServiceAccountToken false",
    ),
    "another-service-account": (
        _set("spec.serviceAccountName", FULLNAME),
        "default ServiceAccount",
    ),
    "a-different-command": (_set("spec.containers.0.command", ["/bin/sh"]), "command ["),
    "no-command": (_drop("spec.containers.0.command"), "command ["),
    "command-and-args": (_set("spec.containers.0.args", ["-c", "id"]), "no args"),
    "an-init-container": (_init_container, "no init or ephemeral containers"),
    "host-pid": (_set("spec.hostPID", True), "no host PID or IPC"),
    "host-ipc": (_set("spec.hostIPC", True), "no host PID or IPC"),
    "a-port": (_set("spec.containers.0.ports", [{"containerPort": 8080}]), "no env, envFrom"),
    "a-probe": (
        _set("spec.containers.0.livenessProbe", {"exec": {"command": ["true"]}}),
        "no lifecycle hooks, probes",
    ),
    "more-memory": (_set("spec.containers.0.resources.limits.memory", "1Gi"), "request cpu 1m"),
    "run-as-root": (_set("spec.securityContext.runAsUser", 0), "runAsUser 65534"),
    "unconfined-seccomp": (
        _set("spec.securityContext.seccompProfile", {"type": "Unconfined"}),
        "seccompProfile RuntimeDefault",
    ),
    "service-links": (_set("spec.enableServiceLinks", True), "enableServiceLinks false"),
    "a-sysctl": (
        _set("spec.securityContext.sysctls", [{"name": "kernel.shm_rmid_forced", "value": "1"}]),
        "securityContext is runAsNonRoot true",
    ),
    "another-user": (_set("spec.securityContext.runAsUser", 1000), "runAsUser 65534"),
    "another-group": (_set("spec.securityContext.runAsGroup", 1000), "runAsGroup 65534"),
    "no-user": (_drop("spec.securityContext.runAsUser"), "runAsUser 65534"),
    "the-root-group-in-a-container": (
        _set("spec.containers.0.securityContext.runAsGroup", 0),
        "runAsGroup 65534, nothing privileged",
    ),
    "an-fs-group-of-root": (
        _set("spec.securityContext.fsGroup", 0),
        "a non-root fsGroup the platform assigns",
    ),
    "supplemental-groups": (
        _set("spec.securityContext.supplementalGroups", [0]),
        "securityContext is runAsNonRoot true",
    ),
    "an-unconfined-selinux-type": (
        _set("spec.securityContext.seLinuxOptions", {"type": "spc_t"}),
        "seLinuxOptions carry a level at most",
    ),
    "an-selinux-user": (
        _set("spec.securityContext.seLinuxOptions", {"user": "system_u", "level": "s0"}),
        "seLinuxOptions carry a level at most",
    ),
    # What the helper never sets: its nodeName places it, its containers' resources size it.
    "a-system-priority-class": (
        _set("spec.priorityClassName", "system-node-critical"),
        "has no priorityClassName",
    ),
    "a-node-selector": (
        _set("spec.nodeSelector", {"kubernetes.io/hostname": NODE}),
        "no nodeSelector, affinity",
    ),
    "a-node-affinity": (
        _set(
            "spec.affinity",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [NODE]}
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        "no nodeSelector, affinity",
    ),
    "a-topology-spread": (
        _set(
            "spec.topologySpreadConstraints",
            [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                }
            ],
        ),
        "no nodeSelector, affinity",
    ),
    "pod-level-resources": (
        _set("spec.resources", {"limits": {"cpu": "100m", "memory": "64Mi"}}),
        "no pod-level resources",
    ),
    "host-users": (_set("spec.hostUsers", True), "does not set hostUsers"),
    "a-dns-config": (
        _set("spec.dnsConfig", {"options": [{"name": "ndots", "value": "1"}]}),
        "no dnsConfig",
    ),
    "another-dns-policy": (_set("spec.dnsPolicy", "Default"), "no dnsConfig"),
    "host-aliases": (
        _set("spec.hostAliases", [{"ip": "127.0.0.2", "hostnames": ["registry"]}]),
        "no dnsConfig",
    ),
    "a-hostname-override": (
        # (The API server's validation refuses one beside hostNetwork.)
        lambda pod: pod["spec"].update(hostNetwork=False, hostnameOverride="node-agent"),
        "no dnsConfig",
    ),
    "a-working-dir": (_set("spec.containers.0.workingDir", "/"), "no workingDir, stdin or tty"),
    "a-tty": (_set("spec.containers.0.tty", True), "no workingDir, stdin or tty"),
    "a-container-as-root": (
        _set("spec.containers.0.securityContext.runAsUser", 0),
        "nothing privileged or added",
    ),
    "another-container-name": (_set("spec.containers.0.name", "agent"), "named pull-0"),
    "pull-always": (_set("spec.containers.0.imagePullPolicy", "Always"), "IfNotPresent"),
    "seventeen-containers": (
        lambda pod: pod["spec"].update(containers=helper_pod("x", 17)["spec"]["containers"]),
        "1 to 16 containers",
    ),
}


@pytest.mark.parametrize("shape", sorted(BAD_SHAPES))
def test_pre_pull_fence_refuses_every_other_shape_with_its_message(
    fenced: Fenced, shape: str
) -> None:
    mutate, expected = BAD_SHAPES[shape]
    pod = copy.deepcopy(fenced.helper())
    mutate(pod)
    refused = fenced.create_as_operator(pod)
    assert refused.returncode != 0, f"{shape}: admitted"
    assert "ValidatingAdmissionPolicy" in refused.stderr, refused.stderr
    assert FENCE in refused.stderr, refused.stderr
    assert expected in refused.stderr, refused.stderr


def test_pre_pull_fence_admits_what_a_platform_adds_a_non_root_fs_group_and_an_selinux_level(
    fenced: Fenced,
) -> None:
    """OpenShift's security context constraints add an fsGroup and an SELinux level (the
    namespace's) to every pod; the fence admits those and nothing more (see BAD_SHAPES)."""
    pod = fenced.helper()
    pod["spec"]["securityContext"].update(
        fsGroup=1_000_650_000, seLinuxOptions={"level": "s0:c26,c5"}
    )
    created = fenced.create_as_operator(pod)
    assert created.returncode == 0, created.stderr
    fenced.as_operator("delete", "pod", pod["metadata"]["name"], "-n", fenced.namespace)


def test_a_clusters_default_priority_class_is_refused_until_named_then_admitted_alone(
    fenced: Fenced,
) -> None:
    """A globalDefault PriorityClass is put on every pod that names none — the operator's
    helper too, after it left the operator. The fence refuses it, and the operator's adapter
    says which value admits it; with prePull.defaultPriorityClassName that one class is
    admitted, and still no other."""
    cluster, ns = fenced.cluster, fenced.namespace
    name = f"imagerefresh-test-default-{secrets.token_hex(3)}"
    cluster.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
            "globalDefault": True,
        }
    )
    pods = HelperPodApi(KubeApi.from_environment(str(fenced.kubeconfig)))
    workload = cluster.get("daemonset", "agent", "-n", ns)
    placement = Placement.from_api(workload)
    assert placement is not None
    manifest = helper_manifest(ns, placement, NODE, [IMAGE], timedelta(minutes=10))
    key = TargetKey(WorkloadKind.DAEMONSET, ns, "agent")
    create = HelperPodCreate(key, NODE, manifest, frozenset({parse(IMAGE).repository}))
    try:
        with pytest.raises(HelperRefused) as refused:
            pods.create(unguarded_pod(create))
        said = str(refused.value)
        assert "the chart's pre-pull admission policy" in said, said
        assert f"{ns}-{FULLNAME}-pre-pull" in said, said
        assert "prePull.defaultPriorityClassName" in said, said
        upgraded = helm(
            "upgrade", RELEASE, str(CHART), "--namespace", ns, "--reuse-values",
            "--set", f"prePull.defaultPriorityClassName={name}",
            env=cluster.env,
        )  # fmt: skip
        assert upgraded.returncode == 0, upgraded.stderr
        eventually(
            lambda: _admitted(pods, create),
            timeout=30,
            what="the helper admitted with the cluster's default class named",
        )
        stored = cluster.get("pod", manifest["metadata"]["name"], "-n", ns)["spec"]
        assert (stored["priorityClassName"], stored["priority"]) == (name, 1000)
        other = fenced.helper()
        other["spec"]["priorityClassName"] = "system-node-critical"
        still = fenced.create_as_operator(other)
        assert still.returncode != 0
        assert f"has no priorityClassName other than the cluster's default, {name}" in (
            still.stderr
        ), still.stderr
    finally:
        cluster.kubectl("delete", "priorityclass", name, "--ignore-not-found")
        cluster.kubectl("delete", "pod", manifest["metadata"]["name"], "-n", ns,
                        "--ignore-not-found", "--wait=false")  # fmt: skip
        helm(
            "upgrade", RELEASE, str(CHART), "--namespace", ns, "--reuse-values",
            "--set", "prePull.defaultPriorityClassName=", env=cluster.env,
        )  # fmt: skip


def _admitted(pods: HelperPodApi, create: HelperPodCreate) -> bool | None:
    try:
        pods.create(unguarded_pod(create))
    except HelperRefused:
        return None  # the binding's new rule may take a moment to reach the API server
    return True


def test_pre_pull_fence_refuses_a_runtime_class(fenced: Fenced) -> None:
    """(The RuntimeClass admission plugin refuses a class that does not exist, first.)"""
    name = f"imagerefresh-test-{secrets.token_hex(3)}"
    fenced.cluster.apply(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": name},
            "handler": "runc",
        }
    )
    try:
        pod = fenced.helper()
        pod["spec"]["runtimeClassName"] = name
        refused = fenced.create_as_operator(pod)
        assert refused.returncode != 0
        assert f"{FENCE} a helper pod names no runtimeClassName" in refused.stderr, refused.stderr
    finally:
        fenced.cluster.kubectl("delete", "runtimeclass", name, "--ignore-not-found")


def test_pre_pull_fence_lets_the_operator_delete_helper_pods_only(fenced: Fenced) -> None:
    """RBAC's delete cannot be scoped by name; the fence keeps it to the helpers."""
    cluster, ns = fenced.cluster, fenced.namespace
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "someone-elses"},
            "spec": {
                "nodeName": NODE,
                "containers": [{"name": "app", "image": "example.test/a:1"}],
            },
        },
        namespace=ns,
    )
    refused = fenced.as_operator("delete", "pod", "someone-elses", "-n", ns, "--wait=false")
    assert refused.returncode != 0
    assert FENCE in refused.stderr
    assert "named imagerefresh-prepull-" in refused.stderr
    assert cluster.get("pod", "someone-elses", "-n", ns)["metadata"]["name"] == "someone-elses"
    cluster.kubectl("delete", "pod", "someone-elses", "-n", ns, "--wait=false")


def test_pre_pull_fence_does_not_look_at_other_users_pods(fenced: Fenced) -> None:
    """The admin (this test's kubeconfig) and another ServiceAccount with pod rights create
    shapes the fence would refuse; neither is evaluated."""
    cluster, ns = fenced.cluster, fenced.namespace
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-maker"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]}],
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "pod-maker"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pod-maker"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-maker",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "pod-maker", "namespace": ns}],
        },
        namespace=ns,
    )
    for who in ([], ["--as", f"system:serviceaccount:{ns}:pod-maker"]):
        pod = fenced.helper()
        pod["spec"]["containers"][0]["image"] = "example.test/a:latest"
        pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        pod["spec"]["hostPID"] = True
        del pod["metadata"]["ownerReferences"]
        created = cluster.kubectl(
            "create", *who, "-n", ns, "-f", "-", input=json.dumps(pod), check=False
        )
        assert created.returncode == 0, created.stderr
        deleted = cluster.kubectl(
            "delete", *who, "pod", pod["metadata"]["name"], "-n", ns, "--wait=false", check=False
        )
        assert deleted.returncode == 0, deleted.stderr


def test_without_pre_pull_the_operator_cannot_create_pods_and_no_fence_is_installed(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = make_namespace(cluster, "off")
    try:
        install(cluster, namespace, {})
        kubeconfig = service_account_kubeconfig(cluster, namespace, FULLNAME, tmp_path / "k")
        pod = helper_pod("00000000-0000-0000-0000-000000000000")
        refused = cluster.kubectl(
            "--kubeconfig", str(kubeconfig), "create", "-n", namespace, "-f", "-",
            input=json.dumps(pod), check=False,
        )  # fmt: skip
        assert refused.returncode != 0
        assert re.search(r"forbidden: User .* cannot create resource \"pods\"", refused.stderr), (
            refused.stderr
        )
        for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
            found = cluster.kubectl(
                "get", kind, f"{namespace}-{FULLNAME}-pre-pull", "--ignore-not-found", "-o", "name"
            )
            assert found.stdout.strip() == "", found.stdout
        pod = cluster.get("deployment", FULLNAME, "-n", namespace)["spec"]["template"]["spec"]
        assert "--pre-pull-pods" not in pod["containers"][0]["args"]
    finally:
        drop_namespace(cluster, namespace)
