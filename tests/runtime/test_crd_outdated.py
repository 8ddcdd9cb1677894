"""An installed CRD older than the operator, on the real API server: the operator acts on nothing.

The older CRD is the repository's with the fields a8eba12 added removed (``spec.verify``,
``spec.minimumAge``, ``status.seen``, ``status.targets[].failed``). Under it the API server
silently drops a policy's ``verify``; the operator, run as ``imagerefresh run``, leaves the
drifted workload as it is, marks the policy Degraded (``CRDOutdated``) with an event and a
metric, and, once the current CRD is applied, acts — without a restart. Every test here leaves
the current CRD installed (other modules share it), whatever happens.

The schema is read from the API server's OpenAPI v3 document: the chart's ServiceAccount reads
it with no rule of the chart's (``system:discovery``), and an identity that may not read it
fails closed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from imagerefresh.kube.api import KubeApi
from imagerefresh.metrics import Metrics
from imagerefresh.runtime.policyview import PolicyUnreadable
from imagerefresh.runtime.schema import (
    CRD_NAME,
    ITEMS,
    CrdCheck,
    missing_paths,
    operator_paths,
)
from imagerefresh.runtime.schema import Path as FieldPath

from support.accounts import impersonating, service_account_kubeconfig
from support.cluster_env import Cluster, eventually
from support.helm_env import only, render
from support.operator_env import CRD, kwok_pod_template, running_operator
from support.registry_env import ImagePusher
from support.signing import TestKey

pytestmark = pytest.mark.cluster

POLICY = "verified"
REMOVED: list[FieldPath] = [
    ("spec", "minimumAge"),
    ("spec", "verify"),
    ("status", "seen"),
    ("status", "targets", ITEMS, "failed"),
]


def older_crd() -> dict[str, Any]:
    """The repository's CRD without the fields of REMOVED: what an older release installed."""
    crd = copy.deepcopy(yaml.safe_load(CRD.read_text()))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path in REMOVED:
        node = schema
        for segment in path[:-1]:
            node = node["items"] if segment == ITEMS else node["properties"][segment]
        del node["properties"][path[-1]]
    return crd


def served_missing(cluster: Cluster) -> list[FieldPath]:
    """What the schema the API server publishes now lacks of the models' fields."""
    api = KubeApi.from_environment(cluster.kubeconfig)
    try:
        return missing_paths(api.read_policy_schema(), operator_paths())
    finally:
        api.close()


def install(cluster: Cluster, crd: dict[str, Any] | Path, missing: list[FieldPath]) -> None:
    """Apply ``crd`` as the crd_installed fixture does (same field manager, so fields it no
    longer names are removed), and wait until the API server serves it: what it publishes
    lacks exactly ``missing``. Conflicts are forced: a chart test's helm release of this
    session may own the versions by now, as an upgrade by hand would find them."""
    apply = ("apply", "--server-side", "--force-conflicts")
    if isinstance(crd, Path):
        cluster.kubectl(*apply, "-f", str(crd))
    else:
        cluster.kubectl(*apply, "-f", "-", input=json.dumps(crd))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
    eventually(
        lambda: served_missing(cluster) == missing,
        timeout=60,
        what=f"the API server to publish the CRD lacking {missing}",
    )


@pytest.fixture
def older(crd_installed: Cluster) -> Iterator[Cluster]:
    """The older CRD installed; the current one again afterwards, whatever happened."""
    try:
        install(crd_installed, older_crd(), REMOVED)
        yield crd_installed
    finally:
        install(crd_installed, CRD, [])


def policy(namespace: str, tag: str) -> dict[str, Any]:
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": POLICY, "namespace": namespace},
        "spec": {
            "verify": {"publicKeys": [TestKey.p256().pem]},
            "targets": [
                {"kind": "Deployment", "name": "app", "containers": [{"name": "app", "image": tag}]}
            ],
        },
    }


def image_of(cluster: Cluster, namespace: str) -> str:
    deployment = cluster.get("deployment", "app", "-n", namespace)
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


def conditions(cluster: Cluster, namespace: str) -> dict[str, tuple[str, str]]:
    status = cluster.get("irp", POLICY, "-n", namespace).get("status") or {}
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or ()}


