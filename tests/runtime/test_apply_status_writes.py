"""Status writes on the real API server: never blindly over someone else's status.

A status PUT carries the resourceVersion the tick read. When it meets a 409, the write is
retried on the fresh object only if nobody changed the status or the spec meanwhile (an
annotation or kopf's bookkeeping may change); otherwise the tick's view is stale and the write
— and, for a plan with patches, every patch — is given up.

The intent records the generation its patch produces. A patch that lands where the intent said
needs no second write; one that lands after someone else's spec write records what it produced.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.planner import permits, plan_tick
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.apply import Applied, apply_plan
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.gather import gather

from support.cluster_env import Cluster
from support.counting import CountingKubeApi
from support.operator_env import deployment_with_policy
from support.registry_env import ImagePusher

pytestmark = pytest.mark.cluster


async def _plan_then(
    cluster: Cluster, registry: str, ns: str, meanwhile: list[str], api: KubeApi | None = None
) -> Applied:
    """Gather and plan a tick, run ``kubectl meanwhile`` (if any), then apply the plan."""
    api = api or KubeApi.from_environment(cluster.kubeconfig)
    ledger = RateLimitLedger()
    async with RegistryClient(insecure_registries=[registry], ledger=ledger) as client:
        policy = api.read_policy(ns, "control-plane")
        assert policy is not None
        now = datetime.now(UTC).replace(microsecond=0)
        gathered = await gather(
            policy,
            api=api,
            resolver=SharedResolver(client),
            ledger=ledger,
            config=OperatorConfig(insecure_registries=(registry,)),
            now=now,
        )
        plan = plan_tick(gathered.tick)
        assert len(plan.patches) == 1
        if meanwhile:
            cluster.kubectl(*meanwhile)
        events = EventRecorder(api)
        applied = await apply_plan(plan, policy, gathered, api, now, events, permits(gathered.tick))
        events.wait_idle(30)
        return applied


async def test_a_status_someone_else_wrote_meanwhile_is_not_overwritten_and_nothing_is_patched(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="stale-status")
    tag = f"{registry}/{ns}/app:prod"
    deployment_with_policy(cluster, ns, tag)
    theirs = {"status": {"lastReset": "written-by-someone-else"}}
    applied = await _plan_then(
        cluster,
        registry,
        ns,
        ["patch", "irp", "control-plane", "-n", ns, "--subresource=status", "--type=merge",
         "-p", json.dumps(theirs)],
    )  # fmt: skip
    assert applied.held
    stored = cluster.get("irp", "control-plane", "-n", ns)["status"]
    assert stored == theirs["status"]
    image = cluster.get("deployment", "app", "-n", ns)["spec"]["template"]["spec"]
    assert image["containers"][0]["image"] == tag


async def test_an_annotation_added_meanwhile_does_not_stop_the_write(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="annotated")
    tag = f"{registry}/{ns}/app:prod"
    deployment_with_policy(cluster, ns, tag)
    applied = await _plan_then(
        cluster, registry, ns, ["annotate", "irp", "control-plane", "-n", ns, "someone=else"]
    )
    assert len(applied.patched) == 1
    stored = cluster.get("irp", "control-plane", "-n", ns)["status"]
    assert stored["targets"][0]["phase"] == "Refreshing"
    assert stored["targets"][0]["pending"]["generation"] == 2


def _generation(cluster: Cluster, ns: str) -> int:
    return int(cluster.get("deployment", "app", "-n", ns)["metadata"]["generation"])


async def test_a_patch_landing_where_its_intent_said_is_recorded_by_the_intent_alone(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="predicted")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    read = _generation(cluster, ns)
    api = CountingKubeApi.from_environment(cluster.kubeconfig)
    applied = await _plan_then(cluster, registry, ns, [], api)
    assert len(applied.patched) == 1
    assert _generation(cluster, ns) == read + 1
    stored = cluster.get("irp", "control-plane", "-n", ns)["status"]
    assert stored["targets"][0]["pending"]["generation"] == read + 1
    assert api.count("PUT", "imagerefreshpolicies") == 1  # the intent; no outcome write


async def test_a_spec_change_before_the_patch_lands_records_the_generation_it_produced(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="scaled-meanwhile")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    read = _generation(cluster, ns)
    api = CountingKubeApi.from_environment(cluster.kubeconfig)
    scale = ["scale", "deployment", "app", "-n", ns, "--replicas=2"]
    applied = await _plan_then(cluster, registry, ns, scale, api)
    assert len(applied.patched) == 1  # the scale left the images alone: the tests held
    produced = _generation(cluster, ns)
    assert produced == read + 2
    stored = cluster.get("irp", "control-plane", "-n", ns)["status"]
    assert stored["targets"][0]["pending"]["generation"] == produced
    assert api.count("PUT", "imagerefreshpolicies") == 2  # the intent, then what it produced
