"""Watched collections against the real API server: synced only between a LIST and a break.

The faults are the API server's own: a watch resumed from a version it no longer holds is
answered 410 Gone; a stream closed under the reader; a LIST the caller's RBAC refuses. Each
leaves the copy unsynced (a reader gets nothing to decide on) until a new LIST succeeds.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import Forbidden
from imagerefresh.kube.watch import SILENT_AFTER, Collection

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually, wait_until_versions_expire
from support.operator_env import kwok_pod_template

pytestmark = pytest.mark.cluster


def _deployment(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": kwok_pod_template({"app": image}, labels={"app": name}),
        },
    }


def _image(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else obj["spec"]["template"]["spec"]["containers"][0]["image"]


def _collection(api: KubeApi, ns: str, name: str | None = None, **kwargs: Any) -> Collection[Any]:
    return Collection(
        api,
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        what=f"deployments in {ns}",
        keep=lambda obj: obj,
        name=name,
        **kwargs,
    )


def _image_in_copy(collection: Collection[Any], name: str) -> str | None:
    synced, obj = collection.get(name)
    return _image(obj) if synced else None


def test_a_copy_is_synced_by_its_list_and_follows_every_change_telling_the_listener(
    cluster: Cluster, policy_namespace: str
) -> None:
    ns = policy_namespace
    cluster.apply(_deployment("app", "example.test/app:1"), namespace=ns)
    api = KubeApi.from_environment(cluster.kubeconfig)
    told: list[tuple[str, str]] = []
    collection = _collection(api, ns, changed=lambda n, v: told.append((n, v))).start()
    try:
        assert collection.wait_first_list(30)
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        assert _image_in_copy(collection, "app") == "example.test/app:1"
        cluster.kubectl("set", "image", "-n", ns, "deployment/app", "app=example.test/app:2")
        eventually(
            lambda: _image_in_copy(collection, "app") == "example.test/app:2",
            what="the watch to deliver the change",
            timeout=30,
        )
        stored = cluster.get("deployment", "app", "-n", ns)["metadata"]["resourceVersion"]
        eventually(lambda: ("app", stored) in told or None, what="the listener told", timeout=30)
        cluster.kubectl("delete", "deployment", "app", "-n", ns)
        eventually(lambda: collection.get("app") == (True, None), what="the deletion", timeout=30)
        assert collection.lists == 1  # no relist: the stream never broke
    finally:
        collection.stop()
    assert collection.snapshot() is None  # stopped: it says nothing any more


def test_a_watch_the_api_server_answers_410_gone_unsyncs_the_copy_until_it_lists_again(
    cluster: Cluster, policy_namespace: str
) -> None:
    ns = policy_namespace
    cluster.apply(_deployment("app", "example.test/app:1"), namespace=ns)
    api = KubeApi.from_environment(cluster.kubeconfig)
    wait_until_versions_expire(cluster, f"/apis/apps/v1/namespaces/{ns}/deployments")
    collection = _collection(api, ns).start()
    try:
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        collection.hold()  # what arrives waits: the 410 is seen only after the change below
        collection.resume_from("1")  # long compacted: the API server answers 410 Gone
        cluster.kubectl("set", "image", "-n", ns, "deployment/app", "app=example.test/app:2")
        assert _image_in_copy(collection, "app") == "example.test/app:1"  # held, not yet seen
        collection.release()
        eventually(lambda: collection.lists == 2, what="a new list after the 410", timeout=30)
        eventually(
            lambda: _image_in_copy(collection, "app") == "example.test/app:2",
            what="the change, from the new list",
            timeout=30,
        )
    finally:
        collection.stop()


def test_a_stream_cut_under_the_reader_unsyncs_the_copy_and_the_new_list_misses_nothing(
    cluster: Cluster, policy_namespace: str
) -> None:
    ns = policy_namespace
    cluster.apply(_deployment("app", "example.test/app:1"), namespace=ns)
    api = KubeApi.from_environment(cluster.kubeconfig)
    unsynced = threading.Event()
    collection = _collection(api, ns)
    original = collection._unsync

    def watched_unsync() -> None:
        unsynced.set()
        original()

    collection._unsync = watched_unsync  # type: ignore[method-assign]
    collection.start()
    try:
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        # Synced at the end of the LIST, the copy opens its stream after: cut that stream.
        eventually(lambda: collection._response is not None, what="the stream open", timeout=30)
        collection.hold()
        collection.cut()  # the connection closes while the reader waits on it
        cluster.kubectl("set", "image", "-n", ns, "deployment/app", "app=example.test/app:2")
        collection.release()
        assert unsynced.wait(30), "a cut stream must unsync the copy"
        eventually(lambda: collection.lists == 2, what="a new list after the cut", timeout=30)
        eventually(
            lambda: _image_in_copy(collection, "app") == "example.test/app:2",
            what="the change made while the stream was down",
            timeout=30,
        )
    finally:
        collection.stop()


def test_a_list_rbac_refuses_leaves_the_copy_unsynced_and_says_why(
    cluster: Cluster, policy_namespace: str, tmp_path: Path
) -> None:
    ns = policy_namespace
    cluster.apply(_deployment("app", "example.test/app:1"), namespace=ns)
    kubeconfig = service_account_kubeconfig(cluster, ns, "default", tmp_path / "kc")
    collection = _collection(KubeApi.from_environment(str(kubeconfig)), ns).start()
    try:
        assert collection.wait_first_list(30)
        assert isinstance(collection.refused, Forbidden)
        assert collection.snapshot() is None
        assert collection.get("app") == (False, None)
    finally:
        collection.stop()


def test_one_workload_by_name_is_watched_with_only_resource_names_rbac(
    cluster: Cluster, policy_namespace: str, tmp_path: Path
) -> None:
    ns = policy_namespace
    cluster.apply(
        _deployment("app", "example.test/app:1"),
        _deployment("other", "example.test/other:1"),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "named"},
            "rules": [
                {
                    "apiGroups": ["apps"],
                    "resources": ["deployments"],
                    "resourceNames": ["app"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "named"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "named"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
        },
        namespace=ns,
    )
    api = KubeApi.from_environment(
        str(service_account_kubeconfig(cluster, ns, "default", tmp_path / "kc"))
    )
    whole = _collection(api, ns).start()
    named = _collection(api, ns, name="app").start()
    try:
        assert whole.wait_first_list(30)
        assert isinstance(whole.refused, Forbidden)  # the namespace's list is not ours
        eventually(lambda: named.synced, what="the by-name list", timeout=30)
        snapshot = named.snapshot()
        assert snapshot is not None
        assert set(snapshot.items) == {"app"}
        cluster.kubectl("set", "image", "-n", ns, "deployment/app", "app=example.test/app:2")
        cluster.kubectl("set", "image", "-n", ns, "deployment/other", "app=example.test/other:2")
        eventually(
            lambda: _image_in_copy(named, "app") == "example.test/app:2",
            what="the named workload's change",
            timeout=30,
        )
        assert named.lists == 1
        assert set(named.snapshot().items) == {"app"}  # type: ignore[union-attr]
    finally:
        whole.stop()
        named.stop()


def test_a_collection_past_its_bound_is_not_kept_and_not_listed_again(
    cluster: Cluster, policy_namespace: str
) -> None:
    ns = policy_namespace
    cluster.apply(*(_deployment(f"app-{i}", "example.test/app:1") for i in range(3)), namespace=ns)
    api = KubeApi.from_environment(cluster.kubeconfig)
    collection = _collection(api, ns, max_items=2).start()
    try:
        assert collection.wait_first_list(30)
        assert collection.refused is not None
        assert "more than 2 objects" in str(collection.refused)
        assert collection.snapshot() is None
        # What must NOT happen, a relist loop, cannot: the watch thread has given up for good.
        assert _gave_up(collection)
        assert collection.lists == 1
    finally:
        collection.stop()


def test_rbac_revoked_mid_run_stops_the_copy_for_good_not_a_relist_loop(
    cluster: Cluster, policy_namespace: str, tmp_path: Path
) -> None:
    ns = policy_namespace
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "lister"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lister"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "lister"},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]}
        ],
    }
    cluster.apply(_deployment("app", "example.test/app:1"), role, binding, namespace=ns)
    api = KubeApi.from_environment(
        str(service_account_kubeconfig(cluster, ns, "default", tmp_path / "kc"))
    )
    collection = _collection(api, ns).start()
    try:
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        cluster.kubectl("delete", "rolebinding", "lister", "-n", ns)
        eventually(lambda: _refused_after_cut(collection), what="the relist refused", timeout=30)
        assert collection.snapshot() is None
        lists = collection.lists
        # What must NOT happen, a relist every backoff, cannot: the watch thread has given up.
        assert _gave_up(collection)
        assert collection.lists == lists
    finally:
        collection.stop()


def _gave_up(collection: Collection[Any]) -> bool:
    """Whether the collection's watch thread has ended: nothing lists or watches for it again
    (a fact, where waiting a while for a relist that does not come would be a bet on time)."""
    thread = collection._thread
    thread.join(30)
    return not thread.is_alive()


def _refused_after_cut(collection: Collection[Any]) -> bool:
    """Cut the stream (the next LIST meets the RBAC as it is now); whether it was refused."""
    if collection.refused is None:
        collection.cut()
        time.sleep(0.3)
    return isinstance(collection.refused, Forbidden)


class _Clock:
    """A clock that moves only when the test moves it (silence is never slept through)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_stream_silent_past_the_threshold_unsyncs_the_copy_and_is_listed_again(
    cluster: Cluster, policy_namespace: str
) -> None:
    ns = policy_namespace
    cluster.apply(_deployment("app", "example.test/app:1"), namespace=ns)
    api = KubeApi.from_environment(cluster.kubeconfig)
    clock = _Clock()
    told: list[tuple[str, str]] = []
    collection = _collection(api, ns, clock=clock, changed=lambda n, v: told.append((n, v)))
    collection.start()
    try:
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        collection.hold()  # nothing arrives from here: no event, no bookmark
        cluster.kubectl("set", "image", "-n", ns, "deployment/app", "app=example.test/app:2")
        clock.now += SILENT_AFTER  # silent exactly as long as allowed: still synced
        assert collection.synced
        assert _image_in_copy(collection, "app") == "example.test/app:1"
        clock.now += 0.5  # past it: dead, whatever the socket says
        assert collection.snapshot() is None
        assert collection.get("app") == (False, None)
        assert collection.version_of("app") is None
        # whoever follows it is told: its version is unknown now (read it directly)
        eventually(lambda: ("app", "") in told or None, what="the listener told", timeout=30)
        collection.release()
        eventually(lambda: collection.lists == 2, what="a new list after the silence", timeout=30)
        eventually(
            lambda: _image_in_copy(collection, "app") == "example.test/app:2",
            what="the change made while it was silent, from the new list",
            timeout=30,
        )
    finally:
        collection.stop()


