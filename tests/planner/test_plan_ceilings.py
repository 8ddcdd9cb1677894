"""Ceilings and clocks as an SRE reads them: the counters in status, the phase, the message.

What a failed refresh counts (an attempt, not a contest), when a rollout has run out of time
(after rolloutTimeout, not at it), what a locked target still does (follow or resend its
rollback, keep skipping) and what it says, and when a rollback is given up.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.models import PendingPurpose, PendingRefresh, Phase
from imagerefresh.planner import Event, PatchPurpose

from support.ticks import JM, PM, T0, Tick, digest, evidence, key, spec, target
from support.workloads import deployment

D1, D2 = digest(1), digest(2)
JM_REPO = "tracebloc/jobs-manager"
PM_REPO = "tracebloc/pods-monitor"
JOBS = key("jobs-manager")
NO_TIME = timedelta(0)
RESET_HINT = "no re-imaging until a reset: imagerefresh reset tracebloc/control-plane"


def settled(image: str, generation: int = 1) -> dict[str, object]:
    return deployment("jobs-manager", {"api": image}, generation=generation)


def unsettled(image: str, generation: int = 2) -> dict[str, object]:
    return deployment("jobs-manager", {"api": image}, generation=generation, available=0)


def refreshing(**fields: object) -> Tick:
    """A tick that has just patched jobs-manager from D1 to D2 (pending recorded at T0)."""
    tick = Tick(spec(target("jobs-manager", api=JM), **fields))
    plan = tick.run(
        {JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})}, advance=NO_TIME
    )
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    return tick


def with_rollback_pending(tick: Tick, **fields: object) -> None:
    """Status as it is after a failed refresh from D1 to D2 recorded its rollback."""
    rollback = PendingRefresh(
        purpose=PendingPurpose.ROLLBACK,
        images={"api": f"{JM_REPO}@{D1}"},
        previous={"api": f"{JM_REPO}@{D2}"},
        started_at=T0,
    )
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D1})}, advance=NO_TIME)
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": rollback, **fields}),)}
    )


def test_a_failed_refresh_counts_an_attempt_but_no_contest() -> None:
    tick = refreshing(rolloutTimeout="1m")
    tick.now = T0 + timedelta(minutes=2)
    tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (1, 0)


def test_a_rollout_is_judged_failed_only_after_its_timeout_has_passed() -> None:
    tick = refreshing(rolloutTimeout="10m")
    tick.now = T0 + timedelta(minutes=10)
    plan = tick.run(
        {JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})}, advance=NO_TIME
    )
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    tick.now = T0 + timedelta(minutes=10, seconds=1)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]
    status = tick.target("jobs-manager")
    assert status.phase is Phase.ROLLING_BACK
    assert status.message == (
        "refresh failed (attempt 1 of 3): it made no progress for rolloutTimeout 10m0s "
        f"(since {T0.isoformat()}); it reached 1 updated and 0 available; rolling back"
    )


def test_a_failure_at_the_ceiling_without_rollback_is_locked_naming_the_reason_and_reset() -> None:
    tick = refreshing(maxRefreshAttempts=1, rollbackOnFailure=False, rolloutTimeout="1m")
    tick.now = T0 + timedelta(minutes=2)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    locked_at = T0 + timedelta(minutes=2)
    assert (status.phase, status.pending, status.locked_at) == (Phase.LOCKED, None, locked_at)
    assert status.message == (
        "locked after 1 failed or contested refreshes (it made no progress for rolloutTimeout "
        f"1m0s (since {T0.isoformat()}); it reached 1 updated and 0 available); {RESET_HINT}"
    )


def test_a_failure_at_the_ceiling_still_rolls_back_and_says_so_while_locked() -> None:
    tick = refreshing(maxRefreshAttempts=1, rolloutTimeout="1m")
    tick.now = T0 + timedelta(minutes=2)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]
    status = tick.target("jobs-manager")
    assert status.phase is Phase.LOCKED
    assert status.message == (
        "locked after 1 failed or contested refreshes (it made no progress for rolloutTimeout "
        f"1m0s (since {T0.isoformat()}); it reached 1 updated and 0 available; rolling back); "
        f"{RESET_HINT}"
    )


def test_a_locked_target_keeps_sending_its_owed_rollback() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=1))
    with_rollback_pending(tick, refresh_attempts=1)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    (patch,) = plan.patches
    assert (patch.purpose, patch.changes[0].image) == (PatchPurpose.ROLLBACK, f"{JM_REPO}@{D1}")
    status = tick.target("jobs-manager")
    assert status.phase is Phase.LOCKED
    assert status.message == (
        "locked after 1 failed or contested refreshes (rollback to "
        f"api={JM_REPO}@{D1} owed: sending it again); {RESET_HINT}"
    )


def test_a_locked_target_that_does_not_settle_stays_locked_not_skipping() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=1))
    with_rollback_pending(tick, refresh_attempts=1)
    tick.status = tick.status.model_copy(
        update={"targets": (tick.status.targets[0].model_copy(update={"pending": None}),)}
    )
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert (status.phase, status.skip_streak) == (Phase.LOCKED, 1)
    assert status.message.startswith("locked after 1 failed or contested refreshes (")
    assert status.message.endswith(f"); {RESET_HINT}")


def test_a_rollback_that_runs_out_of_time_is_given_up_with_a_warning() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="5m"))
    with_rollback_pending(tick, refresh_attempts=1)
    tick.now = T0 + timedelta(minutes=6)
    # Still progressing, not failed: only the clock says it has run out.
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    assert plan.patches == ()  # a rollback is never rolled back
    (stalled,) = [e for e in plan.events if e.reason == "RollbackStalled"]
    assert stalled.type == "Warning"
    assert stalled.message.startswith(
        f"the rollback of Deployment tracebloc/jobs-manager to api={JM_REPO}@{D1} has not settled"
    )
    status = tick.target("jobs-manager")
    assert (status.pending, status.phase) == (None, Phase.SKIPPING)


def test_a_rollback_in_flight_says_what_it_restores() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1h"))
    with_rollback_pending(tick, refresh_attempts=1)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.ROLLING_BACK
    assert status.message.startswith(f"rolling back to api={JM_REPO}@{D1}: ")


def managed_by(workload: dict[str, Any], **managers: str) -> dict[str, Any]:
    """``workload`` whose managedFields name ``managers[container]`` as its image's writer."""
    workload["metadata"]["managedFields"] = [
        {
            "manager": manager,
            "operation": "Update",
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:spec": {"f:containers": {f'k:{{"name":"{name}"}}': {"f:image": {}}}}
                    }
                }
            },
        }
        for name, manager in managers.items()
    ]
    return workload


