"""A build cooling down is pinned when its cooldown ends, with no tick asked for.

This module's operator is the test's own, started with its interval grid a whole interval
away: no interval tick can fall inside the test, so only the wake-up at the cooldown's end can
pin the build. It lives apart from test_gate_scenarios.py, whose module-wide operator would
otherwise tick the same policy alongside it.
"""

from __future__ import annotations

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import ImagePusher
from support.scenario import cooling_policy, images, target_status

pytestmark = pytest.mark.cluster


def test_a_cooled_down_build_is_pinned_when_its_cooldown_ends_with_no_tick_asked_for(
    operator_without_interval_ticks: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    operator = operator_without_interval_ticks
    ns, reg = policy_namespace, operator.registry
    cooling_policy(cluster, pusher, ns, reg, "15s")
    operator.wait_first_tick(ns, "control-plane")
    later = pusher.push(f"{ns}/app", "prod", seed="later")
    operator.tick(ns, "control-plane")
    assert target_status(cluster, ns, "app")["phase"] == "Waiting"
    # No interval tick falls inside this test (the operator's grid starts an interval after
    # it did): only the wake-up at the cooldown's end can pin it now.
    eventually(
        lambda: images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{later.digest}"},
        timeout=90,
        what="the build pinned when its cooldown ended",
    )