def test_a_healthy_idle_stream_is_kept_alive_by_the_api_server_s_bookmarks(
    cluster: Cluster, policy_namespace: str
) -> None:
    """kube-apiserver sends a bookmark 2 s before a stream's own timeout (and about every
    minute): a 4 s stream shows it without waiting a minute. Each one moves ``heard``."""
    ns = policy_namespace
    api = KubeApi.from_environment(cluster.kubeconfig)
    clock = _Clock()
    collection = _collection(api, ns, clock=clock, watch_seconds=4).start()
    try:
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        lists = collection.lists
        marks: list[float] = []
        original = collection._apply

        def apply(event: dict[str, Any], version: str, what: str) -> str:
            if event.get("type") == "BOOKMARK":
                marks.append(clock.now)
            return original(event, version, what)

        collection._apply = apply  # type: ignore[method-assign]
        clock.now += 60
        eventually(lambda: marks or None, what="a bookmark on the idle stream", timeout=30)
        assert collection.heard() == clock.now
        assert collection.synced
        assert collection.lists == lists  # streams ended on time are resumed, never relisted
    finally:
        collection.stop()


def test_a_copy_past_its_byte_cap_is_given_up_for_direct_reads_not_listed_again(
    cluster: Cluster, policy_namespace: str
) -> None:
    ns = policy_namespace
    cluster.apply(*(_deployment(f"app-{i}", "example.test/app:1") for i in range(2)), namespace=ns)
    api = KubeApi.from_environment(cluster.kubeconfig)

    def size(obj: dict[str, Any]) -> int:
        return len(json.dumps(obj))

    one = size(api.read_workload("Deployment", ns, "app-0") or {})
    cap = one * 5 // 2  # two objects fit, not three
    collection = _collection(api, ns, size=size, max_bytes=cap).start()
    try:
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        assert collection.kept_bytes > one
        cluster.apply(_deployment("app-2", "example.test/app:1"), namespace=ns)
        eventually(lambda: collection.refused, what="the copy given up", timeout=30)
        assert f"more than {cap} bytes" in str(collection.refused)
        assert collection.snapshot() is None
        assert collection.kept_bytes == 0  # what it held is let go
        lists = collection.lists
        time.sleep(1.5)  # what must NOT happen: a relist loop (the backoff starts at 0.5 s)
        assert collection.lists == lists
        listed = _collection(api, ns, size=size, max_bytes=cap).start()  # three, from its LIST
        assert listed.wait_first_list(30)
        assert f"more than {cap} bytes" in str(listed.refused)
        assert listed.snapshot() is None
    finally:
        collection.stop()
        if "listed" in locals():
            listed.stop()


def test_a_copy_asked_to_keep_more_is_unsynced_at_once_and_listed_again(
    cluster: Cluster, policy_namespace: str
) -> None:
    ns = policy_namespace
    cluster.apply(_deployment("app", "example.test/app:1"), namespace=ns)
    api = KubeApi.from_environment(cluster.kubeconfig)
    collection = _collection(api, ns).start()
    try:
        eventually(lambda: collection.synced, what="the first list", timeout=30)
        collection.list_again("a test")
        assert collection.snapshot() is None
        eventually(lambda: collection.lists == 2 and collection.synced, what="relisted", timeout=30)
    finally:
        collection.stop()
