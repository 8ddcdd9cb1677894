"""Policies ticking together read each ServiceAccount and pull secret once, not once each.

Two policies in one namespace, each with a workload pulling through the same ServiceAccount's
pull secret, are planned one after the other by one ticker against the real API server: within
the resolution window the second reads neither again; a ticker without a window reads them for
each policy (an answer is never used after the window it was read in), and so does a tick
someone asked for (a new refresh-now), whatever the window.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from imagerefresh.kube import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.models import Phase
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.ticker import PolicyTicker

from support.cluster_env import Cluster
from support.counting import CountingKubeApi
from support.operator_env import pull_secret
from support.registry_env import ImagePusher
from support.scenario import deployment, policy, target

pytestmark = pytest.mark.cluster

POLICIES = ("first", "second")


@pytest.fixture
def two_policies(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> str:
    """``policy_namespace`` with a ServiceAccount whose pull secret two policies' workloads use."""
    pushed = pusher.push("shared/app", "prod", seed="shared-reads")
    image = f"{registry}/shared/app:prod"
    objects: list[dict[str, Any]] = [
        pull_secret("regcred", {registry: ("reader", "secret")}),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "puller"},
            "imagePullSecrets": [{"name": "regcred"}],
        },
    ]
    for name in POLICIES:
        workload = deployment(f"app-{name}", {"app": f"{registry}/shared/app@{pushed.digest}"})
        workload["spec"]["template"]["spec"]["serviceAccountName"] = "puller"
        objects += [workload, policy(name, target(f"app-{name}", app=image))]
    crd_installed.apply(*objects, namespace=policy_namespace)
    return policy_namespace


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[CountingKubeApi]:
    base = KubeApi.from_environment(cluster.kubeconfig)
    counting = CountingKubeApi(base.connection)
    yield counting
    counting.close()


async def plan_both(
    api: CountingKubeApi, registry: str, namespace: str, window: float, *, ask_second: bool = False
) -> None:
    """Plan both policies with one ticker; ``ask_second``: the second is a tick someone asked
    for (a new refresh-now) instead of a plan."""
    ledger = RateLimitLedger()
    config = OperatorConfig(
        watch_evidence=False, insecure_registries=(registry,), resolution_window=window
    )
    async with RegistryClient(insecure_registries=[registry], ledger=ledger) as client:
        ticker = PolicyTicker(
            api=api,
            resolver=SharedResolver(client, window=window),
            ledger=ledger,
            config=config,
            metrics=Metrics(),
        )
        first, second = POLICIES
        planned = await ticker.plan(namespace, first)
        assert planned is not None
        statuses = [planned[1].status]
        if ask_second:
            ticked = await ticker.tick(namespace, second, asked_at=time.time())
            assert ticked is not None
            assert ticked.applied is not None
            statuses.append(ticked.applied.status)
        else:
            planned = await ticker.plan(namespace, second)
            assert planned is not None
            statuses.append(planned[1].status)
        for status in statuses:
            (target_status,) = status.targets
            assert target_status.phase is not Phase.ERROR, target_status.message


async def test_policies_ticking_together_read_the_service_account_and_secret_once(
    api: CountingKubeApi, registry: str, two_policies: str
) -> None:
    await plan_both(api, registry, two_policies, window=10.0)
    assert api.count("GET", "serviceaccounts") == 1
    assert api.count("GET", "secrets") == 1
    assert api.count("GET", "deployments") == 2  # the workloads themselves are read by each


async def test_without_a_window_each_policy_reads_them_itself(
    api: CountingKubeApi, registry: str, two_policies: str
) -> None:
    await plan_both(api, registry, two_policies, window=0.0)
    assert api.count("GET", "serviceaccounts") == 2
    assert api.count("GET", "secrets") == 2


async def test_a_tick_asked_for_reads_them_anew_within_the_window(
    api: CountingKubeApi, registry: str, two_policies: str
) -> None:
    # A refresh-now after a pull secret was rotated must not run on the secret read before it.
    await plan_both(api, registry, two_policies, window=10.0, ask_second=True)
    assert api.count("GET", "serviceaccounts") == 2
    assert api.count("GET", "secrets") == 2
