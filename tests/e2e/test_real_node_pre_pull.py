"""prePull on the real node: the new build is on the node before the DaemonSet switches.

A DaemonSet's rollout kills the node's old pod before the new one starts; without a pre-pull
the node runs without its agent for as long as the pull takes. Here the kubelet and containerd
are real: the helper pod pulls (its command exists in no image, so the image's entrypoint never
runs), the kubelet reports the digest, and only then is the DaemonSet patched — its new pod's
kubelet says the image was already present. A build the node cannot pull holds the refresh with
the kubelet's reason and never touches the DaemonSet; an operator killed mid-pull is succeeded
by one that resumes from the intent in status without charging the pulls again. No helper pod
is left behind in any of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.accounts import audited_kubeconfig, audited_writes
from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, running_operator
from support.prepull import PREFIX, helper_pods
from support.realnode_env import SLEEP, RealNode
from support.registry_env import ImagePusher
from support.scenario import event_messages, event_reasons, policy, target, target_status

pytestmark = pytest.mark.cluster

ACCOUNT = "real-pre-puller"


@pytest.fixture
def pre_puller(crd_installed: Cluster, registry: str, tmp_path: Path) -> Iterator[Operator]:
    kubeconfig = audited_kubeconfig(crd_installed, ACCOUNT, tmp_path / ACCOUNT)
    audited = dataclasses.replace(crd_installed, kubeconfig=str(kubeconfig))
    with running_operator(
        audited, registry, tmp_path / "operator.log", extra_args=("--pre-pull-pods",)
    ) as running:
        yield running


def agent_image(cluster: Cluster, ns: str) -> str:
    obj = cluster.get("daemonset", "agent", "-n", ns)
    return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])


def running_agent(cluster: Cluster, real_node: RealNode, ns: str, image: str) -> None:
    cluster.apply(real_node.daemonset("agent", image), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "daemonset/agent", "--timeout=120s")
    real_node.running(ns, "agent")


def track(cluster: Cluster, ns: str, reg: str) -> None:
    cluster.apply(
        policy("control-plane", target("agent", "DaemonSet", app=f"{reg}/{ns}/agent:prod"),
               prePull=True),
        namespace=ns,
    )  # fmt: skip


def no_helpers_left(cluster: Cluster, ns: str) -> None:
    eventually(
        lambda: helper_pods(cluster, ns) == [] or None,
        timeout=60,
        what="every pre-pull helper pod deleted",
        interval=1,
    )


def helper_and_daemonset_writes(
    cluster: Cluster, ns: str, until: tuple[str, str]
) -> list[tuple[str, str]] | None:
    """(verb, resource) of the operator's successful writes of helper pods and the DaemonSet in
    ``ns``, in the order the API server completed them; None until ``until`` is among them."""
    verbs = [
        (w.verb, w.resource)
        for w in audited_writes(cluster, ACCOUNT)
        if w.succeeded
        and w.namespace == ns
        and (w.resource == "daemonsets" or w.name.startswith(PREFIX))
    ]
    return verbs if until in verbs else None


def pulled_events(cluster: Cluster, ns: str, pod: dict[str, Any]) -> list[str]:
    """What the kubelet said about pulling ``pod``'s image (its Pulled/Pulling events)."""
    events = cluster.get(
        "events", "-n", ns, "--field-selector", f"involvedObject.name={pod['metadata']['name']}"
    )["items"]
    return [
        f"{e['reason']}: {e['message']}" for e in events if e["reason"] in ("Pulling", "Pulled")
    ]


