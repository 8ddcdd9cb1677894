"""The Lease's reads and writes, and the write gate, against a real API server.

Two candidates that read the same Lease and both decide to take it must not both win: each
write carries the ``resourceVersion`` it read, and the API server refuses the second (409).
Every other write of :class:`KubeApi` asks the write gate first and, refused, sends nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube import Forbidden, KubeApi, KubeError, NotLeader
from imagerefresh.planner.actions import ImageChange, ImagePatch, PatchPurpose
from imagerefresh.planner.evidence import Workload
from imagerefresh.reference import parse

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster
from support.guarded import unguarded
from support.helm_env import only, render

pytestmark = pytest.mark.cluster


@pytest.fixture
def api(cluster: Cluster) -> Iterator[KubeApi]:
    kube = KubeApi.from_environment(cluster.kubeconfig)
    yield kube
    kube.close()


def spec(holder: str) -> dict[str, Any]:
    return {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": 0}


def test_of_two_writes_from_one_read_of_the_lease_the_second_is_refused_409(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    assert api.read_lease(namespace, "imagerefresh") is None
    api.create_lease(namespace, "imagerefresh", spec("a"))
    with pytest.raises(KubeError) as created_twice:
        api.create_lease(namespace, "imagerefresh", spec("b"))
    assert created_twice.value.status == 409

    read = api.read_lease(namespace, "imagerefresh")
    assert read is not None
    version = read["metadata"]["resourceVersion"]
    api.replace_lease(namespace, "imagerefresh", version, spec("b"))
    with pytest.raises(KubeError) as stale:
        api.replace_lease(namespace, "imagerefresh", version, spec("c"))
    assert stale.value.status == 409
    stored = cluster.get("lease", "imagerefresh", "-n", namespace)
    assert stored["spec"]["holderIdentity"] == "b"


def test_a_closed_write_gate_refuses_every_write_before_it_is_sent_but_not_reads_or_the_lease(
    api: KubeApi, crd_installed: Cluster, cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        {
            "apiVersion": "images.tracebloc.io/v1alpha1",
            "kind": "ImageRefreshPolicy",
            "metadata": {"name": "control-plane"},
            "spec": {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "web",
                        "containers": [{"name": "app", "image": "nginx:1"}],
                    }
                ]
            },
        },
        namespace=namespace,
    )
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1"}]},
                },
            },
        },
        namespace=namespace,
    )
    holding = [True]
    api.write_gate = lambda: holding[0]
    obj = api.read_workload("Deployment", namespace, "web")
    assert obj is not None
    live = Workload.from_api(obj)
    current = live.containers["app"]
    patch = ImagePatch(
        live.key,
        PatchPurpose.REFRESH,
        (ImageChange("app", current.json_path, "nginx:1", "nginx:2", parse("nginx:2").repository),),
    )

    holding[0] = False
    with pytest.raises(NotLeader, match="does not hold the leader-election Lease"):
        api.patch_images(unguarded(patch))
    policy = api.read_policy(namespace, "control-plane")
    assert policy is not None
    with pytest.raises(NotLeader):  # a status write, first try or retry after a 409, alike
        api.replace_policy_status(policy, {"phase": "written by a deposed leader"})
    with pytest.raises(NotLeader):
        api.annotate_policy(namespace, "control-plane", "images.tracebloc.io/reset", "x")
    api.post_event(obj, "Normal", "Refreshed", "must not be posted")  # best-effort: logged
    api.create_lease(namespace, "imagerefresh", spec("me"))  # how leadership is earned: ungated
    assert api.read_workload("Deployment", namespace, "web") is not None  # reads go on

    stored = cluster.get("deployment", "web", "-n", namespace)
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1"
    assert stored["metadata"]["generation"] == obj["metadata"]["generation"]
    ours = [
        e
        for e in cluster.get("events", "-n", namespace)["items"]
        if (e.get("source") or {}).get("component") == "imagerefresh"
    ]
    assert ours == []
    stored_policy = cluster.get("irp", "control-plane", "-n", namespace)
    assert "status" not in stored_policy
    assert "images.tracebloc.io/reset" not in stored_policy["metadata"].get("annotations", {})

    holding[0] = True  # the same calls go through while the gate allows them
    api.patch_images(unguarded(patch))
    stored = cluster.get("deployment", "web", "-n", namespace)
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"


def test_a_lease_watch_returns_the_next_change_or_none_when_nothing_changes(
    api: KubeApi, namespace: str
) -> None:
    created = api.create_lease(namespace, "imagerefresh", spec("a"))
    version = created["metadata"]["resourceVersion"]
    assert api.watch_lease(namespace, "imagerefresh", version, 1) is None

    renewed = api.replace_lease(
        namespace, "imagerefresh", version, spec("a") | {"leaseTransitions": 1}
    )
    event = api.watch_lease(namespace, "imagerefresh", version, 10)
    assert event is not None
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["resourceVersion"] == renewed["metadata"]["resourceVersion"]
    assert event["object"]["spec"]["leaseTransitions"] == 1


def test_the_charts_role_lets_the_operator_watch_its_own_lease_and_no_other(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    objects = render(namespace=namespace)
    rbac = [
        o
        for o in objects
        if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")
        and o["metadata"].get("namespace", namespace) == namespace
    ]
    cluster.apply(*rbac, namespace=namespace)
    account = only(objects, "ServiceAccount")["metadata"]["name"]
    admin = KubeApi.from_environment(cluster.kubeconfig)
    created = admin.create_lease(namespace, "imagerefresh", spec("a"))
    admin.create_lease(namespace, "other", spec("a"))
    admin.close()
    kubeconfig = service_account_kubeconfig(cluster, namespace, account, tmp_path / "sa")
    operator = KubeApi.from_environment(str(kubeconfig))
    version = created["metadata"]["resourceVersion"]
    try:
        # RBAC caches may lag a moment behind a new Role: allowed within a bound.
        deadline = time.monotonic() + 30
        while True:
            try:
                assert operator.watch_lease(namespace, "imagerefresh", version, 1) is None
                break
            except Forbidden:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with pytest.raises(Forbidden):
            operator.watch_lease(namespace, "other", version, 1)
    finally:
        operator.close()
