"""Lockstep on the real API server (SPEC §3 ``lockstep``), with the operator as it runs.

Two Deployments run one image (as jobs-manager's ``api`` and requests-proxy's ``proxy`` do on
an edge). With ``lockstep: true`` they move to a new digest together or not at all: a peer
that cannot move holds the other, named in its status, its template untouched; a peer whose
rollout fails takes the other back with it. What is asserted is what the API server holds —
the pod templates, the status the operator wrote, the events it posted.
"""

from __future__ import annotations

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import ImagePusher
from support.scenario import (
    deployment,
    event_messages,
    event_reasons,
    images,
    policy,
    settle,
    status,
    target,
    target_status,
)

pytestmark = pytest.mark.cluster

VERDICT_TIMEOUT = 120


@pytest.fixture
def operator(operator_without_interval_ticks: Operator) -> Operator:
    """Each test its own operator: no interval tick can fall inside it, so a rolled-back
    refresh is not started again before the test has read its verdict."""
    return operator_without_interval_ticks


def two_on_one_image(
    cluster: Cluster,
    ns: str,
    pinned: str,
    proxy_annotations: dict[str, str],
    *,
    proxy_settles: bool,
    **spec: object,
) -> None:
    """``api-server`` and ``proxy`` on ``pinned`` (settled, but for a proxy that never does),
    then a lockstep policy tracking their tag."""
    cluster.apply(deployment("api-server", {"api": pinned}, replicas=1), namespace=ns)
    cluster.apply(
        deployment("proxy", {"proxy": pinned}, replicas=1, annotations=proxy_annotations),
        namespace=ns,
    )
    for workload in ("api-server", "proxy") if proxy_settles else ("api-server",):
        cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{workload}", "--timeout=60s")
    tag = pinned.partition("@")[0] + ":prod"
    cluster.apply(
        policy(
            "control-plane",
            target("api-server", api=tag),
            target("proxy", proxy=tag),
            lockstep=True,
            **spec,
        ),
        namespace=ns,
    )


