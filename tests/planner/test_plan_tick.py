"""plan_tick, rule by rule of SPEC §4: each test names the rule it pins down."""

from __future__ import annotations

from datetime import timedelta

from imagerefresh.models import Phase
from imagerefresh.planner import NamespacePolicy, PatchPurpose, Resolved, Unresolved
from imagerefresh.ratelimit import BudgetSnapshot, RateLimitReport

from support.ticks import (
    JM,
    NS,
    PM,
    RM,
    T0,
    Tick,
    budget,
    digest,
    evidence,
    key,
    spec,
    target,
    without_offline,
)
from support.workloads import daemonset, deployment, pod

D1, D2, D3 = digest(1), digest(2), digest(3)
ALLOW_ALL = NamespacePolicy(frozenset({(NS, "*")}))
JM_REPO = "tracebloc/jobs-manager"


def jobs_manager(api: str, monitor: str, **fields: object) -> dict[str, object]:
    return deployment("jobs-manager", {"api": api, "pods-monitor-container": monitor}, **fields)


def two_container_spec(**fields: object):  # type: ignore[no-untyped-def]
    return spec(target("jobs-manager", api=JM, **{"pods-monitor-container": PM}), **fields)


# --- 4.1 suspend ---------------------------------------------------------------------------


def test_suspend_reports_suspended_everywhere_and_does_nothing_else() -> None:
    tick = Tick(two_container_spec(suspend=True))
    plan = tick.run({key("jobs-manager"): evidence(jobs_manager(JM, PM), digests={"api": D1})})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.SUSPENDED
    assert tick.condition("Ready").reason == "Suspended"


# --- 4.3d/e compare and refresh ------------------------------------------------------------


def test_drift_on_two_containers_is_one_guarded_patch_setting_both_digests() -> None:
    tick = Tick(two_container_spec())
    work = jobs_manager(f"{JM_REPO}@{D1}", f"tracebloc/pods-monitor@{D1}", generation=4)
    plan = tick.run(
        {key("jobs-manager"): evidence(work, digests={"api": D2, "pods-monitor-container": D3})}
    )
    (patch,) = plan.patches
    assert patch.purpose is PatchPurpose.REFRESH
    assert patch.json_patch() == [
        {"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "api"},
        {
            "op": "test",
            "path": "/spec/template/spec/containers/0/image",
            "value": f"{JM_REPO}@{D1}",
        },
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/0/image",
            "value": f"{JM_REPO}@{D2}",
        },
        {
            "op": "test",
            "path": "/spec/template/spec/containers/1/name",
            "value": "pods-monitor-container",
        },
        {
            "op": "test",
            "path": "/spec/template/spec/containers/1/image",
            "value": f"tracebloc/pods-monitor@{D1}",
        },
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/1/image",
            "value": f"tracebloc/pods-monitor@{D3}",
        },
    ]
    status = tick.target("jobs-manager")
    assert status.phase is Phase.REFRESHING
    assert status.pending.images == {
        "api": f"{JM_REPO}@{D2}",
        "pods-monitor-container": f"tracebloc/pods-monitor@{D3}",
    }
    assert status.pending.previous["api"] == f"{JM_REPO}@{D1}"
    assert status.pending.generation == 5  # what it produces: the workload read at 4, plus 1
    assert [e.reason for e in without_offline(plan.events)] == ["Refreshing"]
    assert tick.condition("Refreshing").status == "True"
    assert tick.condition("Ready").status == "False"


def test_live_digest_equal_to_desired_is_current_and_an_idle_tick_changes_nothing() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    work = deployment("jobs-manager", {"api": f"docker.io/{JM_REPO}@{D1}"})
    first = tick.run({key("jobs-manager"): evidence(work, digests={"api": D1})})
    assert first.patches == ()
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    assert tick.condition("Ready").status == "True"
    before = tick.status
    second = tick.run({key("jobs-manager"): evidence(work, digests={"api": D1})})
    assert second.status == before  # the shell writes nothing on an idle tick
    assert second.events == ()
    assert second.patches == ()


def test_tag_is_adopted_without_a_patch_when_every_pod_runs_the_desired_digest() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    pods = [pod(f"p{i}", {"api": f"docker.io/{JM_REPO}@{D1}"}) for i in range(2)]
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}, replicas=2), pods, {"api": D1}
            )
        }
    )
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    assert tick.target("jobs-manager").containers[0].running == (D1,)


