"""The chart's RBAC for watch-fed evidence, judged by a real API server.

The chart is rendered for a fresh namespace (its release namespace) and only its
ServiceAccount, Roles and RoleBindings are applied; every request is then sent with a token of
that ServiceAccount, so the answers are the API server's own verdict on the rendered rules:

- names declared (`resourceNames`): a LIST and a WATCH of a declared Deployment pass only with
  `fieldSelector=metadata.name=<declared>` (what the operator's by-name fallback sends); the
  namespace's Deployments without it, or with another name, are refused;
- no names declared: the namespace's workloads may be listed and watched (one stream each);
- pods may be watched in a target namespace, and nothing is granted elsewhere;
- `watchEvidence: false`: none of these list or watch verbs.

The operator's own watches (runtime/watches.py) are then run with that token: refused the
namespace's LIST under scoped RBAC, they fall back to the workload by name and sync.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from imagerefresh.kube.api import KubeApi
from imagerefresh.models import WorkloadKind
from imagerefresh.planner import TargetKey
from imagerefresh.runtime.watches import EvidenceWatches

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually
from support.helm_env import render

pytestmark = [pytest.mark.cluster]

RELEASE = "wr"
FULLNAME = f"{RELEASE}-imagerefresh"
DECLARED = "declared"
OTHER = "other"
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding"}


def declaring(*names: str) -> dict[str, Any]:
    """Values with one policy declaring Deployments `names` (RBAC scoped to them)."""
    container = {"name": "app", "image": "example.test/app:prod"}
    targets = [{"kind": "Deployment", "name": n, "containers": [container]} for n in names]
    return {"policies": [{"name": "p", "spec": {"targets": targets}}]}


def deployment(name: str) -> dict[str, Any]:
    """A Deployment scaled to zero: an object to list and watch, no pods to run."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "example.test/app:prod"}]},
            },
        },
    }


@dataclass
class Answer:
    code: int
    names: set[str]  # the objects a LIST returned, or a WATCH announced