def test_a_peer_that_cannot_move_holds_the_other_untouched_until_both_move_together(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/app", "prod", seed="lockstep-hold-old")
    pinned_old = f"{reg}/{ns}/app@{old.digest}"
    new = pusher.push(f"{ns}/app", "prod", seed="lockstep-hold-new")
    # The proxy's pods never become Ready: it never settles, so it is Frozen at once.
    stuck = {"imagerefresh.test/never-ready": "true"}
    two_on_one_image(
        cluster, ns, pinned_old, stuck, proxy_settles=False, maxSkipTicks=1, healthyFor="2s"
    )
    operator.wait_first_tick(ns, "control-plane")
    waiting = eventually(
        lambda: (t := target_status(cluster, ns, "api-server"))["phase"] == "Waiting" and t,
        timeout=30,
        what="api-server to wait for its lockstep peer",
    )
    assert target_status(cluster, ns, "proxy")["phase"] == "Frozen"
    assert f"Deployment {ns}/proxy (Frozen) cannot refresh now" in waiting["message"]
    assert waiting.get("pending") is None
    event_reasons(cluster, ns, "api-server", "LockstepWaiting")
    operator.tick(ns, "control-plane")
    assert images(cluster, ns, "api-server") == {"api": pinned_old}
    assert images(cluster, ns, "proxy") == {"proxy": pinned_old}

    # Someone fixes the proxy (its pods now become Ready on the old image): both move, together.
    cluster.kubectl(
        "patch", "deployment", "proxy", "-n", ns, "--type", "json", "-p",
        '[{"op": "remove", "path": "/spec/template/metadata/annotations/'
        'imagerefresh.test~1never-ready"}]',
    )  # fmt: skip
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/proxy", "--timeout=60s")
    settle(operator, cluster, ns, "api-server", timeout=VERDICT_TIMEOUT)
    settle(operator, cluster, ns, "proxy", timeout=VERDICT_TIMEOUT)
    pinned_new = f"{reg}/{ns}/app@{new.digest}"
    assert images(cluster, ns, "api-server") == {"api": pinned_new}
    assert images(cluster, ns, "proxy") == {"proxy": pinned_new}
    for workload in ("api-server", "proxy"):
        event_reasons(cluster, ns, workload, "Refreshed")


def test_when_one_peer_fails_the_other_that_moved_is_rolled_back_with_it_uncounted(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    bad = pusher.push(f"{ns}/app", "prod", seed="lockstep-fail-bad")
    good = pusher.push(f"{ns}/app", "prod", seed="lockstep-fail-good")
    pinned_good = f"{reg}/{ns}/app@{good.digest}"
    pusher.push(f"{ns}/app", "prod", seed="lockstep-fail-bad")  # the tag → the bad digest
    # Only the proxy's pods of the bad digest never become Ready; the api-server's do. The
    # production interval: after the policy's first tick nothing pokes it.
    stalls = {"imagerefresh.test/never-ready-image": bad.digest}
    two_on_one_image(cluster, ns, pinned_good, stalls, proxy_settles=True, rolloutTimeout="30s")
    for workload in ("api-server", "proxy"):
        event_reasons(cluster, ns, workload, "Refreshing", timeout=30)
    failed = event_reasons(
        cluster, ns, "proxy", "RefreshFailed", "RollingBack", timeout=VERDICT_TIMEOUT
    )
    assert failed.count("RefreshFailed") == 1
    (rollback,) = event_messages(cluster, ns, "api-server", "RollingBack")
    assert rollback.startswith(f"rolling Deployment {ns}/api-server back to api={pinned_good}")
    assert "its lockstep peers on" in rollback
    assert f"Deployment {ns}/proxy" in rollback
    for workload, container in (("api-server", "api"), ("proxy", "proxy")):
        eventually(
            lambda w=workload, c=container: images(cluster, ns, w) == {c: pinned_good},
            timeout=30,
            what=f"{workload} rolled back to the image the refresh replaced",
        )
    event_reasons(cluster, ns, "api-server", "RolledBack", timeout=VERDICT_TIMEOUT)
    reasons = event_reasons(cluster, ns, "api-server")
    assert "Refreshed" not in reasons  # its own rollout settled, but the group's did not
    assert "RefreshFailed" not in reasons
    targets = {t["name"]: t for t in status(cluster, ns)["targets"]}
    assert targets["proxy"]["refreshAttempts"] == 1
    assert targets["api-server"]["refreshAttempts"] == 0


def test_a_refresh_outside_the_group_that_adopts_a_member_is_never_rolled_back_for_the_group(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    """api-server's ``api`` is on the group's tag and its pods already run the tag's digest;
    its ``monitor`` sidecar drifts. Refreshing the sidecar pins ``api`` too (an adoption, in
    the same patch) — that moves nothing of the group, so the proxy that cannot move (Frozen)
    is no reason to roll api-server back."""
    ns, reg = policy_namespace, operator.registry
    old = pusher.push(f"{ns}/app", "prod", seed="adopt-old")
    new = pusher.push(f"{ns}/app", "prod", seed="adopt-new")
    monitor_old = pusher.push(f"{ns}/monitor", "prod", seed="adopt-monitor-old")
    monitor_new = pusher.push(f"{ns}/monitor", "prod", seed="adopt-monitor-new")
    app, monitor = f"{reg}/{ns}/app", f"{reg}/{ns}/monitor"
    adopted = {"imagerefresh.test/image-id.api": f"{app}@{new.digest}"}
    cluster.apply(
        deployment(
            "api-server",
            {"api": f"{app}:prod", "monitor": f"{monitor}@{monitor_old.digest}"},
            replicas=1,
            annotations=adopted,
        ),
        namespace=ns,
    )
    cluster.apply(
        deployment(
            "proxy",
            {"proxy": f"{app}@{old.digest}"},
            replicas=1,
            annotations={"imagerefresh.test/never-ready": "true"},
        ),
        namespace=ns,
    )
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/api-server", "--timeout=60s")
    cluster.apply(
        policy(
            "control-plane",
            target("api-server", api=f"{app}:prod", monitor=f"{monitor}:prod"),
            target("proxy", proxy=f"{app}:prod"),
            lockstep=True,
            maxSkipTicks=1,
            healthyFor="2s",
        ),
        namespace=ns,
    )
    operator.wait_first_tick(ns, "control-plane")
    settle(operator, cluster, ns, "api-server", timeout=VERDICT_TIMEOUT)
    assert images(cluster, ns, "api-server") == {
        "api": f"{app}@{new.digest}",
        "monitor": f"{monitor}@{monitor_new.digest}",
    }
    event_reasons(cluster, ns, "api-server", "Refreshed")
    reasons = event_reasons(cluster, ns, "api-server")
    assert "RollingBack" not in reasons
    assert target_status(cluster, ns, "api-server")["refreshAttempts"] == 0
    assert target_status(cluster, ns, "proxy")["phase"] == "Frozen"
