"""The CronJob → policy migration's pure core (SPEC §10): what is read, carried, and refused.

The edge is rendered as the edge chart renders it (tests/support/edge.py); each test changes one
thing about it and pins down the policy, the carried status, the values, or the refusal.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.migration import (
    CronJobSettings,
    Migration,
    MigrationRefused,
    interval_of,
    plan_migration,
    read_cronjob,
)
from imagerefresh.models import Phase, PolicySpec, PolicyStatus
from imagerefresh.planner import NamespacePolicy, Plan

from support.edge import PULL_SECRET, Edge
from support.ticks import T0, Tick, digest, evidence, key
from support.workloads import daemonset, deployment, pod

NS, AGENTS = "tracebloc", "tracebloc-node-agents"
D1, D2, D3 = digest("jm"), digest("pm"), digest("rm")
NEW = digest("new")
RESET = "imagerefresh reset tracebloc/r-image-refresh"


def edge(**fields: Any) -> Edge:
    return Edge(release="r", namespace=NS, node_agents=AGENTS, **fields)


def settings_of(e: Edge) -> CronJobSettings:
    return read_cronjob(e.cronjob())


def migrate(e: Edge, interval: timedelta | None = None) -> Migration:
    return plan_migration(
        settings_of(e),
        e.workloads(),
        policy_name="r-image-refresh",
        now=T0,
        interval=interval,
    )


def refusal(e: Edge, interval: timedelta | None = None) -> str:
    with pytest.raises(MigrationRefused) as caught:
        migrate(e, interval)
    return str(caught.value)


def targets(m: Migration) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in m.status["targets"]}


def pinned_edge(**fields: Any) -> Edge:
    images = {
        "jobs-manager": f"tracebloc/jobs-manager@{D1}",
        "pods-monitor": f"tracebloc/pods-monitor@{D2}",
        "resource-monitor": f"tracebloc/resource-monitor@{D3}",
    }
    return edge(images=images, **fields)


# --- the policy and the values -----------------------------------------------------------------


def test_the_chart_rendered_edge_becomes_its_three_targets_with_the_cronjobs_tunables() -> None:
    m = migrate(edge())
    assert m.policy["spec"] == {
        "interval": "15m",
        "maxSkipTicks": 8,
        "maxRefreshAttempts": 3,
        "rolloutTimeout": "10m",
        "targets": [
            {
                "kind": "Deployment",
                "name": "r-jobs-manager",
                "containers": [
                    {"name": "api", "image": "tracebloc/jobs-manager:prod"},
                    {"name": "pods-monitor-container", "image": "tracebloc/pods-monitor:prod"},
                ],
            },
            {
                "kind": "Deployment",
                "name": "r-requests-proxy",
                "containers": [{"name": "proxy", "image": "tracebloc/jobs-manager:prod"}],
            },
            {
                "kind": "DaemonSet",
                "name": "r-resource-monitor",
                "namespace": AGENTS,
                "containers": [
                    {
                        "name": "tracebloc-resource-monitor",
                        "image": "tracebloc/resource-monitor:prod",
                    }
                ],
            },
        ],
    }
    assert m.policy["metadata"]["name"] == "r-image-refresh"
    assert m.policy["metadata"]["namespace"] == NS
    assert m.policy["metadata"]["annotations"]["images.tracebloc.io/migrated-from"] == (
        "CronJob/tracebloc/r-image-refresh"
    )
    PolicySpec.model_validate(m.policy["spec"])
    assert (m.locked, m.carried, m.warnings) == (False, (), ())


def test_the_values_block_carries_the_policy_the_namespace_pair_and_the_pull_secrets() -> None:
    m = migrate(edge())
    assert m.values == {
        "watch": {"namespaces": [NS]},
        "allowNamespacePairs": [{"policyNamespace": NS, "targetNamespace": AGENTS}],
        "rbac": {"pullSecrets": {"names": [PULL_SECRET]}},
        "policies": [{"name": "r-image-refresh", "namespace": NS, "spec": m.policy["spec"]}],
    }


def test_workloads_without_pull_secrets_are_named_and_their_service_account_pointed_at() -> None:
    e = edge()
    workloads = e.workloads()
    del workloads["requests-proxy"]["spec"]["template"]["spec"]["imagePullSecrets"]
    m = plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    assert m.pull_secrets == (PULL_SECRET,)
    (warning,) = m.warnings
    assert warning.startswith("Deployment tracebloc/r-requests-proxy name no imagePullSecrets")
    assert "rbac.pullSecrets.names" in warning


def test_tunables_come_from_the_cronjobs_env() -> None:
    e = edge(env={"MAX_REFRESH_ATTEMPTS": "5", "MAX_SKIP_TICKS": "12", "ROLLOUT_TIMEOUT": "25m"})
    spec = migrate(e).policy["spec"]
    assert (spec["maxRefreshAttempts"], spec["maxSkipTicks"], spec["rolloutTimeout"]) == (
        5,
        12,
        "25m",
    )


def test_a_rollout_timeout_under_the_policys_minimum_is_raised_to_it_with_a_warning() -> None:
    m = migrate(edge(env={"ROLLOUT_TIMEOUT": "10s"}))
    assert m.policy["spec"]["rolloutTimeout"] == "30s"
    assert m.warnings == (
        "env ROLLOUT_TIMEOUT=10s is under the policy's minimum: rolloutTimeout 30s",
    )


# --- schedules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "period"),
    [
        ("*/15 * * * *", timedelta(minutes=15)),
        ("7,22,37,52 * * * *", timedelta(minutes=15)),
        ("52,7,37,22 * * * *", timedelta(minutes=15)),
        ("0,30 * * * *", timedelta(minutes=30)),
        ("*/20 * * * *", timedelta(minutes=20)),
        ("7 * * * *", timedelta(hours=1)),
        ("@hourly", timedelta(hours=1)),
        ("* * * * *", timedelta(minutes=1)),
        ("*/1 * * * *", timedelta(minutes=1)),
        ("  */15   *  * * *  ", timedelta(minutes=15)),
    ],
)
def test_a_schedule_of_evenly_spaced_minutes_every_hour_has_that_period(
    schedule: str, period: timedelta
) -> None:
    assert interval_of(schedule) == period


@pytest.mark.parametrize(
    "schedule",
    [
        "*/7 * * * *",  # 0,7,…,56: the gap past the hour is 4
        "*/45 * * * *",
        "7,22,37 * * * *",
        "0,15,30,44 * * * *",
        "0 3 * * *",
        "0 */2 * * *",
        "*/15 * * * 1-5",
        "*/15 * 1 * *",
        "*/15 * * 6 *",
        "@daily",
        "",
        "60 * * * *",
        "*/0 * * * *",
        "*/60 * * * *",
        "*/x * * * *",
        "0-59/15 * * * *",
        "a * * * *",
        "7,22,37,52 * * *",
        "7,22,37,52 * * * * *",
        "007 * * * *",
        "7,,22 * * * *",
    ],
)
def test_a_schedule_without_a_fixed_period_is_refused_asking_for_interval(schedule: str) -> None:
    with pytest.raises(MigrationRefused) as caught:
        interval_of(schedule, "CronJob tracebloc/r-image-refresh")
    message = str(caught.value)
    assert message.startswith(f"the schedule {schedule!r} of CronJob tracebloc/r-image-refresh")
    assert "has no fixed period" in message
    assert message.endswith("give the policy's tick period with --interval, e.g. --interval 15m")


def test_interval_overrides_a_schedule_without_a_fixed_period() -> None:
    assert "no fixed period" in refusal(edge(schedule="0 3 * * *"))
    m = migrate(edge(schedule="0 3 * * *"), interval=timedelta(hours=24))
    assert m.policy["spec"]["interval"] == "24h"
    assert migrate(edge(), interval=timedelta(seconds=90)).policy["spec"]["interval"] == "1m30s"


def test_an_interval_under_30s_is_refused() -> None:
    assert refusal(edge(), interval=timedelta(seconds=29)) == "--interval 29s is under 30s"
    migrate(edge(), interval=timedelta(seconds=30))


# --- state carried over ------------------------------------------------------------------------


def test_the_flap_lockout_locks_every_target_at_the_ceiling_saying_where_it_came_from() -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-flap-detected": "3"}))
    assert m.locked
    for name, status in targets(m).items():
        assert (status["phase"], status["refreshAttempts"], status["lockedAt"]) == (
            "Locked",
            3,
            "2026-11-29T12:00:00Z",
        ), name
        assert status["message"] == (
            "locked: migrated from the image-refresh CronJob tracebloc/r-image-refresh, whose "
            "flap lockout (tracebloc.io/refresh-flap-detected=3 on Deployment "
            "tracebloc/r-jobs-manager) no human had cleared; no re-imaging until a reset: " + RESET
        )
    assert m.carried == (
        "flap lockout (tracebloc.io/refresh-flap-detected=3 on Deployment "
        "tracebloc/r-jobs-manager): every target Locked, refreshAttempts 3, until " + RESET,
    )
    assert {t["name"]: t["namespace"] for t in m.status["targets"]} == {
        "r-jobs-manager": NS,
        "r-requests-proxy": NS,
        "r-resource-monitor": AGENTS,
    }
    PolicyStatus.model_validate(m.status)


def test_the_lockout_uses_the_cronjobs_own_ceiling() -> None:
    m = migrate(
        edge(env={"MAX_REFRESH_ATTEMPTS": "5"}, state={"tracebloc.io/refresh-flap-detected": "5"})
    )
    assert {t["refreshAttempts"] for t in m.status["targets"]} == {5}


@pytest.mark.parametrize("value", ["", "yes", "-1", "3.0", "x" * 10_000, "99999999"])
def test_a_lockout_whose_value_is_garbage_still_locks_and_warns(value: str) -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-flap-detected": value}))
    assert m.locked
    assert {t["phase"] for t in m.status["targets"]} == {"Locked"}
    (warning,) = m.warnings
    assert warning.startswith("annotation tracebloc.io/refresh-flap-detected=")
    assert warning.endswith("is not a count: ignored")
    assert len(warning) < 200  # a value is quoted short, never whole


def test_attempts_at_the_ceiling_without_the_lockout_annotation_lock_too() -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-attempt": "3"}))
    assert m.locked
    assert m.warnings == (
        "tracebloc.io/refresh-attempt=3 is at the ceiling though "
        "tracebloc.io/refresh-flap-detected is absent: treated as the CronJob's lockout (fail "
        "closed)",
    )


def test_attempts_below_the_ceiling_are_carried_to_every_target_unlocked() -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-attempt": "2"}))
    assert not m.locked
    for status in m.status["targets"]:
        assert (status["phase"], status["refreshAttempts"]) == ("Suspended", 2)
        assert "lockedAt" not in status
        assert status["message"].endswith("; refreshAttempts 2 from tracebloc.io/refresh-attempt")


def test_garbage_attempts_are_ignored_with_a_warning() -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-attempt": "many"}))
    assert not m.locked
    assert {t["refreshAttempts"] for t in m.status["targets"]} == {0}
    assert m.warnings == ("annotation tracebloc.io/refresh-attempt='many' is not a count: ignored",)


def test_the_skip_streak_goes_to_the_jobs_manager_target_capped_at_the_ceiling() -> None:
    for value, carried in (("1", 1), ("5", 5), ("8", 8), ("40", 8)):
        status = targets(migrate(edge(state={"tracebloc.io/refresh-skip-streak": value})))
        assert status["r-jobs-manager"]["skipStreak"] == carried
        assert status["r-jobs-manager"]["message"].endswith(
            f"; skipStreak {carried} from tracebloc.io/refresh-skip-streak"
        )
        assert "skipStreak" not in status["r-requests-proxy"]
        assert "skipStreak" not in status["r-resource-monitor"]


def test_a_garbage_skip_streak_is_ignored_with_a_warning() -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-skip-streak": "-3"}))
    assert "skipStreak" not in targets(m)["r-jobs-manager"]
    assert m.warnings == (
        "annotation tracebloc.io/refresh-skip-streak='-3' is not a count: ignored",
    )


def test_last_refreshed_digests_become_last_good_where_the_template_pins_them() -> None:
    state = {
        "tracebloc.io/last-refreshed-jobs-manager-digest": D1,
        "tracebloc.io/last-refreshed-pods-monitor-digest": D2,
        "tracebloc.io/last-refreshed-resource-monitor-digest": D3,
    }
    m = migrate(pinned_edge(state=state))
    status = targets(m)
    assert status["r-jobs-manager"]["lastGood"] == {
        "api": f"docker.io/tracebloc/jobs-manager@{D1}",
        "pods-monitor-container": f"docker.io/tracebloc/pods-monitor@{D2}",
    }
    assert status["r-requests-proxy"]["lastGood"] == {
        "proxy": f"docker.io/tracebloc/jobs-manager@{D1}"
    }
    assert status["r-resource-monitor"]["lastGood"] == {
        "tracebloc-resource-monitor": f"docker.io/tracebloc/resource-monitor@{D3}"
    }
    assert len(m.carried) == 4
    assert m.warnings == ()


def test_a_last_refreshed_digest_the_template_does_not_carry_is_not_last_good() -> None:
    # The CronJob records its first observation without re-imaging: the template runs the tag.
    m = migrate(edge(state={"tracebloc.io/last-refreshed-jobs-manager-digest": D1}))
    assert all("lastGood" not in t for t in m.status["targets"])
    assert len(m.warnings) == 2  # api and proxy
    assert m.warnings[0].startswith("tracebloc.io/last-refreshed-jobs-manager-digest=sha256:")
    assert (
        "not carried to Deployment tracebloc/r-jobs-manager container api: its template runs "
        "tracebloc/jobs-manager:prod" in m.warnings[0]
    )


@pytest.mark.parametrize("value", ["sha256:abc", "md5:" + "0" * 64, D1.upper(), " " * 300, "x"])
def test_a_garbage_last_refreshed_digest_is_ignored_with_a_warning(value: str) -> None:
    m = migrate(pinned_edge(state={"tracebloc.io/last-refreshed-pods-monitor-digest": value}))
    assert all("lastGood" not in t for t in m.status["targets"])
    (warning,) = m.warnings
    assert warning.startswith("annotation tracebloc.io/last-refreshed-pods-monitor-digest=")
    assert warning.endswith("is not a digest: ignored")


def test_annotations_that_are_not_strings_never_crash() -> None:
    e = edge()
    workloads = e.workloads()
    workloads["jobs-manager"]["metadata"]["annotations"] = {
        "tracebloc.io/refresh-skip-streak": 4,
        "tracebloc.io/last-refreshed-jobs-manager-digest": ["x"],
    }
    m = plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    assert len(m.warnings) == 2
    workloads["jobs-manager"]["metadata"]["annotations"] = ["not", "a", "map"]
    assert plan_migration(settings_of(e), workloads, policy_name="p", now=T0).warnings == ()


# --- pins and mirrors --------------------------------------------------------------------------


def test_pinned_images_keep_the_digest_their_template_carries_and_the_proxy_follows() -> None:
    e = pinned_edge(env={"JOBS_MANAGER_PINNED": "1", "RESOURCE_MONITOR_PINNED": "1"})
    containers = {
        c["name"]: c for t in migrate(e).policy["spec"]["targets"] for c in t["containers"]
    }
    assert containers["api"] == {
        "name": "api",
        "image": "tracebloc/jobs-manager:prod",
        "digest": D1,
    }
    assert containers["proxy"]["digest"] == D1
    assert containers["tracebloc-resource-monitor"]["digest"] == D3
    assert "digest" not in containers["pods-monitor-container"]  # not pinned: tracked


def test_a_pinned_image_whose_template_runs_the_tag_is_refused() -> None:
    message = refusal(edge(env={"PODS_MONITOR_PINNED": "1"}))
    assert message == (
        "PODS_MONITOR_PINNED=1 says the pods-monitor image is pinned by digest, but container "
        "'pods-monitor-container' of Deployment tracebloc/r-jobs-manager runs "
        "tracebloc/pods-monitor:prod (no digest): the pin in the edge chart's values did not "
        "reach the workload. Run the edge's helm upgrade so the template carries the digest, "
        "then run this again"
    )


@pytest.mark.parametrize("value", ["2", "true", "", "yes"])
def test_a_pinned_flag_other_than_0_or_1_is_refused(value: str) -> None:
    assert refusal(edge(env={"JOBS_MANAGER_PINNED": value})).startswith("env JOBS_MANAGER_PINNED=")


def test_a_mirror_edge_tracks_the_mirrors_repository_and_says_why_it_was_always() -> None:
    m = migrate(edge(registry="mirror.example.com:5000/hub"))
    images = [c["image"] for t in m.policy["spec"]["targets"] for c in t["containers"]]
    assert images == [
        "mirror.example.com:5000/hub/tracebloc/jobs-manager:prod",
        "mirror.example.com:5000/hub/tracebloc/pods-monitor:prod",
        "mirror.example.com:5000/hub/tracebloc/jobs-manager:prod",
        "mirror.example.com:5000/hub/tracebloc/resource-monitor:prod",
    ]
    (warning,) = m.warnings
    assert warning.startswith("IMAGE_REGISTRY is mirror.example.com:5000/hub, a mirror")
    assert "imagePullPolicy: Always (its pull-policy helper gives a mirror Always)" in warning


def test_docker_io_spelled_as_its_registry_host_alias_is_no_mirror() -> None:
    assert migrate(edge(registry="index.docker.io")).warnings == ()


# --- refusals: each names what is missing --------------------------------------------------------


def test_a_cronjob_without_the_refresh_container_is_refused() -> None:
    cronjob = edge().cronjob()
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["name"] = "x"
    with pytest.raises(MigrationRefused, match=r"has no container 'refresh' \(it has: x\)"):
        read_cronjob(cronjob)


def test_env_naming_no_workloads_is_refused_naming_the_variables() -> None:
    cronjob = edge().cronjob()
    env = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] not in ("DEPLOYMENT_NAME", "RESOURCE_MONITOR_DAEMONSET")]
    with pytest.raises(MigrationRefused) as caught:
        read_cronjob(cronjob)
    assert str(caught.value).startswith(
        "CronJob tracebloc/r-image-refresh does not name its workloads: env DEPLOYMENT_NAME, "
        "RESOURCE_MONITOR_DAEMONSET missing"
    )


def test_env_read_from_elsewhere_is_unreadable_and_refused() -> None:
    cronjob = edge().cronjob()
    env = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    env.append({"name": "IMAGE_TAG", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}})
    with pytest.raises(MigrationRefused, match=r"env IMAGE_TAG of CronJob .* not a literal value"):
        read_cronjob(cronjob)
    env[-1] = {"name": "IMAGE_TAG", "value": "t" * 300}
    with pytest.raises(MigrationRefused, match=r"env IMAGE_TAG of CronJob .* is unreadable"):
        read_cronjob(cronjob)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MAX_REFRESH_ATTEMPTS": "abc"}, "env MAX_REFRESH_ATTEMPTS='abc' of CronJob"),
        ({"MAX_SKIP_TICKS": "0"}, "env MAX_SKIP_TICKS='0' of CronJob"),
        ({"ROLLOUT_TIMEOUT": "ten"}, "env ROLLOUT_TIMEOUT of CronJob"),
        ({"IMAGE_TAG": "bad tag"}, "env IMAGE_REGISTRY='docker.io' / IMAGE_TAG='bad tag'"),
        ({"DEPLOYMENT_NAME": "Bad_Name"}, "env DEPLOYMENT_NAME='Bad_Name'"),
    ],
)
def test_unreadable_env_values_are_refused_naming_them(env: dict[str, str], message: str) -> None:
    assert refusal(edge(env=env)).startswith(message)


def test_absent_workloads_are_refused_naming_each() -> None:
    e = edge()
    workloads: dict[str, Any] = {**e.workloads(), "requests-proxy": None, "resource-monitor": None}
    with pytest.raises(MigrationRefused) as caught:
        plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    assert str(caught.value).startswith(
        "the workloads CronJob tracebloc/r-image-refresh refreshes are absent: Deployment "
        "tracebloc/r-requests-proxy, DaemonSet tracebloc-node-agents/r-resource-monitor"
    )


def test_a_workload_without_the_charts_container_is_refused() -> None:
    e = edge()
    workloads = e.workloads()
    workloads["requests-proxy"]["spec"]["template"]["spec"]["containers"][0]["name"] = "other"
    with pytest.raises(MigrationRefused, match=r"r-requests-proxy has no container 'proxy'"):
        plan_migration(settings_of(e), workloads, policy_name="p", now=T0)


def test_a_workload_running_another_repository_is_refused() -> None:
    e = edge(images={"resource-monitor": "quay.io/someone/monitor:prod"})
    assert refusal(e).startswith(
        "container 'tracebloc-resource-monitor' of DaemonSet tracebloc-node-agents/"
        "r-resource-monitor runs quay.io/someone/monitor, not "
        "docker.io/tracebloc/resource-monitor that the CronJob refreshes"
    )


# --- the operator reads the carried status as the CronJob left it ---------------------------------


def _first_tick(m: Migration, e: Edge) -> tuple[Tick, Plan]:
    """The operator's first tick on the migrated policy, with a new digest at every tag."""
    tick = Tick(
        PolicySpec.model_validate(m.policy["spec"]),
        namespaces=NamespacePolicy(frozenset({(NS, AGENTS)})),
    )
    tick.status = PolicyStatus.model_validate(m.status)
    jm = deployment(
        "r-jobs-manager",
        {"api": e.image("jobs-manager"), "pods-monitor-container": e.image("pods-monitor")},
    )
    proxy = deployment("r-requests-proxy", {"proxy": e.image("jobs-manager")})
    rm = daemonset(
        "r-resource-monitor", {"tracebloc-resource-monitor": e.image("resource-monitor")}
    )
    old = [pod("p", {"api": f"docker.io/tracebloc/jobs-manager@{D1}"})]
    plan = tick.run(
        {
            key("r-jobs-manager"): evidence(jm, old, {"api": NEW, "pods-monitor-container": NEW}),
            key("r-requests-proxy"): evidence(proxy, old, {"proxy": NEW}),
            key("r-resource-monitor", "DaemonSet", AGENTS): evidence(
                rm, old, {"tracebloc-resource-monitor": NEW}
            ),
        }
    )
    return tick, plan