def test_docker_pullable_image_ids_count_for_adoption() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    pods = [pod("p", {"api": f"docker-pullable://{JM_REPO}@{D1}"})]
    plan = tick.run(
        {key("jobs-manager"): evidence(deployment("jobs-manager", {"api": JM}), pods, {"api": D1})}
    )
    assert plan.patches == ()


def test_a_tag_is_adopted_when_pods_report_platform_manifests_of_the_desired_index() -> None:
    # containers/image runtimes (CRI-O, podman) report the platform manifest they pulled.
    amd64, arm64 = digest(11), digest(12)
    tick = Tick(spec(target("jobs-manager", api=JM)))
    pods = [pod("a", {"api": f"{JM_REPO}@{amd64}"}), pod("b", {"api": f"{JM_REPO}@{arm64}"})]
    index = Resolved(D1, frozenset({amd64, arm64}))
    work = deployment("jobs-manager", {"api": JM}, replicas=2)
    plan = tick.run({key("jobs-manager"): evidence(work, pods, {"api": index})})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    assert tick.target("jobs-manager").containers[0].running == tuple(sorted((amd64, arm64)))


def test_a_platform_manifest_of_another_index_is_drift_and_pins_the_index() -> None:
    other = digest(13)
    tick = Tick(spec(target("jobs-manager", api=JM)))
    pods = [pod("a", {"api": f"{JM_REPO}@{other}"})]
    index = Resolved(D1, frozenset({digest(11), digest(12)}))
    work = deployment("jobs-manager", {"api": JM})
    (patch,) = tick.run({key("jobs-manager"): evidence(work, pods, {"api": index})}).patches
    assert patch.json_patch()[-1]["value"] == f"{JM_REPO}@{D1}"
    assert tick.target("jobs-manager").phase is Phase.REFRESHING


def test_mixed_unknown_or_absent_pod_digests_are_drift_which_repairs_skew() -> None:
    cases = [
        [pod("a", {"api": f"{JM_REPO}@{D1}"}), pod("b", {"api": f"{JM_REPO}@{D2}"})],  # mixed
        [pod("a", {"api": "sha256:" + "0" * 64})],  # an image ID, not a repo digest
        [pod("a", {"api": None})],  # nothing reported
        [],  # no pods at all
    ]
    for pods in cases:
        tick = Tick(spec(target("jobs-manager", api=JM)))
        plan = tick.run(
            {
                key("jobs-manager"): evidence(
                    deployment("jobs-manager", {"api": JM}), pods, {"api": D1}
                )
            }
        )
        (patch,) = plan.patches
        assert patch.changes[0].expected == JM
        assert patch.changes[0].image == f"{JM_REPO}@{D1}"


def test_a_pinned_digest_is_enforced_without_asking_the_registry() -> None:
    tick = Tick(
        spec(
            {
                "kind": "Deployment",
                "name": "jobs-manager",
                "containers": [{"name": "api", "image": JM, "digest": D3}],
            }
        )
    )
    plan = tick.run({key("jobs-manager"): evidence(deployment("jobs-manager", {"api": JM}))})
    assert plan.patches[0].changes[0].image == f"{JM_REPO}@{D3}"
    assert tick.target("jobs-manager").containers[0].desired == D3


def test_a_pinned_digest_is_adopted_on_a_tag_whose_pods_already_run_it() -> None:
    pinned = {"kind": "Deployment", "name": "jobs-manager"}
    tick = Tick(spec({**pinned, "containers": [{"name": "api", "image": JM, "digest": D3}]}))
    pods = [pod("p", {"api": f"docker.io/{JM_REPO}@{D3}"})]
    plan = tick.run({key("jobs-manager"): evidence(deployment("jobs-manager", {"api": JM}), pods)})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.CURRENT


def test_init_containers_are_patched_at_their_own_path() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, migrate=JM)))
    work = deployment("jobs-manager", {"api": JM}, init_images={"migrate": JM})
    plan = tick.run({key("jobs-manager"): evidence(work, digests={"api": D1, "migrate": D1})})
    paths = {c.container: c.json_path for c in plan.patches[0].changes}
    assert paths == {
        "api": "/spec/template/spec/containers/0",
        "migrate": "/spec/template/spec/initContainers/0",
    }


# --- 4.3a scope and shape ------------------------------------------------------------------


