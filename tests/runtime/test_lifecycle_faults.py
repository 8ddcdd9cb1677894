"""The refresh lifecycle under faults and hostile input, on the real API server and registry.

Each test provokes a fault the way production would — a ValidatingAdmissionPolicy refusing a
write, a status forged through the status subresource, another writer reverting the image —
then ticks the policy in-process and asserts what the API server stores: the image in the
pod template, the policy's status, the events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.planner import Cleared, ImageChange, ImagePatch, PatchPurpose, TargetKey
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.ticker import PolicyTicker

from support.accounts import impersonating
from support.cluster_env import Cluster, eventually
from support.operator_env import deployment_with_policy
from support.registry_env import ImagePusher
from support.scenario import deployment, policy, target

pytestmark = pytest.mark.cluster

POLICY = "control-plane"
# New pods become Ready only this long after they are scheduled: a rollout stays in flight.
SLOW = {"imagerefresh.test/ready-after": "20s"}


@pytest.fixture
async def ticker(crd_installed: Cluster, registry: str) -> AsyncIterator[PolicyTicker]:
    api = KubeApi.from_environment(crd_installed.kubeconfig)
    ledger = RateLimitLedger()
    client = RegistryClient(insecure_registries=[registry], ledger=ledger)
    ticker = PolicyTicker(
        api=api,
        resolver=SharedResolver(client),
        ledger=ledger,
        config=OperatorConfig(
            watch_evidence=False, insecure_registries=(registry,), resolution_window=0
        ),
        metrics=Metrics(),
    )
    yield ticker
    ticker.events.wait_idle(30)
    await client.aclose()


def _app_on_its_tag(
    cluster: Cluster, registry: str, pusher: ImagePusher, ns: str, seed: str
) -> str:
    """Deployment ``app`` on ``app:prod`` (just pushed) and a policy tracking it; the tag."""
    pusher.push(f"{ns}/app", "prod", seed=seed)
    tag = f"{registry}/{ns}/app:prod"
    deployment_with_policy(cluster, ns, tag)
    return tag


def _image(cluster: Cluster, ns: str) -> str:
    stored = cluster.get("deployment", "app", "-n", ns)
    return str(stored["spec"]["template"]["spec"]["containers"][0]["image"])


def _target_status(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict(cluster.get("irp", POLICY, "-n", ns)["status"]["targets"][0])


def _conditions(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    status = cluster.get("irp", POLICY, "-n", ns)["status"]
    return {c["type"]: c for c in status.get("conditions", [])}


def _reasons(cluster: Cluster, ns: str, name: str) -> list[str]:
    events = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    return [e["reason"] for e in events["items"]]


def _forge_status(cluster: Cluster, ns: str, status: dict[str, Any]) -> None:
    """Write ``status`` through the status subresource, as anyone granted it could."""
    obj = cluster.get("irp", POLICY, "-n", ns)
    obj["status"] = status
    cluster.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(obj))


async def eventually_async(check: Any, what: str, attempts: int = 30) -> None:
    for _ in range(attempts):
        if await check():
            return
        await asyncio.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def _wait_refused(cluster: Cluster, probe: tuple[str, ...], what: str) -> None:
    """Admission policies take effect asynchronously: wait until a server-side dry run of
    ``probe`` (which runs admission, and changes nothing) is refused."""
    eventually(lambda: cluster.kubectl(*probe, check=False).returncode != 0, timeout=30, what=what)


IMAGES_UNCHANGED = (
    "oldObject.spec.template.spec.containers.map(c, c.image) == "
    "object.spec.template.spec.containers.map(c, c.image)"
)


async def test_a_patch_an_admission_policy_refuses_is_refused_never_current(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
    deny: Any,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    tag = _app_on_its_tag(cluster, registry, pusher, ns, "refused")
    deny(f"freeze-images-{ns}", ns, "deployments", "apps", IMAGES_UNCHANGED)

    probe = ("set", "image", "deployment/app", "-n", ns, f"app={tag}-probe", "--dry-run=server")
    _wait_refused(cluster, probe, "the admission policy to refuse image changes")
    outcome = await ticker.tick(ns, POLICY)
    assert outcome is not None
    assert outcome.applied is not None
    assert len(outcome.applied.refused) == 1
    assert _image(cluster, ns) == tag
    target = _target_status(cluster, ns)
    assert target["phase"] == "Refused"
    assert f"freeze-images-{ns} says no" in target["message"]
    assert "pending" not in target
    assert _conditions(cluster, ns)["Ready"]["status"] == "False"
    ticker.events.wait_idle(30)
    assert "PatchRefused" in _reasons(cluster, ns, "app")
    assert "Refreshing" not in _reasons(cluster, ns, "app")  # never announced as started


async def test_without_a_recorded_intent_no_patch_is_sent(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
    deny: Any,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    tag = _app_on_its_tag(cluster, registry, pusher, ns, "no-intent")
    deny(f"freeze-status-{ns}", ns, "imagerefreshpolicies/status", "images.tracebloc.io", "false")
    probe = (
        "patch", "irp", POLICY, "-n", ns, "--subresource=status", "--type=merge",
        "-p", '{"status": {"lastReset": "probe"}}', "--dry-run=server",
    )  # fmt: skip
    _wait_refused(cluster, probe, "the admission policy to refuse status writes")

    async def held() -> bool:
        outcome = await ticker.tick(ns, POLICY)
        assert outcome is not None
        assert outcome.applied is not None
        return bool(outcome.applied.held)

    await eventually_async(held, "the admission policy to refuse status writes")
    assert _image(cluster, ns) == tag  # the patch was never sent
    assert "status" not in cluster.get("irp", POLICY, "-n", ns)
    ticker.events.wait_idle(30)
    assert "StatusNotWritten" in _reasons(cluster, ns, POLICY)


async def test_without_a_recorded_pre_pull_intent_no_helper_pod_is_created(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    deny: Any,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    old = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-pre-old").digest
    deployment_with_policy(
        cluster, ns, f"{registry}/{ns}/app@{old}", tracked=f"{registry}/{ns}/app:prod"
    )
    cluster.kubectl(
        "patch", "irp", POLICY, "-n", ns, "--type=merge", "-p", '{"spec": {"prePull": true}}'
    )
    pusher.push(f"{ns}/app", "prod", seed=f"{ns}-pre-new")
    deny(f"freeze-status-{ns}", ns, "imagerefreshpolicies/status", "images.tracebloc.io", "false")
    probe = (
        "patch", "irp", POLICY, "-n", ns, "--subresource=status", "--type=merge",
        "-p", '{"status": {"lastReset": "probe"}}', "--dry-run=server",
    )  # fmt: skip
    _wait_refused(cluster, probe, "the admission policy to refuse status writes")
    api = KubeApi.from_environment(cluster.kubeconfig)
    ledger = RateLimitLedger()
    client = RegistryClient(insecure_registries=[registry], ledger=ledger)
    config = OperatorConfig(
        watch_evidence=False,
        insecure_registries=(registry,),
        resolution_window=0,
        pre_pull_pods=True,
    )
    ticker = PolicyTicker(
        api=api, resolver=SharedResolver(client), ledger=ledger, config=config, metrics=Metrics()
    )
    try:
        outcome = await ticker.tick(ns, POLICY)
        assert outcome is not None
        assert outcome.plan.pod_creates, "the tick planned no pre-pull: nothing was tested"
        assert outcome.applied is not None
        assert outcome.applied.created == []
        pods = cluster.get("pods", "-n", ns)["items"]
        assert not [p for p in pods if p["metadata"]["name"].startswith("imagerefresh-prepull-")]
        ticker.events.wait_idle(30)
        assert "StatusNotWritten" in _reasons(cluster, ns, POLICY)
        assert "PrePulling" not in _reasons(cluster, ns, POLICY)
    finally:
        await client.aclose()


async def test_a_forged_rollback_to_another_repository_is_never_written(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    digest = pusher.push(f"{ns}/app", "prod", seed="forged").digest
    pinned = f"{registry}/{ns}/app@{digest}"
    deployment_with_policy(cluster, ns, pinned, tracked=f"{registry}/{ns}/app:prod")
    evil = "evil.example/miner:latest"
    _forge_status(
        cluster,
        ns,
        {
            "targets": [
                {
                    "kind": "Deployment",
                    "namespace": ns,
                    "name": "app",
                    "phase": "RollingBack",
                    "pending": {
                        "purpose": "rollback",
                        "images": {"app": evil},
                        "previous": {"app": pinned},
                        "startedAt": "2026-01-01T00:00:00Z",
                    },
                }
            ]
        },
    )
    outcome = await ticker.tick(ns, POLICY)
    assert outcome is not None
    assert outcome.applied is not None
    assert outcome.applied.patched == []
    assert _image(cluster, ns) == pinned
    target = _target_status(cluster, ns)
    assert target["phase"] == "Error"
    assert "outside the tracked repository" in target["message"]
    assert _conditions(cluster, ns)["Degraded"]["status"] == "True"


def test_the_send_site_sends_only_what_the_write_guard_cleared(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    """Whatever built a patch, the adapter sends nothing the guard did not clear, and no code
    but the guard can clear one."""
    cluster, ns = crd_installed, policy_namespace
    tag = _app_on_its_tag(cluster, registry, pusher, ns, "send-site")
    api = KubeApi.from_environment(cluster.kubeconfig)
    evil = ImagePatch(
        TargetKey("Deployment", ns, "app"),  # type: ignore[arg-type]
        PatchPurpose.ROLLBACK,
        (
            ImageChange(
                "app",
                "/spec/template/spec/containers/0",
                expected=tag,
                image="evil.example/miner:latest",
                repository=f"{registry}/{ns}/app",
            ),
        ),
    )
    with pytest.raises(TypeError, match="only a patch the write guard cleared is sent"):
        api.patch_images(evil)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="only the write guard clears a write"):
        Cleared(evil, object())
    assert _image(cluster, ns) == tag


async def test_an_unreadable_status_fails_closed_until_a_reset_rebuilds_it(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    tag = _app_on_its_tag(cluster, registry, pusher, ns, "unreadable")
    forged = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AllCurrent",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        # Admitted by the CRD (which bounds phases, not counts), refused by the models.
        "targets": [
            {"kind": "Deployment", "namespace": ns, "name": "app", "phase": "Current",
             "refreshAttempts": -1}
        ],
    }  # fmt: skip
    _forge_status(cluster, ns, forged)
    for _ in range(2):  # the second tick writes nothing: the condition is already there
        assert await ticker.tick(ns, POLICY) is None
    assert _image(cluster, ns) == tag
    status = cluster.get("irp", POLICY, "-n", ns)["status"]
    assert status["targets"] == forged["targets"]  # not overwritten
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == (
        "True",
        "StatusUnreadable",
    )
    assert "imagerefresh reset" in conditions["Degraded"]["message"]
    assert ticker.metrics.condition.labels(ns, POLICY, "Degraded")._value.get() == 1
    ticker.events.wait_idle(30)
    assert _reasons(cluster, ns, POLICY).count("StatusUnreadable") == 1

    cluster.kubectl("annotate", "irp", POLICY, "-n", ns, "images.tracebloc.io/reset=r1")
    outcome = await ticker.tick(ns, POLICY)
    assert outcome is not None
    assert outcome.applied is not None
    assert len(outcome.applied.patched) == 1
    rebuilt = cluster.get("irp", POLICY, "-n", ns)["status"]
    assert rebuilt["lastReset"] == "r1"
    assert rebuilt["targets"][0]["phase"] == "Refreshing"


async def test_an_invalid_spec_is_not_ready_and_says_why(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    _app_on_its_tag(cluster, registry, pusher, ns, "invalid")
    outcome = await ticker.tick(ns, POLICY)
    assert outcome is not None
    # A tag of 129 characters: past the reference grammar's 128, which the CRD cannot see.
    bad = f"{registry}/{ns}/app:{'t' * 129}"
    cluster.kubectl(
        "patch",
        "irp",
        POLICY,
        "-n",
        ns,
        "--type=json",
        "-p",
        json.dumps([{"op": "replace", "path": "/spec/targets/0/containers/0/image", "value": bad}]),
    )
    assert await ticker.tick(ns, POLICY) is None
    conditions = _conditions(cluster, ns)
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == (
        "False",
        "PolicyInvalid",
    )
    assert conditions["Degraded"]["status"] == "True"
    assert "spec" in conditions["Degraded"]["message"]
    ticker.events.wait_idle(30)
    assert "PolicyInvalid" in _reasons(cluster, ns, POLICY)


def _rolled_out(cluster: Cluster, ns: str) -> bool:
    obj = cluster.get("deployment", "app", "-n", ns)
    status, want = obj.get("status") or {}, obj["spec"]["replicas"]
    return (
        status.get("observedGeneration", 0) >= obj["metadata"]["generation"]
        and status.get("updatedReplicas") == want
        and status.get("availableReplicas") == want
        and status.get("replicas") == want
    )


async def test_a_writer_reverting_our_pin_ends_locked_naming_it_not_rolling_forever(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    old = pusher.push(f"{ns}/app", "prod", seed="old").digest
    new = pusher.push(f"{ns}/app", "prod", seed="new").digest
    repo = f"{registry}/{ns}/app"
    deployment_with_policy(cluster, ns, f"{repo}@{old}", tracked=f"{repo}:prod")
    edit = [
        {"op": "add", "path": "/spec/maxRefreshAttempts", "value": 2},
        {"op": "add", "path": "/spec/healthyFor", "value": "0s"},  # judged as it settles
    ]
    cluster.kubectl("patch", "irp", POLICY, "-n", ns, "--type=json", "-p", json.dumps(edit))

    async def settle_and_tick() -> None:
        eventually(lambda: _rolled_out(cluster, ns), timeout=60, what="the rollout to settle")
        await ticker.tick(ns, POLICY)

    await settle_and_tick()  # pins the new digest
    await settle_and_tick()  # judges it: Refreshed
    assert _target_status(cluster, ns)["phase"] == "Current"
    phases = []
    for _ in range(2):  # the other writer puts the old digest back, twice
        cluster.kubectl("set", "image", "deployment/app", "-n", ns, f"app={repo}@{old}")
        await settle_and_tick()
        phases.append(_target_status(cluster, ns)["phase"])
        if phases[-1] == "Refreshing":
            await settle_and_tick()
    assert phases == ["Refreshing", "Locked"]
    target = _target_status(cluster, ns)
    assert (target["refreshAttempts"], target["contested"]) == (2, 2)
    assert "contested by field manager 'kubectl-set'" in target["message"]  # status outlives events
    assert _image(cluster, ns) == f"{repo}@{old}"  # locked: the operator stopped fighting
    ticker.events.wait_idle(30)
    events = cluster.get("events", "-n", ns, "--field-selector", "involvedObject.name=app")
    contested = [e["message"] for e in events["items"] if e["reason"] == "Contested"]
    assert contested
    assert all("'kubectl-set'" in message for message in contested)
    assert new not in _image(cluster, ns)


def _operator_role(verbs_on_deployments: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "operator"},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": verbs_on_deployments},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
            {
                "apiGroups": ["images.tracebloc.io"],
                "resources": ["imagerefreshpolicies", "imagerefreshpolicies/status"],
                "verbs": ["get", "update"],
            },
        ],
    }


async def test_patch_rights_revoked_mid_run_are_refused_then_retried_once_granted(
    crd_installed: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    old = pusher.push(f"{ns}/app", "prod", seed="rbac-old").digest
    repo = f"{registry}/{ns}/app"
    deployment_with_policy(cluster, ns, f"{repo}@{old}", tracked=f"{repo}:prod")
    cluster.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator"}},
        _operator_role(["get", "patch"]),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "operator"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "operator",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}],
        },
        namespace=ns,
    )
    acting = impersonating(cluster.kubeconfig, f"system:serviceaccount:{ns}:operator")
    ledger = RateLimitLedger()
    async with RegistryClient(insecure_registries=[registry], ledger=ledger) as registry_client:
        ticker = PolicyTicker(
            api=acting,
            resolver=SharedResolver(registry_client),
            ledger=ledger,
            config=OperatorConfig(
                watch_evidence=False, insecure_registries=(registry,), resolution_window=0
            ),
            metrics=Metrics(),
        )
        await ticker.tick(ns, POLICY)
        assert _target_status(cluster, ns)["phase"] == "Current"

        new = pusher.push(f"{ns}/app", "prod", seed="rbac-new").digest
        cluster.apply(_operator_role(["get"]), namespace=ns)  # patch revoked
        outcome = await ticker.tick(ns, POLICY)
        assert outcome is not None
        assert outcome.applied is not None
        assert len(outcome.applied.refused) == 1
        target = _target_status(cluster, ns)
        assert target["phase"] == "Refused"
        assert "grant patch on deployments.apps" in target["message"]
        assert "pending" not in target
        assert _image(cluster, ns) == f"{repo}@{old}"

        cluster.apply(_operator_role(["get", "patch"]), namespace=ns)  # granted again
        eventually(
            lambda: (
                cluster.kubectl(
                    "auth",
                    "can-i",
                    "patch",
                    "deployments",
                    "-n",
                    ns,
                    "--as",
                    f"system:serviceaccount:{ns}:operator",
                ).stdout.strip()
                == "yes"
            ),
            timeout=30,
            what="the grant to take effect",
        )
        await ticker.tick(ns, POLICY)
        assert _image(cluster, ns).endswith(f"@{new}")
        assert _target_status(cluster, ns)["phase"] == "Refreshing"
        ticker.events.wait_idle(30)


async def test_a_follow_up_leaves_a_new_reset_for_the_tick_that_reads_every_target(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
) -> None:
    """A follow-up reads only the rollout in flight (``app``): a reset seen then is left for
    the next tick that reads every target — it neither uses the value up nor marks the target
    it did not read (``idle``) unreadable."""
    cluster, ns = crd_installed, policy_namespace
    old = pusher.push(f"{ns}/app", "prod", seed="reset-follow-old").digest
    new = pusher.push(f"{ns}/app", "prod", seed="reset-follow-new").digest
    repo = f"{registry}/{ns}/app"
    cluster.apply(
        deployment("app", {"app": f"{repo}@{old}"}, replicas=1, annotations=SLOW),
        deployment("idle", {"app": f"{repo}@{new}"}, replicas=1),
        policy(POLICY, target("app", app=f"{repo}:prod"), target("idle", app=f"{repo}:prod")),
        namespace=ns,
    )
    for name in ("app", "idle"):
        cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=60s")
    await ticker.tick(ns, POLICY)  # app's refresh starts; idle is current
    cluster.kubectl("annotate", "irp", POLICY, "-n", ns, "images.tracebloc.io/reset=now")
    followed = await ticker.tick(ns, POLICY, follow_up=True)
    assert followed is not None
    status = cluster.get("irp", POLICY, "-n", ns)["status"]
    assert "lastReset" not in status
    idle = next(t for t in status["targets"] if t["name"] == "idle")
    assert idle["phase"] == "Current"
    assert _conditions(cluster, ns)["Degraded"]["status"] == "False"
    await ticker.tick(ns, POLICY)
    assert cluster.get("irp", POLICY, "-n", ns)["status"]["lastReset"] == "now"
