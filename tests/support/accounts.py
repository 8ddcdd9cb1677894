"""Clients that act as ServiceAccounts, and what the API server's audit log says they wrote.

A test that must know *who* wrote (two operator processes, the leader and a standby) runs each
client as its own ServiceAccount: the API server then names it in every audit entry. e2e/local
audits only the ServiceAccounts of ``AUDITED_NAMESPACE`` (see its docstring), so
:func:`audited_kubeconfig` makes them there, bound to ``cluster-admin`` (the operator's RBAC is
the chart's business, tested in tests/chart).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagerefresh.kube.api import KubeApi

from support.cluster_env import AUDITED_NAMESPACE, Cluster

__all__ = [
    "AuditEntry",
    "audited_kubeconfig",
    "audited_requests",
    "audited_writes",
    "impersonating",
    "service_account_kubeconfig",
]

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def impersonating(kubeconfig: str, user: str) -> KubeApi:
    """The operator's client on the admin ``kubeconfig``, acting as ``user`` (the admin may
    impersonate anyone): every request is authorized as that user's."""
    api = KubeApi.from_environment(kubeconfig)
    api.connection.default_headers["Impersonate-User"] = user
    return api


def service_account_kubeconfig(cluster: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig for the same API server (server, CA) that authenticates as `account`."""
    token = cluster.kubectl(
        "create", "token", account, "-n", namespace, "--duration", "1h"
    ).stdout.strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    server = admin["clusters"][0]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "test",
                        "cluster": {
                            "server": server["server"],
                            "certificate-authority-data": server["certificate-authority-data"],
                        },
                    }
                ],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": account, "context": {"cluster": "test", "user": account}}],
                "current-context": account,
            }
        )
    )
    return path


def audited_kubeconfig(cluster: Cluster, account: str, path: Path) -> Path:
    """A cluster-admin kubeconfig for ServiceAccount ``account``, whose requests are audited."""
    if cluster.audit_log is None:
        pytest.fail(
            "this test counts writes in the API server's audit log, and this cluster has none: "
            "run it on e2e/local's cluster (unset KUBECONFIG), or set IMAGEREFRESH_TEST_AUDIT_LOG "
            f"to the log of an API server that audits ServiceAccounts of {AUDITED_NAMESPACE}",
            pytrace=False,
        )
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AUDITED_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": AUDITED_NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{AUDITED_NAMESPACE}-{account}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": AUDITED_NAMESPACE}
            ],
        },
    ]
    cluster.apply(*manifests)
    return service_account_kubeconfig(cluster, AUDITED_NAMESPACE, account, path)


@dataclass(frozen=True)
class AuditEntry:
    """One completed request: who, what verb on which object, and the answer's code."""

    account: str
    verb: str
    resource: str
    namespace: str
    name: str
    code: int
    # When the API server received the request and logged its answer (its own clock).
    received: datetime
    completed: datetime

    @property
    def succeeded(self) -> bool:
        return 200 <= self.code < 300


def _audit_events(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """The audit log's entries, in the order the API server logged them."""
    assert cluster.audit_log is not None
    with cluster.audit_log.open() as log:
        for line in log:
            try:
                yield json.loads(line)
            except ValueError:
                continue  # a line still being written


def _code(event: dict[str, Any]) -> int:
    return int((event.get("responseStatus") or {}).get("code") or 0)


def _time(event: dict[str, Any], key: str) -> datetime:
    """An audit timestamp (RFC 3339 with microseconds), as an aware datetime."""
    return datetime.fromisoformat(str(event[key]).replace("Z", "+00:00"))


def audited_writes(cluster: Cluster, *accounts: str) -> list[AuditEntry]:
    """Every write (create/update/patch/delete) by ``accounts`` the API server answered, in the
    order it logged them (the order it completed them)."""
    users = {f"system:serviceaccount:{AUDITED_NAMESPACE}:{a}": a for a in accounts}
    entries: list[AuditEntry] = []
    for event in _audit_events(cluster):
        account = users.get((event.get("user") or {}).get("username", ""))
        if account is None or event.get("stage") != "ResponseComplete":
            continue
        if event.get("verb") not in WRITE_VERBS:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        entries.append(
            AuditEntry(
                account=account,
                verb=event["verb"],
                resource=resource,
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                code=_code(event),
                received=_time(event, "requestReceivedTimestamp"),
                completed=_time(event, "stageTimestamp"),
            )
        )
    return entries


def audited_requests(cluster: Cluster, account: str, stage: str) -> list[tuple[str, str, int]]:
    """The (verb, requestURI, code) of every request by ``account`` the API server logged at
    ``stage`` (a watch is logged at ``ResponseStarted`` when it starts), in the order logged."""
    user = f"system:serviceaccount:{AUDITED_NAMESPACE}:{account}"
    return [
        (str(event.get("verb")), str(event.get("requestURI")), _code(event))
        for event in _audit_events(cluster)
        if (event.get("user") or {}).get("username") == user and event.get("stage") == stage
    ]