def test_a_swapped_repository_is_a_conflict_and_never_patched() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    work = deployment("jobs-manager", {"api": "evil/miner:prod"})
    plan = tick.run({key("jobs-manager"): evidence(work, digests={"api": D1})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.CONFLICT
    assert "never changes repositories" in status.message
    assert [(e.type, e.reason) for e in without_offline(plan.events)] == [("Warning", "Conflict")]
    again = tick.run({key("jobs-manager"): evidence(work, digests={"api": D1})})
    assert again.events == ()  # a standing conflict is not re-announced every tick


def test_a_mirror_of_the_same_path_is_another_repository() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    work = deployment("jobs-manager", {"api": f"mirror.example/{JM_REPO}:prod"})
    plan = tick.run({key("jobs-manager"): evidence(work, digests={"api": D1})})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.CONFLICT


def test_a_declared_container_absent_from_the_template_is_a_conflict() -> None:
    tick = Tick(two_container_spec())
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), digests={"api": D1}
            )
        }
    )
    assert plan.patches == ()
    assert (
        "'pods-monitor-container' is not in the pod template" in tick.target("jobs-manager").message
    )


def test_a_missing_workload_is_missing_with_one_warning() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = tick.run({key("jobs-manager"): evidence(None)})
    assert tick.target("jobs-manager").phase is Phase.MISSING
    assert [e.reason for e in plan.events] == ["WorkloadMissing"]
    assert tick.run({key("jobs-manager"): evidence(None)}).events == ()


def test_a_workload_deleted_mid_refresh_drops_the_pending_refresh_it_had() -> None:
    """Missing means nothing of ours is in flight there: status shows no refresh of a workload
    that no longer exists, and one recreated later is compared afresh."""
    tick = Tick(spec(target("jobs-manager", api=JM)))
    five = timedelta(seconds=5)
    jobs = key("jobs-manager")

    def live(image: str, **fields: object) -> dict[str, object]:
        return deployment("jobs-manager", {"api": f"{JM_REPO}@{image}"}, **fields)

    tick.run({jobs: evidence(live(D1), digests={"api": D2})}, advance=five)
    rolling = live(D2, generation=2, available=0)
    tick.run({jobs: evidence(rolling, digests={"api": D2})}, advance=five)
    assert tick.target("jobs-manager").pending is not None
    tick.run({jobs: evidence(None)}, advance=five)
    missing = tick.target("jobs-manager")
    assert missing.phase is Phase.MISSING
    assert missing.pending is None
    plan = tick.run({jobs: evidence(live(D1), digests={"api": D2})}, advance=five)
    assert [c.image for p in plan.patches for c in p.changes] == [f"{JM_REPO}@{D2}"]
    assert tick.target("jobs-manager").refresh_attempts == 0


def test_an_ondelete_workload_is_a_conflict_not_an_endless_wait() -> None:
    tick = Tick(
        spec(
            target(
                "resource-monitor", "DaemonSet", "tracebloc-node-agents", **{"resource-monitor": RM}
            )
        ),
        namespaces=ALLOW_ALL,
    )
    work = daemonset("resource-monitor", {"resource-monitor": RM}, strategy="OnDelete")
    plan = tick.run(
        {
            key("resource-monitor", "DaemonSet", "tracebloc-node-agents"): evidence(
                work, digests={"resource-monitor": D1}
            )
        }
    )
    assert plan.patches == ()
    assert (
        "OnDelete" in tick.target("resource-monitor", "DaemonSet", "tracebloc-node-agents").message
    )


def test_a_cross_namespace_target_is_refused_unless_the_pair_is_allowed() -> None:
    other = key("resource-monitor", "DaemonSet", "tracebloc-node-agents")
    policy = spec(
        target("resource-monitor", "DaemonSet", "tracebloc-node-agents", **{"resource-monitor": RM})
    )
    work = daemonset("resource-monitor", {"resource-monitor": RM})
    refused = Tick(policy)
    assert refused.run({other: evidence(work, digests={"resource-monitor": D1})}).patches == ()
    status = refused.target("resource-monitor", "DaemonSet", "tracebloc-node-agents")
    assert status.phase is Phase.CONFLICT
    assert "allow-list" in status.message
    allowed = Tick(policy, namespaces=NamespacePolicy(frozenset({(NS, "tracebloc-node-agents")})))
    assert len(allowed.run({other: evidence(work, digests={"resource-monitor": D1})}).patches) == 1