def test_the_first_tick_on_a_migrated_lockout_refreshes_nothing_until_a_reset() -> None:
    e = edge(state={"tracebloc.io/refresh-flap-detected": "3"})
    tick, plan = _first_tick(migrate(e), e)
    assert plan.patches == ()
    assert {t.phase for t in tick.status.targets} == {Phase.LOCKED}
    # The same tick without the lockout refreshes all three: the lock is what held them.
    _, unlocked = _first_tick(migrate(edge()), edge())
    assert len(unlocked.patches) == 3


# --- every word a site engineer reads ------------------------------------------------------------


def test_the_policy_object_is_complete_and_records_what_was_carried() -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-skip-streak": "2"}))
    assert {k: v for k, v in m.policy.items() if k != "spec"} == {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {
            "name": "r-image-refresh",
            "namespace": NS,
            "annotations": {
                "images.tracebloc.io/migrated-from": "CronJob/tracebloc/r-image-refresh",
                "images.tracebloc.io/migrated-state": (
                    "tracebloc.io/refresh-skip-streak=2 on Deployment tracebloc/r-jobs-manager: "
                    "skipStreak 2 of 8 on the jobs-manager target"
                ),
            },
        },
    }
    assert migrate(edge()).policy["metadata"]["annotations"][
        "images.tracebloc.io/migrated-state"
    ] == ("no state to carry")
    state = {"tracebloc.io/refresh-flap-detected": "3", "tracebloc.io/refresh-skip-streak": "1"}
    summary = migrate(edge(state=state)).policy["metadata"]["annotations"][
        "images.tracebloc.io/migrated-state"
    ]
    assert summary == "; ".join(migrate(edge(state=state)).carried)
    assert len(summary) <= 2048


