"""``refresh-now`` on the real operator: a tick someone asked for asks the registry afresh.

Policies ticking together share each registry answer for the resolution window (10 s by
default). A release pipeline that pushes a build and then asks for a tick must not be handed
the answer of a tick from a moment before the push.
"""

from __future__ import annotations

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import running_operator
from support.registry_env import ImagePusher
from support.scenario import deployment, images, policy, target

pytestmark = pytest.mark.cluster


def test_a_refresh_now_within_the_resolution_window_pins_the_build_pushed_a_moment_before(
    crd_installed: Cluster,
    registry: str,
    tmp_path_factory: pytest.TempPathFactory,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    cluster, ns = crd_installed, policy_namespace
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    # A window far longer than the test: every answer would be shared for all of it.
    with running_operator(
        cluster, registry, log, extra_args=("--resolution-window", "600")
    ) as operator:
        reg = operator.registry
        old = pusher.push(f"{ns}/app", "prod", seed="refresh-now-old")
        cluster.apply(
            deployment("app", {"app": f"{reg}/{ns}/app@{old.digest}"}, replicas=1), namespace=ns
        )
        cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
        cluster.apply(
            policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod")), namespace=ns
        )
        operator.wait_first_tick(ns, "control-plane")
        new = pusher.push(f"{ns}/app", "prod", seed="refresh-now-new")
        operator.tick(ns, "control-plane")
        eventually(
            lambda: images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{new.digest}"},
            timeout=30,
            what="the build pushed before the refresh-now to be pinned",
        )


def test_the_tick_a_refresh_now_asks_for_starts_after_it_never_the_one_in_flight(
    crd_installed: Cluster,
    registry: str,
    tmp_path_factory: pytest.TempPathFactory,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    """A tick slow to end (every plan spins 3 s) is in flight, its registry answer read, when
    a build is pushed and a tick asked for: the tick that answers is the next one, which asks
    the registry afresh — what ``Operator.tick`` waits for before a test asserts anything."""
    cluster, ns = crd_installed, policy_namespace
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(
        cluster, registry, log, grid_from_start=True, extra_args=("--planning-delay", "3")
    ) as operator:
        reg = operator.registry
        old = pusher.push(f"{ns}/app", "prod", seed="in-flight-old")
        cluster.apply(
            deployment("app", {"app": f"{reg}/{ns}/app@{old.digest}"}, replicas=1), namespace=ns
        )
        cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
        cluster.apply(
            policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod")), namespace=ns
        )
        operator.wait_first_tick(ns, "control-plane")
        heads = operator.metric("imagerefresh_registry_requests_total", kind="HEAD")
        in_flight = operator.bump(ns, "control-plane")
        eventually(
            lambda: operator.metric("imagerefresh_registry_requests_total", kind="HEAD") > heads,
            timeout=30,
            what="the tick in flight to have its registry answer (the old build)",
        )
        new = pusher.push(f"{ns}/app", "prod", seed="in-flight-new")
        operator.tick(ns, "control-plane")
        # No waiting here: the tick asked for has ended, and it saw the push.
        assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{new.digest}"}
        assert operator.answered(ns, "control-plane") >= in_flight + 1
