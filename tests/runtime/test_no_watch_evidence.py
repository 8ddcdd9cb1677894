"""`imagerefresh run --no-watch-evidence` — the setting the docs recommend for a large fleet on a
small control plane — on the real API server: a refresh is followed to its verdict by reading
the workload by name every 2 s, and nothing of the targets is ever watched.

The operator runs as an audited ServiceAccount of its own, so the API server's audit log says
what it asked: every watch it opened (its policies', kopf's) and every read of the workload.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.accounts import audited_kubeconfig, audited_requests
from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, running_operator
from support.registry_env import ImagePusher
from support.scenario import deployment, event_reasons, images, policy, target, target_status

pytestmark = pytest.mark.cluster


@pytest.fixture
def polling(
    crd_installed: Cluster,
    registry: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Operator, str]]:
    """An operator with watch-fed evidence off, as its own audited account (a new one per test:
    the audit log outlives it); DEBUG logs say what moved a rollout."""
    account = f"polling-{secrets.token_hex(3)}"
    kubeconfig = audited_kubeconfig(crd_installed, account, tmp_path / account)
    monkeypatch.setenv("IMAGEREFRESH_TEST_LOG_LEVEL", "DEBUG")
    with running_operator(
        dataclasses.replace(crd_installed, kubeconfig=str(kubeconfig)),
        registry,
        tmp_path / "operator.log",
        grid_from_start=True,  # no interval tick inside the test: follow-ups only
        extra_args=("--no-watch-evidence",),
    ) as operator:
        yield operator, account


def test_without_watch_evidence_a_refresh_is_judged_by_polling_and_nothing_is_watched(
    polling: tuple[Operator, str], cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    operator, account = polling
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/app", "prod", seed="polled-old")
    # New pods become Ready only 5 s after they are scheduled: the refresh's rollout spans a
    # few polls whatever the machine's speed (more, if it is slow).
    slow = {"imagerefresh.test/ready-after": "5s"}
    pinned = {"app": f"{reg}/{ns}/app@{old.digest}"}
    cluster.apply(deployment("app", pinned, replicas=1, annotations=slow), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    new = pusher.push(f"{ns}/app", "prod", seed="polled-new")
    cluster.apply(policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod")), namespace=ns)

    current = eventually(
        lambda: (found := target_status(cluster, ns, "app"))["phase"] == "Current" and found,
        timeout=90,
        what="the refresh judged Current with no tick asked for",
    )
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{new.digest}"}
    assert current["lastGood"] == {"app": f"{reg}/{ns}/app@{new.digest}"}
    event_reasons(cluster, ns, "app", "Refreshing", "Refreshed")
    # Judged by a follow-up, the first tick (at start-up) being the only other one...
    assert operator.ticks(ns, "control-plane") == 1
    labels = {"namespace": ns, "policy": "control-plane"}
    assert operator.metric("imagerefresh_follow_up_ticks_total", **labels) >= 1
    # ...which a poll asked for: the read of the workload by name saw the rollout move.
    moved = [
        entry
        for entry in operator.log_entries()
        if entry.get("event") == "rollout moved"
        and f"Deployment {ns}/app" in entry.get("workloads", [])
    ]
    assert moved, "no poll saw the rollout move"

    # What the API server says: the workload read by name again and again, never watched.
    requests = [
        (verb, uri)
        for stage in ("ResponseStarted", "ResponseComplete")
        for verb, uri, _ in audited_requests(cluster, account, stage)
    ]
    by_name = f"/apis/apps/v1/namespaces/{ns}/deployments/app"
    reads = [uri for verb, uri in requests if verb == "get" and uri.split("?")[0] == by_name]
    assert len(reads) >= 3, reads  # the first tick's, a poll's, the verdict's (and more polls)
    watched = {uri.split("?")[0] for verb, uri in requests if verb == "watch"}
    targets = [uri for uri in watched if "/deployments" in uri or "/pods" in uri]
    assert targets == [], targets
    assert any("imagerefreshpolicies" in uri for uri in watched)  # kopf's: the audit log works