def test_each_carried_targets_message_says_where_its_state_came_from() -> None:
    state = {
        "tracebloc.io/refresh-attempt": "1",
        "tracebloc.io/refresh-skip-streak": "2",
        "tracebloc.io/last-refreshed-jobs-manager-digest": D1,
    }
    origin = "migrated from the image-refresh CronJob tracebloc/r-image-refresh"
    taking = "the operator takes over once it is unsuspended"
    status = targets(migrate(pinned_edge(state=state)))
    assert status["r-jobs-manager"]["message"] == (
        f"{origin}; {taking}; skipStreak 2 from tracebloc.io/refresh-skip-streak; lastGood from "
        "its last-refreshed-*-digest annotations; refreshAttempts 1 from "
        "tracebloc.io/refresh-attempt"
    )
    assert status["r-resource-monitor"]["message"] == (
        f"{origin}; {taking}; refreshAttempts 1 from tracebloc.io/refresh-attempt"
    )
    assert migrate(edge()).carried == ()
    assert migrate(pinned_edge(state=state)).carried == (
        "tracebloc.io/refresh-attempt=1 on Deployment tracebloc/r-jobs-manager (one counter for "
        "all images): refreshAttempts 1 of 3 on every target",
        "tracebloc.io/refresh-skip-streak=2 on Deployment tracebloc/r-jobs-manager: skipStreak 2 "
        "of 8 on the jobs-manager target",
        "tracebloc.io/last-refreshed-jobs-manager-digest → lastGood of Deployment "
        "tracebloc/r-jobs-manager container api",
        "tracebloc.io/last-refreshed-jobs-manager-digest → lastGood of Deployment "
        "tracebloc/r-requests-proxy container proxy",
    )


