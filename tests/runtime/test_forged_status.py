"""Status is a claim, never a permission: forgeries written by a user who may only update the
status subresource, on the real API server and registry.

The forger is a ServiceAccount whose one grant is ``get`` and ``update`` on
``imagerefreshpolicies/status``: what anyone a careless RBAC gave that right could do. Each
test forges a well-formed status the operator's planner would once have acted on, ticks the
policy in-process, and asserts what the API server stores: the pod template, the workload's
generation (nothing was patched), the policy's status and events, the pods created.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.models.base import format_timestamp
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.reference import parse, registry_host
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.ticker import PolicyTicker

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster
from support.operator_env import deployment_with_policy
from support.registry_env import ImagePusher

pytestmark = pytest.mark.cluster

POLICY = "control-plane"
Forge = Callable[[dict[str, Any]], None]


@pytest.fixture
def forge(crd_installed: Cluster, policy_namespace: str, tmp_path: Path) -> Forge:
    """Write a status as a ServiceAccount that may only get and update the status
    subresource (the API server refuses it anything else)."""
    cluster, ns = crd_installed, policy_namespace
    cluster.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "forger"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "status-only"},
            "rules": [
                {
                    "apiGroups": ["images.tracebloc.io"],
                    "resources": ["imagerefreshpolicies/status"],
                    "verbs": ["get", "update"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "forger-status-only"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "status-only",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "forger", "namespace": ns}],
        },
        namespace=ns,
    )
    kubeconfig = str(service_account_kubeconfig(cluster, ns, "forger", tmp_path / "forger"))
    denied = cluster.kubectl(
        "--kubeconfig", kubeconfig, "patch", "deployment", "app", "-n", ns, "--type=merge",
        "-p", '{"metadata": {"labels": {"forged": "yes"}}}', check=False,
    )  # fmt: skip
    assert denied.returncode != 0, "the forger may do more than update the status"
    assert "forbidden" in denied.stderr

    def write(status: dict[str, Any]) -> None:
        read = ("--kubeconfig", kubeconfig, "-n", ns)
        obj = json.loads(
            cluster.kubectl(
                *read, "get", "irp", POLICY, "--subresource=status", "-o", "json"
            ).stdout
        )
        obj["status"] = status
        cluster.kubectl(*read, "replace", "--subresource=status", "-f", "-", input=json.dumps(obj))

    return write


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
            watch_evidence=False,
            insecure_registries=(registry,),
            resolution_window=0,
            pre_pull_pods=True,
        ),
        metrics=Metrics(),
    )
    yield ticker
    ticker.events.wait_idle(30)
    await client.aclose()


def _deployment(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict(cluster.get("deployment", "app", "-n", ns))


def _target(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict(cluster.get("irp", POLICY, "-n", ns)["status"]["targets"][0])


def _reasons(cluster: Cluster, ns: str, name: str) -> list[str]:
    events = cluster.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    return [e["reason"] for e in events["items"]]


@pytest.mark.parametrize("restores", ["a build it never ran", "the tag"])
async def test_a_forged_owed_rollback_to_what_the_workload_never_ran_is_refused_never_sent(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
    forge: Forge,
    restores: str,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    never = pusher.push(f"{ns}/app", "candidate", seed=f"{ns}-never").digest
    running = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-running").digest
    pinned = f"{registry}/{ns}/app@{running}"
    deployment_with_policy(cluster, ns, pinned, tracked=f"{registry}/{ns}/app:prod")
    assert await ticker.tick(ns, POLICY) is not None
    assert _target(cluster, ns)["phase"] == "Current"
    generation = _deployment(cluster, ns)["metadata"]["generation"]
    image = f"{registry}/{ns}/app@{never}" if restores != "the tag" else f"{registry}/{ns}/app:prod"
    status = cluster.get("irp", POLICY, "-n", ns)["status"]
    status["targets"][0]["pending"] = {
        "purpose": "rollback",
        "images": {"app": image},
        "previous": {"app": pinned},  # the live image: the planner once read this as owed
        "startedAt": status["targets"][0].get("lastRefresh") or "2026-01-01T00:00:00Z",
    }
    forge(status)

    outcome = await ticker.tick(ns, POLICY)

    assert outcome is not None
    assert outcome.applied is not None
    assert outcome.plan.patches == ()  # planned nothing: the guard had nothing to refuse
    stored = _deployment(cluster, ns)
    assert stored["metadata"]["generation"] == generation
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == pinned
    target = _target(cluster, ns)
    assert target["phase"] == "Refused"
    assert "pending" not in target  # not owed: no loop of refusals
    ticker.events.wait_idle(30)
    assert "RollbackNotAllowed" in _reasons(cluster, ns, POLICY)
    again = await ticker.tick(ns, POLICY)
    assert again is not None
    assert again.plan.patches == ()
    assert _target(cluster, ns)["phase"] == "Current"


async def test_a_forged_pre_pull_intent_buys_no_uncharged_pull(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    ticker: PolicyTicker,
    forge: Forge,
) -> None:
    """A pre-pull intent in status once stood for pulls already charged: forged, its helper
    pods pulled on nobody's account. Each helper is charged as it is created."""
    cluster, ns = crd_installed, policy_namespace
    old = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-pre-old").digest
    deployment_with_policy(
        cluster, ns, f"{registry}/{ns}/app@{old}", tracked=f"{registry}/{ns}/app:prod"
    )
    cluster.kubectl(
        "patch", "irp", POLICY, "-n", ns, "--type=merge", "-p", '{"spec": {"prePull": true}}'
    )
    new = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-pre-new").digest
    forge(
        {
            "targets": [
                {
                    "kind": "Deployment",
                    "namespace": ns,
                    "name": "app",
                    "phase": "Refreshing",
                    "prePull": {
                        "images": {"app": f"{registry}/{ns}/app@{new}"},
                        "startedAt": format_timestamp(datetime.now(UTC)),
                    },
                }
            ]
        }
    )
    host = registry_host(parse(f"{registry}/{ns}/app").domain)
    before = ticker.ledger.budget(host, "anonymous").reserved()

    outcome = await ticker.tick(ns, POLICY)

    assert outcome is not None
    assert outcome.applied is not None
    creates = outcome.plan.pod_creates
    assert creates, "no helper pod was planned: nothing was tested"
    assert all(dict(c.pulls) == {(host, "anonymous"): 1} for c in creates)
    assert outcome.applied.created == list(creates)
    helpers = [
        p
        for p in cluster.get("pods", "-n", ns)["items"]
        if p["metadata"]["name"].startswith("imagerefresh-prepull-")
    ]
    assert len(helpers) == len(creates)
    assert ticker.ledger.budget(host, "anonymous").reserved() == before + len(creates)