@dataclass
class AsOperator:
    """Raw requests to the API server with the chart ServiceAccount's token."""

    client: httpx.Client
    namespace: str
    kubeconfig: Path

    def _send(self, path: str, params: dict[str, str]) -> Answer:
        with self.client.stream("GET", path, params=params) as response:
            body = response.read().decode()
        if response.status_code != 200:
            return Answer(response.status_code, set())
        if params.get("watch") == "true":
            events = [json.loads(line) for line in body.splitlines() if line.strip()]
            names = {e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"}
            return Answer(200, names)
        return Answer(200, {item["metadata"]["name"] for item in json.loads(body)["items"]})

    def list(
        self, resource: str, *, name: str | None = None, namespace: str | None = None
    ) -> Answer:
        params = {"fieldSelector": f"metadata.name={name}"} if name else {}
        return self._send(self._path(resource, namespace), params)

    def watch(
        self, resource: str, *, name: str | None = None, namespace: str | None = None
    ) -> Answer:
        """A WATCH from "now" (the existing objects arrive as ADDED), ended by the API server
        after a second."""
        params = {"watch": "true", "timeoutSeconds": "1"}
        if name:
            params["fieldSelector"] = f"metadata.name={name}"
        return self._send(self._path(resource, namespace), params)

    def _path(self, resource: str, namespace: str | None) -> str:
        prefix = "/api/v1" if resource == "pods" else "/apis/apps/v1"
        return f"{prefix}/namespaces/{namespace or self.namespace}/{resource}"


@pytest.fixture
def as_operator(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Any]:
    """Applies the chart's RBAC for `values` in `namespace`; the ServiceAccount's client."""
    clients: list[httpx.Client] = []

    def install(values: dict[str, Any]) -> AsOperator:
        objects = render(values, namespace=namespace, release=RELEASE)
        assert not [o for o in objects if o["kind"] in {"ClusterRole", "ClusterRoleBinding"}]
        cluster.apply(*[o for o in objects if o["kind"] in RBAC_KINDS])
        cluster.apply(deployment(DECLARED), deployment(OTHER), namespace=namespace)
        path = service_account_kubeconfig(
            cluster, namespace, FULLNAME, tmp_path / f"sa-{secrets.token_hex(3)}.kubeconfig"
        )
        config = yaml.safe_load(path.read_text())
        server = config["clusters"][0]["cluster"]
        ca = tmp_path / "ca.crt"
        ca.write_bytes(base64.b64decode(server["certificate-authority-data"]))
        token = config["users"][0]["user"]["token"]
        client = httpx.Client(
            base_url=server["server"],
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            verify=ssl.create_default_context(cafile=str(ca)),
            timeout=30,
        )
        clients.append(client)
        # RBAC takes effect as the API server's informers see the new Role and binding.
        eventually(
            lambda: (
                client.get(
                    f"/apis/apps/v1/namespaces/{namespace}/deployments/{DECLARED}"
                ).status_code
                == 200
                or None
            ),
            timeout=30,
            what="the chart's Role in effect for its ServiceAccount",
        )
        return AsOperator(client, namespace, path)

    yield install
    for client in clients:
        client.close()


def test_with_declared_names_a_declared_deployment_is_listed_and_watched_only_by_its_name(
    as_operator: Any,
) -> None:
    sa: AsOperator = as_operator(declaring(DECLARED))
    # What the operator's by-name fallback sends: allowed, and it sees the declared object.
    assert sa.list("deployments", name=DECLARED) == Answer(200, {DECLARED})
    assert sa.watch("deployments", name=DECLARED) == Answer(200, {DECLARED})
    # The namespace's Deployments, or another name: refused.
    assert sa.list("deployments").code == 403
    assert sa.watch("deployments").code == 403
    assert sa.list("deployments", name=OTHER).code == 403
    assert sa.watch("deployments", name=OTHER).code == 403
    # Another kind's declared names are not this kind's: nothing is declared for DaemonSets.
    assert sa.list("daemonsets", name=DECLARED).code == 403
    # Pods: one stream of the namespace's pods.
    assert sa.list("pods").code == 200
    assert sa.watch("pods").code == 200
    assert sa.watch("pods", namespace="default").code == 403


def test_without_declared_names_the_namespaces_workloads_and_pods_are_listed_and_watched(
    as_operator: Any,
) -> None:
    sa: AsOperator = as_operator({})
    assert sa.list("deployments") == Answer(200, {DECLARED, OTHER})
    assert sa.watch("deployments") == Answer(200, {DECLARED, OTHER})
    for resource in ("daemonsets", "statefulsets", "pods"):
        assert (sa.list(resource).code, sa.watch(resource).code) == (200, 200), resource
    # Only where the chart grants it: not in a namespace the operator does not reach.
    assert sa.list("deployments", namespace="default").code == 403
    assert sa.watch("deployments", namespace="default").code == 403


@pytest.mark.parametrize("values", [declaring(DECLARED), {}], ids=["names-declared", "no-names"])
def test_without_watch_evidence_no_list_or_watch_on_workloads_and_no_watch_on_pods(
    as_operator: Any, values: dict[str, Any]
) -> None:
    sa: AsOperator = as_operator({**values, "watchEvidence": False})
    for name in (DECLARED, None):
        assert sa.list("deployments", name=name).code == 403, name
        assert sa.watch("deployments", name=name).code == 403, name
    assert sa.watch("pods").code == 403
    # What the operator reads without watches is still granted.
    declared = f"/apis/apps/v1/namespaces/{sa.namespace}/deployments/{DECLARED}"
    assert sa.client.get(declared).status_code == 200
    assert sa.list("pods").code == 200


@pytest.mark.parametrize(
    ("values", "by_name"), [(declaring(DECLARED), True), ({}, False)], ids=["names", "no-names"]
)
def test_the_operators_own_watches_sync_with_the_charts_rbac(
    as_operator: Any, values: dict[str, Any], by_name: bool
) -> None:
    """Scoped, the namespace's LIST is refused and the workload is watched by name; unscoped,
    one watch of the namespace's Deployments. Either way the copy syncs, as do the pods'."""
    sa: AsOperator = as_operator(values)
    api = KubeApi.from_environment(str(sa.kubeconfig))
    watches = EvidenceWatches(api)
    key = TargetKey(WorkloadKind.DEPLOYMENT, sa.namespace, DECLARED)
    try:
        known = eventually(
            lambda: watches.workload(key) if watches.workload(key)[0] else None,
            timeout=30,
            what="the declared Deployment from a synced watch",
        )
        assert known[1] is not None
        assert known[1]["metadata"]["name"] == DECLARED
        shared = watches._workloads[("Deployment", sa.namespace)]
        assert (shared.refused is not None) is by_name
        assert (key in watches._named) is by_name
        assert watches.version(key) not in (None, "")
        pods = eventually(
            lambda: watches.pods(sa.namespace, {"matchLabels": {"app": DECLARED}}),
            timeout=30,
            what="the namespace's pods from a synced watch",
        )
        assert pods == []  # scaled to zero
    finally:
        watches.close()
        api.close()