def test_a_pinned_image_is_listed_as_carried_with_its_flag() -> None:
    m = migrate(pinned_edge(env={"RESOURCE_MONITOR_PINNED": "1"}))
    assert m.carried == (
        "DaemonSet tracebloc-node-agents/r-resource-monitor container "
        f"tracebloc-resource-monitor: pinned to {D3} (RESOURCE_MONITOR_PINNED=1, the digest its "
        "template carries)",
    )


def test_a_lockout_with_a_garbage_value_quotes_it_in_the_message() -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-flap-detected": "yes"}))
    assert m.carried[0].startswith("flap lockout (tracebloc.io/refresh-flap-detected='yes' on ")


def test_a_garbage_digest_does_not_stop_the_next_image_from_being_carried() -> None:
    state = {
        "tracebloc.io/last-refreshed-jobs-manager-digest": "nope",
        "tracebloc.io/last-refreshed-pods-monitor-digest": D2,
    }
    m = migrate(pinned_edge(state=state))
    assert targets(m)["r-jobs-manager"]["lastGood"] == {
        "pods-monitor-container": f"docker.io/tracebloc/pods-monitor@{D2}"
    }
    assert m.warnings == (
        "annotation tracebloc.io/last-refreshed-jobs-manager-digest='nope' is not a digest: "
        "ignored",
    )


