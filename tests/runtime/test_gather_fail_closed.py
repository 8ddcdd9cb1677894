"""The shell's read half: evidence the API will not give becomes Error, never Missing or a patch."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from imagerefresh.kube.api import PULL_SECRETS_VALUE, KubeApi
from imagerefresh.models import Phase, TargetStatus
from imagerefresh.planner import plan_tick
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.gather import Gathered, gather

from support.accounts import impersonating
from support.cluster_env import Cluster
from support.helm_env import only, render
from support.operator_env import deployment_with_policy

pytestmark = pytest.mark.cluster


async def gather_as(
    cluster: Cluster, registry: str, namespace: str, service_account: str
) -> Gathered:
    """The policy ``control-plane`` gathered as ``service_account`` of ``namespace``."""
    admin = KubeApi.from_environment(cluster.kubeconfig)
    policy = admin.read_policy(namespace, "control-plane")
    assert policy is not None
    acting = impersonating(
        cluster.kubeconfig, f"system:serviceaccount:{namespace}:{service_account}"
    )
    ledger = RateLimitLedger()
    async with RegistryClient(insecure_registries=[registry], ledger=ledger) as registry_client:
        return await gather(
            policy,
            api=acting,
            resolver=SharedResolver(registry_client),
            ledger=ledger,
            config=OperatorConfig(),
            now=datetime.now(UTC),
        )


async def test_a_workload_the_operator_may_not_read_is_error_and_degraded_never_missing(
    crd_installed: Cluster, registry: str, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    tag = f"{registry}/{ns}/app:prod"
    deployment_with_policy(cluster, ns, tag)
    # The default ServiceAccount may read nothing: every workload read is Forbidden.
    gathered = await gather_as(cluster, registry, ns, "default")
    plan = plan_tick(gathered.tick)
    assert plan.patches == ()
    (target,) = plan.status.targets
    assert target.phase is Phase.ERROR
    assert "forbidden" in target.message.lower()
    degraded = next(c for c in plan.status.conditions if c.type == "Degraded")
    assert degraded.status == "True"


async def test_pods_the_operator_may_not_list_make_the_target_error_never_a_patch(
    crd_installed: Cluster, registry: str, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    tag = f"{registry}/{ns}/app:prod"
    deployment_with_policy(cluster, ns, tag)
    # A reader of workloads, service accounts and secrets that may not list pods.
    cluster.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "no-pods"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "no-pods"},
            "rules": [
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
                {
                    "apiGroups": [""],
                    "resources": ["serviceaccounts", "secrets"],
                    "verbs": ["get"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "no-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-pods"},
            "subjects": [{"kind": "ServiceAccount", "name": "no-pods", "namespace": ns}],
        },
        namespace=ns,
    )
    gathered = await gather_as(cluster, registry, ns, "no-pods")
    plan = plan_tick(gathered.tick)
    assert plan.patches == ()
    (target,) = plan.status.targets
    assert target.phase is Phase.ERROR
    assert "list pods" in target.message


def install_chart_rbac(cluster: Cluster, namespace: str, names: list[str]) -> str:
    """The chart's ServiceAccount, Role and RoleBinding for ``namespace`` (released there, with
    ``rbac.pullSecrets.names`` = ``names``), applied; the ServiceAccount's name."""
    objects = render({"rbac": {"pullSecrets": {"names": names}}}, namespace=namespace)
    rbac = [o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    cluster.apply(*rbac, namespace=namespace)
    return str(only(objects, "ServiceAccount")["metadata"]["name"])


async def target_once(
    cluster: Cluster, registry: str, namespace: str, account: str, done: Callable[[str], bool]
) -> TargetStatus:
    """The policy's one target as ``account`` gathers it, once ``done(message)`` holds (RBAC
    caches may lag a moment behind a new Role); nothing may ever be patched on the way."""
    deadline = time.monotonic() + 30
    while True:
        plan = plan_tick((await gather_as(cluster, registry, namespace, account)).tick)
        assert plan.patches == ()
        (target,) = plan.status.targets
        if done(target.message) or time.monotonic() > deadline:
            return target
        await asyncio.sleep(0.2)


async def test_a_pull_secret_the_charts_rbac_does_not_name_is_error_naming_the_chart_value(
    crd_installed: Cluster, registry: str, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    deployment_with_policy(cluster, ns, f"{registry}/{ns}/app:prod")
    pull_with = {"spec": {"template": {"spec": {"imagePullSecrets": [{"name": "regcred"}]}}}}
    cluster.kubectl("patch", "deployment", "app", "-n", ns, "-p", json.dumps(pull_with))

    # The chart's defaults grant no Secret at all: the target is Error, and says what to set.
    account = install_chart_rbac(cluster, ns, [])
    target = await target_once(cluster, registry, ns, account, lambda m: PULL_SECRETS_VALUE in m)
    assert target.phase is Phase.ERROR
    assert "get Secret" in target.message
    assert f"add 'regcred' to the chart value {PULL_SECRETS_VALUE}" in target.message

    # Named in the value, it is read (here: found missing, and skipped as the kubelet skips it).
    install_chart_rbac(cluster, ns, ["regcred"])
    readable = await target_once(
        cluster, registry, ns, account, lambda m: "forbidden" not in m.lower()
    )
    assert "forbidden" not in readable.message.lower()

    # A second pull secret the value does not name fails closed again, naming that one.
    pull_with["spec"]["template"]["spec"]["imagePullSecrets"].append({"name": "hub"})
    cluster.kubectl("patch", "deployment", "app", "-n", ns, "-p", json.dumps(pull_with))
    target = await target_once(cluster, registry, ns, account, lambda m: PULL_SECRETS_VALUE in m)
    assert target.phase is Phase.ERROR
    assert f"add 'hub' to the chart value {PULL_SECRETS_VALUE}" in target.message
    assert "regcred" not in target.message


async def test_a_container_running_another_repository_never_reaches_its_registry(
    crd_installed: Cluster, registry: str, policy_namespace: str
) -> None:
    cluster, ns = crd_installed, policy_namespace
    deployment_with_policy(
        cluster, ns, f"{registry}/{ns}/other:prod", tracked=f"{registry}/{ns}/app:prod"
    )
    api = KubeApi.from_environment(cluster.kubeconfig)
    policy = api.read_policy(ns, "control-plane")
    assert policy is not None
    sent: list[tuple[str, str, str]] = []
    ledger = RateLimitLedger()
    async with RegistryClient(
        insecure_registries=[registry],
        ledger=ledger,
        observer=lambda host, kind, outcome: sent.append((host, str(kind), outcome)),
    ) as client:
        gathered = await gather(
            policy,
            api=api,
            resolver=SharedResolver(client),
            ledger=ledger,
            config=OperatorConfig(insecure_registries=(registry,)),
            now=datetime.now(UTC),
        )
    assert sent == []  # a Conflict is never patched: its registry is not asked
    plan = plan_tick(gathered.tick)
    assert plan.status.targets[0].phase is Phase.CONFLICT
