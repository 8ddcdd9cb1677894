"""What a real container runtime records for the images it pulls, and the operator reading it.

podman (containers/image, as CRI-O) pulls single- and multi-platform images pushed to the real
registry, by tag and by digest; the test records what it reports (`Digest`, `RepoDigests`).
For a multi-platform index it records the platform manifest it pulled next to the index. The
scenario then has the kwok pods report, as their ``imageID``, a digest podman recorded — not
one the test picked — and the operator must recognise the desired content (SPEC §5).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, kwok_pod_template
from support.podman_env import podman, pull
from support.registry_env import ImagePusher, PushedImage

pytestmark = pytest.mark.registry

AMD64 = {"os": "linux", "architecture": "amd64"}


def platform_manifest(pushed: PushedImage, platform: dict[str, str]) -> str:
    (entry,) = [m for m in json.loads(pushed.body)["manifests"] if m["platform"] == platform]
    return str(entry["digest"])


@pytest.mark.parametrize("kind", ["oci-manifest", "oci-index", "docker-list"])
def test_podman_records_the_index_and_the_platform_manifest_it_pulled_by_tag_and_digest(
    registry: str, pusher: ImagePusher, kind: str
) -> None:
    pushed = pusher.push(f"runtime/{kind}", "prod", seed=f"podman-{kind}", kind=kind)
    expected = {pushed.digest}
    if kind != "oci-manifest":
        expected.add(platform_manifest(pushed, AMD64))  # this machine's platform
    for reference in (pushed.reference, f"{pushed.repository}@{pushed.digest}"):
        try:
            record = pull(reference)
        finally:
            podman("rmi", "--force", reference, check=False)
        print(f"{kind} by {reference.rpartition('/')[2][:24]}: {record}")
        assert record.digest == pushed.digest
        assert record.recorded_digests == expected
        assert all(r.startswith(pushed.repository + "@") for r in record.repo_digests)


def workload(name: str, image: str, image_id: str) -> dict[str, Any]:
    annotations = {"imagerefresh.test/image-id.app": image_id}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": kwok_pod_template({"app": image}, annotations, {"app": name}),
        },
    }


def policy(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": "control-plane"},
        "spec": {
            "interval": "1h",
            "targets": [
                {
                    "kind": "Deployment",
                    "name": name,
                    "containers": [{"name": "app", "image": image}],
                }
                for name in ("on-platform-manifest", "on-index")
            ],
        },
    }


def target_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    targets = cluster.get("irp", "control-plane", "-n", namespace)["status"]["targets"]
    return next(t for t in targets if t["name"] == name)


def test_pods_reporting_what_podman_recorded_for_the_tags_index_are_adopted_with_one_get(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, front = policy_namespace, operator.front
    assert front is not None
    pushed = pusher.push(f"{ns}/app", "prod", seed="runtime-adopt", kind="oci-index")
    repository, tag = f"{front.host}/{ns}/app", f"{front.host}/{ns}/app:prod"
    try:
        record = pull(f"{operator.registry}/{ns}/app:prod")
    finally:
        podman("rmi", "--force", f"{operator.registry}/{ns}/app:prod", check=False)
    (child,) = record.recorded_digests - {record.digest}  # the platform manifest podman pulled
    assert record.digest == pushed.digest
    cluster.apply(
        workload("on-platform-manifest", tag, f"{repository}@{child}"),
        workload("on-index", tag, f"{repository}@{record.digest}"),
        namespace=ns,
    )
    for name in ("on-platform-manifest", "on-index"):
        cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=60s")
    generations = {
        name: cluster.get("deployment", name, "-n", ns)["metadata"]["generation"]
        for name in ("on-platform-manifest", "on-index")
    }
    front.served.clear()
    cluster.apply(policy(tag), namespace=ns)
    operator.wait_first_tick(ns, "control-plane")

    def current() -> dict[str, Any] | None:
        found = {n: target_status(cluster, ns, n) for n in generations}
        return found if all(t["phase"] == "Current" for t in found.values()) else None

    found = eventually(current, timeout=60, what="both targets Current")
    assert found["on-platform-manifest"]["containers"][0]["running"] == [child]
    assert found["on-platform-manifest"]["containers"][0]["desired"] == pushed.digest
    for name, generation in generations.items():  # adopted: no patch, no rollout
        obj = cluster.get("deployment", name, "-n", ns)
        assert obj["metadata"]["generation"] == generation
        assert obj["spec"]["template"]["spec"]["containers"][0]["image"] == tag
    operator.tick(ns, "control-plane")
    operator.tick(ns, "control-plane")
    gets = [
        r.path
        for r in front.served
        if r.kind == "manifest" and r.method == "GET" and r.status == 200
    ]
    assert gets == [f"/v2/{ns}/app/manifests/{pushed.digest}"]  # once, then remembered
    assert operator.metric("imagerefresh_registry_requests_total", kind="GET", outcome="200") >= 1
