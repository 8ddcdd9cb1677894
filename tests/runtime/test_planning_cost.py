"""What planning the largest policy the CRD admits costs, with the operator running.

A tenant may make its policy as large as admission allows, with lockstep on, against a
registry of its own that answers ``ratelimit-remaining: 1``: 64 Deployments in 32 pairs, each
pair on one tag, every tag moved on. No pair's refreshes fit the budget together, so every
target is deferred. The cost is counted, not timed: how many target decisions the tick made
(the operator logs it with each tick). Each target is decided once, and once more when its
deferral is known — never once per lockstep round per target, which is what let one policy
hold the operator for minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.models import MAX_TARGETS

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, running_operator
from support.registry_env import ImagePusher
from support.scenario import deployment, policy, status, target

pytestmark = pytest.mark.cluster


@pytest.fixture
def operator(crd_installed: Cluster, registry: str, tmp_path: Path) -> Iterator[Operator]:
    with running_operator(crd_installed, registry, tmp_path / "operator.log") as running:
        assert running.front is not None
        running.front.remaining = 1
        yield running


def test_the_largest_admitted_lockstep_policy_costs_two_decisions_per_target(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns = policy_namespace
    assert operator.front is not None
    host = operator.front.host
    workloads: list[dict[str, Any]] = []
    targets: list[dict[str, Any]] = []
    for pair in range(MAX_TARGETS // 2):
        old = pusher.push(f"{ns}/g{pair}", "prod", seed=f"cost-{pair}-old").digest
        pusher.push(f"{ns}/g{pair}", "prod", seed=f"cost-{pair}-new")
        for member in ("a", "b"):
            name = f"w{pair}{member}"
            workloads.append(deployment(name, {"c": f"{host}/{ns}/g{pair}@{old}"}, replicas=1))
            targets.append(target(name, c=f"{host}/{ns}/g{pair}:prod"))
    cluster.apply(*workloads, namespace=ns)
    cluster.kubectl(
        "wait", "--for=condition=Available", "deployment", "--all", "-n", ns, "--timeout=180s"
    )
    cluster.apply(
        policy("control-plane", *targets, lockstep=True, pullBudget={"reserve": 0}),
        namespace=ns,
    )
    operator.wait_first_tick(ns, "control-plane", timeout=120)

    def deferred() -> bool:
        operator.tick(ns, "control-plane", timeout=120)
        return {t["phase"] for t in status(cluster, ns).get("targets", ())} == {"Deferred"}

    eventually(deferred, timeout=180, what="every target to be deferred", interval=1)
    ticks = [
        entry
        for entry in operator.log_entries()
        if entry.get("event") == "tick" and entry.get("policy") == f"{ns}/control-plane"
    ]
    assert ticks
    assert all(tick["decisions"] <= 2 * MAX_TARGETS for tick in ticks), ticks
