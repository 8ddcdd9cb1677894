"""Which policy claims a container, with the operator running: only one that may reach it.

Anyone who may create a policy in their own namespace can name any workload. A declaration
outside what the operator's allow-list lets that policy reach must have no effect on anyone
else: the rightful owner's target keeps refreshing (no Conflict), and the tenant's own target
says why it is refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import ImagePusher
from support.scenario import deployment, images, policy, settle, target, target_status

pytestmark = pytest.mark.cluster


@pytest.fixture
def tenant_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"irp-tenant-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_a_tenant_naming_another_namespace_s_workload_never_makes_its_owner_a_conflict(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    tenant_namespace: str,
) -> None:
    owner, tenant, reg = policy_namespace, tenant_namespace, operator.registry
    old = pusher.push(f"{owner}/jobs-manager", "prod", seed="claims-old").digest
    new = pusher.push(f"{owner}/jobs-manager", "prod", seed="claims-new").digest
    repo = f"{reg}/{owner}/jobs-manager"
    cluster.apply(deployment("jobs-manager", {"api": f"{repo}@{old}"}, replicas=1), namespace=owner)
    # The tenant's policy is there first, naming the owner's container (no allow-list pair).
    grab = target("jobs-manager", api=f"{repo}:prod")
    grab["namespace"] = owner
    cluster.apply(policy("control-plane", grab), namespace=tenant)
    operator.wait_first_tick(tenant, "control-plane")
    refused = target_status(cluster, tenant, "jobs-manager")
    assert refused["phase"] == "Conflict"
    assert "allow-list does not permit it" in refused["message"]

    cluster.apply(
        policy("control-plane", target("jobs-manager", api=f"{repo}:prod"), healthyFor="2s"),
        namespace=owner,
    )
    operator.wait_first_tick(owner, "control-plane")
    current = settle(operator, cluster, owner, "jobs-manager")
    assert images(cluster, owner, "jobs-manager") == {"api": f"{repo}@{new}"}
    assert f"policy {tenant}/control-plane" not in current["message"]
    # And it stays so: the tenant's later ticks change nothing for the owner.
    operator.tick(tenant, "control-plane")
    operator.tick(owner, "control-plane")
    assert target_status(cluster, owner, "jobs-manager")["phase"] == "Current"
    eventually(
        lambda: target_status(cluster, tenant, "jobs-manager")["phase"] == "Conflict",
        timeout=10,
        what="the tenant's target to stay refused",
    )
