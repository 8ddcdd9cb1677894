"""Pull-policy awareness on the real API server: a target pulled ``Always`` is reported in
status and warned about once per policy generation, however many ticks run."""

from __future__ import annotations

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import ImagePusher
from support.scenario import deployment, event_messages, policy, settle, target, target_status

pytestmark = pytest.mark.cluster


def test_a_deployment_pulled_always_is_reported_and_warned_about_once_per_generation(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, operator.registry
    pushed = pusher.push(f"{ns}/app", "prod", seed="pull-always")
    workload = deployment("app", {"app": f"{reg}/{ns}/app@{pushed.digest}"}, replicas=1)
    workload["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    cluster.apply(workload, namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    cluster.apply(policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod")), namespace=ns)
    operator.wait_first_tick(ns, "control-plane")
    found = settle(operator, cluster, ns, "app")
    assert found["containers"][0]["pullPolicy"] == "Always"

    def warned(count: int) -> list[str] | None:
        messages = event_messages(cluster, ns, "app", "PullPolicyAlways")
        return messages if len(messages) >= count else None

    (message,) = eventually(lambda: warned(1), timeout=30, what="one PullPolicyAlways event")
    assert "container 'app' of Deployment" in message
    assert "IfNotPresent" in message
    for _ in range(3):
        operator.tick(ns, "control-plane")
    assert target_status(cluster, ns, "app")["phase"] == "Current"  # a warning, not a failure

    # A new policy generation warns once more (the spec change ticks the policy at once).
    cluster.kubectl(
        "patch",
        "irp",
        "control-plane",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"maxSkipTicks":9}}',
    )
    eventually(lambda: warned(2), timeout=30, what="a second PullPolicyAlways event")
    for _ in range(2):
        operator.tick(ns, "control-plane")
    operator.tick(ns, "control-plane")
    assert len(event_messages(cluster, ns, "app", "PullPolicyAlways")) == 2
