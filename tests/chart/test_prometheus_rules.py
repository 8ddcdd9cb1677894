"""The chart's PrometheusRule, run by Prometheus' own rule engine (`promtool test rules`).

Each test replays what Prometheus would scrape from the operator (one sample a minute, a stale
marker where a scrape fails or a series is removed) through the rendered rules and says which
alerts fire when. The point (issue 12): an operator that is Pending or crash-looping, or whose
policies were all deleted, must not leave every alert quiet — the per-policy series vanish with
the operator and with each deleted policy, the heartbeat does not.

No cluster here; the rules are rendered by the pinned `helm template` (support.helm_env).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from support.helm_env import RELEASE, RELEASE_NAMESPACE, only, render
from support.promtool_env import promtool, rules_test, write_rules

MONITORING = {"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
# The labels Prometheus gives what the ServiceMonitor scrapes: job is the metrics Service's name.
JOB = f"{RELEASE}-imagerefresh-metrics"
SCRAPE = {"job": JOB, "namespace": RELEASE_NAMESPACE}
MINUTES = 60  # each scenario's length; samples at minutes 0..MINUTES-1


@pytest.fixture(scope="module")
def groups() -> list[dict[str, Any]]:
    return list(only(render(MONITORING), "PrometheusRule")["spec"]["groups"])


def rules_by_alert(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in groups for r in group["rules"]}


def series(name: str, **labels: str) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def life(start: int, end: int = MINUTES, value: float | Callable[[int], float] = 1) -> str:
    """A series scraped each minute from ``start`` until ``end``, stale-marked there (the scrape
    failed or the series was removed), absent around that; ``value`` may be per minute."""
    at = value if callable(value) else (lambda _: value)
    tokens = ["_"] * start + [f"{at(m):g}" for m in range(start, min(end, MINUTES))]
    if end < MINUTES:
        tokens += ["stale"] + ["_"] * (MINUTES - end - 1)
    return " ".join(tokens)


def operator(
    pod: str,
    start: int = 0,
    end: int = MINUTES,
    *,
    leader: float | Callable[[int], float] = 1,
) -> dict[str, str]:
    """What one operator process exposes while it runs, as Prometheus stores it."""
    labels = {**SCRAPE, "pod": pod}
    return {
        series("imagerefresh_build_info", **labels, version="0.1.0"): life(start, end),
        series("imagerefresh_leader", **labels): life(start, end, leader),
        series("process_start_time_seconds", **labels): life(start, end, start * 60),
    }


def crash_loop(pod: str, every: int) -> dict[str, str]:
    """A process that lives for one scrape, crashes, and is back ``every`` minutes later."""
    labels = {**SCRAPE, "pod": pod}
    values: dict[str, Callable[[int], int]] = {
        series("imagerefresh_build_info", **labels, version="0.1.0"): lambda _: 1,
        series("imagerefresh_leader", **labels): lambda _: 1,
        series("process_start_time_seconds", **labels): lambda start: start * 60,
    }
    found = {}
    for name, value in values.items():
        tokens = ["_"] * MINUTES
        for start in range(0, MINUTES, every):
            tokens[start : start + 2] = [str(value(start)), "stale"]
        found[name] = " ".join(tokens[:MINUTES])
    return found


def target_up(
    pod: str, start: int = 0, up_until: int = MINUTES, end: int = MINUTES
) -> dict[str, str]:
    """`up` of the pod's scrape target: 1 until ``up_until``, 0 after (the pod exists but does
    not answer) until ``end``, when the target goes (the pod is gone)."""
    values = ["_"] * start + ["1"] * (up_until - start) + ["0"] * (end - up_until)
    if end < MINUTES:
        values += ["stale"] + ["_"] * (MINUTES - end - 1)
    return {series("up", **SCRAPE, pod=pod): " ".join(values)}


def policy(pod: str, start: int = 0, end: int = MINUTES) -> dict[str, str]:
    """A healthy policy's series as the operator exports them while it runs (honorLabels keeps
    their own namespace label): ticks every minute, nothing Frozen, Locked or Degraded, every
    target offline-ready."""
    p = {"job": JOB, "pod": pod, "namespace": "tracebloc", "policy": "control-plane"}
    t = {**p, "kind": "Deployment", "target": "tracebloc/jobs-manager"}
    return {
        series("imagerefresh_last_tick_timestamp_seconds", **p): life(start, end, lambda m: m * 60),
        series("imagerefresh_ticks_total", **p, outcome="ok"): life(start, end, lambda m: m),
        series("imagerefresh_target_frozen", **t): life(start, end, 0),
        series("imagerefresh_target_locked", **t): life(start, end, 0),
        series("imagerefresh_target_untrusted", **t): life(start, end, 0),
        series("imagerefresh_target_offline_ready", **t): life(start, end, 1),
        series("imagerefresh_policy_condition", **p, condition="Ready"): life(start, end, 1),
        series("imagerefresh_policy_condition", **p, condition="Degraded"): life(start, end, 0),
        series("imagerefresh_policy_condition", **p, condition="RateLimited"): life(start, end, 0),
        series(
            "imagerefresh_ratelimit_remaining",
            job=JOB,
            pod=pod,
            registry="registry-1.docker.io",
            identity="anonymous",
        ): life(start, end, 90),
    }


def nothing_fires(groups: list[dict[str, Any]], *minutes: int) -> list[dict[str, Any]]:
    """Expect no alert of the chart's at any of ``minutes``."""
    return [
        {"eval_time": f"{m}m", "alertname": name, "exp_alerts": []}
        for m in minutes
        for name in rules_by_alert(groups)
    ]