# --- fail closed -------------------------------------------------------------------------


def test_an_unreadable_workload_is_error_and_degraded_with_no_patch() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = tick.run({key("jobs-manager"): evidence(None, error="403 Forbidden: grant get")})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.ERROR
    assert tick.condition("Degraded").status == "True"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "EvidenceUnreadable")]


def test_a_registry_failure_blocks_only_the_container_that_needed_it() -> None:
    tick = Tick(two_container_spec())
    down = Unresolved("Unreachable", "cannot reach registry-1.docker.io")
    work = jobs_manager(f"{JM_REPO}@{D1}", f"tracebloc/pods-monitor@{D1}")
    plan = tick.run(
        {key("jobs-manager"): evidence(work, digests={"api": D2, "pods-monitor-container": down})}
    )
    (patch,) = plan.patches
    assert [c.container for c in patch.changes] == ["api"]
    assert "cannot reach registry-1.docker.io" in tick.target("jobs-manager").message
    assert tick.condition("Degraded").status == "True"


def test_a_registry_failure_is_neither_a_skip_nor_a_flap() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    down = Unresolved("Timeout", "registry-1.docker.io did not answer")
    work = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"})
    for _ in range(10):
        plan = tick.run({key("jobs-manager"): evidence(work, digests={"api": down})})
        assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert (status.phase, status.skip_streak, status.refresh_attempts) == (Phase.ERROR, 0, 0)


def test_an_unresolved_container_on_a_tag_is_left_alone_while_the_next_one_refreshes() -> None:
    tick = Tick(two_container_spec())
    down = Unresolved("Unreachable", "cannot reach registry-1.docker.io")
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                jobs_manager(JM, PM), digests={"api": down, "pods-monitor-container": D2}
            )
        }
    )
    (patch,) = plan.patches
    assert [(c.container, c.image) for c in patch.changes] == [
        ("pods-monitor-container", f"tracebloc/pods-monitor@{D2}")
    ]
    status = tick.target("jobs-manager")
    assert status.pending.images == {"pods-monitor-container": f"tracebloc/pods-monitor@{D2}"}
    assert status.message == (
        f"refreshing pods-monitor-container unknown → {D2[:19]}…; "
        "not resolved, left alone: api: cannot reach registry-1.docker.io"
    )


def test_a_container_with_no_registry_answer_at_all_is_an_error_never_a_patch() -> None:
    tick = Tick(two_container_spec())
    plan = tick.run({key("jobs-manager"): evidence(jobs_manager(JM, PM), digests={})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert (status.phase, status.pending) == (Phase.ERROR, None)
    assert status.message == (
        "registry unreadable, nothing patched; not resolved, left alone: "
        "api: not resolved; pods-monitor-container: not resolved"
    )
    assert tick.condition("Degraded").status == "True"


# --- 4.3c skip streak → Frozen -----------------------------------------------------------


def test_an_unsettled_target_skips_then_freezes_then_thaws_by_itself() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), maxSkipTicks=3))
    stuck = deployment("jobs-manager", {"api": JM}, replicas=2, updated=2, available=1)
    phases, events = [], []
    for _ in range(5):
        plan = tick.run({key("jobs-manager"): evidence(stuck, digests={"api": D2})})
        assert plan.patches == ()
        phases.append(tick.target("jobs-manager").phase)
        events += [e.reason for e in without_offline(plan.events)]
    assert phases == [Phase.SKIPPING, Phase.SKIPPING, Phase.FROZEN, Phase.FROZEN, Phase.FROZEN]
    assert events == ["Frozen"]
    assert tick.target("jobs-manager").skip_streak == 3  # capped: no status write per tick
    assert "never become Ready" in tick.target("jobs-manager").message
    assert tick.condition("Frozen").status == "True"
    settled = deployment("jobs-manager", {"api": f"{JM_REPO}@{D2}"}, replicas=2)
    tick.run({key("jobs-manager"): evidence(settled, digests={"api": D2})})
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    assert tick.target("jobs-manager").skip_streak == 0
    assert tick.condition("Frozen").status == "False"


