"""Ticks on watch-fed evidence, against the real API server: decided on a synced copy only.

A synced copy spares the tick its workload and pod reads; a copy that never synced (the RBAC
allows no list or watch) leaves every read to the API server; a copy that lags behind a change
made meanwhile cannot clobber it (the patch's ``test`` ops fail on the API server) and the next
tick decides on the change; a watch that breaks in the middle of a rollout — the API server's
410 Gone, a stream cut under the reader — still ends in the rollout's verdict, decided on the
copy the new list made, with nothing polled and nothing read directly meanwhile (the test
counts both).
Policies here are judged as they settle (``healthyFor: 0s``): these tests are about the copies;
the health window's own following of pods is in test_rollout_following and test_scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.watch import SILENT_AFTER, Collection
from imagerefresh.metrics import Metrics
from imagerefresh.models import WorkloadKind
from imagerefresh.planner import ObservedPod, TargetKey, Workload
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.scheduler import DEFAULT_FOLLOW_PERIOD, Scheduler
from imagerefresh.runtime.ticker import PolicyTicker

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually, wait_until_versions_expire
from support.counting import CountingKubeApi
from support.operator_env import deployment_with_policy
from support.registry_env import ImagePusher
from support.scenario import (
    event_reasons,
    images,
    policy,
    running_good_digest_with_bad_next,
    target,
    target_status,
)

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
        # The API server's version is read again each time: a controller's status write after
        # the rollout settled moves it on, and the copy then has to catch up with that one.
        stored = str(
            cluster.get("deployment", key.name, "-n", key.namespace)["metadata"]["resourceVersion"]
        )
        assert ticker.watches is not None
        copied = ticker.watches.version(key)
        assert copied == stored, f"the copy holds version {copied!r}, the API server {stored!r}"
        return True

    await asyncio.to_thread(eventually, held, what="the copy to catch up", timeout=30)


def _pinned(cluster: Cluster, ns: str, digest: str) -> bool:
    return str(images(cluster, ns, "app")["app"]).endswith(digest)


async def test_a_tick_on_synced_copies_reads_no_workload_or_pod_and_still_pins_the_new_digest(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    pusher.push(f"{ns}/app", "prod", seed="one")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod", healthyFor="0s")
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
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod", healthyFor="0s")
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
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod", healthyFor="0s")
    api = CountingKubeApi.from_environment(cluster.kubeconfig)
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")
    with _ticker(api, registry) as ticker:
        await _schema_ready(ticker)
        # The copy is held while the test pushes and ticks, which takes what the machine takes;
        # held, it hears nothing, so its silence is measured on a clock that stands still.
        _freeze_silence(ticker, [0.0])
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
        await _caught_up(ticker, cluster, key)  # with the hotfix's settled rollout
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
async def _scheduling(
    ticker: PolicyTicker, ns: str, *, polled: bool = True
) -> AsyncIterator[_Gated]:
    """The operator's scheduler over ``ticker``, with one policy on a 15-minute interval;
    ``polled=False``: no poll of rollouts within the test."""
    period = DEFAULT_FOLLOW_PERIOD if polled else NEVER_POLLED
    scheduler = _Gated(ticker, phase=0.0, follow_period=period)
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
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod", healthyFor="0s")
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
        async with _scheduling(ticker, ns, polled=False) as scheduler:
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


# --- read your own writes, and silence ------------------------------------------------------

SELECTOR = {"matchLabels": {"app": "app"}}


async def _copies_synced(ticker: PolicyTicker, key: TargetKey) -> Collection[Any]:
    """Start the copies of ``key``'s workload and its namespace's pods (as a tick would) and
    wait until both are synced; the workload's copy."""
    watches = ticker.watches
    assert watches is not None
    watches.workload(key)
    watches.pods(key.namespace, SELECTOR)
    await asyncio.to_thread(
        eventually,
        lambda: watches.workload(key)[0] and watches.pods(key.namespace, SELECTOR) is not None,
        what="the copies",
        timeout=30,
    )
    copy = watches.covering(key)
    assert copy is not None
    return copy


def _freeze_silence(ticker: PolicyTicker, offset: list[float]) -> None:
    """The copies measure silence on a clock that stands still but for ``offset``, which the
    test moves: however long the machine takes, a stream falls silent only when told to."""
    assert ticker.watches is not None
    frozen = time.monotonic()
    ticker.watches.clock = lambda: frozen + offset[0]


