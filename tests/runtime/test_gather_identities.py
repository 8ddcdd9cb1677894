"""The shell's read half: each registry account is its whole credential, named by its pull secret.

Two workloads of one policy pull with two secrets that share a username; the token service
behind the Docker-Hub-like front checks the password. The wrong secret must be refused by the
registry itself (its target is Error), never served through the token the right one was
granted, and status and metrics must name accounts by pull secret, never by username.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.models import Phase
from imagerefresh.planner import Plan, plan_tick
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.gather import Gathered, gather

from support.cluster_env import Cluster
from support.hub_front import HubFront, user_id
from support.operator_env import kwok_pod_template, pull_secret
from support.registry_env import ImagePusher

pytestmark = pytest.mark.cluster


def policy(image: str, *names: str) -> dict[str, Any]:
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": "control-plane"},
        "spec": {
            "targets": [
                {
                    "kind": "Deployment",
                    "name": name,
                    "containers": [{"name": "app", "image": image}],
                }
                for name in names
            ]
        },
    }


async def gather_and_plan(
    cluster: Cluster, namespace: str, registry: str, *deployments: str
) -> tuple[Gathered, Plan]:
    """One tick of ``control-plane`` in ``namespace``, gathered and planned, nothing applied,
    once ``deployments`` have rolled out (an unsettled workload is only Skipping)."""
    for name in deployments:
        cluster.kubectl("rollout", "status", "-n", namespace, f"deployment/{name}", "--timeout=60s")
    api = KubeApi.from_environment(cluster.kubeconfig)
    found = api.read_policy(namespace, "control-plane")
    assert found is not None
    ledger = RateLimitLedger()
    async with RegistryClient(insecure_registries=[registry], ledger=ledger) as client:
        gathered = await gather(
            found,
            api=api,
            resolver=SharedResolver(client),
            ledger=ledger,
            config=OperatorConfig(),
            now=datetime.now(UTC),
        )
    return gathered, plan_tick(gathered.tick)


def deployment(name: str, image: str, secret: str) -> dict[str, Any]:
    template = kwok_pod_template({"app": image}, labels={"app": name})
    template["spec"]["imagePullSecrets"] = [{"name": secret}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


async def test_a_secret_with_the_right_username_and_a_wrong_password_is_refused_not_served(
    crd_installed: Cluster, hub_front: HubFront, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    hub_front.users = {"alice": "s3cret"}
    pusher.push(f"{ns}/app", "prod", seed="identities")
    image = f"{hub_front.host}/{ns}/app:prod"
    cluster.apply(
        pull_secret("paid-regcred", {hub_front.host: ("alice", "s3cret")}),
        pull_secret("tenant-regcred", {hub_front.host: ("alice", "guessed")}),
        deployment("paid", image, "paid-regcred"),
        deployment("tenant", image, "tenant-regcred"),
        policy(image, "paid", "tenant"),
        namespace=ns,
    )
    gathered, plan = await gather_and_plan(cluster, ns, hub_front.host, "paid", "tenant")

    targets = {target.name: target for target in plan.status.targets}
    assert targets["tenant"].phase is Phase.ERROR
    assert f"pull secret {ns}/tenant-regcred" in targets["tenant"].message
    assert targets["paid"].phase is Phase.REFRESHING
    assert [patch.target.name for patch in plan.patches] == ["paid"]
    # What the registry did: the right password was granted a token and served one manifest;
    # the wrong one was refused by the token service and served nothing.
    tokens = sorted((r.identity, r.status) for r in hub_front.served if r.kind == "token")
    assert tokens == [("?", 401), ("alice", 200)]
    served = [r.identity for r in hub_front.served if r.kind == "manifest" and r.status == 200]
    assert served == ["alice"]
    # Status and metrics name the account by its pull secret, never by its user.
    (budget,) = plan.status.registries
    assert (budget.host, budget.identity) == (hub_front.host, f"{ns}/paid-regcred")
    assert budget.source == user_id("alice")
    metrics = Metrics()
    metrics.record_status(ns, "control-plane", gathered.tick.policy.spec, plan.status)
    labels = {
        sample.labels["identity"]
        for family in metrics.registry.collect()
        if family.name.startswith("imagerefresh_ratelimit")
        for sample in family.samples
    }
    assert labels == {f"{ns}/paid-regcred"}
    shown = plan.status.model_dump_json() + " ".join(str(e) for e in plan.events)
    for secret in ("alice", "s3cret", "guessed"):
        assert secret not in shown


async def test_pull_secrets_holding_one_credential_share_its_token_and_spend_one_budget(
    crd_installed: Cluster, hub_front: HubFront, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    hub_front.users = {"alice": "s3cret"}
    hub_front.remaining = 3  # the account's pulls: with a reserve of 2, one refresh fits
    pusher.push(f"{ns}/app", "prod", seed="shared")
    image = f"{hub_front.host}/{ns}/app:prod"
    shared = policy(image, "one", "two")
    shared["spec"]["pullBudget"] = {"reserve": 2}
    cluster.apply(
        pull_secret("b-regcred", {hub_front.host: ("alice", "s3cret")}),
        pull_secret("a-regcred", {hub_front.host: ("alice", "s3cret")}),
        deployment("one", image, "b-regcred"),
        deployment("two", image, "a-regcred"),
        shared,
        namespace=ns,
    )
    _, plan = await gather_and_plan(cluster, ns, hub_front.host, "one", "two")

    # One account: one token, however many secrets hold it.
    assert [(r.identity, r.status) for r in hub_front.served if r.kind == "token"] == [
        ("alice", 200)
    ]
    # One budget, under one name, spent once: the second refresh would eat into the reserve.
    assert [budget.identity for budget in plan.status.registries] == [f"{ns}/a-regcred"]
    (patch,) = plan.patches
    waiting = [target.phase for target in plan.status.targets if target.name != patch.target.name]
    assert waiting == [Phase.DEFERRED]