def test_the_warning_for_a_digest_recorded_but_never_written_is_whole() -> None:
    m = migrate(edge(state={"tracebloc.io/last-refreshed-pods-monitor-digest": D2}))
    assert m.warnings == (
        f"tracebloc.io/last-refreshed-pods-monitor-digest={D2[:19]}… not carried to Deployment "
        "tracebloc/r-jobs-manager container pods-monitor-container: its template runs "
        "tracebloc/pods-monitor:prod, so the CronJob recorded that digest without writing it "
        "there (as it does on its first observation, or before a chart upgrade re-rendered the "
        "tag); the operator compares the pods' digests itself",
    )


def test_the_mirror_and_pull_secret_warnings_are_whole() -> None:
    e = edge(registry="mirror.example.com")
    workloads = e.workloads()
    workloads["requests-proxy"]["spec"]["template"]["spec"]["imagePullSecrets"] = [
        {"name": ""},
        "junk",
        {"other": "x"},
    ]
    m = plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    assert m.warnings == (
        "IMAGE_REGISTRY is mirror.example.com, a mirror: the CronJob resolved digests from "
        "docker.io and went inert here, and the edge chart rendered these containers "
        "imagePullPolicy: Always (its pull-policy helper gives a mirror Always), so they were "
        "not offline-safe. The policy tracks the mirror's repositories "
        "(mirror.example.com/tracebloc/…) and pins digests the mirror itself holds",
        "Deployment tracebloc/r-requests-proxy name no imagePullSecrets in their pod templates: "
        "the operator then uses their ServiceAccount's; list those secrets in "
        "rbac.pullSecrets.names too (kubectl get serviceaccount -o yaml)",
    )


