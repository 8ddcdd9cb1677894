"""One slow or hostile registry holds only the work that needs it, with the operator running.

A registry of a tenant's own that never answers — its connections accepted, its requests read,
nothing ever sent back — is asked by many policies at once, more than the operator runs ticks
at a time. Meanwhile a policy on a healthy registry ticks, refreshes and gets its verdict, and
a policy with a target on each registry gets the verdict of the healthy one's rollout while its
own tick still waits. The registry is released (stopped) only after that: the order is the
test's own, never a race against a deadline (the deadlines here are longer than the test).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster_env import Cluster, eventually
from support.hostile_registry import HostileRegistry
from support.operator_env import Operator, running_operator
from support.registry_env import ImagePusher
from support.scenario import (
    deployment,
    event_reasons,
    images,
    pod_quota,
    policy,
    settle,
    target,
)

pytestmark = pytest.mark.cluster

# More policies waiting on the silent registry than the operator runs ticks at once (8).
HOSTILE_POLICIES = 9
TAGS_EACH = 16  # a target's most containers
LONGER_THAN_THE_TEST = "900"


@pytest.fixture
def silent(registry: str) -> Iterator[HostileRegistry]:
    front = HostileRegistry(registry, behaviour="honest").start()
    yield front
    front.stop()


@pytest.fixture
def operator(
    crd_installed: Cluster, registry: str, silent: HostileRegistry, tmp_path: Path
) -> Iterator[Operator]:
    args = (
        "--insecure-registry",
        silent.host,
        "--registry-deadline",
        LONGER_THAN_THE_TEST,
        "--registry-timeout",
        LONGER_THAN_THE_TEST,
    )
    with running_operator(
        crd_installed, registry, tmp_path / "operator.log", grid_from_start=True, extra_args=args
    ) as running:
        yield running


def namespace(cluster: Cluster, created: list[str], what: str) -> str:
    name = f"irp-slow-{what}-{secrets.token_hex(2)}"
    cluster.kubectl("create", "namespace", name)
    created.append(name)
    return name


@pytest.fixture
def namespaces(cluster: Cluster) -> Iterator[list[str]]:
    created: list[str] = []
    yield created
    for name in created:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def hostile_policies(cluster: Cluster, silent: HostileRegistry, created: list[str]) -> list[str]:
    """Policies whose every tag is on the silent registry; their first ticks start waiting."""
    waiting = []
    for index in range(HOSTILE_POLICIES):
        ns = namespace(cluster, created, f"tenant{index}")
        tags = {f"c{i}": f"{silent.host}/{ns}/t{i}:prod" for i in range(TAGS_EACH)}
        cluster.apply(deployment("grab", tags, replicas=1), namespace=ns)
        cluster.apply(policy("control-plane", target("grab", **tags)), namespace=ns)
        waiting.append(ns)
    return waiting


def test_a_registry_that_never_answers_holds_no_other_policy_s_tick_or_verdict(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    silent: HostileRegistry,
    namespaces: list[str],
) -> None:
    healthy = namespace(cluster, namespaces, "healthy")
    reg = operator.registry
    old = pusher.push(f"{healthy}/app", "prod", seed="slow-old").digest
    repo = f"{reg}/{healthy}/app"
    cluster.apply(deployment("app", {"app": f"{repo}@{old}"}, replicas=1), namespace=healthy)
    cluster.apply(
        policy("control-plane", target("app", app=f"{repo}:prod"), healthyFor="2s"),
        namespace=healthy,
    )
    operator.wait_first_tick(healthy, "control-plane")

    silent.behaviour = "silent"
    waiting = hostile_policies(cluster, silent, namespaces)
    eventually(
        lambda: all(ns in operator.log() for ns in waiting) and len(silent.received) >= 4,
        timeout=60,
        what="every tenant policy's tick to be waiting on the silent registry",
    )

    new = pusher.push(f"{healthy}/app", "prod", seed="slow-new").digest
    done = settle(operator, cluster, healthy, "app", timeout=120)
    assert images(cluster, healthy, "app") == {"app": f"{repo}@{new}"}
    assert done["phase"] == "Current"
    event_reasons(cluster, healthy, "app", "Refreshing", "Refreshed")
    # All of that while every tenant's first tick still waits on the silent registry.
    assert [operator.ticks(ns, "control-plane") for ns in waiting] == [0] * HOSTILE_POLICIES
    assert all(request.completed is None for request in silent.received)

    silent.stop()  # released: their ticks end, unresolved, nothing patched on it
    for ns in waiting:
        eventually(
            lambda ns=ns: operator.ticks(ns, "control-plane") >= 1,
            timeout=120,
            what=f"the tick of {ns} to end once the registry is gone",
        )
    assert "@sha256:" not in str(images(cluster, waiting[0], "grab"))


def test_a_policy_s_healthy_rollout_is_judged_while_its_tick_waits_on_another_registry(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    silent: HostileRegistry,
    namespaces: list[str],
) -> None:
    ns = namespace(cluster, namespaces, "mixed")
    reg = operator.registry
    old = pusher.push(f"{ns}/app", "prod", seed="mixed-old").digest
    new = pusher.push(f"{ns}/app", "prod", seed="mixed-new").digest
    side = pusher.push(f"{ns}/side", "prod", seed="mixed-side").digest
    repo, side_repo = f"{reg}/{ns}/app", f"{silent.host}/{ns}/side"
    # Two pods (app's and side's): the refresh's new pod waits for the quota, so its rollout
    # is in flight until the test raises it.
    cluster.apply(pod_quota(2), namespace=ns)
    cluster.apply(deployment("app", {"app": f"{repo}@{old}"}, replicas=1), namespace=ns)
    cluster.apply(deployment("side", {"side": f"{side_repo}@{side}"}, replicas=1), namespace=ns)
    for name in ("app", "side"):
        cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=60s")
    cluster.apply(
        policy(
            "control-plane",
            target("app", app=f"{repo}:prod"),
            target("side", side=f"{side_repo}:prod"),
            healthyFor="2s",  # its end is judged aside the tick that waits, too
        ),
        namespace=ns,
    )
    operator.wait_first_tick(ns, "control-plane")
    refreshing = settle(operator, cluster, ns, "app", phase="Refreshing")
    assert refreshing["pending"]["images"] == {"app": f"{repo}@{new}"}

    silent.behaviour = "silent"
    asked = operator.bump(ns, "control-plane")  # a tick that waits on the silent registry
    #                                             for `side`
    eventually(
        lambda: any(f"/{ns}/side/" in request.target for request in silent.received[-4:]),
        timeout=60,
        what="the tick to be waiting on the silent registry",
    )
    cluster.kubectl(
        "patch", "resourcequota", "pods", "-n", ns, "--type=merge",
        "-p", '{"spec": {"hard": {"pods": "10"}}}',
    )  # fmt: skip
    verdict = eventually(
        lambda: (t := settled_target(cluster, ns, "app")) is not None and t,
        timeout=120,
        what="the verdict of app's rollout",
    )
    assert verdict["phase"] == "Current"
    event_reasons(cluster, ns, "app", "Refreshed")
    assert operator.answered(ns, "control-plane") < asked  # the tick asked for still waits
    silent.stop()
    operator.wait_answered(ns, "control-plane", asked, timeout=120)  # it ends once it is gone


def settled_target(cluster: Cluster, ns: str, name: str) -> dict[str, object] | None:
    status = cluster.get("irp", "control-plane", "-n", ns).get("status") or {}
    found = next((t for t in status.get("targets", ()) if t["name"] == name), None)
    return found if found is not None and found["phase"] == "Current" else None
