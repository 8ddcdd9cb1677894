"""What may be pinned, end to end: builds that failed here, and the cooldown for new builds.

The operator runs as ``imagerefresh run`` against the local cluster (kwok nodes) and the real
registry; each verdict is read from what the API server stores: the pod template's image, the
ReplicaSets a rollout left, the status the operator wrote, its events. Signatures have their own
scenarios (test_signature_scenarios.py); a pull that fails is shown on the real node
(tests/e2e/test_real_node.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.cluster_env import Cluster
from support.operator_env import Operator
from support.registry_env import ImagePusher
from support.scenario import (
    cooling_policy,
    deployment,
    event_messages,
    event_reasons,
    images,
    policy,
    running_good_digest_with_bad_next,
    settle,
    status,
    target,
    target_status,
)

pytestmark = pytest.mark.cluster


def _templates(cluster: Cluster, ns: str) -> set[str]:
    """Every image any ReplicaSet of the namespace was made for: what was ever rolled out."""
    return {
        container["image"]
        for rs in cluster.get("rs", "-n", ns)["items"]
        for container in rs["spec"]["template"]["spec"]["containers"]
    }


def test_a_failed_build_stays_barred_when_the_tag_moves_away_and_back_and_a_new_push_is_tried(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, operator.registry
    bad, _ = running_good_digest_with_bad_next(
        cluster, pusher, ns, reg, "away", progressDeadlineSeconds=2
    )
    tracked = target("app", app=f"{reg}/{ns}/app:prod")
    cluster.apply(policy("control-plane", tracked, healthyFor="2s"), namespace=ns)
    operator.wait_first_tick(ns, "control-plane")
    pusher.push(f"{ns}/app", "prod", seed="away-bad")  # tag → bad
    settle(operator, cluster, ns, "app", phase="Waiting", timeout=120)
    assert [f["digest"] for f in target_status(cluster, ns, "app")["failed"]] == [bad]

    fixed = pusher.push(f"{ns}/app", "prod", seed="away-fixed")  # a new push is tried
    operator.tick(ns, "control-plane")
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{fixed.digest}"}
    current = settle(operator, cluster, ns, "app")
    assert current["refreshAttempts"] == 0  # the success clears the failed attempt

    assert pusher.push(f"{ns}/app", "prod", seed="away-bad").digest == bad  # back to it
    operator.tick(ns, "control-plane")
    back = target_status(cluster, ns, "app")
    assert back["phase"] == "Waiting"
    assert f"{bad} failed its rollout here" in back["message"]
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{fixed.digest}"}
    assert [f["digest"] for f in back["failed"]] == [bad]
    messages = event_messages(cluster, ns, "app", "BuildFailed")
    assert len(messages) == 2  # once when barred, once when the tag came back to it
    assert all(bad in message for message in messages)


def _seen(cluster: Cluster, ns: str) -> dict[str, Any]:
    (entry,) = status(cluster, ns)["seen"]
    return dict(entry)


def test_two_pushes_within_the_cooldown_restart_its_clock_and_the_first_is_never_pinned(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    first = cooling_policy(cluster, pusher, ns, reg, "1h")
    operator.wait_first_tick(ns, "control-plane")
    assert _seen(cluster, ns)["digest"] == first
    assert target_status(cluster, ns, "app")["phase"] == "Current"

    second = pusher.push(f"{ns}/app", "prod", seed="second")
    operator.tick(ns, "control-plane")
    cooling = target_status(cluster, ns, "app")
    assert cooling["phase"] == "Waiting"
    assert "spec.minimumAge 1h0m0s" in cooling["message"]
    clock = _seen(cluster, ns)
    assert clock["digest"] == second.digest
    event_reasons(cluster, ns, "app", "CoolingDown")

    third = pusher.push(f"{ns}/app", "prod", seed="third")  # the tag moves again
    operator.tick(ns, "control-plane")
    restarted = _seen(cluster, ns)
    assert restarted["digest"] == third.digest
    assert restarted["since"] >= clock["since"]
    operator.tick(ns, "control-plane")  # a refresh-now shortens nothing
    assert _seen(cluster, ns) == restarted
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{first}"}
    assert _templates(cluster, ns) == {f"{reg}/{ns}/app@{first}"}


def test_the_cooldown_clock_survives_a_restart_of_the_operator(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    first = cooling_policy(cluster, pusher, ns, reg, "1h")
    operator.wait_first_tick(ns, "control-plane")
    pusher.push(f"{ns}/app", "prod", seed="after")
    operator.tick(ns, "control-plane")
    before = _seen(cluster, ns)
    message = target_status(cluster, ns, "app")["message"]
    operator.stop()
    operator.start()
    operator.wait_first_tick(ns, "control-plane")
    operator.tick(ns, "control-plane")
    assert _seen(cluster, ns) == before
    assert target_status(cluster, ns, "app")["message"] == message
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{first}"}


@pytest.mark.parametrize("gate", ["cooling down", "failed here"])
def test_a_sibling_s_refresh_leaves_a_tag_whose_new_build_is_held_on_its_tag(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    gate: str,
) -> None:
    """A fresh install on tags; the api is pinned by the policy to a new build (a pin waits for
    no cooldown), the sidecar's tag moves to a build that is cooling down, or that failed here.
    The api's patch once pinned the sidecar too, to its tag's new digest past its gate."""
    ns, reg = policy_namespace, operator.registry
    ran = {n: pusher.push(f"{ns}/{n}", "prod", seed=f"{ns}-{n}-1").digest for n in ("api", "side")}
    tags = {n: f"{reg}/{ns}/{n}:prod" for n in ran}
    annotations = {f"imagerefresh.test/image-id.{n}": f"{reg}/{ns}/{n}@{d}" for n, d in ran.items()}
    cluster.apply(deployment("edge", tags, replicas=1, annotations=annotations), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/edge", "--timeout=60s")
    pin = pusher.push(f"{ns}/api", "next", seed=f"{ns}-api-2").digest
    held = pusher.push(f"{ns}/side", "prod", seed=f"{ns}-side-2").digest
    containers = [
        {"name": "api", "image": tags["api"], "digest": pin},
        {"name": "side", "image": tags["side"]},
    ]
    edge = {"kind": "Deployment", "name": "edge", "containers": containers}
    # Judged as it settles: this test is about the gates, not the health window.
    spec: dict[str, Any] = {"targets": [edge], "healthyFor": "0s"}
    if gate == "cooling down":
        spec["minimumAge"] = "1h"
    else:
        spec["suspend"] = True  # the failed list is written before the policy acts
    cluster.apply(
        {"apiVersion": "images.tracebloc.io/v1alpha1", "kind": "ImageRefreshPolicy",
         "metadata": {"name": "control-plane"}, "spec": spec},
        namespace=ns,
    )  # fmt: skip
    operator.wait_first_tick(ns, "control-plane")
    if gate == "failed here":
        written = status(cluster, ns)
        written["targets"][0]["failed"] = [{"digest": held, "at": "2026-12-01T00:00:00Z"}]
        obj = cluster.get("irp", "control-plane", "-n", ns)
        obj["status"] = written
        cluster.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(obj))
        cluster.kubectl(
            "patch", "irp", "control-plane", "-n", ns, "--type=merge",
            "-p", '{"spec": {"suspend": false}}',
        )  # fmt: skip
        operator.tick(ns, "control-plane")

    # The api's rollout is judged by a tick after it settles: Refreshing until then.
    found = settle(operator, cluster, ns, "edge", phase="Waiting")
    assert images(cluster, ns, "edge") == {"api": f"{reg}/{ns}/api@{pin}", "side": tags["side"]}
    assert held in found["message"] or "cooling down" in found["message"]
    assert "WriteRefused" not in event_reasons(cluster, ns, "control-plane")
