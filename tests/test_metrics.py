"""imagerefresh.metrics: a series lives as long as what it describes.

Each test records through the public methods, renders the registry as Prometheus scrapes it
(the text exposition format) and reads the series back from that text.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from imagerefresh.metrics import Metrics
from imagerefresh.models import PolicySpec, PolicyStatus
from imagerefresh.ratelimit import RequestKind

TARGET_GAUGES = (
    "imagerefresh_target_skip_streak",
    "imagerefresh_target_refresh_attempts",
    "imagerefresh_target_frozen",
    "imagerefresh_target_locked",
)
SPEC = PolicySpec.model_validate(
    {
        "maxSkipTicks": 2,
        "targets": [
            {"kind": "Deployment", "name": "x", "containers": [{"name": "a", "image": "a:b"}]}
        ],
    }
)


def series(metrics: Metrics, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name`` whose labels include ``labels``: {sorted labels: value}."""
    found = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        head, value = line.rsplit(" ", 1)
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if labels.items() <= pairs.items():
            found[tuple(sorted(pairs.items()))] = float(value)
    return found


def status(
    *targets: tuple[str, str, int],
    conditions: tuple[str, ...] = ("Ready", "Degraded"),
    registries: tuple[dict[str, Any], ...] = (),
) -> PolicyStatus:
    """A status with ``targets`` as (kind, name, skipStreak), in namespace ``ns``."""
    return PolicyStatus.model_validate(
        {
            "conditions": [
                {
                    "type": c,
                    "status": "True",
                    "reason": "Because",
                    "lastTransitionTime": "2026-11-29T12:00:00Z",
                }
                for c in conditions
            ],
            "targets": [
                {"kind": kind, "namespace": "ns", "name": name, "phase": "Current", "skipStreak": s}
                for kind, name, s in targets
            ],
            "registries": list(registries),
        }
    )


def tick(metrics: Metrics, namespace: str, policy: str, recorded: PolicyStatus) -> None:
    """What the ticker records for one tick of a policy."""
    metrics.tick_duration.labels(namespace, policy).observe(0.1)
    metrics.ticks.labels(namespace, policy, "ok").inc()
    metrics.last_tick.labels(namespace, policy).set(1.0)
    metrics.refreshes.labels(namespace, policy, "started").inc()
    metrics.status_writes.labels(namespace, policy).inc()
    metrics.record_status(namespace, policy, SPEC, recorded)


def per_policy_series(metrics: Metrics, namespace: str, policy: str) -> set[str]:
    """Every sample that carries this policy's labels, as its name and its other labels."""
    text = generate_latest(metrics.registry).decode()
    found = set()
    for line in text.splitlines():
        head = line.rsplit(" ", 1)[0]
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if pairs.get("namespace") == namespace and pairs.get("policy") == policy:
            rest = sorted((k, v) for k, v in pairs.items() if k not in ("namespace", "policy"))
            found.add(f"{head.split('{')[0]}{rest}")
    return found


def test_forget_policy_removes_every_series_of_that_policy_and_no_other() -> None:
    metrics = Metrics(CollectorRegistry())
    both = status(("Deployment", "x", 2), ("DaemonSet", "y", 0))
    for namespace, policy in (("ns", "gone"), ("ns", "kept"), ("other", "gone")):
        tick(metrics, namespace, policy, both)
    recorded = per_policy_series(metrics, "ns", "gone")
    # Every per-policy family: ticks, duration, last tick, refreshes, writes, conditions, targets.
    assert {line.split("[")[0] for line in recorded} >= {
        "imagerefresh_ticks_total",
        "imagerefresh_tick_duration_seconds_count",
        "imagerefresh_last_tick_timestamp_seconds",
        "imagerefresh_refreshes_total",
        "imagerefresh_status_writes_total",
        "imagerefresh_policy_condition",
        *TARGET_GAUGES,
    }
    metrics.forget_policy("ns", "gone")
    assert per_policy_series(metrics, "ns", "gone") == set()
    assert per_policy_series(metrics, "ns", "kept") == recorded
    assert per_policy_series(metrics, "other", "gone") == recorded