def two_containers(api: str, monitor: str, **fields: Any) -> dict[str, Any]:
    return deployment("jobs-manager", {"api": api, "monitor": monitor}, **fields)


OURS = {"api": f"docker.io/{JM_REPO}@{D2}", "monitor": f"docker.io/{PM_REPO}@{D2}"}
PLAN = f"api {D1[:19]}… → {D2[:19]}…, monitor {D1[:19]}… → {D2[:19]}…"
ROLLBACK = PendingRefresh(
    purpose=PendingPurpose.ROLLBACK,
    images={"api": f"{JM_REPO}@{D1}", "monitor": f"{PM_REPO}@{D1}"},
    previous={"api": f"{JM_REPO}@{D2}", "monitor": f"{PM_REPO}@{D2}"},
    started_at=T0,
)
RESTORED = f"api={JM_REPO}@{D1}, monitor={PM_REPO}@{D1}"
UNSTEADY = "1 of 2 updated replicas are available"
LOCKED_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "drift",
        {},
        two_containers(f"{JM_REPO}@{D1}", f"{PM_REPO}@{D1}"),
        f"drift: {PLAN}",
    ),
    ("now current", {}, two_containers(f"{JM_REPO}@{D2}", f"{PM_REPO}@{D2}"), "now current"),
    (
        "not settled",
        {},
        two_containers(f"{JM_REPO}@{D1}", f"{PM_REPO}@{D1}", replicas=2, available=1),
        UNSTEADY,
    ),
    (
        "rolling back",
        {"pending": ROLLBACK},
        two_containers(f"{JM_REPO}@{D1}", f"{PM_REPO}@{D1}", replicas=2, available=1),
        f"rolling back to {RESTORED}: {UNSTEADY}",
    ),
    (
        "rollback owed",
        {"pending": ROLLBACK},
        two_containers(f"{JM_REPO}@{D2}", f"{PM_REPO}@{D2}"),
        f"rollback to {RESTORED} owed: sending it again",
    ),
]


