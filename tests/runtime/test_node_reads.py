"""The nodes are listed once per round of ticks, for every policy, against the real API server.

Five policies of two targets each tick together through one ticker, as a round of the tick
grid runs them: they cost one node LIST between them, not one per policy or target, and each
target's offline verdict is judged on it. A round after the list's lifetime reads the nodes
again; callers that ask at once share the read in flight even without a lifetime; a list the
RBAC refuses is an explained unknown; with node reads off no node is read at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.models import PolicyStatus
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.nodes import NodeReads
from imagerefresh.runtime.ticker import PolicyTicker

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster
from support.counting import CountingKubeApi
from support.registry_env import ImagePusher
from support.scenario import deployment, policy, target

pytestmark = pytest.mark.cluster

POLICIES = [f"p{i}" for i in range(5)]
NODE_LIST = ("GET", "/api/v1/nodes")


@pytest.fixture
def five_policies(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> str:
    """Five policies in ``policy_namespace``, each with two Deployments of its own, rolled out."""
    pushed = pusher.push(f"{policy_namespace}/app", "prod", seed="node-reads")
    pinned = f"{registry}/{policy_namespace}/app@{pushed.digest}"
    tracked = f"{registry}/{policy_namespace}/app:prod"
    objects: list[dict[str, Any]] = []
    for name in POLICIES:
        workloads = [f"{name}-a", f"{name}-b"]
        objects += [deployment(w, {"app": pinned}, replicas=1) for w in workloads]
        objects.append(policy(name, *(target(w, app=tracked) for w in workloads)))
    crd_installed.apply(*objects, namespace=policy_namespace)
    for name in POLICIES:
        for workload in (f"{name}-a", f"{name}-b"):
            crd_installed.kubectl(
                "rollout", "status", "-n", policy_namespace, f"deployment/{workload}",
                "--timeout=60s",
            )  # fmt: skip
    return policy_namespace


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[CountingKubeApi]:
    base = KubeApi.from_environment(cluster.kubeconfig)
    counting = CountingKubeApi(base.connection)
    yield counting
    counting.close()


async def tick_all(
    api: CountingKubeApi, registry: str, namespace: str, config: OperatorConfig, rounds: int = 1
) -> list[PolicyStatus]:
    """Tick every policy together (one round), ``rounds`` times with one ticker; the statuses
    of the last round."""
    ledger = RateLimitLedger()
    async with RegistryClient(insecure_registries=[registry], ledger=ledger) as client:
        ticker = PolicyTicker(
            api=api,
            resolver=SharedResolver(client, window=config.resolution_window),
            ledger=ledger,
            config=config,
            metrics=Metrics(),
        )
        statuses: list[PolicyStatus] = []
        for round in range(rounds):
            if round:
                await asyncio.sleep(config.node_list_lifetime + 0.1)
            outcomes = await asyncio.gather(*(ticker.tick(namespace, p) for p in POLICIES))
            statuses = []
            for outcome in outcomes:
                assert outcome is not None
                assert outcome.applied is not None
                statuses.append(outcome.applied.status)
        return statuses


def offline_reasons(statuses: list[PolicyStatus]) -> list[str]:
    reasons = []
    for status in statuses:
        for target_status in status.targets:
            for container in target_status.containers:
                assert container.offline is not None, target_status
                reasons.append(container.offline.reason)
    assert len(reasons) == 2 * len(POLICIES)
    return reasons


async def test_policies_ticking_in_one_round_share_one_node_list(
    api: CountingKubeApi, registry: str, five_policies: str
) -> None:
    # Two tick slots: the round runs in waves, as a round of more policies than slots does, so
    # later waves find the list already read (not only in flight).
    config = OperatorConfig(
        watch_evidence=False, insecure_registries=(registry,), read_nodes=True, tick_concurrency=2
    )
    statuses = await tick_all(api, registry, five_policies, config)
    assert api.requests[NODE_LIST] == 1  # ten targets of five policies: one LIST
    # Judged on the nodes read: every pod here proves its own node, so every target is ready.
    assert set(offline_reasons(statuses)) == {"every pod would restart from its node's cache"}


async def test_each_round_after_the_lists_lifetime_reads_the_nodes_again(
    api: CountingKubeApi, registry: str, five_policies: str
) -> None:
    config = OperatorConfig(
        watch_evidence=False,
        insecure_registries=(registry,),
        read_nodes=True,
        node_list_lifetime=1.0,
    )
    await tick_all(api, registry, five_policies, config, rounds=2)
    assert api.requests[NODE_LIST] == 2


async def test_callers_asking_at_once_share_the_read_in_flight_even_without_a_lifetime(
    api: CountingKubeApi,
) -> None:
    reads = NodeReads(api, OperatorConfig(read_nodes=True, node_list_lifetime=0))
    answers = await asyncio.gather(*(reads.current() for _ in range(10)))
    assert api.requests[NODE_LIST] == 1
    assert all(answer is answers[0] and answer is not None for answer in answers)
    assert answers[0] is not None
    assert (answers[0].complete, answers[0].unreadable) == (True, None)
    await reads.current()  # the read is done and has no lifetime: the next asks again
    assert api.requests[NODE_LIST] == 2


async def test_a_tick_asked_for_takes_no_node_list_from_before_it_was_asked(
    api: CountingKubeApi,
) -> None:
    reads = NodeReads(api, OperatorConfig(read_nodes=True, node_list_lifetime=60))
    await reads.current()
    await reads.current()
    assert api.requests[NODE_LIST] == 1
    await reads.current(asked_at=time.time() + 0.001)  # a refresh-now asked after that read
    assert api.requests[NODE_LIST] == 2


async def test_with_node_reads_off_no_node_is_read_and_the_verdicts_say_so(
    api: CountingKubeApi, registry: str, five_policies: str
) -> None:
    config = OperatorConfig(watch_evidence=False, insecure_registries=(registry,))
    statuses = await tick_all(api, registry, five_policies, config)
    assert api.requests[NODE_LIST] == 0
    assert len(offline_reasons(statuses)) == 2 * len(POLICIES)
    assert await NodeReads(api, config).current() is None


async def test_a_node_list_the_rbac_refuses_is_unknown_saying_what_to_grant(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = service_account_kubeconfig(cluster, namespace, "default", tmp_path / "kc")
    refused = KubeApi.from_environment(str(kubeconfig))
    try:
        inventory = await NodeReads(refused, OperatorConfig(read_nodes=True)).current()
    finally:
        refused.close()
    assert inventory is not None
    assert dict(inventory.nodes) == {}
    assert inventory.complete is False
    assert inventory.unreadable is not None
    assert "list nodes: forbidden" in inventory.unreadable
    assert "offline.readNodes" in inventory.unreadable
