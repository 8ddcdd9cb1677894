"""Ticks on watch-fed evidence, against the real API server: decided on a synced copy only.

A synced copy spares the tick its workload and pod reads; a copy that never synced (the RBAC
allows no list or watch) leaves every read to the API server; a copy that lags behind a change
made meanwhile cannot clobber it (the patch's ``test`` ops fail on the API server) and the next
tick decides on the change; a watch that breaks in the middle of a rollout — the API server's
410 Gone, a stream cut under the reader — still ends in the rollout's verdict, decided on the
copy the new list made, with nothing polled and nothing read directly meanwhile (the test
counts both).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.models import WorkloadKind
from imagerefresh.planner import TargetKey
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.scheduler import Scheduler
from imagerefresh.runtime.ticker import PolicyTicker

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually, wait_until_versions_expire
from support.counting import CountingKubeApi
from support.operator_env import deployment_with_policy
from support.registry_env import ImagePusher
from support.scenario import images, target_status

pytestmark = pytest.mark.cluster

POLICY = "control-plane"


def _workload_reads(api: CountingKubeApi, ns: str) -> dict[str, int]:
    """Requests a tick would send for its workload and pods (not the watches' own LISTs)."""
    return {
        "get deployment": api.requests[("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/app")],
        "list pods": api.requests[("GET", f"/api/v1/namespaces/{ns}/pods")],
    }


@contextlib.contextmanager
def _ticker(api: KubeApi, registry: str) -> Iterator[PolicyTicker]:
    ledger = RateLimitLedger()
    client = RegistryClient(insecure_registries=[registry], ledger=ledger)
    ticker = PolicyTicker(
        api=api,
        resolver=SharedResolver(client),
        ledger=ledger,
        config=OperatorConfig(insecure_registries=(registry,), watch_evidence=True),
        metrics=Metrics(),
    )
    try:
        yield ticker
    finally:
        ticker.close()


async def _schema_ready(ticker: PolicyTicker) -> None:
    """Wait until the API server publishes the CRD's schema (a fresh cluster may not yet):
    until then every tick stops at the CRD check and reports it."""
    ticker.crd.recheck_outdated = 0.5
    for _ in range(120):
        if await ticker.crd.problem() is None:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"the CRD's schema never became readable: {await ticker.crd.problem()}")


def _synced(ticker: PolicyTicker, key: TargetKey) -> bool:
    assert ticker.watches is not None
    return ticker.watches.version(key) is not None


async def _caught_up(ticker: PolicyTicker, cluster: Cluster, key: TargetKey) -> None:
    """Wait until the workload's copy holds what the API server holds now (a settled rollout's
    last status): a tick on it then judges what ``kubectl rollout status`` saw."""

    def held() -> bool:
        stored = cluster.get("deployment", key.name, "-n", key.namespace)["metadata"]
        return ticker.watches is not None and ticker.watches.version(key) == str(
            stored["resourceVersion"]
        )

    await asyncio.to_thread(eventually, held, what="the copy to catch up", timeout=30)


def _pinned(cluster: Cluster, ns: str, digest: str) -> bool:
    return str(images(cluster, ns, "app")["app"]).endswith(digest)


async def test_a_tick_on_synced_copies_reads_no_workload_or_pod_and_still_pins_the_new_digest(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="one")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    api = CountingKubeApi.from_environment(cluster.kubeconfig)
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")
    with _ticker(api, registry) as ticker:
        await _schema_ready(ticker)
        await ticker.tick(ns, POLICY)  # starts the copies; read directly meanwhile
        await asyncio.to_thread(
            eventually, lambda: _synced(ticker, key), what="the copies", timeout=30
        )
        await asyncio.to_thread(
            eventually,
            lambda: (
                ticker.watches is not None
                and ticker.watches.pods(ns, {"matchLabels": {"app": "app"}}) is not None
            ),
            what="the pods' copy",
            timeout=30,
        )
        await asyncio.to_thread(cluster.kubectl, "rollout", "status", "-n", ns, "deployment/app")
        await _caught_up(ticker, cluster, key)
        await ticker.tick(ns, POLICY)  # judges the first pin (Current)
        before = _workload_reads(api, ns)
        pushed = pusher.push(f"{ns}/app", "prod", seed="two")
        outcome = await ticker.tick(ns, POLICY)
        assert outcome is not None
        assert outcome.applied is not None
        assert [p.target.name for p in outcome.applied.patched] == ["app"]
        assert _pinned(cluster, ns, pushed.digest)
        assert _workload_reads(api, ns) == before  # the tick read neither