def test_several_workloads_without_pull_secrets_are_listed_together() -> None:
    e = edge()
    workloads = e.workloads()
    for role in ("jobs-manager", "resource-monitor"):
        del workloads[role]["spec"]["template"]["spec"]["imagePullSecrets"]
    (warning,) = plan_migration(settings_of(e), workloads, policy_name="p", now=T0).warnings
    assert warning.startswith(
        "Deployment tracebloc/r-jobs-manager, DaemonSet tracebloc-node-agents/r-resource-monitor "
        "name no imagePullSecrets"
    )


def test_a_container_the_chart_runs_as_an_init_container_is_found() -> None:
    e = edge()
    workloads = e.workloads()
    pod_spec = workloads["jobs-manager"]["spec"]["template"]["spec"]
    sidecar = pod_spec["containers"].pop()
    pod_spec["initContainers"] = [sidecar]
    m = plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    names = [c["name"] for c in m.policy["spec"]["targets"][0]["containers"]]
    assert names == ["api", "pods-monitor-container"]


@pytest.mark.parametrize(
    ("value", "accepted"),
    [("1", True), ("1000000", True), ("1000001", False), ("0", False), ("01", True)],
)
def test_counters_in_env_are_bounded(value: str, accepted: bool) -> None:
    e = edge(env={"MAX_SKIP_TICKS": value})
    if accepted:
        assert migrate(e).policy["spec"]["maxSkipTicks"] == int(value)
    else:
        assert refusal(e) == (
            f"env MAX_SKIP_TICKS={value!r} of CronJob tracebloc/r-image-refresh is not a positive "
            "whole number; fix it in the edge chart's values, or migrate by hand"
        )