def test_a_policy_of_the_same_name_created_after_a_forget_starts_afresh() -> None:
    metrics = Metrics(CollectorRegistry())
    tick(metrics, "ns", "p", status(("Deployment", "x", 0)))
    metrics.forget_policy("ns", "p")
    tick(metrics, "ns", "p", status(("Deployment", "x", 0)))
    (count,) = series(metrics, "imagerefresh_ticks_total", policy="p").values()
    assert count == 1


def test_a_target_removed_from_the_spec_loses_its_series_the_others_keep_theirs() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.record_status("ns", "p", SPEC, status(("Deployment", "x", 2), ("DaemonSet", "y", 1)))
    metrics.record_status("ns", "p", SPEC, status(("DaemonSet", "y", 1)))
    for gauge in TARGET_GAUGES:
        assert series(metrics, gauge, target="ns/x") == {}, gauge
        assert len(series(metrics, gauge, kind="DaemonSet", target="ns/y")) == 1, gauge


def test_a_target_whose_key_changed_keeps_only_the_new_keys_series() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.record_status("ns", "p", SPEC, status(("Deployment", "x", 2)))
    # The same name as another kind: a new key, the old one's series (frozen = 1) must go.
    metrics.record_status("ns", "p", SPEC, status(("StatefulSet", "x", 0)))
    assert series(metrics, "imagerefresh_target_frozen", policy="p") == {
        (
            ("kind", "StatefulSet"),
            ("namespace", "ns"),
            ("policy", "p"),
            ("target", "ns/x"),
        ): 0.0
    }


def test_forget_targets_removes_just_those_targets_series() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.record_status("ns", "p", SPEC, status(("Deployment", "x", 2), ("DaemonSet", "y", 1)))
    metrics.forget_targets("ns", "p", [("Deployment", "ns/x")])
    for gauge in TARGET_GAUGES:
        assert series(metrics, gauge, target="ns/x") == {}
        assert series(metrics, gauge, target="ns/y") != {}


def test_a_condition_no_longer_reported_loses_its_series() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.record_status("ns", "p", SPEC, status(conditions=("Ready", "Degraded")))
    metrics.record_status("ns", "p", SPEC, status(conditions=("Ready",)))
    found = series(metrics, "imagerefresh_policy_condition", policy="p")
    assert [dict(labels)["condition"] for labels in found] == ["Ready"]


def test_a_registry_budget_goes_only_when_no_policy_reports_it_any_longer() -> None:
    metrics = Metrics(CollectorRegistry())
    hub = {"host": "registry-1.docker.io", "identity": "ns/regcred", "limit": 100, "remaining": 7}
    mirror = {"host": "mirror.example", "identity": "anonymous", "limit": 10, "remaining": 3}
    metrics.record_status("ns", "a", SPEC, status(registries=(hub, mirror)))
    metrics.record_status("ns", "b", SPEC, status(registries=(hub,)))
    metrics.record_status("ns", "a", SPEC, status(registries=()))
    for gauge in ("imagerefresh_ratelimit_limit", "imagerefresh_ratelimit_remaining"):
        assert series(metrics, gauge, registry="mirror.example") == {}, gauge
        assert series(metrics, gauge, registry="registry-1.docker.io") != {}, gauge
    metrics.forget_policy("ns", "b")
    for gauge in ("imagerefresh_ratelimit_limit", "imagerefresh_ratelimit_remaining"):
        assert series(metrics, gauge) == {}, gauge


def test_a_budget_that_stops_reporting_its_limit_loses_only_the_limit_series() -> None:
    metrics = Metrics(CollectorRegistry())
    budget = {"host": "r.example", "identity": "anonymous", "limit": 10, "remaining": 3}
    metrics.record_status("ns", "p", SPEC, status(registries=(budget,)))
    metrics.record_status("ns", "p", SPEC, status(registries=({**budget, "limit": None},)))
    assert series(metrics, "imagerefresh_ratelimit_limit") == {}
    assert list(series(metrics, "imagerefresh_ratelimit_remaining").values()) == [3.0]