async def test_a_copy_the_rbac_never_lets_sync_is_never_decided_on_every_tick_reads_directly(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    tmp_path: Path,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="one")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    cluster.apply(*_operator_role_without_list_or_watch(ns), namespace=ns)
    kubeconfig = service_account_kubeconfig(cluster, ns, "default", tmp_path / "kc")
    api = CountingKubeApi.from_environment(str(kubeconfig))
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")
    with _ticker(api, registry) as ticker:
        await _schema_ready(ticker)
        first = await ticker.tick(ns, POLICY)
        assert first is not None
        assert first.applied is not None
        assert first.applied.patched  # the tracked tag pinned, on direct reads
        assert ticker.watches is not None
        copy = ticker.watches.covering(key)
        assert copy is None  # the namespace's list and the by-name list were both refused
        await asyncio.to_thread(cluster.kubectl, "rollout", "status", "-n", ns, "deployment/app")
        judged = await ticker.tick(ns, POLICY)  # the first pin settled: Current
        assert judged is not None
        assert judged.applied is not None
        assert judged.applied.status.targets[0].phase.value == "Current"
        pushed = pusher.push(f"{ns}/app", "prod", seed="two")
        before = _workload_reads(api, ns)
        outcome = await ticker.tick(ns, POLICY)
        assert outcome is not None
        assert outcome.applied is not None
        assert [p.target.name for p in outcome.applied.patched] == ["app"]
        assert _pinned(cluster, ns, pushed.digest)
        after = _workload_reads(api, ns)
        assert after["get deployment"] > before["get deployment"]
        assert after["list pods"] > before["list pods"]


def _operator_role_without_list_or_watch(ns: str) -> list[dict[str, Any]]:
    """What a tick needs and no more: no list or watch of workloads, no watch of pods."""
    rules = [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {
            "apiGroups": ["images.tracebloc.io"],
            "resources": ["imagerefreshpolicies"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["images.tracebloc.io"],
            "resources": ["imagerefreshpolicies/status"],
            "verbs": ["update", "patch"],
        },
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "operator"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "operator"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "operator",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
        },
    ]


async def test_a_change_behind_a_lagging_copy_fails_the_patch_s_precondition_and_is_not_clobbered(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="one")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    api = CountingKubeApi.from_environment(cluster.kubeconfig)
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")
    with _ticker(api, registry) as ticker:
        await _schema_ready(ticker)
        await ticker.tick(ns, POLICY)
        await asyncio.to_thread(
            eventually, lambda: _synced(ticker, key), what="the copies", timeout=30
        )
        await asyncio.to_thread(cluster.kubectl, "rollout", "status", "-n", ns, "deployment/app")
        await _caught_up(ticker, cluster, key)
        first = await ticker.tick(ns, POLICY)  # judges the first pin on the synced copy
        assert first is not None
        assert first.applied is not None
        assert first.applied.status.targets[0].phase.value == "Current"
        assert ticker.watches is not None
        copy = ticker.watches.covering(key)
        assert copy is not None
        copy.hold()  # the copy lags: what the API server says next is not in it yet
        hotfix = f"{registry}/{ns}/app:hotfix"
        cluster.kubectl("set", "image", "-n", ns, "deployment/app", f"app={hotfix}")
        pusher.push(f"{ns}/app", "prod", seed="two")
        reads = _workload_reads(api, ns)
        stale = await ticker.tick(ns, POLICY)
        assert _workload_reads(api, ns)["get deployment"] == reads["get deployment"]
        assert stale is not None
        assert stale.applied is not None
        assert stale.applied.patched == []
        assert [p.target.name for p in stale.applied.conflicted] == ["app"]
        assert images(cluster, ns, "app")["app"] == hotfix  # not clobbered
        assert "nothing was overwritten" in target_status(cluster, ns, "app")["message"]
        copy.release()
        await asyncio.to_thread(cluster.kubectl, "rollout", "status", "-n", ns, "deployment/app")
        stored = cluster.get("deployment", "app", "-n", ns)["metadata"]["resourceVersion"]
        await asyncio.to_thread(
            eventually,
            lambda: copy.version_of("app") == stored,
            what="the copy to catch up with the hotfix's settled rollout",
            timeout=30,
        )
        fresh = await ticker.tick(ns, POLICY)
        assert fresh is not None
        assert fresh.applied is not None
        assert [p.changes[0].expected for p in fresh.applied.patched] == [hotfix]


