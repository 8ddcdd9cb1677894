"""A refresh's health window on the real node: what a build does after its rollout settled.

A container without a readiness probe is Ready the moment it runs, so a build that exits at
start completes its rollout for an instant (``kubectl rollout status`` says "successfully rolled
out") and crash-loops after. These scenarios push such builds to a kubelet with containerd and
read the verdict from the API server — the crashes as the kubelet reported them, the operator's
status, its events, the images patched back — with no tick asked for after the patch: the
verdict follows the pods' watch events and the window's end. Windows are short (the default,
60 s, is for edges); pods are few.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, running_operator
from support.realnode_env import CRASH, SLEEP, RealNode
from support.registry_env import ImagePusher
from support.scenario import event_messages, images, policy, target, target_status

pytestmark = pytest.mark.cluster

# Crashes 20 s after it started: inside a 30 s window, long after its rollout settled.
LATE_CRASH = ("/bin/busybox", "sh", "-c", "sleep 20; exit 3")
# A sidecar that runs 15 s, exits 1 and is restarted (back-off 10 s, then 20 s, …): mostly up.
FLAKY = ("/bin/busybox", "sh", "-c", "sleep 15; exit 1")


@pytest.fixture
def node_operator(crd_installed: Cluster, registry: str, tmp_path: Path) -> Iterator[Operator]:
    with running_operator(crd_installed, registry, tmp_path / "operator.log") as running:
        yield running


def image_id(pod: dict[str, Any], container: str = "app") -> str:
    for status in pod["status"].get("containerStatuses", []):
        if status["name"] == container:
            return str(status.get("imageID", ""))
    return ""


def restarts(pod: dict[str, Any], container: str) -> int:
    for status in pod["status"].get("containerStatuses", []):
        if status["name"] == container:
            return int(status.get("restartCount", 0))
    return 0


def judged(cluster: Cluster, ns: str, name: str, phase: str, **expected: Any) -> dict[str, Any]:
    """The target's status once it is ``phase`` with ``expected`` fields (no tick asked for)."""

    def reached() -> dict[str, Any] | None:
        found = target_status(cluster, ns, name)
        same = all(found.get(k) == v for k, v in expected.items())
        return found if found["phase"] == phase and same else None

    return eventually(reached, timeout=120, what=f"{name} {phase} with {expected}")


def failed_with(
    cluster: Cluster, ns: str, name: str, digest: str, good: str, kind: str = "deployment"
) -> str:
    """Wait for the refresh to ``digest`` to be failed, barred and rolled back to ``good``;
    the RefreshFailed event's message."""

    def barred() -> dict[str, Any] | None:
        found = target_status(cluster, ns, name)
        bad = [b["digest"] for b in found.get("failed", [])]
        return found if digest in bad and found.get("pending") is None else None

    found = eventually(barred, timeout=120, what=f"the build {digest[:19]} barred on {name}")
    assert found["refreshAttempts"] == 1
    eventually(
        lambda: _images(cluster, ns, name, kind) == {"app": good},
        timeout=30,
        what=f"{name} rolled back to {good}",
    )
    (message,) = event_messages(cluster, ns, name, "RefreshFailed")
    assert event_messages(cluster, ns, name, "RolledBack")
    return message


def _images(cluster: Cluster, ns: str, name: str, kind: str) -> dict[str, str]:
    if kind == "deployment":
        return images(cluster, ns, name)
    obj = cluster.get(kind, name, "-n", ns)
    return {c["name"]: c["image"] for c in obj["spec"]["template"]["spec"]["containers"]}