def test_operator_wide_series_survive_forgetting_a_policy() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.registry_request("registry-1.docker.io", RequestKind.HEAD, "ok")
    metrics.events_dropped.inc()
    tick(metrics, "ns", "p", status(("Deployment", "x", 0)))
    metrics.set_leader(True)
    metrics.forget_policy("ns", "p")
    assert series(metrics, "imagerefresh_registry_requests_total") != {}
    assert series(metrics, "imagerefresh_events_dropped_total") == {(): 1.0}
    # The heartbeat the operator-down and no-leader alerts read: no policy can take it away.
    assert list(series(metrics, "imagerefresh_build_info").values()) == [1.0]
    assert series(metrics, "imagerefresh_leader") == {(): 1.0}
    assert len(series(metrics, "process_start_time_seconds")) == 1


def test_the_heartbeat_is_1_from_the_start_and_names_the_installed_version() -> None:
    metrics = Metrics(CollectorRegistry())
    assert series(metrics, "imagerefresh_build_info") == {
        (("version", version("imagerefresh")),): 1.0
    }


def test_a_process_is_not_leader_until_it_says_so_and_can_step_down() -> None:
    metrics = Metrics(CollectorRegistry())
    assert series(metrics, "imagerefresh_leader") == {(): 0.0}
    metrics.set_leader(True)
    assert series(metrics, "imagerefresh_leader") == {(): 1.0}
    metrics.set_leader(False)
    assert series(metrics, "imagerefresh_leader") == {(): 0.0}


def offline(*verdicts: bool | None) -> PolicyStatus:
    """A status whose one target ``ns/x`` has a container per verdict (None: not assessed)."""
    containers = [
        {"name": f"c{i}", "tracked": "docker.io/library/a:b"}
        | ({} if ready is None else {"offline": {"ready": ready, "reason": "because"}})
        for i, ready in enumerate(verdicts)
    ]
    return PolicyStatus.model_validate(
        {
            "targets": [
                {
                    "kind": "Deployment",
                    "namespace": "ns",
                    "name": "x",
                    "phase": "Current",
                    "containers": containers,
                }
            ]
        }
    )


def offline_ready(metrics: Metrics) -> list[float]:
    return list(series(metrics, "imagerefresh_target_offline_ready", target="ns/x").values())


def test_a_target_is_offline_ready_only_while_every_declared_container_is() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.record_status("ns", "p", SPEC, offline(True, True))
    assert offline_ready(metrics) == [1.0]
    metrics.record_status("ns", "p", SPEC, offline(True, False))
    assert offline_ready(metrics) == [0.0]
    metrics.record_status("ns", "p", SPEC, offline(False))
    assert offline_ready(metrics) == [0.0]


def test_a_target_not_assessed_has_no_offline_series_rather_than_a_stale_one() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.record_status("ns", "p", SPEC, offline(False))
    # One container not assessed (a suspended policy, a missing workload): no verdict at all.
    metrics.record_status("ns", "p", SPEC, offline(True, None))
    assert offline_ready(metrics) == []
    metrics.record_status("ns", "p", SPEC, offline(False))
    metrics.record_status("ns", "p", SPEC, offline())  # no containers reported
    assert offline_ready(metrics) == []


def test_the_offline_series_goes_with_its_target_and_with_its_policy() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.record_status("ns", "p", SPEC, offline(False))
    metrics.record_status("ns", "p", SPEC, status(("DaemonSet", "y", 0)))
    assert offline_ready(metrics) == []
    metrics.record_status("ns", "p", SPEC, offline(True))
    metrics.forget_policy("ns", "p")
    assert offline_ready(metrics) == []
