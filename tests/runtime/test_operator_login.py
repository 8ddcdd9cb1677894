"""kopf's watch logs in as the operator's own requests do: with the kubeconfig it was given.

The operator learns of its policies from kopf's watch, so a policy that ticks and is pinned is
kopf's watch at work. Here the environment's ``KUBECONFIG`` names a file that does not exist
and only ``--kubeconfig`` names the cluster: a kopf that logged in by itself, from the
environment, would see no policy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import deployment_with_policy, running_operator
from support.registry_env import ImagePusher
from support.scenario import images

pytestmark = pytest.mark.cluster


def test_kopfs_watch_logs_in_with_the_kubeconfig_the_operator_was_given(
    crd_installed: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    tmp_path: Path,
) -> None:
    ns = policy_namespace
    elsewhere = dataclasses.replace(crd_installed, kubeconfig=str(tmp_path / "absent"))
    with running_operator(
        elsewhere,
        registry,
        tmp_path / "operator.log",
        extra_args=("--kubeconfig", crd_installed.kubeconfig),
    ) as operator:
        operator.cluster = crd_installed  # the test's own kubectl calls use the real kubeconfig
        built = pusher.push(f"{ns}/app", "prod", seed="login")
        deployment_with_policy(crd_installed, ns, f"{registry}/{ns}/app:prod")
        operator.wait_first_tick(ns, "control-plane")
        # The first tick may have come while the Deployment was still rolling out (a skip,
        # with the next interval tick far off); it has settled now, so a tick asked for pins.
        operator.tick(ns, "control-plane")
        eventually(
            lambda: (
                images(crd_installed, ns, "app") == {"app": f"{registry}/{ns}/app@{built.digest}"}
            ),
            timeout=60,
            what="the tracked tag pinned by digest",
        )