def test_one_frozen_target_never_blocks_the_others() -> None:
    tick = Tick(
        spec(target("jobs-manager", api=JM), target("requests-proxy", proxy=JM), maxSkipTicks=1)
    )
    stuck = deployment("jobs-manager", {"api": JM}, available=0)
    proxy = deployment("requests-proxy", {"proxy": f"{JM_REPO}@{D1}"})
    plan = tick.run(
        {
            key("jobs-manager"): evidence(stuck, digests={"api": D2}),
            key("requests-proxy"): evidence(proxy, digests={"proxy": D2}),
        }
    )
    assert tick.target("jobs-manager").phase is Phase.FROZEN
    assert [p.target.name for p in plan.patches] == ["requests-proxy"]


# --- 4.3b pending refresh ------------------------------------------------------------------


def _refreshing_tick(**fields: object) -> tuple[Tick, dict[str, object]]:
    tick = Tick(spec(target("jobs-manager", api=JM), **fields))
    work = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}, generation=1)
    tick.run({key("jobs-manager"): evidence(work, digests={"api": D2})}, advance=timedelta(0))
    rolling = deployment(
        "jobs-manager",
        {"api": f"{JM_REPO}@{D2}"},
        generation=2,
        replicas=1,
        updated=1,
        total=2,
        available=0,
    )
    return tick, rolling


def test_a_rollout_in_flight_stays_refreshing_and_is_not_a_skip() -> None:
    tick, rolling = _refreshing_tick()
    plan = tick.run(
        {key("jobs-manager"): evidence(rolling, digests={"api": D2})}, advance=timedelta(minutes=1)
    )
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert (status.phase, status.skip_streak) == (Phase.REFRESHING, 0)


def test_a_settled_refresh_healthy_through_its_window_succeeds_and_records_last_good() -> None:
    tick, _ = _refreshing_tick()
    done = deployment("jobs-manager", {"api": f"{JM_REPO}@{D2}"}, generation=2)
    plan = tick.run({key("jobs-manager"): evidence(done, digests={"api": D2})})
    status = tick.target("jobs-manager")
    assert (status.phase, status.pending.settled_at) == (Phase.REFRESHING, T0)  # its window runs
    assert (plan.patches, status.last_good, status.last_refresh) == ((), {}, None)
    assert [e.reason for e in plan.events] == []
    plan = tick.run({key("jobs-manager"): evidence(done, digests={"api": D2})})
    status = tick.target("jobs-manager")
    assert plan.patches == ()
    assert (status.phase, status.pending, status.refresh_attempts) == (Phase.CURRENT, None, 0)
    assert status.last_good == {"api": f"docker.io/{JM_REPO}@{D2}"}
    assert status.last_refresh is not None
    assert [e.reason for e in plan.events] == ["Refreshed", "AllCurrent"]


def test_a_timed_out_refresh_is_a_flap_and_is_rolled_back_to_the_replaced_images() -> None:
    tick, rolling = _refreshing_tick(rolloutTimeout="5m")
    # Still within the timeout: rolling.
    assert (
        tick.run(
            {key("jobs-manager"): evidence(rolling, digests={"api": D2})},
            advance=timedelta(minutes=6),
        ).patches
        == ()
    )
    plan = tick.run({key("jobs-manager"): evidence(rolling, digests={"api": D2})})
    (rollback,) = plan.patches
    assert rollback.purpose is PatchPurpose.ROLLBACK
    assert rollback.changes[0].expected == f"{JM_REPO}@{D2}"
    assert rollback.changes[0].image == f"{JM_REPO}@{D1}"
    status = tick.target("jobs-manager")
    assert status.refresh_attempts == 1
    assert status.phase is Phase.ROLLING_BACK
    # The rollback is itself a recorded intent, owed until it lands.
    assert status.pending.purpose == "rollback"
    assert status.pending.images == {"api": f"{JM_REPO}@{D1}"}
    assert status.pending.previous == {"api": f"{JM_REPO}@{D2}"}
    assert [e.reason for e in plan.events] == ["RefreshFailed", "RollingBack"]


def test_progress_deadline_exceeded_fails_the_refresh_at_once() -> None:
    tick, _ = _refreshing_tick(rollbackOnFailure=False)
    failed = deployment(
        "jobs-manager",
        {"api": f"{JM_REPO}@{D2}"},
        generation=2,
        updated=0,
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "late",
            }
        ],
    )
    plan = tick.run(
        {key("jobs-manager"): evidence(failed, digests={"api": D2})}, advance=timedelta(seconds=1)
    )
    assert plan.patches == ()  # rollbackOnFailure: false
    assert tick.target("jobs-manager").refresh_attempts == 1
    assert "progress deadline" in tick.target("jobs-manager").message


