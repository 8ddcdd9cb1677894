"""An operator not allowed to create pods (no `--pre-pull-pods`, the chart's default) never
switches a workload whose policy asks for prePull: the refresh holds and says how to allow it.

A module of its own: an operator with pod powers in the same module would act on the policy.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.prepull import agents, helper_pods, template_image
from support.registry_env import ImagePusher
from support.scenario import event_reasons, policy, target, target_status

pytestmark = pytest.mark.cluster


def test_an_operator_that_may_not_create_pods_holds_a_pre_pull_refresh_and_says_so(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/agent", "prod", seed=f"pre-no-{secrets.token_hex(3)}")
    agents(cluster, ns, f"{reg}/{ns}/agent@{old.digest}")
    pusher.push(f"{ns}/agent", "prod", seed=f"pre-no-new-{secrets.token_hex(3)}")
    cluster.apply(
        policy(
            "control-plane",
            target("agents", "DaemonSet", agent=f"{reg}/{ns}/agent:prod"),
            prePull=True,
        ),
        namespace=ns,
    )
    operator.tick(ns, "control-plane")

    def held() -> dict[str, Any] | None:
        found = target_status(cluster, ns, "agents")
        return found if found["phase"] == "Waiting" else None

    found = eventually(held, timeout=60, what="the refresh held", interval=1)
    assert "prePull.enabled=true" in found["message"]
    assert template_image(cluster, ns) == f"{reg}/{ns}/agent@{old.digest}"
    assert helper_pods(cluster, ns) == []
    assert "PrePullNotAllowed" in event_reasons(cluster, ns, "agents", "PrePullNotAllowed")
