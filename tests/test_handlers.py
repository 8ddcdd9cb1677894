"""kopf's wiring (:mod:`imagerefresh.handlers`) as the API server sees it.

The operator runs as an audited ServiceAccount, so the API server's audit log shows each watch
request kopf sends for a watched namespace's policies: when it is asked to end, and what it
resumes from.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from imagerefresh.handlers import WATCH_CLIENT_TIMEOUT, WATCH_SERVER_TIMEOUT

from support.accounts import audited_kubeconfig, audited_requests
from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import free_port

pytestmark = pytest.mark.cluster

ACCOUNT = "watch-bounds"


def test_a_policy_watch_ends_within_its_bound_and_resumes_from_its_version_without_a_list(
    crd_installed: Cluster, registry: str, policy_namespace: str, tmp_path: Path
) -> None:
    cluster = crd_installed
    kubeconfig = audited_kubeconfig(cluster, ACCOUNT, tmp_path / "kubeconfig")
    operator = Operator(
        dataclasses.replace(cluster, kubeconfig=str(kubeconfig)),
        registry,
        free_port(),
        tmp_path / "operator.log",
    )
    path = f"/apis/images.tracebloc.io/v1alpha1/namespaces/{policy_namespace}/imagerefreshpolicies"

    def of_policies(verb: str, stage: str = "ResponseStarted") -> list[str]:
        """What kopf asked of this namespace's policies (and was answered: a fresh CRD's
        storage answers 429 while it initializes, and kopf asks again)."""
        return [
            uri
            for v, uri, code in audited_requests(cluster, ACCOUNT, stage)
            if v == verb and uri.split("?")[0] == path and code == 200
        ]

    operator.start()
    try:
        # A silent stream is replaced within the bound: a second watch starts after the first
        # is ended (by the server at WATCH_SERVER_TIMEOUT, else by the client).
        eventually(
            lambda: len(of_policies("watch")) >= 2,
            timeout=WATCH_CLIENT_TIMEOUT + 30,
            what="the policy watch to end and start again",
        )
    finally:
        operator.stop()
    first, second = of_policies("watch")[:2]
    assert f"timeoutSeconds={WATCH_SERVER_TIMEOUT}" in first
    assert f"timeoutSeconds={WATCH_SERVER_TIMEOUT}" in second
    assert "resourceVersion=" in second  # resumed where the first ended, not from a new list
    assert len(of_policies("list", "ResponseComplete")) == 1
