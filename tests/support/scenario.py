"""What the operator's scenarios build and read: workloads and policies as the API takes them,
and the status, conditions and events the operator wrote (tests/runtime)."""

from __future__ import annotations

from typing import Any

from imagerefresh.models.policy import PolicySpec

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, kwok_pod_template
from support.registry_env import ImagePusher


def deployment(
    name: str,
    containers: dict[str, str],
    *,
    replicas: int = 2,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": kwok_pod_template(containers, annotations, {"app": name}),
            **spec,
        },
    }


def pod_quota(pods: int) -> dict[str, Any]:
    """A ResourceQuota of ``pods`` pods: a rollout whose new pod would exceed it is held in
    flight (its surge pod is never created) until the quota is raised or the template reverted
    — a rollout the test decides the end of, with no clock involved."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "pods"},
        "spec": {"hard": {"pods": str(pods)}},
    }


def policy(name: str, *targets: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": name},
        "spec": {"targets": list(targets), **spec},
    }


def target(name: str, kind: str = "Deployment", **containers: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "name": name,
        "containers": [{"name": n, "image": i} for n, i in containers.items()],
    }


def images(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    obj = cluster.get("deployment", name, "-n", namespace)
    return {c["name"]: c["image"] for c in obj["spec"]["template"]["spec"]["containers"]}


def status(cluster: Cluster, namespace: str, name: str = "control-plane") -> dict[str, Any]:
    return cluster.get("irp", name, "-n", namespace).get("status") or {}


def target_status(cluster: Cluster, namespace: str, workload: str) -> dict[str, Any]:
    return next(t for t in status(cluster, namespace)["targets"] if t["name"] == workload)


def condition(cluster: Cluster, namespace: str, kind: str) -> dict[str, Any]:
    return next(c for c in status(cluster, namespace)["conditions"] if c["type"] == kind)


def event_reasons(
    cluster: Cluster, namespace: str, involved: str, *expected: str, timeout: float = 30
) -> list[str]:
    """The reasons of the events about ``involved``, once each ``expected`` one has arrived
    (as often as it is listed): a tick posts its events in the background."""

    def arrived() -> list[str] | None:
        events = cluster.get(
            "events", "-n", namespace, "--field-selector", f"involvedObject.name={involved}"
        )
        reasons = [e["reason"] for e in events["items"]]
        missing = any(reasons.count(r) < expected.count(r) for r in expected)
        return None if missing else reasons

    return eventually(arrived, timeout=timeout, what=f"events {expected} about {involved}")


def settle(
    operator: Operator,
    cluster: Cluster,
    namespace: str,
    workload: str,
    phase: str = "Current",
    timeout: float = 60,
) -> dict[str, Any]:
    """Tick until the target reaches ``phase`` (a rollout takes a few ticks to be judged).

    The wait is ``timeout`` past the target's health window: a refresh becomes Current only once
    its pods stayed up that long, so a shorter wait would race the operator's clock.
    """
    window = health_window(cluster, namespace, workload)

    def reached() -> dict[str, Any] | None:
        operator.tick(namespace, "control-plane")
        found = target_status(cluster, namespace, workload)
        if found["phase"] != phase:
            raise AssertionError(f"phase {found['phase']}: {found.get('message', '')}")
        return found

    return eventually(
        reached, timeout=timeout + window, what=f"{workload} to become {phase}", interval=0.5
    )


def health_window(cluster: Cluster, namespace: str, workload: str) -> float:
    """Seconds of ``workload``'s health window, as its policy in the cluster sets it."""
    spec = PolicySpec.model_validate(cluster.get("irp", "control-plane", "-n", namespace)["spec"])
    declared = next(t for t in spec.targets if t.name == workload)
    return spec.healthy_for_of(declared).total_seconds()


def running_good_digest_with_bad_next(
    cluster: Cluster, pusher: ImagePusher, ns: str, reg: str, seed: str, **spec: Any
) -> tuple[str, str]:
    """Deployment `app` settled on a good digest; pods of the returned bad digest never get Ready.

    The tag ends on the good digest; re-pushing ``<seed>-bad`` moves it to the bad one.
    """
    bad = pusher.push(f"{ns}/app", "prod", seed=f"{seed}-bad")
    good = pusher.push(f"{ns}/app", "prod", seed=f"{seed}-good")
    pinned_good = f"{reg}/{ns}/app@{good.digest}"
    annotations = {"imagerefresh.test/never-ready-image": bad.digest}
    cluster.apply(
        deployment("app", {"app": pinned_good}, replicas=1, annotations=annotations, **spec),
        namespace=ns,
    )
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    return bad.digest, pinned_good


def event_messages(cluster: Cluster, namespace: str, involved: str, reason: str) -> list[str]:
    """The messages of the events of ``reason`` about the object named ``involved``."""
    events = cluster.get(
        "events", "-n", namespace, "--field-selector", f"involvedObject.name={involved}"
    )
    return [e["message"] for e in events["items"] if e["reason"] == reason]


def cooling_policy(cluster: Cluster, pusher: ImagePusher, ns: str, reg: str, age: str) -> str:
    """Deployment ``app`` pinned to a first build, a policy on its tag with ``minimumAge``;
    the first build's digest."""
    first = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-first")
    cluster.apply(deployment("app", {"app": f"{reg}/{ns}/app@{first.digest}"}), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    cluster.apply(
        policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod"), minimumAge=age),
        namespace=ns,
    )
    return first.digest