def test_someone_elses_change_during_our_refresh_is_a_contested_attempt_naming_the_writer() -> None:
    tick, _ = _refreshing_tick()
    edited = deployment("jobs-manager", {"api": f"{JM_REPO}@{D3}"}, generation=3)
    edited["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-set",
            "operation": "Update",
            "time": "2026-11-29T12:05:00Z",
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:spec": {"f:containers": {'k:{"name":"api"}': {"f:image": {}}}}
                    }
                }
            },
        }
    ]
    plan = tick.run({key("jobs-manager"): evidence(edited, digests={"api": D3})})
    (contested,) = [e for e in plan.events if e.reason == "Contested"]
    assert "'kubectl-set'" in contested.message
    status = tick.target("jobs-manager")
    assert (status.pending, status.refresh_attempts, status.contested) == (None, 1, 1)
    assert status.phase is Phase.CURRENT  # the other writer's image is the desired one


def test_attempts_reach_the_ceiling_then_locked_until_a_reset_honoured_once() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=2, rolloutTimeout="1m"))
    good = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}, generation=1)
    bad = deployment("jobs-manager", {"api": f"{JM_REPO}@{D2}"}, generation=2, available=0)
    reasons = []
    for _ in range(2):
        patch = tick.run({key("jobs-manager"): evidence(good, digests={"api": D2})}).patches
        assert patch[0].purpose is PatchPurpose.REFRESH
        plan = tick.run({key("jobs-manager"): evidence(bad, digests={"api": D2})})
        assert plan.patches[0].purpose is PatchPurpose.ROLLBACK
        reasons += [e.reason for e in plan.events]
    assert reasons.count("Locked") == 1
    status = tick.target("jobs-manager")
    assert (status.phase, status.refresh_attempts) == (Phase.LOCKED, 2)
    assert "imagerefresh reset tracebloc/control-plane" in status.message
    assert tick.condition("Locked").status == "True"
    assert tick.run({key("jobs-manager"): evidence(good, digests={"api": D2})}).patches == ()
    tick.reset = "2026-11-29T13:00"
    plan = tick.run({key("jobs-manager"): evidence(good, digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert "Reset" in [e.reason for e in plan.events]
    assert tick.status.last_reset == "2026-11-29T13:00"
    assert tick.condition("Locked").status == "False"
    # The same annotation value again is not a new reset.
    tick.run({key("jobs-manager"): evidence(bad, digests={"api": D2})})
    plan = tick.run({key("jobs-manager"): evidence(good, digests={"api": D2})})
    assert "Reset" not in [e.reason for e in plan.events]


# --- 4.3e pull budget, dry run ----------------------------------------------------------------


def test_a_refresh_that_would_eat_into_the_reserve_is_deferred() -> None:
    rm_key = key("resource-monitor", "DaemonSet", "tracebloc-node-agents")
    tick = Tick(
        spec(
            target(
                "resource-monitor", "DaemonSet", "tracebloc-node-agents", **{"resource-monitor": RM}
            ),
            pullBudget={"reserve": 2},
        ),
        namespaces=NamespacePolicy(frozenset({(NS, "*")})),
    )
    work = daemonset("resource-monitor", {"resource-monitor": RM}, desired=3)
    hub = ("registry-1.docker.io", "anonymous")
    plan = tick.run(
        {rm_key: evidence(work, digests={"resource-monitor": D1})},
        {hub: budget(*hub[:1], remaining=4)},
    )
    assert plan.patches == ()  # 3 nodes pull: 4 - 3 = 1 < reserve 2
    assert (
        tick.target(*("resource-monitor", "DaemonSet", "tracebloc-node-agents")).phase
        is Phase.DEFERRED
    )
    assert tick.condition("RateLimited").status == "True"
    plan = tick.run(
        {rm_key: evidence(work, digests={"resource-monitor": D1})},
        {hub: budget(*hub[:1], remaining=5)},
    )
    assert len(plan.patches) == 1
    assert tick.condition("RateLimited").status == "False"


def test_targets_share_one_budget_within_a_tick() -> None:
    tick = Tick(
        spec(
            target("jobs-manager", api=JM),
            target("requests-proxy", proxy=JM),
            pullBudget={"reserve": 0},
        )
    )
    hub = ("registry-1.docker.io", "anonymous")
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}, replicas=2), digests={"api": D1}
            ),
            key("requests-proxy"): evidence(
                deployment("requests-proxy", {"proxy": JM}, replicas=2), digests={"proxy": D1}
            ),
        },
        {hub: budget("registry-1.docker.io", remaining=3)},
    )
    assert [p.target.name for p in plan.patches] == ["jobs-manager"]
    assert tick.target("requests-proxy").phase is Phase.DEFERRED