def test_a_build_exiting_at_start_is_rolled_back_and_barred_and_a_healthy_one_is_current_after(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    good = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-good", entrypoint=SLEEP).digest
    pinned_good = f"{reg}/{ns}/app@{good}"
    cluster.apply(real_node.deployment("app", pinned_good), namespace=ns)  # no readiness probe
    real_node.running(ns, "app")
    tag = f"{reg}/{ns}/app:prod"
    cluster.apply(policy("control-plane", target("app", app=tag), healthyFor="10s"), namespace=ns)
    node_operator.wait_first_tick(ns, "control-plane")
    judged(cluster, ns, "app", "Current")

    bad = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-exits", entrypoint=CRASH).digest
    node_operator.tick(ns, "control-plane")
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{bad}"}
    message = failed_with(cluster, ns, "app", bad, pinned_good)
    assert "the new build crashed" in message
    assert f"on node {real_node.name}" in message
    assert "exit code 1 (Error)" in message
    # Whatever the rollout got to before the crash was seen, the pod running is the good build.
    assert image_id(real_node.running(ns, "app")[0]).endswith(f"@{good}")
    node_operator.tick(ns, "control-plane")  # barred: the tag still answers it, nothing moves
    waiting = target_status(cluster, ns, "app")
    assert (waiting["phase"], waiting["refreshAttempts"]) == ("Waiting", 1)
    assert images(cluster, ns, "app") == {"app": pinned_good}

    fixed = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-fixed", entrypoint=SLEEP).digest
    node_operator.tick(ns, "control-plane")
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{fixed}"}
    eventually(
        lambda: "watching its pods until" in target_status(cluster, ns, "app")["message"],
        timeout=60,
        what="the healthy build settled and its window running",
    )
    done = judged(cluster, ns, "app", "Current", refreshAttempts=0)  # no tick asked for
    assert done["lastGood"] == {"app": f"{reg}/{ns}/app@{fixed}"}
    assert [b["digest"] for b in done["failed"]] == [bad]
    assert len(event_messages(cluster, ns, "app", "RollingBack")) == 1  # the bad build's only
    (refreshed,) = event_messages(cluster, ns, "app", "Refreshed")
    assert refreshed.endswith("and its pods stayed up for 10s")
    assert image_id(real_node.running(ns, "app")[0]).endswith(f"@{fixed}")


def test_a_build_that_crashes_twenty_seconds_after_starting_inside_its_window_is_rolled_back(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    good = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-good", entrypoint=SLEEP).digest
    pinned_good = f"{reg}/{ns}/app@{good}"
    cluster.apply(real_node.deployment("app", pinned_good), namespace=ns)
    real_node.running(ns, "app")
    tag = f"{reg}/{ns}/app:prod"
    cluster.apply(policy("control-plane", target("app", app=tag), healthyFor="30s"), namespace=ns)
    node_operator.wait_first_tick(ns, "control-plane")

    late = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-late", entrypoint=LATE_CRASH).digest
    node_operator.tick(ns, "control-plane")
    # It rolls out and settles (Running, Ready): the window runs, saying until when.
    watching = judged(cluster, ns, "app", "Refreshing")
    eventually(
        lambda: "watching its pods until" in target_status(cluster, ns, "app")["message"],
        timeout=60,
        what="the rollout settled and its window running",
    )
    assert watching["refreshAttempts"] == 0
    message = failed_with(cluster, ns, "app", late, pinned_good)
    assert "within its health window (healthyFor 30s" in message
    assert "exit code 3 (Error)" in message
    assert image_id(real_node.running(ns, "app")[0]).endswith(f"@{good}")


def test_a_daemonset_agent_that_crash_loops_on_the_real_node_after_its_update_is_rolled_back(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    good = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-good", entrypoint=SLEEP).digest
    pinned_good = f"{reg}/{ns}/agent@{good}"
    cluster.apply(real_node.daemonset("agent", pinned_good), namespace=ns)  # no readiness probe
    real_node.running(ns, "agent")
    agent = target("agent", "DaemonSet", app=f"{reg}/{ns}/agent:prod")
    cluster.apply(policy("control-plane", agent, healthyFor="15s"), namespace=ns)
    node_operator.wait_first_tick(ns, "control-plane")

    bad = pusher.push(f"{ns}/agent", "prod", seed=f"{ns}-bad", entrypoint=CRASH).digest
    node_operator.tick(ns, "control-plane")
    assert _images(cluster, ns, "agent", "daemonset") == {"app": f"{reg}/{ns}/agent@{bad}"}
    message = failed_with(cluster, ns, "agent", bad, pinned_good, "daemonset")
    assert f"crashing on node(s) {real_node.name}" in message
    assert image_id(real_node.running(ns, "agent")[0]).endswith(f"@{good}")


def test_a_sidecar_already_restarting_before_the_refresh_is_not_blamed_for_it(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    good = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-good", entrypoint=SLEEP).digest
    flaky = pusher.push(f"{ns}/flaky", "prod", seed=f"{ns}-flaky", entrypoint=FLAKY).digest
    pinned_good = f"{reg}/{ns}/app@{good}"
    deployment = real_node.deployment("app", pinned_good)
    deployment["spec"]["template"] = real_node.template(
        {"app": pinned_good, "sidecar": f"{reg}/{ns}/flaky@{flaky}"}, labels={"app": "app"}
    )
    cluster.apply(deployment, namespace=ns)

    def restarted_and_up() -> bool:
        pods = real_node.pods(ns, "app")
        return len(pods) == 1 and restarts(pods[0], "sidecar") >= 1 and _ready(pods[0])

    eventually(restarted_and_up, timeout=120, what="the sidecar restarted, and the pod up again")
    tag = f"{reg}/{ns}/app:prod"
    cluster.apply(policy("control-plane", target("app", app=tag), healthyFor="20s"), namespace=ns)
    node_operator.wait_first_tick(ns, "control-plane")
    newer = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-newer", entrypoint=SLEEP).digest
    node_operator.tick(ns, "control-plane")
    assert images(cluster, ns, "app")["app"] == f"{reg}/{ns}/app@{newer}"

    def new_sidecar_restarted() -> bool:
        pods = [p for p in real_node.pods(ns, "app") if image_id(p).endswith(f"@{newer}")]
        return bool(pods) and restarts(pods[0], "sidecar") >= 1

    # The new pod's sidecar restarts inside the window (15 s after it started): not the build's.
    eventually(new_sidecar_restarted, timeout=60, what="the new pod's sidecar restarting")
    done = judged(cluster, ns, "app", "Current", refreshAttempts=0)
    assert done["failed"] == []
    assert done["lastGood"]["app"] == f"{reg}/{ns}/app@{newer}"
    # That restart came inside the window, which ended when the refresh was judged healthy.
    (pod,) = [p for p in real_node.pods(ns, "app") if image_id(p).endswith(f"@{newer}")]
    (sidecar,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "sidecar"]
    assert sidecar["lastState"]["terminated"]["finishedAt"] < done["lastRefresh"]
    assert event_messages(cluster, ns, "app", "RollingBack") == []
    assert images(cluster, ns, "app")["app"] == f"{reg}/{ns}/app@{newer}"


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )
