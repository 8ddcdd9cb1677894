"""Other writers of the same images, with the operator running (SPEC §4 h, §10).

A writer that re-pins what the operator pinned is a fight, and ends Locked, loudly; that case
runs in test_lifecycle_faults.py (`kubectl set image` twice → Locked, the status message and the
Contested events naming `kubectl-set`). Here: the edge chart's hourly `helm upgrade` re-rendering
`repo:tag` over the operator's pin, while the pods already run the desired digest — an adoption,
not a fight, and no second rollout.
"""

from __future__ import annotations

import json

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import ImagePusher
from support.scenario import (
    deployment,
    event_messages,
    event_reasons,
    images,
    pod_quota,
    policy,
    settle,
    target,
    target_status,
)

pytestmark = pytest.mark.cluster


def test_a_chart_rerender_of_the_tag_whose_pods_run_the_desired_digest_is_adopted_not_fought(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/jobs-manager", "prod", seed="old").digest
    new = pusher.push(f"{ns}/jobs-manager", "prod", seed="new").digest
    repo, tag = f"{reg}/{ns}/jobs-manager", f"{reg}/{ns}/jobs-manager:prod"
    cluster.apply(deployment("jobs-manager", {"api": f"{repo}@{old}"}, replicas=1), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/jobs-manager", "--timeout=60s")
    cluster.apply(
        policy("control-plane", target("jobs-manager", api=tag), healthyFor="2s"), namespace=ns
    )
    operator.wait_first_tick(ns, "control-plane")
    pinned = settle(operator, cluster, ns, "jobs-manager")
    assert images(cluster, ns, "jobs-manager") == {"api": f"{repo}@{new}"}
    assert pinned["lastGood"] == {"api": f"{repo}@{new}"}

    # helm upgrade renders the tag again (its own field manager); the new pods pull the tag,
    # which is the desired digest.
    rerender = {
        "spec": {
            "template": {
                "metadata": {"annotations": {"imagerefresh.test/image-id.api": f"{repo}@{new}"}},
                "spec": {"containers": [{"name": "api", "image": tag}]},
            }
        }
    }
    cluster.kubectl(
        "patch",
        "deployment",
        "jobs-manager",
        "-n",
        ns,
        "--field-manager=helm",
        "--type=strategic",
        "-p",
        json.dumps(rerender),
    )
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/jobs-manager", "--timeout=60s")
    generation = cluster.get("deployment", "jobs-manager", "-n", ns)["metadata"]["generation"]

    adopted = settle(operator, cluster, ns, "jobs-manager")
    operator.tick(ns, "control-plane")  # and once more: still nothing to do
    assert images(cluster, ns, "jobs-manager") == {"api": tag}  # not re-pinned: no rollout
    assert cluster.get("deployment", "jobs-manager", "-n", ns)["metadata"]["generation"] == (
        generation
    )
    assert (adopted["refreshAttempts"], adopted.get("contested", 0)) == (0, 0)
    assert adopted["containers"][0]["running"] == [new]
    assert "Contested" not in event_reasons(cluster, ns, "jobs-manager", "Refreshed")


def test_a_gitops_self_heal_reverting_our_landed_pin_to_the_tag_ends_locked_naming_it(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    """Argo CD's self-heal sets the tag back moments after our pin lands, before its rollout
    settles (here: it cannot, a quota holds its new pod), and the pods still run the old build
    (IfNotPresent). Each revert is one contested attempt naming the controller; the third
    ends Locked, and the operator stops re-pinning."""
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/jobs-manager", "prod", seed="selfheal-old").digest
    pusher.push(f"{ns}/jobs-manager", "prod", seed="selfheal-new")
    repo, tag = f"{reg}/{ns}/jobs-manager", f"{reg}/{ns}/jobs-manager:prod"
    cluster.apply(pod_quota(1), namespace=ns)
    running_old = {"imagerefresh.test/image-id.api": f"{repo}@{old}"}
    cluster.apply(
        deployment("jobs-manager", {"api": tag}, replicas=1, annotations=running_old),
        namespace=ns,
    )
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/jobs-manager", "--timeout=60s")
    cluster.apply(
        policy("control-plane", target("jobs-manager", api=tag), maxRefreshAttempts=3),
        namespace=ns,
    )
    operator.wait_first_tick(ns, "control-plane")
    revert = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": tag}]
    phases = []
    for _ in range(3):
        landed = eventually(
            lambda: (
                (t := target_status(cluster, ns, "jobs-manager"))
                .get("pending", {})
                .get("generation")
                and t
            ),
            timeout=30,
            what="our pin to land",
        )
        assert "@sha256:" in images(cluster, ns, "jobs-manager")["api"]
        assert landed["phase"] == "Refreshing"
        cluster.kubectl(
            "patch", "deployment", "jobs-manager", "-n", ns, "--type=json",
            "--field-manager=argocd-controller", "-p", json.dumps(revert),
        )  # fmt: skip
        cluster.kubectl("rollout", "status", "-n", ns, "deployment/jobs-manager", "--timeout=60s")
        operator.tick(ns, "control-plane")
        phases.append(target_status(cluster, ns, "jobs-manager")["phase"])
    assert phases == ["Refreshing", "Refreshing", "Locked"]
    locked = target_status(cluster, ns, "jobs-manager")
    assert (locked["refreshAttempts"], locked["contested"]) == (3, 3)
    assert images(cluster, ns, "jobs-manager") == {"api": tag}  # locked: it stopped fighting
    eventually(
        lambda: len(event_messages(cluster, ns, "jobs-manager", "Contested")) == 3,
        timeout=30,
        what="three Contested events",
    )
    contested = event_messages(cluster, ns, "jobs-manager", "Contested")
    assert all(
        message.startswith(
            f"field manager 'argocd-controller' reverted Deployment {ns}/jobs-manager to the "
            "images our refresh replaced, after it landed: contested attempt"
        )
        for message in contested
    ), contested