def test_a_429_pause_defers_every_refresh_to_that_registry() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    hub = ("registry-1.docker.io", "anonymous")
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), digests={"api": D1}
            )
        },
        {hub: budget("registry-1.docker.io", 90, blocked="paused after a 429")},
    )
    assert plan.patches == ()
    assert "429" in tick.target("jobs-manager").message


def test_a_registry_reporting_no_limit_never_defers() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}, replicas=50), digests={"api": D1}
            )
        }
    )
    assert len(plan.patches) == 1


def test_dry_run_reports_the_same_decision_and_never_patches() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), dryRun=True))
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), digests={"api": D1}
            )
        }
    )
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.DRIFTED
    assert status.pending is None
    assert "would patch api" in status.message


# --- status summary -------------------------------------------------------------------------


def test_status_summary_is_the_worst_phase_and_observed_generation() -> None:
    tick = Tick(
        spec(target("jobs-manager", api=JM), target("requests-proxy", proxy=JM)), generation=7
    )
    tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}), digests={"api": D1}
            ),
            key("requests-proxy"): evidence(None),
        }
    )
    assert tick.status.phase is Phase.MISSING
    assert tick.status.target_count == 2
    assert tick.status.observed_generation == 7
    assert all(c.observed_generation == 7 for c in tick.status.conditions)


def budget_from(source: str) -> BudgetSnapshot:
    report = RateLimitReport(limit=100, remaining=76, window_seconds=21600, source=source)
    return BudgetSnapshot("registry-1.docker.io", "anonymous", report, 76)


def test_the_policy_s_last_refresh_is_its_latest_target_refresh() -> None:
    names = ("jobs-manager", "requests-proxy")
    # Settled alone is a success: each target's lastRefresh is its settling tick's.
    tick = Tick(spec(*(target(n, api=JM) for n in names), healthyFor="0s"))
    old, new = {"api": f"{JM_REPO}@{D1}"}, {"api": f"{JM_REPO}@{D2}"}
    tick.run({key(n): evidence(deployment(n, old), digests={"api": D2}) for n in names})
    assert tick.status.last_refresh is None
    first = tick.now
    tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", new, generation=2), digests={"api": D2}
            ),
            key("requests-proxy"): evidence(deployment("requests-proxy", old), digests={"api": D2}),
        }
    )
    assert tick.status.last_refresh == first
    second = tick.now
    tick.run(
        {key(n): evidence(deployment(n, new, generation=2), digests={"api": D2}) for n in names}
    )
    assert tick.target("jobs-manager").last_refresh == first
    assert tick.status.last_refresh == second


def test_registry_budgets_are_reported_in_status() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    hub = ("registry-1.docker.io", "anonymous")
    tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}), digests={"api": D1}
            )
        },
        {hub: budget_from("203.0.113.7")},
    )
    (registry,) = tick.status.registries
    assert (
        registry.host,
        registry.identity,
        registry.limit,
        registry.remaining,
        registry.window_seconds,
        registry.source,
    ) == ("registry-1.docker.io", "anonymous", 100, 76, 21600, "203.0.113.7")


def test_a_refresh_also_pins_containers_still_on_an_adopted_tag_in_the_same_patch() -> None:
    tick = Tick(two_container_spec())
    work = jobs_manager(f"{JM_REPO}@{D1}", PM)
    pods = [pod("p", {"api": f"{JM_REPO}@{D1}", "pods-monitor-container": f"{PM}@{D3}"})]
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                work, pods, digests={"api": D2, "pods-monitor-container": D3}
            )
        }
    )
    (patch,) = plan.patches
    assert {c.container: c.image for c in patch.changes} == {
        "api": f"{JM_REPO}@{D2}",
        "pods-monitor-container": f"tracebloc/pods-monitor@{D3}",
    }
