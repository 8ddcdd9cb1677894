"""kopf's wiring (:mod:`imagerefresh.handlers`) as the API server sees it.

The operator runs as an audited ServiceAccount, so the API server's audit log shows each list
and watch request kopf sends: where it watches policies, when a watch is asked to end, and what
it resumes from. The module operators of the other tests watch ``irp-*``, a pattern: one
cluster-wide watch of policies, and no namespace listing for kopf to race.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import kopf
import pytest

from imagerefresh.handlers import WATCH_CLIENT_TIMEOUT, WATCH_SERVER_TIMEOUT, NoEssence

from support.accounts import audited_kubeconfig, audited_requests
from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import free_port
from support.scenario import policy, target

pytestmark = pytest.mark.cluster

ACCOUNT = "watch-bounds"


POLICIES = "/apis/images.tracebloc.io/v1alpha1/imagerefreshpolicies"
NAMESPACES = "/api/v1/namespaces"


def audited_operator(cluster: Cluster, registry: str, account: str, tmp_path: Path) -> Operator:
    """The tests' operator (``--namespace irp-*``) as ServiceAccount ``account``."""
    kubeconfig = audited_kubeconfig(cluster, account, tmp_path / "kubeconfig")
    return Operator(
        dataclasses.replace(cluster, kubeconfig=str(kubeconfig)),
        registry,
        free_port(),
        tmp_path / "operator.log",
    )


def answered(cluster: Cluster, account: str, verb: str, path: str, stage: str) -> list[str]:
    """The URIs of ``account``'s requests of ``verb`` on ``path`` that were answered 200 (a
    fresh CRD's storage answers 429 while it initializes, and kopf asks again)."""
    return [
        uri
        for v, uri, code in audited_requests(cluster, account, stage)
        if v == verb and uri.split("?")[0] == path and code == 200
    ]


def test_a_policy_watch_ends_within_its_bound_and_resumes_from_its_version_without_a_list(
    crd_installed: Cluster, registry: str, policy_namespace: str, tmp_path: Path
) -> None:
    cluster = crd_installed
    operator = audited_operator(cluster, registry, ACCOUNT, tmp_path)

    def of_policies(verb: str, stage: str = "ResponseStarted") -> list[str]:
        return answered(cluster, ACCOUNT, verb, POLICIES, stage)

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


@pytest.mark.parametrize("scanning", [(), ("--no-scanning",)], ids=["scanning", "no-scanning"])
def test_a_namespace_pattern_is_served_from_one_cluster_wide_watch_without_listing_namespaces(
    crd_installed: Cluster,
    registry: str,
    policy_namespace: str,
    tmp_path: Path,
    scanning: tuple[str, ...],
) -> None:
    # kopf serves a pattern by listing namespaces twice and ignoring what only the second
    # listing shows: a namespace created between them was never served (reproduced by delaying
    # kopf's namespace watcher). Without a namespace dimension there is nothing to miss; a
    # pattern handed back to kopf reddens the namespace assertions at once, not one run in many.
    cluster, account = crd_installed, "namespace-scope" + "".join(scanning)
    elsewhere = f"irq-{policy_namespace.removeprefix('irp-')}"  # not matched by irp-*
    cluster.kubectl("create", "namespace", elsewhere)
    try:
        for namespace in (elsewhere, policy_namespace):
            cluster.apply(
                policy("control-plane", target("app", app=f"{registry}/{namespace}/app:prod")),
                namespace=namespace,
            )
        operator = dataclasses.replace(
            audited_operator(cluster, registry, account, tmp_path), extra_args=scanning
        )
        operator.start()
        try:
            operator.wait_first_tick(policy_namespace, "control-plane")
            # One more event of the matching policy, through the same stream, after both
            # ADDED events: the unmatched policy has been delivered and passed over by now.
            operator.tick(policy_namespace, "control-plane")
            assert operator.ticks(elsewhere, "control-plane") == 0
            assert f"{elsewhere}/control-plane" not in operator.log()
        finally:
            operator.stop()
    finally:
        cluster.kubectl("delete", "namespace", elsewhere, "--wait=false", check=False)
    assert answered(cluster, account, "watch", POLICIES, "ResponseStarted")
    namespaced = f"/apis/images.tracebloc.io/v1alpha1/namespaces/{policy_namespace}/"
    requests = audited_requests(cluster, account, "ResponseStarted")
    assert not [uri for verb, uri, _ in requests if verb == "watch" and uri.startswith(namespaced)]
    assert not [uri for verb, uri, _ in requests if uri.split("?")[0] == NAMESPACES]


def test_no_essence_gives_kopf_nothing_to_copy_compare_or_store_per_policy_event() -> None:
    body = kopf.Body(
        {
            "metadata": {"name": "p", "labels": {"team": "a"}, "annotations": {"x": "1"}},
            "spec": {"targets": [{"kind": "Deployment", "name": "d"}]},
            "status": {"targets": [{"name": "d", "message": "m" * 1000}]},
        }
    )
    storage = NoEssence()
    patch = kopf.Patch()
    assert storage.build(body=body) == {}
    assert storage.build(body=body, extra_fields=["status.targets"]) == {}
    assert storage.fetch(body=body) == {}
    storage.store(body=body, patch=patch, essence=kopf.BodyEssence({"spec": {}}))
    assert not patch