def fires(
    groups: list[dict[str, Any]], name: str, minute: int, *alerts: Mapping[str, str]
) -> dict[str, Any]:
    """Expect alert ``name`` firing at ``minute`` with exactly ``alerts`` (their labels, the
    rule's severity added); annotations as the chart rendered them, Prometheus' own templates
    ({{ $labels.x }}, {{ $value }}) filled from the alert's labels and a "value" entry."""
    rule = rules_by_alert(groups)[name]
    expected = []
    for alert in alerts:
        labels = {k: v for k, v in alert.items() if k != "value"}
        annotations = {}
        for key, text in rule["annotations"].items():
            for label, value in labels.items():
                text = text.replace("{{ $labels." + label + " }}", value)
            text = text.replace("{{ $value }}", alert.get("value", ""))
            assert "{{" not in text, f"{name}: an annotation template this test does not fill"
            annotations[key] = text
        expected.append(
            {"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": annotations}
        )
    return {"eval_time": f"{minute}m", "alertname": name, "exp_alerts": expected}


def quiet(name: str, *minutes: int) -> list[dict[str, Any]]:
    return [{"eval_time": f"{m}m", "alertname": name, "exp_alerts": []} for m in minutes]


# -- the rules load ------------------------------------------------------------------------------


def test_the_rendered_rules_pass_promtool_check_rules(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = write_rules(tmp_path, groups)
    result = promtool("check", "rules", "--lint-fatal", path.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# -- a healthy operator --------------------------------------------------------------------------


def test_a_running_leading_operator_with_a_healthy_policy_fires_nothing(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    rules_test(
        tmp_path,
        groups,
        {**operator("op-a"), **target_up("op-a"), **policy("op-a")},
        nothing_fires(groups, 1, 10, 30, 59),
    )


def test_an_upgrade_replacing_the_pod_within_a_minute_fires_nothing(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    rules_test(
        tmp_path,
        groups,
        {
            **operator("op-a", 0, 20),
            **target_up("op-a", 0, 20, 20),
            **policy("op-a", 0, 20),
            **operator("op-b", 21),
            **target_up("op-b", 21),
            **policy("op-b", 21),
        },
        nothing_fires(groups, 20, 21, 25, 40, 59),
    )


# -- the operator goes away: the heartbeat alert fires -------------------------------------------


def test_an_operator_pending_from_the_start_fires_operator_down(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    # Pending: no pod IP, so no scrape target, no `up`, no series of the operator's at all;
    # Prometheus scrapes other things.
    rules_test(
        tmp_path,
        groups,
        {series("up", job="node-exporter"): life(0)},
        [
            *quiet("ImageRefreshOperatorDown", 4),
            fires(groups, "ImageRefreshOperatorDown", 5, SCRAPE),
            fires(groups, "ImageRefreshOperatorDown", 59, SCRAPE),
        ],
    )


def test_an_operator_whose_scrapes_fail_fires_operator_down_while_its_policy_alerts_go_quiet(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    # Crash-looping (or hung): the pod is still a target, `up` is 0, every series stale-marked.
    rules_test(
        tmp_path,
        groups,
        {**operator("op-a", 0, 10), **target_up("op-a", 0, 10), **policy("op-a", 0, 10)},
        [
            *quiet("ImageRefreshOperatorDown", 9, 14),
            fires(groups, "ImageRefreshOperatorDown", 15, SCRAPE),
            fires(groups, "ImageRefreshOperatorDown", 59, SCRAPE),
            # Why the heartbeat exists: the per-policy alert is silent for a dead operator.
            *quiet("ImageRefreshNotTicking", 15, 59),
        ],
    )


def test_a_crash_loop_whose_short_lives_are_scraped_fires_operator_restarting(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    # Each life lasts one scrape, then the back-off: the heartbeat comes back every 4 minutes,
    # which keeps restarting the `for` of ImageRefreshOperatorDown.
    rules_test(
        tmp_path,
        groups,
        crash_loop("op-a", every=4),
        [
            *quiet("ImageRefreshOperatorRestarting", 4),
            fires(
                groups,
                "ImageRefreshOperatorRestarting",
                8,
                {**SCRAPE, "pod": "op-a", "value": "2"},
            ),
            fires(
                groups,
                "ImageRefreshOperatorRestarting",
                40,
                {**SCRAPE, "pod": "op-a", "value": "10"},
            ),
        ],
    )


# -- deleted policies' series must not silence it ------------------------------------------------


def test_deleting_every_policy_fires_nothing_and_leaves_operator_down_able_to_fire(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    # The policy is deleted at minute 10 (forget_policy removes its series); the operator runs
    # on without policies until it crashes at minute 30.
    rules_test(
        tmp_path,
        groups,
        {**operator("op-a", 0, 30), **target_up("op-a", 0, 30), **policy("op-a", 0, 10)},
        [
            *nothing_fires(groups, 10, 20, 29),
            *quiet("ImageRefreshOperatorDown", 34),
            fires(groups, "ImageRefreshOperatorDown", 35, SCRAPE),
            fires(groups, "ImageRefreshOperatorDown", 59, SCRAPE),
        ],
    )


# -- leadership ----------------------------------------------------------------------------------


def test_operators_that_all_stand_by_fire_no_leader(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    # Two replicas; the leader loses its Lease at minute 10 and neither gets it back.
    rules_test(
        tmp_path,
        groups,
        {
            **operator("op-a", leader=lambda m: int(m < 10)),
            **target_up("op-a"),
            **operator("op-b", leader=0),
            **target_up("op-b"),
        },
        [
            *quiet("ImageRefreshNoLeader", 9, 14),
            fires(groups, "ImageRefreshNoLeader", 15, {}),
            *quiet("ImageRefreshOperatorDown", 15, 59),
        ],
    )


def test_a_failover_within_a_minute_fires_nothing(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    rules_test(
        tmp_path,
        groups,
        {
            **operator("op-a", 0, 20, leader=1),
            **target_up("op-a", 0, 20, 20),
            **policy("op-a", 0, 20),
            **operator("op-b", leader=lambda m: int(m >= 21)),
            **target_up("op-b"),
            **policy("op-b", 21),
        },
        nothing_fires(groups, 20, 21, 30, 59),
    )


def test_operators_that_do_not_report_leadership_fire_no_leader(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    running = {k: v for k, v in operator("op-a").items() if "imagerefresh_leader" not in k}
    rules_test(
        tmp_path,
        groups,
        running,
        [*quiet("ImageRefreshNoLeader", 4), fires(groups, "ImageRefreshNoLeader", 5, {})],
    )


# -- a target on an unsigned build ---------------------------------------------------------------


def test_a_target_turning_untrusted_fires_at_once_and_goes_quiet_when_a_signed_build_lands(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    healthy = policy("op-a")
    target = {"job": JOB, "pod": "op-a", "namespace": "tracebloc", "policy": "control-plane",
              "kind": "Deployment", "target": "tracebloc/jobs-manager"}  # fmt: skip
    untrusted = series("imagerefresh_target_untrusted", **target)
    healthy[untrusted] = life(0, MINUTES, lambda m: int(10 <= m < 30))
    labels = {"namespace": "tracebloc", "policy": "control-plane", "kind": "Deployment",
              "target": "tracebloc/jobs-manager"}  # fmt: skip
    rules_test(
        tmp_path,
        groups,
        {**operator("op-a"), **target_up("op-a"), **healthy},
        [
            *quiet("ImageRefreshTargetUntrusted", 9),
            fires(groups, "ImageRefreshTargetUntrusted", 10, labels),
            fires(groups, "ImageRefreshTargetUntrusted", 29, labels),
            *quiet("ImageRefreshTargetUntrusted", 30, 59),
        ],
    )


# -- a target that would not restart offline -----------------------------------------------------

OFFLINE_MINUTES = 150  # longer than the alert's default `for` (1h), twice over
OFFLINE_TARGET = {"namespace": "tracebloc", "policy": "control-plane", "kind": "Deployment",
                  "target": "tracebloc/jobs-manager"}  # fmt: skip


def offline_ready(at: Callable[[int], float | None]) -> dict[str, str]:
    """The target's imagerefresh_target_offline_ready each minute (None: no series, stale-marked
    where it ends — a target not assessed has none)."""
    tokens, present = [], False
    for minute in range(OFFLINE_MINUTES):
        value = at(minute)
        tokens.append(("stale" if present else "_") if value is None else f"{value:g}")
        present = value is not None
    name = series("imagerefresh_target_offline_ready", job=JOB, pod="op-a", **OFFLINE_TARGET)
    return {name: " ".join(tokens)}


def test_not_offline_ready_fires_once_the_target_stayed_so_for_an_hour_and_not_before(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    assert rules_by_alert(groups)["ImageRefreshNotOfflineReady"]["for"] == "1h"
    rules_test(
        tmp_path,
        groups,
        offline_ready(lambda _: 0),
        [
            *quiet("ImageRefreshNotOfflineReady", 1, 30, 59),
            fires(groups, "ImageRefreshNotOfflineReady", 60, OFFLINE_TARGET),
            fires(groups, "ImageRefreshNotOfflineReady", 149, OFFLINE_TARGET),
        ],
    )


def test_an_offline_ready_target_never_fires_not_offline_ready(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    rules_test(
        tmp_path,
        groups,
        offline_ready(lambda _: 1),
        quiet("ImageRefreshNotOfflineReady", 1, 60, 61, 120, 149),
    )


def test_a_target_ready_again_in_between_starts_the_hour_afresh(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    # Not ready, then ready from minute 30 (say, its new pods proved their nodes), then a new
    # tag lands unpinned at minute 40: the hour counts from 40.
    rules_test(
        tmp_path,
        groups,
        offline_ready(lambda m: 0 if m < 30 or m >= 40 else 1),
        [
            *quiet("ImageRefreshNotOfflineReady", 60, 99),
            fires(groups, "ImageRefreshNotOfflineReady", 100, OFFLINE_TARGET),
        ],
    )


def test_a_target_no_longer_assessed_does_not_fire_not_offline_ready(
    groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    # Not ready for 50 minutes, then not assessed (the policy suspended): the series is removed.
    rules_test(
        tmp_path,
        groups,
        offline_ready(lambda m: 0 if m < 50 else None),
        quiet("ImageRefreshNotOfflineReady", 59, 60, 90, 149),
    )
