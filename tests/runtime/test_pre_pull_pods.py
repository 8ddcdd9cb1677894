"""prePull on the real API server, via `imagerefresh run --pre-pull-pods` (kwok nodes).

kwok's kubelet reports a container by digest as pulled at once (its image ID), so here the
helper pods prove their nodes at once; what a real kubelet does with them (the pull, the start
that fails, a pull it refuses) is the real node's to prove (tests/e2e/test_real_node.py). What
this proves is the shell: the intent in status before the first pod, one pod per node with the
workload's owner reference and label, the DaemonSet patched only after its helpers were
created, every helper deleted afterwards — also one a crashed operator left behind — and a pod
that merely carries the label never touched.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.reads import read_targets

from support.accounts import audited_kubeconfig, audited_writes
from support.cluster_env import Cluster, eventually
from support.counting import CountingKubeApi
from support.operator_env import Operator, kwok_pod_template, running_operator
from support.prepull import LABEL, PREFIX, agents, helper_pods, template_image
from support.registry_env import ImagePusher
from support.scenario import event_reasons, policy, target, target_status

pytestmark = pytest.mark.cluster

ACCOUNT = "pre-puller"  # the operator's identity: the API server audits its writes


@pytest.fixture(scope="module")
def pre_puller(
    crd_installed: Cluster, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    directory = tmp_path_factory.mktemp("operator")
    kubeconfig = audited_kubeconfig(crd_installed, ACCOUNT, directory / ACCOUNT)
    audited = dataclasses.replace(crd_installed, kubeconfig=str(kubeconfig))
    log = directory / "operator.log"
    with running_operator(audited, registry, log, extra_args=("--pre-pull-pods",)) as op:
        yield op


def writes(cluster: Cluster, ns: str) -> list[tuple[str, str, str]]:
    """(verb, resource, name) of the operator's successful writes of helper pods and of the
    DaemonSet in ``ns``, in the order the API server completed them (its audit log)."""
    return [
        (w.verb, w.resource, w.name)
        for w in audited_writes(cluster, ACCOUNT)
        if w.succeeded
        and w.namespace == ns
        and (w.resource == "daemonsets" or w.name.startswith(PREFIX))
    ]


def test_a_daemonset_is_patched_only_after_a_helper_pod_per_node_and_none_is_left(
    pre_puller: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, pre_puller.registry
    old = pusher.push(f"{ns}/agent", "prod", seed=f"pre-old-{secrets.token_hex(3)}")
    workload = agents(cluster, ns, f"{reg}/{ns}/agent@{old.digest}")
    scheduled = workload["status"]["desiredNumberScheduled"]
    new = pusher.push(f"{ns}/agent", "prod", seed=f"pre-new-{secrets.token_hex(3)}")
    cluster.apply(
        policy(
            "control-plane",
            target("agents", "DaemonSet", agent=f"{reg}/{ns}/agent:prod"),
            prePull=True,
            healthyFor="2s",
        ),
        namespace=ns,
    )
    pinned = f"{reg}/{ns}/agent@{new.digest}"
    pre_puller.tick(ns, "control-plane")

    def switched() -> bool | None:
        return template_image(cluster, ns) == pinned or None

    eventually(switched, timeout=90, what="the DaemonSet pinned after its pre-pull", interval=1)
    eventually(
        lambda: helper_pods(cluster, ns) == [] or None,
        timeout=60,
        what="every helper pod deleted",
        interval=1,
    )
    order = writes(cluster, ns)
    creates = [name for verb, resource, name in order if (verb, resource) == ("create", "pods")]
    deletes = [name for verb, resource, name in order if (verb, resource) == ("delete", "pods")]
    (patch_at,) = [
        i for i, (verb, res, _) in enumerate(order) if (verb, res) == ("patch", "daemonsets")
    ]
    assert len(set(creates)) == scheduled  # one helper per node
    assert all(order.index(("create", "pods", name)) < patch_at for name in creates)
    assert sorted(set(deletes)) == sorted(set(creates))
    assert all(order.index(("delete", "pods", name)) > patch_at for name in deletes)
    assert "PrePulling" in event_reasons(cluster, ns, "agents", "PrePulling", "Refreshed")
    assert target_status(cluster, ns, "agents").get("prePull") is None
    assert "tick failed unexpectedly" not in pre_puller.log()  # every tick ran to its end


def test_a_helper_a_crashed_operator_left_is_deleted_and_a_pod_that_only_wears_the_label_is_not(
    pre_puller: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, pre_puller.registry
    current = pusher.push(f"{ns}/agent", "prod", seed=f"pre-left-{secrets.token_hex(3)}")
    image = f"{reg}/{ns}/agent@{current.digest}"
    workload = agents(cluster, ns, image)
    uid, node = workload["metadata"]["uid"], None
    node = next(
        p["spec"]["nodeName"] for p in cluster.get("pods", "-n", ns, "-l", "app=agents")["items"]
    )

    def pod(name: str, owned: bool) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {LABEL: uid}},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "tolerations": kwok_pod_template({})["spec"]["tolerations"],
                "containers": [{"name": "pull-0", "image": image, "command": ["/x"]}],
            },
        }
        if owned:
            obj["metadata"]["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agents", "uid": uid}
            ]
        return obj

    cluster.apply(
        pod(f"{PREFIX}left-behind", True), pod(f"{PREFIX}wears-the-label", False), namespace=ns
    )
    cluster.apply(
        policy(
            "control-plane",
            target("agents", "DaemonSet", agent=f"{reg}/{ns}/agent:prod"),
            prePull=True,
        ),
        namespace=ns,
    )
    pre_puller.tick(ns, "control-plane")
    eventually(
        lambda: (
            [p["metadata"]["name"] for p in helper_pods(cluster, ns)]
            == [f"{PREFIX}wears-the-label"]
            or None
        ),
        timeout=60,
        what="the left-behind helper deleted, the labelled stranger kept",
        interval=1,
    )
    assert target_status(cluster, ns, "agents")["phase"] == "Current"


async def test_helper_pods_are_read_only_for_targets_that_pre_pull_or_recorded_a_pre_pull(
    crd_installed: Cluster, pusher: ImagePusher, registry: str, policy_namespace: str
) -> None:
    ns = policy_namespace
    current = pusher.push(f"{ns}/agent", "prod", seed=f"pre-reads-{secrets.token_hex(3)}")
    agents(crd_installed, ns, f"{registry}/{ns}/agent@{current.digest}")
    tracked = target("agents", "DaemonSet", agent=f"{registry}/{ns}/agent:prod")
    crd_installed.apply(policy("control-plane", tracked), namespace=ns)
    counting = CountingKubeApi(KubeApi.from_environment(crd_installed.kubeconfig).connection)
    config = OperatorConfig(insecure_registries=(registry,), pre_pull_pods=True)

    async def pod_lists() -> int:
        counting.requests.clear()
        obj = crd_installed.get("irp", "control-plane", "-n", ns)
        await read_targets(obj, api=counting, config=config)
        return counting.requests[("GET", f"/api/v1/namespaces/{ns}/pods")]

    assert await pod_lists() == 1  # the workload's pods only: no prePull, no helper read
    crd_installed.kubectl(
        "patch",
        "irp",
        "control-plane",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec": {"prePull": true}}',
    )
    assert await pod_lists() == 2  # and one LIST of the namespace's helper pods


def test_a_namespace_whose_pod_security_level_refuses_the_helper_holds_the_switch_and_says_why(
    pre_puller: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    """A DaemonSet on the host's network, whose namespace moved to Pod Security Admission's
    `baseline` level after its pods started: its pods keep running, but a helper pod — which
    runs on the host's network as the workload's do — is refused. The refresh holds
    (PrePullFailed) naming the admission, the level and what to do; the DaemonSet is not
    touched and no helper pod exists."""
    ns, reg = policy_namespace, pre_puller.registry
    old = pusher.push(f"{ns}/agent", "prod", seed=f"pre-psa-{secrets.token_hex(3)}")
    running = f"{reg}/{ns}/agent@{old.digest}"
    template = kwok_pod_template({"agent": running}, None, {"app": "agents"})
    template["spec"]["hostNetwork"] = True
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agents"},
            "spec": {"selector": {"matchLabels": {"app": "agents"}}, "template": template},
        },
        namespace=ns,
    )
    cluster.kubectl("rollout", "status", "-n", ns, "daemonset/agents", "--timeout=90s")
    before = cluster.get("daemonset", "agents", "-n", ns)
    pods_before = {p["metadata"]["uid"] for p in cluster.get("pods", "-n", ns)["items"]}
    assert pods_before
    labelled = cluster.kubectl(
        "label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline"
    )
    assert "host namespaces" in labelled.stderr  # the API server warns of the running pods
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {**template["spec"], "nodeName": "kwok-node-0"},
    }

    def enforced() -> bool | None:
        # (Admission reads namespaces from its cache: the new label may take a moment.)
        dry = cluster.kubectl(
            "create", "--dry-run=server", "-n", ns, "-f", "-", input=json.dumps(probe),
            check=False,
        )  # fmt: skip
        return "violates PodSecurity" in dry.stderr or None

    eventually(enforced, timeout=30, what="the baseline level enforced")
    pusher.push(f"{ns}/agent", "prod", seed=f"pre-psa-new-{secrets.token_hex(3)}")
    cluster.apply(
        policy(
            "control-plane",
            target("agents", "DaemonSet", agent=f"{reg}/{ns}/agent:prod"),
            prePull=True,
        ),
        namespace=ns,
    )
    pre_puller.tick(ns, "control-plane")

    def held() -> dict[str, Any] | None:
        found = target_status(cluster, ns, "agents")
        return found if found.get("phase") == "Waiting" else None

    found = eventually(held, timeout=60, what="the refresh held", interval=1)
    message = found["message"]
    print(f"the target's message: {message}")
    for said in (
        "Pod Security Admission refused the helper pod",
        f"namespace {ns} enforces the 'baseline' level",
        "hostNetwork",
        "Label the namespace pod-security.kubernetes.io/enforce=privileged",
        "prePull: false",
        f"imagerefresh reset {ns}/control-plane",
    ):
        assert said in message, message
    assert found["prePull"]["failure"]["reason"].startswith("Pod Security Admission refused")
    assert "PrePullFailed" in event_reasons(cluster, ns, "agents", "PrePullFailed")
    pre_puller.tick(ns, "control-plane")  # and on the next tick: held, not retried
    after = cluster.get("daemonset", "agents", "-n", ns)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert template_image(cluster, ns) == running
    assert helper_pods(cluster, ns) == []
    assert {p["metadata"]["uid"] for p in cluster.get("pods", "-n", ns)["items"]} == pods_before
    assert not [
        w for w in writes(cluster, ns) if w[:2] in {("create", "pods"), ("patch", "daemonsets")}
    ]
    assert target_status(cluster, ns, "agents")["phase"] == "Waiting"