@pytest.mark.parametrize(("value", "carried"), [("1000000", True), ("1000001", False)])
def test_counters_in_annotations_are_bounded(value: str, carried: bool) -> None:
    m = migrate(edge(state={"tracebloc.io/refresh-skip-streak": value}))
    assert ("skipStreak" in targets(m)["r-jobs-manager"]) is carried


def test_an_annotation_of_exactly_the_bound_is_read_and_one_past_is_not() -> None:
    at, past = " " * 255 + "2", " " * 256 + "2"  # surrounding blanks are trimmed
    read = targets(migrate(edge(state={"tracebloc.io/refresh-attempt": at})))
    assert read["r-jobs-manager"]["refreshAttempts"] == 2
    assert (
        migrate(edge(state={"tracebloc.io/refresh-attempt": past}))
        .warnings[0]
        .endswith("is not a count: ignored")
    )


def test_env_entries_without_a_name_are_skipped_and_missing_pins_mean_unpinned() -> None:
    cronjob = edge().cronjob()
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [
        {"value": "x"},
        "junk",
        *(e for e in container["env"] if not e["name"].endswith("_PINNED")),
    ]
    settings = read_cronjob(cronjob)
    assert dict(settings.pinned) == {
        "jobs-manager": False,
        "pods-monitor": False,
        "resource-monitor": False,
    }


def test_a_pin_flag_refusal_is_whole() -> None:
    assert refusal(edge(env={"JOBS_MANAGER_PINNED": "yes"})) == (
        "env JOBS_MANAGER_PINNED='yes' of CronJob tracebloc/r-image-refresh is neither 0 nor 1; "
        "fix the edge chart's values"
    )


def test_minute_59_and_the_default_cronjob_name_in_refusals() -> None:
    assert interval_of("59 * * * *") == timedelta(hours=1)
    assert interval_of("*/30 * * * *") == timedelta(minutes=30)
    with pytest.raises(MigrationRefused) as caught:
        interval_of("0 3 * * *")
    assert str(caught.value) == (
        "the schedule '0 3 * * *' of the CronJob has no fixed period (only evenly spaced "
        "minutes every hour of every day do, such as '*/15 * * * *' or '7,22,37,52 * * * *'); "
        "give the policy's tick period with --interval, e.g. --interval 15m"
    )
    assert refusal(edge(schedule="@daily")).startswith(
        "the schedule '@daily' of CronJob tracebloc/r-image-refresh has no fixed period"
    )