def test_under_an_older_crd_nothing_is_done_until_it_is_upgraded_without_a_restart(
    older: Cluster, registry: str, pusher: ImagePusher, policy_namespace: str, tmp_path: Path
) -> None:
    cluster, ns = older, policy_namespace
    digest = pusher.push(f"{ns}/app", "prod", seed="crd-outdated").digest
    tag = f"{registry}/{ns}/app:prod"
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "app"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "app"}},
                "template": kwok_pod_template({"app": tag}, labels={"app": "app"}),
            },
        },
        namespace=ns,
    )
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    # As a client that does not validate fields (a GitOps tool, a script): the API server
    # drops verify without a word, and the policy it stores asks for no verification.
    cluster.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(policy(ns, tag)))
    assert "verify" not in cluster.get("irp", POLICY, "-n", ns)["spec"]

    with running_operator(cluster, registry, tmp_path / "operator.log") as operator:
        started = operator.process
        operator.wait_first_tick(ns, POLICY)
        for _ in range(2):
            operator.tick(ns, POLICY)
        assert conditions(cluster, ns) == {
            "Degraded": ("True", "CRDOutdated"),
            "Ready": ("False", "CRDOutdated"),
        }
        status = cluster.get("irp", POLICY, "-n", ns)["status"]
        assert set(status) == {"conditions"}  # nothing but the marking was written
        assert image_of(cluster, ns) == tag  # drifted, and not patched
        about = f"involvedObject.name={POLICY},reason=CRDOutdated"
        (event,) = cluster.get("events", "-n", ns, "--field-selector", about)["items"]
        assert event["type"] == "Warning"
        for said in (CRD_NAME, "spec.verify", "status.targets[].failed", "helm upgrade"):
            assert said in event["message"], event["message"]
        assert operator.metric("imagerefresh_crd_outdated") == 1
        assert operator.metric("imagerefresh_ticks_total", policy=POLICY, outcome="crd_outdated")
        assert operator.metric("imagerefresh_ticks_total", policy=POLICY, outcome="ok") == 0

        install(cluster, CRD, [])  # the upgrade

        def pinned() -> bool:
            operator.tick(ns, POLICY)
            return image_of(cluster, ns) == f"{registry}/{ns}/app@{digest}"

        eventually(pinned, timeout=90, interval=1, what="the operator to act once upgraded")
        assert operator.process is started  # the same process, never restarted
        assert started.poll() is None
        assert operator.metric("imagerefresh_crd_outdated") == 0
        eventually(
            lambda: conditions(cluster, ns).get("Degraded") == ("False", "EvidenceRead"),
            timeout=30,
            what="Degraded to clear",
        )
    # What the older CRD dropped stays dropped: why the policy must be applied again.
    assert "verify" not in cluster.get("irp", POLICY, "-n", ns)["spec"]


# -- reading the schema -------------------------------------------------------------------------


def test_the_charts_service_account_reads_the_schema_with_no_rule_of_the_charts(
    crd_installed: Cluster, policy_namespace: str, tmp_path: Path
) -> None:
    cluster, ns = crd_installed, policy_namespace
    for values in ({}, {"watch": {"allNamespaces": True}}):
        rules = [
            rule
            for o in render(values, namespace=ns)
            if o["kind"] in ("Role", "ClusterRole")
            for rule in o["rules"]
        ]
        assert not [r for r in rules if "apiextensions.k8s.io" in r.get("apiGroups", ())]
        assert not [r for r in rules if "nonResourceURLs" in r]
    objects = render({}, namespace=ns)
    cluster.apply(
        *[o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")],
        namespace=ns,
    )
    account = only(objects, "ServiceAccount")["metadata"]["name"]
    kubeconfig = service_account_kubeconfig(cluster, ns, account, tmp_path / "sa.kubeconfig")
    api = KubeApi.from_environment(str(kubeconfig))
    try:
        assert missing_paths(api.read_policy_schema(), operator_paths()) == []
    finally:
        api.close()


async def test_an_identity_that_may_not_read_the_schema_fails_closed(
    crd_installed: Cluster,
) -> None:
    # Anonymous is in no group that system:discovery is bound to: the API server answers 403.
    acting = impersonating(crd_installed.kubeconfig, "system:anonymous")
    metrics = Metrics(CollectorRegistry())
    with pytest.raises(PolicyUnreadable, match="cannot be read") as refused:
        await CrdCheck(acting, metrics).require()
    assert refused.value.part == "crd"
    assert "forbidden" in str(refused.value)
    assert metrics.registry.get_sample_value("imagerefresh_crd_outdated") == 1
