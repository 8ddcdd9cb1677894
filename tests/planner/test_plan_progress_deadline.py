"""rolloutTimeout is a progress deadline (SPEC §4): a rollout fails after that long WITHOUT
progress, not after that long in all — a DaemonSet rolling node by node is not a bad image.

Also the follow-up tick: between interval ticks only rollouts in flight are judged, so the
other targets' skip streaks still count interval ticks.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from imagerefresh.models import Phase, ProgressMark
from imagerefresh.planner import PatchPurpose

from support.ticks import NS, RM, T0, Tick, budget, digest, evidence, key, spec, target
from support.workloads import daemonset, deployment

D1, D2 = digest(1), digest(2)
RM_REPO = "tracebloc/resource-monitor"  # as the policy writes it, so as we patch it
AGENTS = NS  # in the policy's own namespace
MONITOR = key("resource-monitor", "DaemonSet", AGENTS)
MINUTE = timedelta(minutes=1)


def nodes(updated: int, available: int, *, image: str = f"{RM_REPO}@{D2}", generation: int = 2):
    """A 10-node DaemonSet running ``image`` on ``updated`` nodes, ``available`` of them up."""
    return daemonset(
        "resource-monitor",
        {"monitor": image},
        namespace=AGENTS,
        generation=generation,
        desired=10,
        updated=updated,
        available=available,
    )


def rolling(**fields: object) -> Tick:
    """A tick that patched the DaemonSet from D1 to D2 at T0 (rolloutTimeout 2m); a settled
    rollout is a success at once (``healthyFor: 0s``): these tables are about the deadline."""
    fields.setdefault("rolloutTimeout", "2m")
    fields.setdefault("healthyFor", "0s")
    tick = Tick(spec(target("resource-monitor", "DaemonSet", AGENTS, monitor=RM), **fields))
    plan = tick.run(
        {
            MONITOR: evidence(
                nodes(10, 10, image=f"{RM_REPO}@{D1}", generation=1), digests={"monitor": D2}
            )
        },
        advance=timedelta(0),
    )
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    return tick


def step(tick: Tick, at: timedelta, updated: int, available: int, **kw: bool) -> Phase:
    tick.now = T0 + at
    tick.run(
        {MONITOR: evidence(nodes(updated, available), digests={"monitor": D2})},
        advance=timedelta(0),
        **kw,
    )
    return tick.target("resource-monitor", "DaemonSet", AGENTS)


def test_a_daemonset_that_keeps_progressing_past_rollout_timeout_is_not_failed() -> None:
    tick = rolling()
    # One node every 90 s: 13.5 minutes in all, far past the 2m timeout, never 2m without progress.
    for n in range(1, 10):
        status = step(tick, n * 1.5 * MINUTE, n, n)
        assert status.phase is Phase.REFRESHING, status.message
        assert status.refresh_attempts == 0
    status = step(tick, 15 * MINUTE, 10, 10)
    assert (status.phase, status.pending, status.refresh_attempts) == (Phase.CURRENT, None, 0)
    assert status.last_good == {"monitor": f"docker.io/{RM_REPO}@{D2}"}


def test_a_stalled_daemonset_fails_once_it_has_not_progressed_for_rollout_timeout() -> None:
    tick = rolling()
    step(tick, MINUTE, 1, 1)  # baseline
    step(tick, 2 * MINUTE, 2, 2)  # progress at T0+2m
    status = step(tick, 4 * MINUTE, 2, 2)  # exactly 2m without progress: not yet
    assert status.phase is Phase.REFRESHING
    assert status.pending.progressed_at == T0 + 2 * MINUTE
    assert status.pending.progress == ProgressMark(updated=2, available=2)
    status = step(tick, 4 * MINUTE + timedelta(seconds=1), 2, 2)
    assert status.phase is Phase.ROLLING_BACK
    assert status.refresh_attempts == 1
    assert status.message == (
        "refresh failed (attempt 1 of 3): it made no progress for rolloutTimeout 2m0s "
        f"(since {(T0 + 2 * MINUTE).isoformat()}); it reached 2 updated and 2 available; "
        "rolling back"
    )


def test_the_first_counts_seen_are_a_baseline_not_progress() -> None:
    tick = rolling()
    status = step(tick, 30 * timedelta(seconds=1), 3, 3)
    assert status.pending.progressed_at is None  # the deadline still runs from startedAt
    assert status.pending.progress == ProgressMark(updated=3, available=3)
    status = step(tick, 2 * MINUTE + timedelta(seconds=1), 3, 3)
    assert status.phase is Phase.ROLLING_BACK


def test_counts_falling_back_are_not_progress_and_a_new_high_in_either_count_is() -> None:
    tick = rolling()
    step(tick, MINUTE, 4, 4)
    status = step(tick, 2 * MINUTE, 5, 3)  # updated rose; available fell
    assert status.pending.progressed_at == T0 + 2 * MINUTE
    assert status.pending.progress == ProgressMark(updated=5, available=4)
    status = step(tick, 3 * MINUTE, 5, 4)  # back to the mark: nothing new
    assert status.pending.progressed_at == T0 + 2 * MINUTE
    status = step(tick, 3 * MINUTE + timedelta(seconds=30), 5, 5)  # available beyond it
    assert status.pending.progressed_at == T0 + 3 * MINUTE + timedelta(seconds=30)


def test_counts_of_a_spec_the_controller_has_not_observed_are_not_progress() -> None:
    tick = rolling()
    unobserved = nodes(10, 10)
    unobserved["status"]["observedGeneration"] = 1
    tick.now = T0 + MINUTE
    tick.run({MONITOR: evidence(unobserved, digests={"monitor": D2})}, advance=timedelta(0))
    status = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert (status.pending.progress, status.pending.progressed_at) == (None, None)


def test_a_target_may_override_the_policy_rollout_timeout() -> None:
    overriding = target("resource-monitor", "DaemonSet", AGENTS, monitor=RM)
    overriding["rolloutTimeout"] = "10m"
    tick = Tick(spec(overriding, rolloutTimeout="2m"))
    tick.run(
        {
            MONITOR: evidence(
                nodes(10, 10, image=f"{RM_REPO}@{D1}", generation=1), digests={"monitor": D2}
            )
        },
        advance=timedelta(0),
    )
    assert step(tick, 9 * MINUTE, 0, 0).phase is Phase.REFRESHING
    status = step(tick, 10 * MINUTE + timedelta(seconds=1), 0, 0)
    assert status.phase is Phase.ROLLING_BACK
    assert "rolloutTimeout 10m0s" in status.message


def test_a_rollback_is_given_the_same_progress_deadline() -> None:
    tick = rolling(maxRefreshAttempts=3)
    step(tick, MINUTE, 1, 1)
    status = step(tick, 3 * MINUTE + timedelta(seconds=1), 1, 1)
    assert status.phase is Phase.ROLLING_BACK
    back = f"{RM_REPO}@{D1}"
    for n, at in enumerate((4, 5.5, 7, 8.5), start=1):
        tick.now = T0 + at * MINUTE
        workload = nodes(n, n, image=back, generation=3)
        tick.run({MONITOR: evidence(workload, digests={"monitor": D2})}, advance=timedelta(0))
        assert tick.target("resource-monitor", "DaemonSet", AGENTS).phase is Phase.ROLLING_BACK


def forge_progress(tick: Tick, progressed_at: object) -> None:
    (status,) = tick.status.targets
    forged = status.pending.model_copy(
        update={"progressed_at": progressed_at, "progress": ProgressMark(updated=0, available=0)}
    )
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": forged}),)}
    )


def test_a_progress_time_within_the_clock_skew_bound_is_accepted() -> None:
    tick = rolling()
    tick.now = T0 + MINUTE
    forge_progress(tick, tick.now + timedelta(minutes=5))  # another replica's clock, ahead
    plan = tick.run({MONITOR: evidence(nodes(1, 1), digests={"monitor": D2})})
    assert tick.target("resource-monitor", "DaemonSet", AGENTS).phase is Phase.REFRESHING
    assert plan.patches == ()


def test_a_progress_time_in_the_future_is_not_ours_and_fails_closed() -> None:
    tick = rolling()
    (status,) = tick.status.targets
    forged = status.pending.model_copy(
        update={
            "progressed_at": T0 + timedelta(days=365),
            "progress": ProgressMark(updated=0, available=0),
        }
    )
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": forged}),)}
    )
    tick.now = T0 + MINUTE
    plan = tick.run({MONITOR: evidence(nodes(1, 1), digests={"monitor": D2})})
    status = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert (plan.patches, status.phase) == ((), Phase.ERROR)
    assert "progressed in the future" in status.message


@pytest.mark.parametrize("follow_up", [False, True])
def test_only_interval_ticks_count_another_targets_skip_streak(follow_up: bool) -> None:
    tick = Tick(
        spec(
            # The kept target first: a follow-up goes on to judge the rollouts after it.
            target("jobs-manager", api="tracebloc/jobs-manager:prod"),
            target("resource-monitor", "DaemonSet", AGENTS, monitor=RM),
            rolloutTimeout="2m",
        )
    )
    jm = "tracebloc/jobs-manager"
    stuck = deployment("jobs-manager", {"api": f"{jm}@{D1}"}, generation=2, observed=1)
    jobs = evidence(stuck, digests={"api": D1})
    tick.run(
        {
            MONITOR: evidence(
                nodes(10, 10, image=f"{RM_REPO}@{D1}", generation=1), digests={"monitor": D2}
            ),
            key("jobs-manager"): jobs,
        },
        advance=timedelta(0),
    )
    assert tick.target("jobs-manager").skip_streak == 1
    for n in range(1, 4):
        tick.now = T0 + n * timedelta(seconds=5)
        tick.run(
            {MONITOR: evidence(nodes(n, n), digests={"monitor": D2}), key("jobs-manager"): jobs},
            advance=timedelta(0),
            follow_up=follow_up,
        )
        assert tick.target("resource-monitor", "DaemonSet", AGENTS).pending.progress is not None
    assert tick.target("jobs-manager").skip_streak == (1 if follow_up else 4)


def test_a_follow_up_tick_gives_the_verdict_of_a_rollout_that_settled() -> None:
    tick = rolling()
    tick.now = T0 + timedelta(seconds=20)
    plan = tick.run({MONITOR: evidence(nodes(10, 10), digests={"monitor": D2})}, follow_up=True)
    status = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert (status.phase, status.pending) == (Phase.CURRENT, None)
    assert [e.reason for e in plan.events if e.reason == "Refreshed"] == ["Refreshed"]


def test_a_follow_up_rolls_back_but_starts_no_refresh_the_next_interval_tick_retries() -> None:
    tick = rolling()
    step(tick, MINUTE, 1, 1, follow_up=True)
    failed = step(tick, 3 * MINUTE + timedelta(seconds=1), 1, 1, follow_up=True)
    assert (failed.phase, failed.pending.purpose) == (Phase.ROLLING_BACK, PatchPurpose.ROLLBACK)
    back = nodes(10, 10, image=f"{RM_REPO}@{D1}", generation=3)
    tick.now = T0 + 4 * MINUTE
    plan = tick.run(
        {MONITOR: evidence(back, digests={"monitor": D2})}, advance=timedelta(0), follow_up=True
    )
    waiting = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert plan.patches == ()
    assert (waiting.phase, waiting.pending, waiting.refresh_attempts) == (Phase.WAITING, None, 1)
    assert "the refresh starts at the next tick" in waiting.message
    assert [e.reason for e in plan.events] == ["RolledBack"]
    tick.now = T0 + 15 * MINUTE
    plan = tick.run({MONITOR: evidence(back, digests={"monitor": D2})}, advance=timedelta(0))
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert tick.target("resource-monitor", "DaemonSet", AGENTS).phase is Phase.REFRESHING


def test_a_rollout_never_observed_fails_saying_the_controller_never_reported_it() -> None:
    tick = rolling()
    unobserved = nodes(0, 0)
    unobserved["status"]["observedGeneration"] = 1
    tick.now = T0 + 2 * MINUTE + timedelta(seconds=1)
    tick.run({MONITOR: evidence(unobserved, digests={"monitor": D2})}, advance=timedelta(0))
    status = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert status.message == (
        "refresh failed (attempt 1 of 3): it made no progress for rolloutTimeout 2m0s "
        f"(since {T0.isoformat()}); the controller never reported it under way; rolling back"
    )


def rolled_back_deployment(**fields: object) -> dict[str, object]:
    return deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}, generation=3, **fields)


JM_REPO = "tracebloc/jobs-manager"
JOBS = key("jobs-manager")


def rolling_back() -> Tick:
    """jobs-manager refreshed D1 → D2 at T0, failed at T0+2m+1s: its rollback is in flight."""
    tick = Tick(spec(target("jobs-manager", api=f"{JM_REPO}:prod"), rolloutTimeout="2m"))
    first = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"})
    tick.run({JOBS: evidence(first, digests={"api": D2})}, advance=timedelta(0))
    tick.now = T0 + 2 * MINUTE + timedelta(seconds=1)
    stuck = deployment("jobs-manager", {"api": f"{JM_REPO}@{D2}"}, generation=2, available=0)
    plan = tick.run({JOBS: evidence(stuck, digests={"api": D2})}, advance=timedelta(0))
    assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]
    return tick


def test_a_rollback_without_progress_is_given_up_saying_how_far_it_came() -> None:
    tick = rolling_back()
    started = tick.now
    tick.now = started + MINUTE
    tick.run({JOBS: evidence(rolled_back_deployment(available=0), digests={"api": D2})})
    tick.now = started + 2 * MINUTE + timedelta(seconds=1)
    plan = tick.run({JOBS: evidence(rolled_back_deployment(available=0), digests={"api": D2})})
    (stalled,) = [e.message for e in plan.events if e.reason == "RollbackStalled"]
    assert stalled == (
        f"the rollback of Deployment {NS}/jobs-manager to api={JM_REPO}@{D1} has not settled: "
        f"it made no progress for rolloutTimeout 2m0s (since {started.isoformat()}); "
        "it reached 1 updated and 0 available"
    )


def test_a_rollback_the_controller_gave_up_on_says_the_controllers_words() -> None:
    tick = rolling_back()
    deadline = [
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "jm-1" has timed out progressing.',
        }
    ]
    tick.now += MINUTE
    failed = rolled_back_deployment(available=0, conditions=deadline)
    plan = tick.run({JOBS: evidence(failed, digests={"api": D2})})
    (stalled,) = [e.message for e in plan.events if e.reason == "RollbackStalled"]
    assert stalled.endswith(
        "has not settled: the Deployment exceeded its progress deadline: "
        'ReplicaSet "jm-1" has timed out progressing.'
    )


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("reported", "judged"),
    [
        (-timedelta(seconds=1), "RollingBack"),  # the failed refresh's condition, still shown
        (timedelta(0), "RollingBack"),  # the same second as the rollback's start: still its
        (timedelta(seconds=1), "RollbackStalled"),  # reported after the start: the rollback's
    ],
)
def test_a_deadline_condition_from_before_the_rollback_started_is_not_the_rollback_s(
    reported: timedelta, judged: str
) -> None:
    """The controller keeps ProgressDeadlineExceeded until it sees progress: right after the
    rollback's patch is observed, the condition still says the refresh timed out."""
    tick = rolling_back()
    started = tick.now
    deadline = [
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "lastUpdateTime": _stamp(started + reported),
        }
    ]
    tick.now = started + timedelta(seconds=2)
    failed = rolled_back_deployment(available=0, conditions=deadline)
    plan = tick.run({JOBS: evidence(failed, digests={"api": D2})}, advance=timedelta(0))
    if judged == "RollbackStalled":
        assert "RollbackStalled" in [e.reason for e in plan.events]
    else:
        assert "RollbackStalled" not in [e.reason for e in plan.events]
        assert tick.target("jobs-manager").phase.value == judged


def test_a_follow_up_keeps_the_registries_the_interval_tick_reported() -> None:
    tick = rolling()
    hub = budget("registry-1.docker.io", remaining=76)
    tick.now = T0 + MINUTE
    tick.run(
        {MONITOR: evidence(nodes(1, 1), digests={"monitor": D2})},
        {("registry-1.docker.io", "anonymous"): hub},
        advance=timedelta(0),
    )
    reported = tick.status.registries
    assert [r.remaining for r in reported] == [76]
    tick.now = T0 + MINUTE + timedelta(seconds=5)
    tick.run({MONITOR: evidence(nodes(2, 2), digests={"monitor": D2})}, follow_up=True)
    assert tick.status.registries == reported