def test_refusals_about_workloads_are_whole() -> None:
    e = edge()
    workloads: dict[str, Any] = {**e.workloads(), "requests-proxy": None}
    with pytest.raises(MigrationRefused) as caught:
        plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    assert str(caught.value) == (
        "the workloads CronJob tracebloc/r-image-refresh refreshes are absent: Deployment "
        "tracebloc/r-requests-proxy (named by its env); check the release's namespace and names, "
        "or remove the CronJob's stale env by upgrading the edge chart"
    )
    workloads = e.workloads()
    workloads["requests-proxy"]["spec"]["template"]["spec"]["containers"][0]["name"] = "other"
    with pytest.raises(MigrationRefused) as caught:
        plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    assert str(caught.value) == (
        "Deployment tracebloc/r-requests-proxy has no container 'proxy', which the CronJob "
        "refreshes with the jobs-manager image; the workload is not the edge chart's: fix it "
        "(helm upgrade) or migrate by hand"
    )
    workloads = e.workloads()
    del workloads["requests-proxy"]["spec"]["template"]["spec"]["containers"][0]["image"]
    with pytest.raises(MigrationRefused) as caught:
        plan_migration(settings_of(e), workloads, policy_name="p", now=T0)
    assert str(caught.value).startswith(
        "container 'proxy' of Deployment tracebloc/r-requests-proxy runs an unreadable image ("
    )
    assert str(caught.value).endswith("); fix the workload")
    assert refusal(edge(images={"pods-monitor": "tracebloc/other:prod"})) == (
        "container 'pods-monitor-container' of Deployment tracebloc/r-jobs-manager runs "
        "docker.io/tracebloc/other, not docker.io/tracebloc/pods-monitor that the CronJob "
        "refreshes (IMAGE_REGISTRY=docker.io); the operator never changes repositories — fix the "
        "workload (helm upgrade) or the CronJob's IMAGE_REGISTRY first"
    )


def test_an_older_charts_env_gets_the_cronjobs_defaults_each_said() -> None:
    cronjob = edge().cronjob()
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    names = ("DEPLOYMENT_NAME", "REQUESTS_PROXY_DEPLOYMENT", "RESOURCE_MONITOR_DAEMONSET")
    container["env"] = [e for e in container["env"] if e["name"] in names]
    settings = read_cronjob(cronjob)
    assert (
        settings.registry,
        settings.tag,
        settings.rollout_timeout,
        settings.max_refresh_attempts,
        settings.max_skip_ticks,
        settings.workloads["resource-monitor"].namespace,
    ) == ("docker.io", "prod", timedelta(minutes=10), 3, 8, AGENTS)
    assert settings.warnings == (
        "env NODE_AGENTS_NAMESPACE is not set: the resource-monitor DaemonSet is looked up in "
        "tracebloc-node-agents, the chart's default",
        "env IMAGE_REGISTRY is not set: docker.io, the CronJob's default, is used",
        "env IMAGE_TAG is not set: prod, the CronJob's default, is used",
    )


def test_the_refusals_of_a_cronjob_are_whole() -> None:
    cronjob = edge().cronjob()
    pod_spec = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = pod_spec["containers"][0]["env"]
    env.append({"name": "IMAGE_TAG", "valueFrom": {}})
    with pytest.raises(MigrationRefused) as caught:
        read_cronjob(cronjob)
    assert str(caught.value) == (
        "env IMAGE_TAG of CronJob tracebloc/r-image-refresh is not a literal value (valueFrom): "
        "it cannot be read here; set it as a literal in the edge chart's values, or migrate by "
        "hand (docs/migration.md)"
    )
    env[:] = [e for e in env if e["name"] != "DEPLOYMENT_NAME"]
    env.pop()
    with pytest.raises(MigrationRefused) as caught:
        read_cronjob(cronjob)
    assert str(caught.value) == (
        "CronJob tracebloc/r-image-refresh does not name its workloads: env DEPLOYMENT_NAME "
        "missing from container 'refresh' (chart 1.9.x renders all three); upgrade the edge "
        "chart first, or migrate by hand"
    )
    env.append({"name": "DEPLOYMENT_NAME", "value": "r-jobs-manager"})
    env.append({"name": "NODE_AGENTS_NAMESPACE", "value": "Bad"})
    with pytest.raises(MigrationRefused) as caught:
        read_cronjob(cronjob)
    assert str(caught.value) == (
        "env RESOURCE_MONITOR_DAEMONSET='r-resource-monitor' (namespace 'Bad') of CronJob "
        "tracebloc/r-image-refresh is not a Kubernetes object name; fix the CronJob"
    )
    pod_spec["containers"] = []
    with pytest.raises(MigrationRefused) as caught:
        read_cronjob(cronjob)
    assert str(caught.value) == (
        "CronJob tracebloc/r-image-refresh has no container 'refresh' (it has: none): it is not "
        "the edge chart's image-refresh CronJob; name the right one (kubectl get cronjob -A)"
    )
    pod_spec["containers"] = [{"name": "a"}, {"name": "b"}]
    with pytest.raises(MigrationRefused, match=r"\(it has: a, b\)"):
        read_cronjob(cronjob)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("x" * 40, repr("x" * 40)), ("x" * 41, repr("x" * 40 + "…")), ("a\nb", repr("a?b"))],
)
def test_an_untrusted_value_is_quoted_short_and_printable(value: str, shown: str) -> None:
    assert refusal(edge(env={"JOBS_MANAGER_PINNED": value})) == (
        f"env JOBS_MANAGER_PINNED={shown} of CronJob tracebloc/r-image-refresh is neither 0 nor "
        "1; fix the edge chart's values"
    )
