"""The reading half of `imagerefresh audit --offline` against the real API server: a refused
node list (403) is judged without node image lists; any other failure to list nodes means the
audit could not be done, never "ready".

The API server answers everything here; only the node LIST's answer is replaced, by the status
a faulty or overloaded API server (or a caller whose credentials expired) gives, since a real
one cannot be made to fail that one LIST on cue.
"""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import ErrorAnswer, translate
from imagerefresh.runtime.coverage import AuditUnreadable, read_coverage

from support.cluster_env import Cluster
from support.scenario import deployment

pytestmark = pytest.mark.cluster

PINNED = "docker.io/tracebloc/proxy@sha256:" + "a" * 64


class NodesAnswer(KubeApi):
    """A KubeApi whose node LIST is answered with ``status``; every other request is real."""

    def __init__(self, *args: Any, status: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.status = status

    def _request(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        if path == "/api/v1/nodes":
            answer = ErrorAnswer(self.status, "injected")
            raise translate(answer, what=what)
        return super()._request(what, method, path, **kwargs)


def api_answering(cluster: Cluster, status: int) -> KubeApi:
    return NodesAnswer(KubeApi.from_environment(cluster.kubeconfig).connection, status=status)


@pytest.fixture
def audited(crd_installed: Cluster, namespace: str) -> str:
    crd_installed.apply(deployment("proxy", {"proxy": PINNED}), namespace=namespace)
    crd_installed.kubectl("rollout", "status", "deployment/proxy", "-n", namespace, "--timeout=60s")
    return namespace


@pytest.mark.parametrize("status", [500, 503, 401, 404])
def test_a_node_list_that_fails_other_than_forbidden_means_the_audit_could_not_be_done(
    cluster: Cluster, audited: str, status: int
) -> None:
    with pytest.raises(AuditUnreadable, match=r"^list nodes: ") as raised:
        read_coverage(api_answering(cluster, status), (audited,), offline=True)
    assert "imagerefresh audit --offline reads the nodes' image lists" in str(raised.value)


def test_a_forbidden_node_list_is_judged_on_pods_alone_and_said_once(
    cluster: Cluster, audited: str
) -> None:
    coverage = read_coverage(api_answering(cluster, 403), (audited,), offline=True)
    assert coverage.offline is not None
    assert coverage.offline.nodes.unreadable == "you may not list nodes"
    assert coverage.offline.note is not None
    assert coverage.offline.note.startswith("node image lists were not used: list nodes: ")
    (proxy,) = coverage.offline.workloads
    # The pods were read as they run: each proves the node it landed on.
    assert {pod.node for pod in proxy.pods} <= {f"kwok-node-{i}" for i in range(16)}
    assert all(pod.pulled == {"proxy": PINNED} for pod in proxy.pods)


def test_without_offline_neither_pods_nor_nodes_are_read(cluster: Cluster, audited: str) -> None:
    coverage = read_coverage(api_answering(cluster, 500), (audited,))
    assert coverage.offline is None
