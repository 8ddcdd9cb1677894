"""Refresh windows with the real operator (`imagerefresh run`), the local cluster and registry.

The windows are chosen relative to the test's own clock, far from its edges, so the outcome
never depends on the time of day the suite runs: a closed window opens twelve hours from now
(in Asia/Kolkata, which keeps no DST), an open one spans every whole day.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from imagerefresh.planner import OPERATOR_FIELD_MANAGER

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator
from support.registry_env import ImagePusher
from support.scenario import (
    deployment,
    event_messages,
    images,
    policy,
    settle,
    status,
    target,
    target_status,
)

pytestmark = pytest.mark.cluster

OVERRIDE = "images.tracebloc.io/refresh-outside-window"
ALL_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def closed_window() -> tuple[dict[str, Any], str]:
    """A daily one-minute window opening twelve hours from now, and that start in RFC 3339."""
    opens = (datetime.now(UTC) + timedelta(hours=12)).replace(second=0, microsecond=0)
    local = opens.astimezone(ZoneInfo("Asia/Kolkata"))
    end = local + timedelta(minutes=1)
    window = {
        "days": ALL_DAYS,
        "start": f"{local:%H:%M}",
        "end": f"{end:%H:%M}",
        "timeZone": "Asia/Kolkata",
    }
    return window, f"{opens:%Y-%m-%dT%H:%M:%SZ}"


def app_on_old_digest(cluster: Cluster, pusher: ImagePusher, ns: str, reg: str) -> tuple[str, str]:
    """Deployment `app` settled on v1 while its tag has moved on: (pinned v1, tracked tag)."""
    v1 = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-v1")
    pinned = f"{reg}/{ns}/app@{v1.digest}"
    cluster.apply(deployment("app", {"app": pinned}, replicas=1), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=60s")
    return pinned, f"{reg}/{ns}/app:prod"


def imagerefresh(*args: str, cluster: Cluster) -> str:
    """Run the installed CLI against the test cluster; its standard output."""
    script = Path(sys.executable).with_name("imagerefresh")
    result = subprocess.run(
        [str(script), *args], capture_output=True, text=True, env=cluster.env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_outside_its_window_a_policy_waits_naming_the_start_and_the_override_refreshes_once(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    pinned_v1, tag = app_on_old_digest(cluster, pusher, ns, reg)
    v2 = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-v2")
    window, opens = closed_window()
    spec = {"interval": "1h", "windows": [window], "healthyFor": "2s"}
    cluster.apply(policy("control-plane", target("app", app=tag), **spec), namespace=ns)
    operator.wait_first_tick(ns, "control-plane")

    waiting = target_status(cluster, ns, "app")
    assert waiting["phase"] == "Waiting"
    assert f"the refresh starts when the next window opens, at {opens}" in waiting["message"]
    assert images(cluster, ns, "app") == {"app": pinned_v1}
    # Idle ticks outside the window write nothing.
    writes = operator.metric("imagerefresh_status_writes_total", namespace=ns)
    operator.tick(ns, "control-plane")
    operator.tick(ns, "control-plane")
    assert operator.metric("imagerefresh_status_writes_total", namespace=ns) == writes
    assert images(cluster, ns, "app") == {"app": pinned_v1}

    # The override refreshes once, at once (no interval tick is due for an hour).
    asked = imagerefresh("refresh-now", f"{ns}/control-plane", "--outside-window", cluster=cluster)
    assert "a tick that may refresh outside its windows requested" in asked
    eventually(
        lambda: images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{v2.digest}"},
        timeout=30,
        what="the override to refresh app",
    )
    annotations = cluster.get("irp", "control-plane", "-n", ns)["metadata"]["annotations"]
    assert status(cluster, ns)["lastWindowOverride"] == annotations[OVERRIDE]
    settle(operator, cluster, ns, "app")
    honoured = eventually(
        lambda: event_messages(cluster, ns, "control-plane", "RefreshOutsideWindow") or None,
        timeout=30,
        what="the RefreshOutsideWindow event",
    )
    assert len(honoured) == 1

    # Once: the next digest waits for the window again.
    v3 = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-v3")
    operator.tick(ns, "control-plane")
    again = target_status(cluster, ns, "app")
    assert again["phase"] == "Waiting"
    assert v3.digest[:19] in again["message"]
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{v2.digest}"}


def test_inside_its_window_a_policy_refreshes(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    _, tag = app_on_old_digest(cluster, pusher, ns, reg)
    v2 = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-v2")
    always = {"days": ALL_DAYS, "start": "00:00", "end": "00:00", "timeZone": "Europe/Berlin"}
    spec = {"interval": "1h", "windows": [always], "healthyFor": "2s"}
    cluster.apply(policy("control-plane", target("app", app=tag), **spec), namespace=ns)
    operator.wait_first_tick(ns, "control-plane")
    eventually(
        lambda: images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{v2.digest}"},
        timeout=30,
        what="app to be refreshed inside its window",
    )
    assert settle(operator, cluster, ns, "app")["lastGood"] == {
        "app": f"{reg}/{ns}/app@{v2.digest}"
    }


def test_a_waiting_policy_refreshes_when_its_wake_at_without_waiting_for_its_interval(
    operator: Operator, cluster: Cluster, pusher: ImagePusher, policy_namespace: str
) -> None:
    ns, reg = policy_namespace, operator.registry
    pinned_v1, tag = app_on_old_digest(cluster, pusher, ns, reg)
    v2 = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-v2")
    # The next whole minute at least 45 s away: the first tick finds the window closed.
    soon = datetime.now(UTC) + timedelta(seconds=45 + 59)
    opens = soon.replace(second=0, microsecond=0)
    local = opens.astimezone(ZoneInfo("Asia/Kolkata"))
    window = {
        "days": ALL_DAYS,
        "start": f"{local:%H:%M}",
        "end": f"{local + timedelta(minutes=10):%H:%M}",
        "timeZone": "Asia/Kolkata",
    }
    spec = {"interval": "1h", "windows": [window]}
    cluster.apply(policy("control-plane", target("app", app=tag), **spec), namespace=ns)
    operator.wait_first_tick(ns, "control-plane")
    waiting = target_status(cluster, ns, "app")
    assert f"at {opens:%Y-%m-%dT%H:%M:%SZ}" in waiting["message"]
    assert images(cluster, ns, "app") == {"app": pinned_v1}
    # No refresh-now, and the next interval tick is up to an hour away: only the window's
    # opening can start this refresh.
    eventually(
        lambda: images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{v2.digest}"},
        timeout=(opens - datetime.now(UTC)).total_seconds() + 30,
        what="the refresh to start when the window opens",
    )
    # ...and nothing started before it opened: when the API server took the operator's one
    # write to the Deployment (its own record, whatever the test's polling saw meanwhile).
    assert operator_wrote_at(cluster, ns, "app") >= opens


def operator_wrote_at(cluster: Cluster, namespace: str, name: str) -> datetime:
    """When the API server last took a write of the operator's to the Deployment (its
    managedFields entry; whole seconds, truncated)."""
    found = cluster.get("deployment", name, "-n", namespace, "--show-managed-fields")
    fields = found["metadata"]["managedFields"]
    (entry,) = [f for f in fields if f["manager"] == OPERATOR_FIELD_MANAGER]
    return datetime.fromisoformat(entry["time"].replace("Z", "+00:00"))
