"""The shell's write half against the real API server: a concurrent edit is never clobbered."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.planner import permits, plan_tick
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.apply import apply_plan
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.gather import gather
from imagerefresh.runtime.ticker import PolicyTicker

from support.cluster_env import Cluster
from support.operator_env import deployment_with_policy
from support.registry_env import ImagePusher
from support.ticks import without_offline

pytestmark = pytest.mark.cluster


async def test_a_concurrent_edit_between_read_and_patch_is_refused_and_retried_next_tick(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="race")
    tag = f"{registry}/{ns}/app:prod"
    deployment_with_policy(cluster, ns, tag)
    api = KubeApi.from_environment(cluster.kubeconfig)
    ledger = RateLimitLedger()
    client = RegistryClient(insecure_registries=[registry], ledger=ledger)
    resolver = SharedResolver(client)
    config = OperatorConfig(watch_evidence=False, insecure_registries=(registry,))
    now = datetime.now(UTC).replace(microsecond=0)

    policy = api.read_policy(ns, "control-plane")
    assert policy is not None
    gathered = await gather(
        policy, api=api, resolver=resolver, ledger=ledger, config=config, now=now
    )
    plan = plan_tick(gathered.tick)
    assert len(plan.patches) == 1
    hotfix = f"{registry}/{ns}/app:hotfix"
    cluster.kubectl("set", "image", "-n", ns, "deployment/app", f"app={hotfix}")

    events = EventRecorder(api)
    applied = await apply_plan(plan, policy, gathered, api, now, events, permits(gathered.tick))
    assert applied.conflicted == list(plan.patches)
    assert applied.patched == []
    assert applied.refused == []  # a concurrent edit is not a refusal
    stored = cluster.get("deployment", "app", "-n", ns)
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == hotfix
    target = applied.status.targets[0]
    assert target.pending is None
    assert target.refresh_attempts == 0
    assert "nothing was overwritten" in target.message
    assert [e.reason for e in without_offline(applied.events)] == ["PatchConflict"]
    assert events.wait_idle(30)
    posted = cluster.get("events", "-n", ns, "--field-selector", "involvedObject.name=app")
    assert "PatchConflict" in [e["reason"] for e in posted["items"]]
    written = cluster.get("irp", "control-plane", "-n", ns)["status"]
    assert written["targets"][0].get("pending") is None

    ticker = PolicyTicker(
        api=api, resolver=resolver, ledger=ledger, config=config, metrics=Metrics()
    )
    outcome = await ticker.tick(ns, "control-plane")
    assert outcome is not None
    assert outcome.applied is not None
    assert [p.target.name for p in outcome.applied.patched] == ["app"]
    assert outcome.applied.patched[0].changes[0].expected == hotfix
    await client.aclose()