def _hold_once_it_holds(copy: Collection[Any], image: str) -> None:
    """Hold ``copy`` right after it applies the first event whose workload names ``image``:
    the stream stalls after our patch's first event (no event, no bookmark after it)."""
    told = copy.changed

    def changed(name: str, version: str) -> None:
        _, kept = copy.get(name)
        if kept is not None and image in kept.raw.decode():
            copy.hold()
        if told is not None:
            told(name, version)

    copy.changed = changed


def _rolled_out_cleanly(cluster: Cluster, ns: str, digest: str) -> bool:
    found = target_status(cluster, ns, "app")
    return found.get("phase") == "Current" and _pinned(cluster, ns, digest)


async def test_a_copy_held_behind_our_own_patch_still_rolls_a_failing_build_back_and_bars_it(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    """The copy never sees our patch. Read from it, our landed patch would look reverted (a
    contested attempt, the refresh dropped, the failing build never rolled back nor barred);
    the operator remembers the generation its patch produced and reads the workload directly
    until the copy has it."""
    cluster, ns = crd_installed, policy_namespace
    bad, good = running_good_digest_with_bad_next(
        cluster, pusher, ns, registry, "held", progressDeadlineSeconds=2
    )
    api = KubeApi.from_environment(cluster.kubeconfig)
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")
    with _ticker(api, registry) as ticker:
        _freeze_silence(ticker, [0.0])  # never silent: the copy only lags
        await _schema_ready(ticker)
        copy = await _copies_synced(ticker, key)
        copy.hold()  # from here on the copy lags: our patches never reach it
        pusher.push(f"{ns}/app", "prod", seed="held-bad")  # the tag → the failing build
        cluster.apply(
            policy("control-plane", target("app", app=f"{registry}/{ns}/app:prod")), namespace=ns
        )
        async with _scheduling(ticker, ns):
            reasons = await asyncio.to_thread(
                event_reasons, cluster, ns, "app", "RefreshFailed", "RolledBack", timeout=120
            )
        assert "Contested" not in reasons
        assert images(cluster, ns, "app") == {"app": good}
        found = target_status(cluster, ns, "app")
        assert [f["digest"] for f in found["failed"]] == [bad]
        assert (found["refreshAttempts"], found.get("contested", 0)) == (1, 0)
        synced, kept = copy.get("app")
        assert synced  # the copy claimed to be synced throughout ...
        assert kept is not None
        assert good in kept.raw.decode()  # ... on the workload before our patch
        assert copy.lists == 1
        copy.release()


@pytest.mark.parametrize("silence", ["past 90 s", "within a short deadline"])
async def test_a_stream_silent_mid_rollout_still_yields_the_verdict_and_bars_nothing(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    silence: str,
) -> None:
    """The workload's stream delivers our patch's first event, then nothing: no event, no
    bookmark. Read from the copy, the healthy rollout would make no progress and be rolled back,
    its good build barred. Past 90 s of silence the copy is unsynced and the workload read
    directly (the clock the copies measure silence on is moved, never slept through); within a
    deadline shorter than that, the deadline's verdict reads the workload directly."""
    cluster, ns = crd_installed, policy_namespace
    old = pusher.push(f"{ns}/app", "prod", seed="silent-old")
    pinned = f"{registry}/{ns}/app@{old.digest}"
    deployment_with_policy(
        cluster, ns, pinned, tracked=f"{registry}/{ns}/app:prod", healthyFor="0s"
    )
    if silence == "within a short deadline":
        cluster.kubectl(
            "patch", "irp", POLICY, "-n", ns, "--type=merge", "-p",
            '{"spec": {"rolloutTimeout": "30s"}}',
        )  # fmt: skip
    api = KubeApi.from_environment(cluster.kubeconfig)
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")
    offset = [0.0]
    with _ticker(api, registry) as ticker:
        _freeze_silence(ticker, offset)
        await _schema_ready(ticker)
        async with _scheduling(ticker, ns) as scheduler:
            await asyncio.to_thread(
                eventually,
                lambda: target_status(cluster, ns, "app").get("phase") == "Current",
                what="the first tick",
                timeout=60,
            )
            copy = await _copies_synced(ticker, key)
            new = pusher.push(f"{ns}/app", "prod", seed="silent-new")
            _hold_once_it_holds(copy, new.digest)
            scheduler.observe(
                f"{ns}/{POLICY}", ns, POLICY, 900.0, {"spec": 1, "refresh_now": "pushed"}
            )
            await asyncio.to_thread(
                eventually, lambda: _pinned(cluster, ns, new.digest), what="the patch", timeout=60
            )
            await asyncio.to_thread(
                cluster.kubectl, "rollout", "status", "-n", ns, "deployment/app", "--timeout=60s"
            )
            assert copy.synced  # the copy still claims to be synced ...
            assert copy.lists == 1
            if silence == "past 90 s":
                assert target_status(cluster, ns, "app")["phase"] == "Refreshing"  # ... stale
                offset[0] += SILENT_AFTER + 1
            await asyncio.to_thread(
                eventually,
                lambda: _rolled_out_cleanly(cluster, ns, new.digest),
                what="the verdict on the rollout the copy never saw",
                timeout=90,
            )
        found = target_status(cluster, ns, "app")
        assert found.get("failed", []) == []
        assert found["refreshAttempts"] == 0
        assert "RefreshFailed" not in event_reasons(cluster, ns, "app", "Refreshed")
        copy.release()
        if silence == "past 90 s":  # the silent stream was given up and listed again
            await asyncio.to_thread(
                eventually, lambda: copy.lists > 1 and copy.synced, what="a new list", timeout=30
            )


async def test_the_copies_decide_as_the_live_objects_do_and_keep_only_labels_selectors_read(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    """What the API server really returns — managedFields of several managers, the
    controller's status, kwok's pod statuses — parsed whole and from the copies agrees; the
    pods' copy keeps the labels a selector reads and, asked for another, lists again to keep it."""
    cluster, ns = crd_installed, policy_namespace
    pushed = pusher.push(f"{ns}/app", "prod", seed="live")
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    cluster.kubectl(
        "set", "image", "-n", ns, "deployment/app", f"app={registry}/{ns}/app@{pushed.digest}"
    )  # fmt: skip
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    await asyncio.to_thread(
        eventually,
        lambda: len(cluster.get("pods", "-n", ns, "-l", "app=app")["items"]) == 1,
        what="the old pod gone",
        timeout=60,
    )
    cluster.kubectl("label", "pods", "-n", ns, "-l", "app=app", "tier=a", "noise=n")
    api = KubeApi.from_environment(cluster.kubeconfig)
    key = TargetKey(WorkloadKind.DEPLOYMENT, ns, "app")
    with _ticker(api, registry) as ticker:
        watches = ticker.watches
        assert watches is not None
        await _copies_synced(ticker, key)
        live = api.read_workload("Deployment", ns, "app")
        assert live is not None
        assert {e["manager"] for e in live["metadata"]["managedFields"]} >= {"kubectl-set"}

        def copied() -> dict[str, Any] | None:
            _, found = watches.workload(key)
            stored = cluster.get("deployment", "app", "-n", ns)["metadata"]["resourceVersion"]
            return found if found and found["metadata"]["resourceVersion"] == stored else None

        kept = await asyncio.to_thread(eventually, copied, what="the copy caught up", timeout=30)
        live = api.read_workload("Deployment", ns, "app")
        assert Workload.from_api(kept) == Workload.from_api(live)  # type: ignore[arg-type]
        assert Workload.from_api(kept).image_managers == {"app": "kubectl-set"}
        assert kept["spec"]["selector"] == live["spec"]["selector"]  # type: ignore[index]

        def by_name(pods: Any) -> list[ObservedPod]:
            return sorted(pods, key=lambda pod: pod.name)

        listed = by_name(ObservedPod.from_api(p) for p in api.list_pods(ns, SELECTOR))
        watched = watches.pods(ns, SELECTOR)
        assert watched is not None
        assert by_name(p.pod for p in watched) == listed
        assert all(set(p.labels) == {"app"} for p in watched)  # tier, noise, hash: not read

        copy = watches._pods[ns]
        lists = copy.lists
        tiered = {"matchLabels": {"app": "app"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a"]}
        ]}  # fmt: skip
        assert watches.pods(ns, tiered) is None  # tier is not kept yet: read directly
        await asyncio.to_thread(
            eventually,
            lambda: copy.lists > lists and watches.pods(ns, tiered),
            what="the copy listed again, keeping tier",
            timeout=30,
        )
        again = watches.pods(ns, tiered)
        assert again is not None
        assert by_name(p.pod for p in again) == listed
        assert all(set(p.labels) == {"app", "tier"} for p in again)