def test_the_new_build_is_on_the_node_before_the_daemonset_switches_and_no_helper_is_left(
    pre_puller: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, pre_puller.registry
    old = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-old", entrypoint=SLEEP)
    running_agent(cluster, real_node, ns, f"{reg}/{ns}/agent@{old.digest}")
    new = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-new", entrypoint=SLEEP)
    pinned = f"{reg}/{ns}/agent@{new.digest}"
    assert new.digest not in real_node.ctr("images", "ls", "-q")
    track(cluster, ns, reg)
    pre_puller.tick(ns, "control-plane")
    eventually(
        lambda: agent_image(cluster, ns) == pinned or None,
        timeout=120,
        what="the DaemonSet switched after its pre-pull",
        interval=1,
    )
    # The helper goes after the patch, perhaps a tick later: read the log once it has gone.
    no_helpers_left(cluster, ns)
    verbs = eventually(
        lambda: helper_and_daemonset_writes(cluster, ns, until=("delete", "pods")),
        timeout=30,
        what="the helper's deletion in the audit log",
        interval=0.5,
    )
    # The node held the build before the patch: the operator created the helper, then patched.
    assert verbs.index(("create", "pods")) < verbs.index(("patch", "daemonsets"))
    assert verbs.count(("create", "pods")) == 1  # one node, one helper
    assert verbs.index(("delete", "pods")) > verbs.index(("patch", "daemonsets"))
    assert new.digest in real_node.ctr("images", "ls", "-q")
    # The new agent's start contained no pull: its kubelet found the image on the node.
    (agent,) = real_node.running(ns, "agent")
    assert agent["spec"]["containers"][0]["image"] == pinned
    said = pulled_events(cluster, ns, agent)
    assert said, "the kubelet posted no Pulled event for the new agent"
    assert all("already present on machine" in line for line in said), said
    assert target_status(cluster, ns, "agent").get("prePull") is None
    assert "tick failed unexpectedly" not in pre_puller.log()  # every tick ran to its end


def test_a_build_the_node_cannot_pull_holds_the_refresh_and_never_touches_the_daemonset(
    pre_puller: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, pre_puller.registry
    old = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-old", entrypoint=SLEEP)
    before = f"{reg}/{ns}/agent@{old.digest}"
    running_agent(cluster, real_node, ns, before)
    # An index offering only arm64: the amd64 kubelet cannot pull it.
    pusher.push(
        f"{ns}/agent", "prod", seed=f"{ns}-foreign", kind="oci-index", entrypoint=SLEEP,
        platforms=(("linux", "arm64"),),
    )  # fmt: skip
    track(cluster, ns, reg)
    pre_puller.tick(ns, "control-plane")

    def held() -> dict[str, Any] | None:
        found = target_status(cluster, ns, "agent")
        return found if found["phase"] == "Waiting" and found.get("prePull") else None

    found = eventually(held, timeout=120, what="the pre-pull failing on the node", interval=1)
    failure = found["prePull"]["failure"]
    assert failure["node"] == real_node.name
    assert failure["reason"].startswith(("ErrImagePull", "ImagePullBackOff")), failure
    assert f"the pre-pull failed on node {real_node.name}" in found["message"]
    (message,) = event_messages(cluster, ns, "agent", "PrePullFailed")
    assert real_node.name in message
    assert agent_image(cluster, ns) == before
    writes = audited_writes(cluster, ACCOUNT)
    assert not [w for w in writes if w.namespace == ns and w.resource == "daemonsets"]
    no_helpers_left(cluster, ns)
    real_node.running(ns, "agent")  # the old agent never stopped


def test_an_operator_killed_mid_pull_is_succeeded_by_one_that_resumes_charging_nothing_twice(
    crd_installed: Cluster,
    registry: str,
    tmp_path: Path,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns = policy_namespace
    old = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-old", entrypoint=SLEEP)
    new = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-mid", entrypoint=SLEEP)
    kubeconfig = audited_kubeconfig(crd_installed, ACCOUNT, tmp_path / ACCOUNT)
    audited = dataclasses.replace(crd_installed, kubeconfig=str(kubeconfig))
    args = ("--pre-pull-pods",)
    with running_operator(audited, registry, tmp_path / "first.log", extra_args=args) as first:
        reg = first.registry
        # The old build runs before the tag moves on (the pusher pushed both; pin the first).
        running_agent(cluster, real_node, ns, f"{reg}/{ns}/agent@{old.digest}")
        with real_node.containerd_paused():  # the node is stuck mid-pull
            track(cluster, ns, reg)
            first.tick(ns, "control-plane")

            def pre_pulling() -> dict[str, Any] | None:
                found = target_status(cluster, ns, "agent")
                return found if found.get("prePull") and helper_pods(cluster, ns) else None

            intent = eventually(pre_pulling, timeout=60, what="a pre-pull in flight", interval=0.5)
            assert intent["phase"] == "Refreshing"
            first.kill()
    with running_operator(audited, registry, tmp_path / "second.log", extra_args=args) as second:
        second.tick(ns, "control-plane")
        eventually(
            lambda: agent_image(cluster, ns) == f"{reg}/{ns}/agent@{new.digest}" or None,
            timeout=120,
            what="the successor finishing the pre-pull and switching",
            interval=1,
        )
        no_helpers_left(cluster, ns)
        # One pre-pull, charged once: the successor carried on from the intent in status.
        assert event_reasons(cluster, ns, "agent", "PrePulling").count("PrePulling") == 1
        creates = [
            w.name
            for w in audited_writes(cluster, ACCOUNT)
            if w.namespace == ns and w.verb == "create" and w.resource == "pods" and w.succeeded
        ]
        assert len(creates) == 1  # the successor found the helper, it did not make another


def test_a_policy_deleted_mid_pull_takes_its_helper_pods_with_it(
    pre_puller: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, pre_puller.registry
    old = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-old", entrypoint=SLEEP)
    running_agent(cluster, real_node, ns, f"{reg}/{ns}/agent@{old.digest}")
    pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-gone", entrypoint=SLEEP)
    with real_node.containerd_paused():  # the node is stuck mid-pull
        track(cluster, ns, reg)
        pre_puller.tick(ns, "control-plane")
        eventually(
            lambda: helper_pods(cluster, ns) or None,
            timeout=60,
            what="a helper pod pulling",
            interval=0.5,
        )
        cluster.kubectl("delete", "irp", "control-plane", "-n", ns)
        no_helpers_left(cluster, ns)  # no tick of the policy is left to delete them
    assert agent_image(cluster, ns) == f"{reg}/{ns}/agent@{old.digest}"


def test_a_helper_with_the_platforms_user_fails_loudly_on_an_image_that_runs_as_root(
    crd_installed: Cluster,
    registry: str,
    tmp_path: Path,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    """Why helpers have a user of their own by default: one that names none (--pre-pull-user
    platform, for OpenShift) runs as the image's USER, and the kubelet — after pulling — refuses
    runAsNonRoot for an image that runs as root, before it creates the container, so no imageID
    proves the pull. The pre-pull fails at once with the kubelet's words and what to set, rather
    than waiting out its deadline; the DaemonSet is not touched and no helper is left."""
    ns = policy_namespace
    old = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-root-old", entrypoint=SLEEP)
    pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-root-new", entrypoint=SLEEP)
    args = ("--pre-pull-pods", "--pre-pull-user", "platform")
    with running_operator(crd_installed, registry, tmp_path / "op.log", extra_args=args) as op:
        reg = op.registry
        before = f"{reg}/{ns}/agent@{old.digest}"
        running_agent(cluster, real_node, ns, before)
        track(cluster, ns, reg)
        op.tick(ns, "control-plane")

        def held() -> dict[str, Any] | None:
            found = target_status(cluster, ns, "agent")
            return found if found["phase"] == "Waiting" and found.get("prePull") else None

        found = eventually(held, timeout=120, what="the pre-pull failing", interval=1)
        failure = found["prePull"]["failure"]
        assert failure["node"] == real_node.name
        assert failure["reason"].startswith("CreateContainerConfigError"), failure
        assert "runAsNonRoot and image will run as root" in failure["reason"], failure
        assert "prePull.runAsUser" in failure["reason"], failure
        assert "PrePullFailed" in event_reasons(cluster, ns, "agent", "PrePullFailed")
        assert agent_image(cluster, ns) == before
        no_helpers_left(cluster, ns)
