"""One pull budget per account, across policies ticking together, with the operator running.

Two policies whose workloads pull from one registry account tick at the same moment — as two
policies of one interval do by design. A refresh's pulls are made later, by the kubelet, so
the registry's report cannot show them yet: each planned refresh reserves its pulls before any
other tick reads the budget. Five pulls left and two reserved for the kubelet leave three for
refreshes — across both policies, not three each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, running_operator
from support.registry_env import ImagePusher
from support.scenario import deployment, images, policy, status, target

pytestmark = pytest.mark.cluster

POLICIES = {"first": ("r0", "r1", "r2"), "second": ("r3", "r4", "r5")}


@pytest.fixture
def operator(crd_installed: Cluster, registry: str, tmp_path: Path) -> Iterator[Operator]:
    with running_operator(crd_installed, registry, tmp_path / "operator.log") as running:
        assert running.front is not None
        running.front.remaining = 5  # HEADs are free: it stays 5, whatever the ticks ask
        yield running


def test_two_policies_ticking_together_never_spend_one_account_s_pulls_twice(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns = policy_namespace
    assert operator.front is not None
    host = operator.front.host
    old: dict[str, str] = {}
    for names in POLICIES.values():
        for name in names:
            old[name] = (
                f"{host}/{ns}/{name}@"
                + pusher.push(f"{ns}/{name}", "prod", seed=f"shared-{name}-old").digest
            )
            pusher.push(f"{ns}/{name}", "prod", seed=f"shared-{name}-new")
            cluster.apply(deployment(name, {"app": old[name]}, replicas=1), namespace=ns)
    # Settled first: a target still rolling out is not refreshed at all (not Deferred), which
    # on a busy cluster would make the count below a race with kwok.
    for name in old:
        cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=60s")
    # Both policies at once: their first ticks start together.
    cluster.apply(
        *(
            policy(p, *(target(n, app=f"{host}/{ns}/{n}:prod") for n in names))
            for p, names in POLICIES.items()
        ),
        namespace=ns,
    )
    for name in POLICIES:
        operator.wait_first_tick(ns, name)
        operator.tick(ns, name)  # and once more each: the budget still holds the reservation

    phases = {
        t["name"]: t["phase"]
        for name in POLICIES
        for t in eventually(
            lambda name=name: status(cluster, ns, name).get("targets"),
            timeout=30,
            what=f"the status of {name}",
        )
    }
    pinned = [name for name in old if images(cluster, ns, name)["app"] != old[name]]
    assert len(pinned) == 3, phases
    deferred = [n for n, phase in phases.items() if phase == "Deferred"]
    assert len(deferred) == 3, json.dumps(
        [t for name in POLICIES for t in status(cluster, ns, name)["targets"]], indent=1
    )
    message = next(
        t["message"]
        for name in POLICIES
        for t in status(cluster, ns, name)["targets"]
        if t["phase"] == "Deferred"
    )
    assert "and 2 stay reserved for the kubelet" in message
