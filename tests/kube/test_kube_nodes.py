"""KubeApi.list_nodes on the real API server: paged, capped, honest about what it left out.

The cluster's nodes (kwok's fake ones and the real node) are listed page by page with the API
server's own ``limit``/``continue``; a list that stops at its cap says it is incomplete, and
one the RBAC refuses is a :class:`Forbidden` like every other read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube import KubeApi
from imagerefresh.kube.errors import Forbidden

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster
from support.counting import CountingKubeApi

NODES = "/api/v1/nodes"


@pytest.fixture
def api(cluster: Cluster) -> Iterator[CountingKubeApi]:
    base = KubeApi.from_environment(cluster.kubeconfig)
    counting = CountingKubeApi(base.connection)
    yield counting
    counting.close()


def name_of(node: dict[str, Any]) -> str:
    return str(node["metadata"]["name"])


def all_nodes(cluster: Cluster) -> list[str]:
    names = sorted(name_of(node) for node in cluster.get("nodes")["items"])
    assert len(names) >= 3, names  # kwok's nodes and the real one: enough to page and cap
    return names


def test_every_node_is_listed_page_by_page_and_the_list_says_it_is_complete(
    api: CountingKubeApi, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = all_nodes(cluster)
    monkeypatch.setattr(api, "page_size", 1)  # one node a page: every continue token is used
    found, complete = api.list_nodes(name_of)
    assert sorted(found) == expected
    assert complete is True
    assert api.requests[("GET", NODES)] == len(expected)


def test_a_list_stopped_at_its_cap_keeps_what_it_read_and_says_it_is_incomplete(
    api: CountingKubeApi, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = all_nodes(cluster)
    cap = len(expected) - 1
    found, complete = api.list_nodes(name_of, cap=cap)
    assert len(found) == cap
    assert set(found) < set(expected)
    assert complete is False
    assert api.requests[("GET", NODES)] == 1  # it asked for no more than the cap
    monkeypatch.setattr(api, "page_size", 2)  # and across pages the cap holds just the same
    paged, complete = api.list_nodes(name_of, cap=cap)
    assert (len(paged), complete) == (cap, False)


def test_a_cap_the_cluster_fits_in_is_complete(api: CountingKubeApi, cluster: Cluster) -> None:
    expected = all_nodes(cluster)
    found, complete = api.list_nodes(name_of, cap=len(expected))
    assert (sorted(found), complete) == (expected, True)


def test_what_keep_makes_nothing_of_is_left_out_but_still_counts_against_the_cap(
    api: CountingKubeApi, cluster: Cluster
) -> None:
    expected = all_nodes(cluster)
    found, complete = api.list_nodes(lambda node: None, cap=len(expected) - 1)
    assert (found, complete) == ([], False)


def test_a_node_list_the_rbac_refuses_is_forbidden_naming_the_grant(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = service_account_kubeconfig(cluster, namespace, "default", tmp_path / "kc")
    api = KubeApi.from_environment(str(kubeconfig))
    try:
        with pytest.raises(Forbidden) as refused:
            api.list_nodes(name_of)
    finally:
        api.close()
    assert refused.value.status == 403
    assert "list nodes" in str(refused.value)
    assert "list on nodes cluster-wide" in str(refused.value)
