"""Rollouts are followed as they happen (SPEC §4.4), and nothing is left behind (SPEC §6).

Every policy here keeps the production interval (15m): after the first tick — the one a new
policy gets at once — nothing pokes it. A verdict that arrives at all therefore arrived
without an interval tick; the operator's own counters say so (interval ticks vs follow-ups).
How many seconds a verdict takes is `make bench`'s to measure, not a test's to assert.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, kwok_pod_template
from support.registry_env import ImagePusher
from support.scenario import (
    deployment,
    event_messages,
    event_reasons,
    images,
    policy,
    running_good_digest_with_bad_next,
    status,
    target,
    target_status,
)

pytestmark = pytest.mark.cluster

# Far above any single test: a verdict must not be able to wait for an interval tick.
VERDICT_TIMEOUT = 120


@pytest.fixture
def operator(operator_without_interval_ticks: Operator) -> Operator:
    """Each test its own operator: no interval tick can fall inside it (see the fixture)."""
    return operator_without_interval_ticks


def daemonset(name: str, image: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A DaemonSet on every kwok node, replacing one pod at a time."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": kwok_pod_template({"agent": image}, annotations, {"app": name}),
        },
    }


def daemonset_image(cluster: Cluster, namespace: str, name: str) -> str:
    obj = cluster.get("daemonset", name, "-n", namespace)
    (container,) = obj["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def reaches(
    cluster: Cluster, namespace: str, workload: str, phase: str, timeout: float = VERDICT_TIMEOUT
) -> dict[str, Any]:
    """Wait — without poking the operator — until the target's phase is ``phase``."""

    def reached() -> dict[str, Any] | None:
        targets = status(cluster, namespace).get("targets") or []
        found = next((t for t in targets if t["name"] == workload), None)
        return found if found is not None and found["phase"] == phase else None

    return eventually(reached, timeout=timeout, what=f"{workload} to become {phase}", interval=1)


def interval_ticks(operator: Operator, namespace: str) -> float:
    return operator.ticks(namespace, "control-plane")


def follow_ups(operator: Operator, namespace: str) -> float:
    return operator.metric(
        "imagerefresh_follow_up_ticks_total", namespace=namespace, policy="control-plane"
    )