@pytest.mark.parametrize(
    ("fields", "workload", "detail"),
    [case[1:] for case in LOCKED_CASES],
    ids=[case[0] for case in LOCKED_CASES],
)
def test_a_locked_target_says_what_it_sees_and_how_to_unlock_it(
    fields: dict[str, Any], workload: dict[str, Any], detail: str
) -> None:
    tick = Tick(
        spec(target("jobs-manager", api=JM, monitor=PM), maxRefreshAttempts=2, rolloutTimeout="1h")
    )
    tick.run({JOBS: evidence(two_containers(f"{JM_REPO}@{D1}", f"{PM_REPO}@{D1}"))})
    (status,) = tick.status.targets
    locked = {"refresh_attempts": 2, "locked_at": T0, "phase": Phase.LOCKED, **fields}
    tick.status = tick.status.model_copy(update={"targets": (status.model_copy(update=locked),)})
    plan = tick.run({JOBS: evidence(workload, digests={"api": D2, "monitor": D2})})
    assert [p.purpose for p in plan.patches] == (
        [PatchPurpose.ROLLBACK] if detail.startswith("rollback to") else []
    )
    status = tick.target("jobs-manager")
    assert status.phase is Phase.LOCKED
    assert status.message == (
        f"locked after 2 failed or contested refreshes ({detail}); {RESET_HINT}"
    )


WRITERS = "field manager 'argocd-controller', field manager 'kubectl-set'"


def test_re_pinning_what_two_other_writers_moved_is_a_contested_attempt_naming_both() -> None:
    tick = Tick(
        spec(target("jobs-manager", api=JM, monitor=PM), maxRefreshAttempts=2, healthyFor="0s")
    )
    tick.run({JOBS: evidence(two_containers(f"{JM_REPO}@{D2}", f"{PM_REPO}@{D2}"))})
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"last_good": OURS}),)}
    )
    reverted = managed_by(
        two_containers(f"{JM_REPO}@{D1}", f"{PM_REPO}@{D1}", generation=2),
        api="argocd-controller",
        monitor="kubectl-set",
    )
    ours = two_containers(f"{JM_REPO}@{D2}", f"{PM_REPO}@{D2}", generation=3)
    for attempt, phase in ((1, Phase.REFRESHING), (2, Phase.LOCKED)):
        if attempt == 2:  # our re-pin rolled out; then they moved both images away again
            tick.run({JOBS: evidence(ours, digests={"api": D2, "monitor": D2})})
        plan = tick.run({JOBS: evidence(reverted, digests={"api": D2, "monitor": D2})})
        contested = [e for e in plan.events if e.reason == "Contested"]
        assert contested == [
            Event(
                "Warning",
                "Contested",
                "field manager 'argocd-controller', field manager 'kubectl-set' changed api, "
                "monitor of Deployment tracebloc/jobs-manager away from what imagerefresh last "
                f"wrote: re-pinning is contested attempt {attempt} of 2. Two writers on one "
                "image end Locked: stop the other writer (a CronJob, GitOps self-heal, another "
                "policy) or remove the target from this policy",
                JOBS,
            )
        ]
        status = tick.target("jobs-manager")
        assert (status.phase, status.contested) == (phase, attempt)
        if phase is Phase.REFRESHING:
            assert status.message == (f"refreshing {PLAN}; contested by {WRITERS} (attempt 1 of 2)")
    assert [p.purpose for p in plan.patches] == []
    assert tick.target("jobs-manager").message == (
        f"locked after 2 failed or contested refreshes (contested by {WRITERS}: {PLAN}); "
        f"{RESET_HINT}"
    )


def test_a_new_digest_after_our_own_refresh_is_a_plain_refresh_not_a_contest() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), healthyFor="0s"))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    assert tick.target("jobs-manager").last_good == {"api": f"docker.io/{JM_REPO}@{D2}"}
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": digest(3)})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert [e.reason for e in plan.events] == ["Refreshing"]
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (0, 0)


def test_a_success_clears_failed_attempts_but_never_contested_ones() -> None:
    for contested in (0, 1):
        tick = refreshing(maxRefreshAttempts=3, healthyFor="0s")
        (status,) = tick.status.targets
        counters = {"refresh_attempts": 2, "contested": contested}
        tick.status = tick.status.model_copy(
            update={"targets": (status.model_copy(update=counters),)}
        )
        tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
        status = tick.target("jobs-manager")
        assert (status.phase, status.refresh_attempts, status.contested) == (
            Phase.CURRENT,
            contested,
            contested,
        )


def test_a_refresh_in_flight_when_the_ceiling_is_lowered_to_its_attempts_cannot_lift_the_lock() -> (
    None
):
    tick = refreshing(maxRefreshAttempts=3, healthyFor="0s")
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"refresh_attempts": 1}),)}
    )
    tick.spec = spec(
        target("jobs-manager", api=JM), maxRefreshAttempts=1, healthyFor="0s"
    )  # lowered
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    status = tick.target("jobs-manager")
    assert status.pending is None  # the refresh landed and settled: it is judged
    assert status.locked_at is not None
    assert status.phase is Phase.LOCKED
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}"), digests={"api": digest(3)})})
    assert plan.patches == ()  # a newer digest waits for a reset
    assert tick.target("jobs-manager").phase is Phase.LOCKED
