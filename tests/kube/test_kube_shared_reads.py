"""Reads a tick shares: pods of one namespace in one LIST, ServiceAccounts and secrets once.

Each shared read must answer exactly what the per-target read answers — checked against the
API server's own label matching, not against a model of it — while making fewer requests.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from imagerefresh.kube import KubeApi, KubeError
from imagerefresh.kube.readcache import ReadCache

from support.cluster_env import Cluster
from support.counting import CountingKubeApi

Json = dict[str, Any]


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[CountingKubeApi]:
    base = KubeApi.from_environment(cluster.kubeconfig)
    counting = CountingKubeApi(base.connection)
    yield counting
    counting.close()


def naked_pod(name: str, labels: dict[str, str], **spec: Any) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [{"name": "c", "image": "busybox:1"}],
            "nodeSelector": {"type": "kwok"},
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            **spec,
        },
    }


def names(pods: list[Json] | KubeError) -> set[str]:
    assert not isinstance(pods, KubeError), pods
    return {pod["metadata"]["name"] for pod in pods}


# Pods whose labels exercise every operator, each on and off its selector.
PODS = {
    "web-1": {"app": "web", "tier": "front", "track": "stable", "team": "edge"},
    "web-2": {"app": "web", "tier": "front", "track": "canary", "team": "edge"},
    "api-1": {"app": "api", "tier": "back", "track": "stable"},
    "api-legacy": {"app": "api", "tier": "back", "legacy": "yes"},
    "worker-1": {"app": "worker", "tier": "batch", "team": "data"},
    "webby": {"app": "webby", "tier": "front"},
    "bare": {},
}
SELECTORS: list[Json] = [
    {"matchLabels": {"app": "web"}},
    {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "track", "operator": "NotIn", "values": ["canary"]}],
    },
    {
        "matchLabels": {"app": "api", "tier": "back"},
        "matchExpressions": [{"key": "legacy", "operator": "DoesNotExist"}],
    },
    {
        "matchLabels": {"app": "worker"},
        "matchExpressions": [
            {"key": "team", "operator": "Exists"},
            {"key": "tier", "operator": "In", "values": ["batch", "front"]},
        ],
    },
    {"matchLabels": {"app": "absent"}},
]


@pytest.fixture(scope="module")
def labelled(cluster: Cluster) -> Iterator[str]:
    """A namespace holding PODS, for the whole module (read-only tests)."""
    name = f"t-shared-reads-{time.time_ns() % 10**8}"
    cluster.kubectl("create", "namespace", name)
    try:
        deadline = time.monotonic() + 30
        while cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode:
            assert time.monotonic() < deadline, "no default ServiceAccount"
            time.sleep(0.2)
        cluster.apply(*(naked_pod(n, labels) for n, labels in PODS.items()), namespace=name)
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false")


def test_pods_of_selectors_sharing_a_label_come_in_one_list_split_as_the_server_splits(
    api: CountingKubeApi, labelled: str
) -> None:
    expected = [names(api.list_pods(labelled, selector)) for selector in SELECTORS]
    assert expected[0] == {"web-1", "web-2"}  # the server's answers, for the record
    assert expected[1] == {"web-1"}
    assert expected[2] == {"api-1"}
    assert expected[3] == {"worker-1"}
    assert expected[4] == set()
    api.requests.clear()

    answers = api.list_pods_of(labelled, SELECTORS)

    assert [names(pods) for pods in answers] == expected
    assert sum(api.requests.values()) == 1
    for pods in answers:
        assert not isinstance(pods, KubeError)
        assert all(pod["kind"] == "Pod" and pod["apiVersion"] == "v1" for pod in pods)


def test_selectors_without_a_shared_label_are_listed_one_by_one(
    api: CountingKubeApi, labelled: str
) -> None:
    selectors: list[Json] = [
        {"matchLabels": {"tier": "front"}},
        {"matchLabels": {"app": "api"}},
        {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
    ]
    expected = [names(api.list_pods(labelled, selector)) for selector in selectors]
    api.requests.clear()

    answers = api.list_pods_of(labelled, selectors)

    assert [names(pods) for pods in answers] == expected
    assert sum(api.requests.values()) == len(selectors)


def test_an_unusable_selector_fails_only_its_own_target(
    api: CountingKubeApi, labelled: str
) -> None:
    selectors: list[Json] = [
        {"matchLabels": {"app": "web"}},
        {},  # would select every pod: refused
        {"matchLabels": {"app": "api"}},
        {"matchExpressions": [{"key": "x", "operator": "Near"}]},
    ]
    answers = api.list_pods_of(labelled, selectors)
    assert names(answers[0]) == {"web-1", "web-2"}
    assert names(answers[2]) == {"api-1", "api-legacy"}
    for bad in (answers[1], answers[3]):
        assert isinstance(bad, KubeError)
        assert "spec.selector cannot be used" in str(bad)


def docker_secret(name: str, user: str) -> Json:
    auth = base64.b64encode(f"{user}:pw".encode()).decode()
    document = {"auths": {"docker.io": {"auth": auth}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(document).encode()).decode()},
    }


def test_a_ticks_cache_reads_each_service_account_and_secret_once(
    api: CountingKubeApi, cluster: Cluster, namespace: str
) -> None:
    cluster.apply(
        docker_secret("hub", "sa-user"),
        docker_secret("own", "template-user"),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "builder"},
            "imagePullSecrets": [{"name": "hub"}],
        },
        namespace=namespace,
    )
    specs: list[Json] = [
        {"serviceAccountName": "builder"},
        {"serviceAccountName": "builder"},
        {"serviceAccount": "builder"},
        {"imagePullSecrets": [{"name": "own"}, {"name": "hub"}]},
    ]
    uncached = [api.read_pull_secrets(namespace, spec) for spec in specs]
    api.requests.clear()

    cache = ReadCache()
    cached = [api.read_pull_secrets(namespace, spec, cache) for spec in specs]

    assert cached == uncached
    assert [[c["docker.io"].username for c in configs] for configs in cached] == [
        ["sa-user"],
        ["sa-user"],
        ["sa-user"],
        ["template-user", "sa-user"],
    ]
    assert sorted(api.requests.values()) == [1, 1, 1]  # the account, hub, own: once each
    assert {path.rsplit("/", 2)[-2] for _, path in api.requests} == {
        "serviceaccounts",
        "secrets",
    }