def test_a_refresh_is_judged_when_its_health_window_ends_without_an_interval_tick(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/app", "prod", seed="follow-old")
    cluster.apply(deployment("app", {"app": f"{reg}/{ns}/app@{old.digest}"}), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    new = pusher.push(f"{ns}/app", "prod", seed="follow-new")
    tracked = target("app", app=f"{reg}/{ns}/app:prod")
    cluster.apply(policy("control-plane", tracked, healthyFor="3s"), namespace=ns)

    current = reaches(cluster, ns, "app", "Current")
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{new.digest}"}
    assert (current["refreshAttempts"], current.get("pending")) == (0, None)
    # Judged at the window's end, which the settling follow-up recorded (status kept no trace
    # of it but this: it is a success only once its window passed).
    (refreshed,) = event_messages(cluster, ns, "app", "Refreshed")
    assert refreshed.endswith("and its pods stayed up for 3s")
    event_reasons(cluster, ns, "app", "Refreshing", "Refreshed", timeout=VERDICT_TIMEOUT)
    assert interval_ticks(operator, ns) == 1  # the policy's first tick, and no other
    assert follow_ups(operator, ns) >= 1


def test_a_stalled_refresh_fails_and_is_rolled_back_without_an_interval_tick(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    _, pinned_good = running_good_digest_with_bad_next(cluster, pusher, ns, reg, "follow-stall")
    pusher.push(f"{ns}/app", "prod", seed="follow-stall-bad")  # the tag → the bad digest
    cluster.apply(
        policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod"), rolloutTimeout="30s"),
        namespace=ns,
    )
    reasons = event_reasons(
        cluster, ns, "app", "RefreshFailed", "RollingBack", "RolledBack", timeout=VERDICT_TIMEOUT
    )
    assert reasons.count("RefreshFailed") == 1
    assert images(cluster, ns, "app") == {"app": pinned_good}
    found = target_status(cluster, ns, "app")
    assert found["refreshAttempts"] == 1
    (failed,) = event_messages(cluster, ns, "app", "RefreshFailed")
    assert "made no progress for rolloutTimeout 30s" in failed
    assert interval_ticks(operator, ns) == 1


def test_a_daemonset_progressing_node_by_node_past_rollout_timeout_is_not_failed(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/agent", "prod", seed="slow-old")
    # Each pod becomes Ready 12 s after it is scheduled; one node at a time, on 3 nodes, the
    # rollout needs well over the 30 s rolloutTimeout while it never stops progressing.
    slow = {"imagerefresh.test/ready-after": "12s"}
    cluster.apply(daemonset("agents", f"{reg}/{ns}/agent@{old.digest}", slow), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "daemonset/agents", "--timeout=90s")
    new = pusher.push(f"{ns}/agent", "prod", seed="slow-new")
    cluster.apply(
        policy(
            "control-plane",
            target("agents", "DaemonSet", agent=f"{reg}/{ns}/agent:prod"),
            rolloutTimeout="30s",
            healthyFor="2s",
        ),
        namespace=ns,
    )
    refreshing = reaches(cluster, ns, "agents", "Refreshing")
    started = refreshing["pending"]["startedAt"]

    current = reaches(cluster, ns, "agents", "Current", timeout=180)
    assert daemonset_image(cluster, ns, "agents") == f"{reg}/{ns}/agent@{new.digest}"
    assert current["refreshAttempts"] == 0
    # It did run past rolloutTimeout (timestamps the operator itself recorded).
    took = datetime.fromisoformat(current["lastRefresh"]) - datetime.fromisoformat(started)
    assert took.total_seconds() > 30
    reasons = event_reasons(cluster, ns, "agents", "Refreshed")
    assert "RefreshFailed" not in reasons
    assert "RollingBack" not in reasons


def test_the_same_daemonset_stalled_fails_after_rollout_timeout_without_progress(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    bad = pusher.push(f"{ns}/agent", "prod", seed="stall-bad")
    good = pusher.push(f"{ns}/agent", "prod", seed="stall-good")
    pinned_good = f"{reg}/{ns}/agent@{good.digest}"
    stalls = {
        "imagerefresh.test/ready-after": "12s",
        "imagerefresh.test/never-ready-image": bad.digest,
    }
    cluster.apply(daemonset("agents", pinned_good, stalls), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "daemonset/agents", "--timeout=90s")
    pusher.push(f"{ns}/agent", "prod", seed="stall-bad")  # the tag → the bad digest
    cluster.apply(
        policy(
            "control-plane",
            target("agents", "DaemonSet", agent=f"{reg}/{ns}/agent:prod"),
            rolloutTimeout="30s",
        ),
        namespace=ns,
    )
    event_reasons(cluster, ns, "agents", "RefreshFailed", "RollingBack", timeout=VERDICT_TIMEOUT)
    failed = event_messages(cluster, ns, "agents", "RefreshFailed")
    assert len(failed) == 1
    assert "made no progress for rolloutTimeout 30s" in failed[0]
    eventually(
        lambda: daemonset_image(cluster, ns, "agents") == pinned_good,
        timeout=30,
        what="the rollback to the image the refresh replaced",
    )
    assert interval_ticks(operator, ns) == 1


def test_policies_carry_no_finalizer_and_are_deleted_at_once_with_the_operator_stopped(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    pusher.push(f"{ns}/app", "prod", seed="finalizers")
    tag = f"{reg}/{ns}/app:prod"
    cluster.apply(deployment("app", {"app": tag}, replicas=1), namespace=ns)
    cluster.apply(policy("control-plane", target("app", app=tag)), namespace=ns)
    operator.wait_first_tick(ns, "control-plane")
    assert not cluster.get("irp", "control-plane", "-n", ns)["metadata"].get("finalizers")
    operator.stop()
    try:
        # Nothing of ours holds it: it goes at once although no operator runs.
        cluster.kubectl("delete", "irp", "control-plane", "-n", ns, "--timeout=20s")
    finally:
        operator.start()


def test_a_rollback_an_admission_policy_refuses_is_sent_again_backing_off_not_every_period(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str, deny: Any
) -> None:
    """A failed refresh whose rollback an admission policy refuses stays owed: follow-ups send
    it again 2 s after the first refusal, then 4, 8 … (the status says when), not every 2 s."""
    ns, reg = policy_namespace, operator.registry
    _, pinned_good = running_good_digest_with_bad_next(cluster, pusher, ns, reg, "owed")
    pusher.push(f"{ns}/app", "prod", seed="owed-bad")  # the tag → the bad digest
    cluster.apply(
        policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod"), rolloutTimeout="30s"),
        namespace=ns,
    )
    eventually(
        lambda: target_status(cluster, ns, "app").get("pending", {}).get("generation"),
        timeout=VERDICT_TIMEOUT,
        what="the refresh to land",
    )
    # Now nothing may put the good digest back: the rollback will be refused, for good.
    no_rollback = f"!object.spec.template.spec.containers.exists(c, c.image == '{pinned_good}')"
    deny(f"no-rollback-{ns}", ns, "deployments", "apps", no_rollback)
    probe = ("set", "image", "deployment/app", "-n", ns, f"app={pinned_good}", "--dry-run=server")
    eventually(
        lambda: cluster.kubectl(*probe, check=False).returncode != 0,
        timeout=30,
        what="the admission policy to refuse the rollback",
    )

    def refusals() -> int:
        return int((target_status(cluster, ns, "app").get("pending") or {}).get("refusals", 0))

    eventually(lambda: refusals() >= 4, timeout=VERDICT_TIMEOUT, what="four refusals in a row")
    owed = target_status(cluster, ns, "app")
    assert owed["phase"] == "Refused"
    assert "the rollback stays owed: refused" in owed["message"]
    assert "it is sent again at" in owed["message"]
    # When each send was refused, as the operator logged the ticks that sent them (the status
    # keeps the last only, and a poll of it may miss one between two reads).
    refused = [
        datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
        for entry in operator.log_entries()
        if entry.get("event") == "tick"
        and entry.get("policy") == f"{ns}/control-plane"
        and entry.get("refused")
    ]
    gaps = [(refused[n + 1] - refused[n]).total_seconds() for n in (0, 1, 2)]
    # Each wait is at least the back-off (2, 4, 8 s; the status it is counted from keeps
    # whole seconds).
    assert [gap >= wait - 1 for gap, wait in zip(gaps, (2, 4, 8), strict=True)] == [True] * 3, gaps
    assert images(cluster, ns, "app")["app"] != pinned_good
    assert interval_ticks(operator, ns) == 1  # every send was a follow-up's