class _Gated(Scheduler):
    """The operator's scheduler, with two things a test needs: a gate no tick passes while it
    is closed (the tick is due, and runs once it opens), and a count of the reads of rollouts
    it polls (``polled``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = asyncio.Event()
        self.gate.set()
        self.polled = 0

    async def _tick(self, policy: Any, follow_up: bool, *, aside: bool = False) -> None:
        await self.gate.wait()
        await super()._tick(policy, follow_up, aside=aside)

    async def _version(self, key: TargetKey) -> str | None:
        self.polled += 1
        return await super()._version(key)


# Rollouts no synced watch reports are read this often: never within a test. Only the watches
# (the stream, or the list that replaces a broken one) can bring a rollout's change here.
NEVER_POLLED = 86_400.0


@contextlib.asynccontextmanager
async def _scheduling(ticker: PolicyTicker, ns: str) -> AsyncIterator[_Gated]:
    """The operator's scheduler over ``ticker``, with one policy on a 15-minute interval, and
    no poll of rollouts within the test."""
    scheduler = _Gated(ticker, phase=0.0, follow_period=NEVER_POLLED)
    uid = f"{ns}/{POLICY}"
    scheduler.observe(uid, ns, POLICY, 900.0, {"spec": 1})
    task = asyncio.create_task(scheduler.run())
    try:
        yield scheduler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await scheduler.stop()


@pytest.mark.parametrize("fault", ["410 Gone", "stream cut"])
async def test_a_watch_broken_mid_rollout_still_yields_the_verdict_decided_on_the_new_list(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    fault: str,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="one")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    api = CountingKubeApi.from_environment(cluster.kubeconfig)
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")

    def phase() -> str | None:
        found = target_status(cluster, ns, "app").get("phase")
        return str(found) if found is not None else None

    def current_on(digest: str) -> bool:
        return phase() == "Current" and _pinned(cluster, ns, digest)

    if fault == "410 Gone":
        await asyncio.to_thread(
            wait_until_versions_expire, cluster, f"/apis/apps/v1/namespaces/{ns}/deployments"
        )
    with _ticker(api, registry) as ticker:
        await _schema_ready(ticker)
        async with _scheduling(ticker, ns) as scheduler:
            await asyncio.to_thread(
                eventually, lambda: phase() == "Current", what="the first pin", timeout=60
            )
            await asyncio.to_thread(
                eventually, lambda: _synced(ticker, key), what="the copies", timeout=30
            )
            assert ticker.watches is not None
            copy = ticker.watches.covering(key)
            assert copy is not None
            lists = copy.lists
            copy.hold()  # nothing the stream delivers from here is applied until released
            pushed = pusher.push(f"{ns}/app", "prod", seed="two")
            scheduler.observe(f"{ns}/{POLICY}", ns, POLICY, 900.0, {"spec": 1, "refresh_now": "a"})
            await asyncio.to_thread(
                eventually,
                lambda: _pinned(cluster, ns, pushed.digest),
                what="the refresh's patch",
                timeout=60,
            )
            await asyncio.to_thread(
                cluster.kubectl, "rollout", "status", "-n", ns, "deployment/app", "--timeout=60s"
            )
            assert phase() == "Refreshing"  # settled, but no event and no poll told anyone
            # The break. Until the copy is listed again, no tick runs (a follow-up may fall due
            # meanwhile: the events the broken stream still hands over ask for one).
            scheduler.gate.clear()
            reads = _workload_reads(api, ns)
            if fault == "410 Gone":
                copy.resume_from("1")  # long compacted: the API server answers 410
            else:
                copy.cut()
            copy.release()
            await asyncio.to_thread(
                eventually,
                lambda: copy.lists > lists and copy.synced,
                what="a new list",
                timeout=30,
            )
            scheduler.gate.set()
            await asyncio.to_thread(
                eventually,
                lambda: current_on(pushed.digest),
                what="the verdict after the new list",
                timeout=60,
            )
            # Decided on the copy: no tick read the workload or its pods, nothing was polled.
            assert _workload_reads(api, ns) == reads
            assert scheduler.polled == 0
