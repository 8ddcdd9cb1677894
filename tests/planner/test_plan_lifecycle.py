"""The refresh lifecycle when the world does not cooperate (SPEC §4 b, f, h, i).

Each test feeds plan_tick a status it may not have written itself, or a workload someone else
changed, and pins down what the planner concludes: intents that never landed, owed rollbacks,
contested attempts, sticky locks, claims by two targets or two policies, forged pending records.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from imagerefresh.models import PendingPurpose, PendingRefresh, Phase, PolicyStatus
from imagerefresh.planner import (
    ImageChange,
    ImagePatch,
    PatchPurpose,
    Plan,
    TargetKey,
    plan_tick,
    unsafe_changes,
)

from support.ticks import JM, NS, T0, Tick, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D1, D2, D3 = digest(1), digest(2), digest(3)
JM_REPO = "tracebloc/jobs-manager"
JOBS = key("jobs-manager")


def settled(image: str, generation: int = 1) -> dict[str, object]:
    return deployment("jobs-manager", {"api": image}, generation=generation)


def unsettled(image: str, generation: int = 2) -> dict[str, object]:
    return deployment("jobs-manager", {"api": image}, generation=generation, available=0)


def with_pending(tick: Tick, pending: PendingRefresh, **fields: object) -> None:
    """Put ``pending`` (and counters) into the status, as anyone with status access could."""
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D1})})
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": pending, **fields}),)}
    )


def refresh_intent(images: str, previous: str) -> PendingRefresh:
    return PendingRefresh(images={"api": images}, previous={"api": previous}, started_at=T0)


def rollback_intent(images: str, previous: str) -> PendingRefresh:
    return PendingRefresh(
        purpose=PendingPurpose.ROLLBACK,
        images={"api": images},
        previous={"api": previous},
        started_at=T0,
    )


# --- intent first (f) ------------------------------------------------------------------------


def test_an_intent_that_never_landed_is_dropped_uncounted_and_the_refresh_planned_again() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    with_pending(tick, refresh_intent(f"{JM_REPO}@{D2}", f"{JM_REPO}@{D1}"))
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    (patch,) = plan.patches
    assert patch.purpose is PatchPurpose.REFRESH
    assert (patch.changes[0].expected, patch.changes[0].image) == (
        f"{JM_REPO}@{D1}",
        f"{JM_REPO}@{D2}",
    )
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (0, 0)
    assert "Contested" not in [e.reason for e in plan.events]


def test_a_landed_intent_is_recognised_as_ours_after_a_lost_status_write() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), healthyFor="0s"))
    with_pending(tick, refresh_intent(f"{JM_REPO}@{D2}", f"{JM_REPO}@{D1}"))
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    assert plan.patches == ()
    assert next(e.reason for e in plan.events) == "Refreshed"
    status = tick.target("jobs-manager")
    assert (status.phase, status.pending, status.refresh_attempts) == (Phase.CURRENT, None, 0)
    assert status.last_good == {"api": f"docker.io/{JM_REPO}@{D2}"}


def test_an_intent_records_the_generation_its_patch_produces_on_the_workload_as_read() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}", 6), digests={"api": D2})})
    pending = tick.target("jobs-manager").pending
    assert pending is not None
    assert pending.generation == 7  # the API server adds one for the patch's spec change


@pytest.mark.parametrize("meanwhile", [0, 1], ids=["untouched", "scaled-once"])
def test_an_intent_whose_workload_is_at_most_at_its_generation_never_landed(meanwhile: int) -> None:
    """The operator stopped between the intent and its patch: the workload is where the intent
    was planned, or one foreign spec write (a scale) on; a landing and a revert would be two.
    The patch is planned again, uncounted."""
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}", 6), digests={"api": D2})})
    later = settled(f"{JM_REPO}@{D1}", 6 + meanwhile)
    plan = tick.run({JOBS: evidence(later, digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (0, 0)
    assert "Contested" not in [e.reason for e in plan.events]


def test_an_intent_whose_workload_passed_its_generation_back_at_previous_was_reverted() -> None:
    """No outcome write said the patch landed: the workload reaching the generation the intent
    recorded says so, and the old images again are someone's revert, a contested attempt."""
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}", 6), digests={"api": D2})})
    back = reverted_by("argocd-controller", f"{JM_REPO}@{D1}", 8)
    plan = tick.run({JOBS: evidence(back, digests={"api": D2})})
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (1, 1)
    assert [e.reason for e in plan.events if e.reason == "Contested"] == ["Contested"]


# --- owed rollbacks (g) ----------------------------------------------------------------------


def test_a_rollback_that_has_not_landed_is_owed_and_sent_again_every_tick() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    with_pending(tick, rollback_intent(f"{JM_REPO}@{D1}", f"{JM_REPO}@{D2}"), refresh_attempts=1)
    for _ in range(2):
        plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
        (patch,) = plan.patches
        assert patch.purpose is PatchPurpose.ROLLBACK
        assert (patch.changes[0].expected, patch.changes[0].image) == (
            f"{JM_REPO}@{D2}",
            f"{JM_REPO}@{D1}",
        )
        status = tick.target("jobs-manager")
        assert (status.phase, status.message) == (
            Phase.ROLLING_BACK,
            f"rollback to api={JM_REPO}@{D1} owed: sending it again",
        )
        assert status.refresh_attempts == 1  # counted once, when the refresh failed
        assert status.pending is not None


def test_an_owed_rollback_sent_again_predicts_from_the_workload_it_is_sent_to() -> None:
    """A refused rollback produced nothing (its generation cleared); the workload's spec moved
    on meanwhile (a scale): the rollback sent again records what it produces now."""
    tick = Tick(spec(target("jobs-manager", api=JM)))
    with_pending(tick, rollback_intent(f"{JM_REPO}@{D1}", f"{JM_REPO}@{D2}"), refresh_attempts=1)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}", 9), digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]
    pending = tick.target("jobs-manager").pending
    assert pending is not None
    assert pending.generation == 10


def test_a_refused_rollback_is_sent_by_a_follow_up_only_once_its_back_off_passed() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    owed = rollback_intent(f"{JM_REPO}@{D1}", f"{JM_REPO}@{D2}").model_copy(
        update={"refusals": 3, "refused_at": T0}
    )
    with_pending(tick, owed, refresh_attempts=1, phase=Phase.REFUSED, message="refused")
    bad = {JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})}
    tick.now = T0 + timedelta(seconds=7)  # refused 3 times: sent again 8 s after the last
    early = tick.run(bad, advance=timedelta(0), follow_up=True)
    assert early.patches == ()
    assert (tick.target("jobs-manager").phase, tick.target("jobs-manager").message) == (
        Phase.REFUSED,
        "refused",
    )
    tick.now = T0 + timedelta(seconds=8)
    due = tick.run(bad, advance=timedelta(0), follow_up=True)
    assert [p.purpose for p in due.patches] == [PatchPurpose.ROLLBACK]


def test_a_refused_rollback_is_sent_at_every_interval_tick_whatever_its_back_off() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    owed = rollback_intent(f"{JM_REPO}@{D1}", f"{JM_REPO}@{D2}").model_copy(
        update={"refusals": 9, "refused_at": T0}
    )
    with_pending(tick, owed, refresh_attempts=1, phase=Phase.REFUSED)
    tick.now = T0 + timedelta(seconds=1)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]


def test_a_landed_rollback_is_followed_until_it_settles_then_announced() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=1, rolloutTimeout="1h"))
    with_pending(tick, rollback_intent(f"{JM_REPO}@{D1}", f"{JM_REPO}@{D2}"), refresh_attempts=1)
    rolling = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D1}", 3), digests={"api": D2})})
    assert rolling.patches == ()
    assert tick.target("jobs-manager").phase is Phase.LOCKED  # locked, rollback still followed
    assert tick.target("jobs-manager").pending is not None
    done = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}", 3), digests={"api": D2})})
    assert "RolledBack" in [e.reason for e in done.events]
    assert done.patches == ()  # locked: no new refresh
    assert tick.target("jobs-manager").pending is None


# --- contested (h) ---------------------------------------------------------------------------


def test_a_writer_reverting_our_pin_counts_until_locked_and_a_success_never_clears_it() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=2, healthyFor="0s"))
    ours = f"{JM_REPO}@{D2}"
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    tick.run({JOBS: evidence(settled(ours, 2), digests={"api": D2})})  # success: lastGood = D2
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    phases, patched = [], []
    for round_ in range(2):
        reverted = settled(f"{JM_REPO}@{D1}", 3 + 2 * round_)  # someone pins the old digest
        plan = tick.run({JOBS: evidence(reverted, digests={"api": D2})})
        patched.append(len(plan.patches))
        phases.append(tick.target("jobs-manager").phase)
        tick.run({JOBS: evidence(settled(ours, 4 + 2 * round_), digests={"api": D2})})
    assert patched == [1, 0]
    assert phases == [Phase.REFRESHING, Phase.LOCKED]
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (2, 2)
    assert status.locked_at is not None


def reverted_by(manager: str, image: str, generation: int, **fields: object) -> dict[str, object]:
    """The workload after ``manager`` (a GitOps controller's self-heal) set ``image`` back."""
    work = deployment("jobs-manager", {"api": image}, generation=generation, **fields)  # type: ignore[arg-type]
    api = {'k:{"name":"api"}': {"f:image": {}}}
    work["metadata"]["managedFields"] = [  # type: ignore[index]
        {
            "manager": manager,
            "operation": "Update",
            "time": "2026-11-29T12:00:00Z",
            "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": api}}}},
        }
    ]
    return work


def landed(plan: Plan, tick: Tick, generation: int) -> None:
    """What the shell does once the planned patch landed: record the generation it produced."""
    (status,) = tick.status.targets
    assert status.pending is not None
    assert plan.patches
    pending = status.pending.model_copy(update={"generation": generation})
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": pending}),)}
    )


def test_a_landed_pin_reverted_to_the_tag_counts_a_contest_naming_the_writer_until_locked() -> None:
    """Argo CD's self-heal sets the tag back before our rollout settles; the pods still run
    the old build (IfNotPresent), so the workload settles back at once. Each revert is one
    contested attempt, named after its field manager, until the target is Locked."""
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=3))
    old = [pod("p", {"api": f"{JM_REPO}@{D1}"})]
    generation = 1
    plan = tick.run({JOBS: evidence(settled(JM, generation), old, digests={"api": D2})})
    attempts, contested, events = [], [], []
    for _ in range(4):
        if plan.patches:
            landed(plan, tick, generation + 1)
        generation += 2
        back = reverted_by("argocd-controller", JM, generation)
        plan = tick.run({JOBS: evidence(back, old, digests={"api": D2})})
        status = tick.target("jobs-manager")
        attempts.append(status.refresh_attempts)
        contested.append(status.contested)
        events += [e.message for e in plan.events if e.reason == "Contested"]
    assert attempts == [1, 2, 3, 3]
    assert contested == [1, 2, 3, 3]
    assert tick.target("jobs-manager").phase is Phase.LOCKED
    assert plan.patches == ()
    assert len(events) == 3
    assert events[0].startswith(
        "field manager 'argocd-controller' reverted Deployment tracebloc/jobs-manager to the "
        "images our refresh replaced, after it landed: contested attempt 1 of 3"
    )


def test_a_revert_seen_while_its_rollout_still_rolls_is_counted_once_not_again_at_the_re_pin() -> (
    None
):
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=5, healthyFor="0s"))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    assert tick.target("jobs-manager").last_good == {"api": f"docker.io/{JM_REPO}@{D2}"}
    # Another writer pins D3; re-pinning D2 is a contest (1). It lands, and the writer puts D3
    # back while its rollout still rolls: a second contest (2), nothing re-pinned yet.
    theirs = f"{JM_REPO}@{D3}"
    plan = tick.run({JOBS: evidence(reverted_by("cronjob", theirs, 3), digests={"api": D2})})
    assert [e.message.split(": re-pinning")[0] for e in plan.events if e.reason == "Contested"] == [
        "field manager 'cronjob' changed api of Deployment tracebloc/jobs-manager away from what "
        "imagerefresh last wrote"
    ]
    landed(plan, tick, 4)
    back = reverted_by("cronjob", theirs, 5, available=0)
    rolling = tick.run({JOBS: evidence(back, digests={"api": D2})})
    assert rolling.patches == ()
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (2, 2)
    # Settled on the other writer's images: re-pinning them is that same contest, not a third.
    settled_back = reverted_by("cronjob", theirs, 5)
    again = tick.run({JOBS: evidence(settled_back, digests={"api": D2})})
    assert [p.purpose for p in again.patches] == [PatchPurpose.REFRESH]
    status = tick.target("jobs-manager")
    assert (status.refresh_attempts, status.contested) == (2, 2)
    assert "Contested" not in [e.reason for e in again.events]


def test_a_landed_rollback_reverted_to_the_failed_images_is_superseded_naming_the_writer() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    with_pending(tick, rollback_intent(f"{JM_REPO}@{D1}", f"{JM_REPO}@{D2}"), refresh_attempts=1)
    (status,) = tick.status.targets
    assert status.pending is not None
    landed_rollback = status.pending.model_copy(update={"generation": 3})
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": landed_rollback}),)}
    )
    back = reverted_by("kubectl-rollout", f"{JM_REPO}@{D2}", 4)
    plan = tick.run({JOBS: evidence(back, digests={"api": D2})})
    assert plan.patches == ()  # no rollback sent again: that would be a fight
    assert [e.message for e in plan.events if e.reason == "RollbackSuperseded"] == [
        "Deployment tracebloc/jobs-manager was reverted by field manager 'kubectl-rollout' after "
        "our rollback landed; it is dropped and the target is judged afresh"
    ]
    assert tick.target("jobs-manager").pending is None


def test_a_chart_rerender_to_the_tag_whose_pods_run_the_desired_digest_is_no_contest() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), healthyFor="0s"))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    rerendered = settled(JM, 3)
    plan = tick.run(
        {JOBS: evidence(rerendered, [pod("p", {"api": f"{JM_REPO}@{D2}"})], digests={"api": D2})}
    )
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert (status.phase, status.contested, status.refresh_attempts) == (Phase.CURRENT, 0, 0)
    # The adopted tag is the new baseline: when the tag moves on, pinning it is no contest.
    moved_on = tick.run(
        {JOBS: evidence(rerendered, [pod("p", {"api": f"{JM_REPO}@{D2}"})], digests={"api": D3})}
    )
    assert [p.purpose for p in moved_on.patches] == [PatchPurpose.REFRESH]
    status = tick.target("jobs-manager")
    assert (status.contested, status.refresh_attempts) == (0, 0)


def test_one_workload_targeted_twice_after_namespace_defaulting_is_a_conflict_on_both() -> None:
    explicit = target("jobs-manager", namespace=NS, api=JM)
    defaulted = target("jobs-manager", **{"pods-monitor-container": "tracebloc/pods-monitor:prod"})
    tick = Tick(spec(explicit, defaulted))
    work = deployment(
        "jobs-manager",
        {"api": f"{JM_REPO}@{D1}", "pods-monitor-container": "tracebloc/pods-monitor:prod"},
    )
    plan = tick.run({JOBS: evidence(work, digests={"api": D2, "pods-monitor-container": D3})})
    assert plan.patches == ()
    assert [t.phase for t in tick.status.targets] == [Phase.CONFLICT, Phase.CONFLICT]
    assert [t.message for t in tick.status.targets] == 2 * [
        f"{JOBS} is targeted more than once by this policy (after defaulting the namespace); "
        "declare each workload once"
    ]


def test_a_container_another_policy_declares_is_a_conflict_naming_that_policy() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    claims = {(JOBS, "api"): "tracebloc/legacy"}
    plan = plan_with_claims(tick, claims)
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.CONFLICT
    assert status.message == (
        f"container 'api' of {JOBS} is also declared by policy tracebloc/legacy; one container, "
        "one policy: remove it from one of them"
    )


def plan_with_claims(tick: Tick, claims: dict[tuple[TargetKey, str], str]) -> Plan:
    base = tick.input({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    plan = plan_tick(replace(base, claimed_elsewhere=claims))
    tick.status = plan.status
    return plan


# --- ceilings (i) ----------------------------------------------------------------------------


def _locked_tick(ceiling: int) -> Tick:
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=ceiling))
    with_pending(tick, refresh_intent(f"{JM_REPO}@{D2}", f"{JM_REPO}@{D1}"))
    failed = deployment(
        "jobs-manager",
        {"api": f"{JM_REPO}@{D2}"},
        generation=2,
        conditions=[{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}],
    )
    tick.run({JOBS: evidence(failed, digests={"api": D2})})
    return tick


def test_raising_the_ceiling_never_unlocks_a_locked_target() -> None:
    tick = _locked_tick(1)
    assert tick.target("jobs-manager").phase is Phase.LOCKED
    tick.spec = spec(target("jobs-manager", api=JM), maxRefreshAttempts=5)
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}", 3), digests={"api": D2})})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.LOCKED
    assert tick.condition("Locked").status == "True"


def test_lowering_the_ceiling_locks_at_once_and_a_reset_unlocks() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), maxRefreshAttempts=3))
    with_pending(tick, refresh_intent(f"{JM_REPO}@{D2}", f"{JM_REPO}@{D1}"))
    tick.status = tick.status.model_copy(
        update={
            "targets": (
                tick.status.targets[0].model_copy(update={"pending": None, "refresh_attempts": 2}),
            )
        }
    )
    tick.spec = spec(target("jobs-manager", api=JM), maxRefreshAttempts=2)
    assert tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})}).patches == ()
    assert tick.target("jobs-manager").locked_at is not None
    tick.reset = "again"
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    status = tick.target("jobs-manager")
    assert (status.locked_at, status.refresh_attempts, status.contested) == (None, 0, 0)


# --- forged pending records (f) --------------------------------------------------------------


def test_a_pending_rollback_to_another_repository_is_never_planned() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    with_pending(tick, refresh_intent(f"{JM_REPO}@{D2}", "evil.example/miner:latest"))
    failed = deployment(
        "jobs-manager",
        {"api": f"{JM_REPO}@{D2}"},
        generation=2,
        conditions=[{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}],
    )
    plan = tick.run({JOBS: evidence(failed, digests={"api": D2})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.ERROR
    assert "outside the tracked repository" in status.message
    assert "imagerefresh reset" in status.message
    assert tick.condition("Degraded").status == "True"


def test_a_pending_record_for_undeclared_containers_fails_closed_until_a_reset() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    forged = PendingRefresh(
        images={"sidecar": f"{JM_REPO}@{D2}"}, previous={"sidecar": JM}, started_at=T0
    )
    with_pending(tick, forged)
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.ERROR
    tick.reset = "rebuild"
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    assert len(plan.patches) == 1
    assert tick.target("jobs-manager").pending.images == {"api": f"{JM_REPO}@{D2}"}


def test_a_forged_pending_record_is_explained_whole_with_the_way_out() -> None:
    fix = (
        ": it was not written by imagerefresh for this target, so nothing is patched on it; "
        "reset the policy to rebuild its status: imagerefresh reset tracebloc/control-plane"
    )
    cases = [
        (
            PendingRefresh(
                images={"b": f"{JM_REPO}@{D2}", "a": f"{JM_REPO}@{D2}"},
                previous={"b": JM, "a": JM},
                started_at=T0,
            ),
            "names containers the policy does not declare (a, b)",
        ),
        (
            refresh_intent("evil.example/miner:1", "evil.example/miner:2"),
            "names images outside the tracked repository (api: evil.example/miner is not the "
            "tracked repository docker.io/tracebloc/jobs-manager; api: evil.example/miner is "
            "not the tracked repository docker.io/tracebloc/jobs-manager)",
        ),
    ]
    for forged, why in cases:
        tick = Tick(spec(target("jobs-manager", api=JM)))
        with_pending(tick, forged)
        plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
        assert plan.patches == ()
        status = tick.target("jobs-manager")
        assert (status.phase, status.message) == (
            Phase.ERROR,
            f"status.pending of {JOBS} {why}{fix}",
        )


def test_a_pending_record_started_in_the_future_fails_closed_instead_of_never_timing_out() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    future = refresh_intent(f"{JM_REPO}@{D2}", f"{JM_REPO}@{D1}").model_copy(
        update={"started_at": T0 + timedelta(days=365)}
    )
    with_pending(tick, future)
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.ERROR
    assert "in the future" in status.message


def test_a_pending_record_up_to_five_minutes_ahead_is_another_replica_s_clock_not_forged() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    with_pending(tick, refresh_intent(f"{JM_REPO}@{D2}", f"{JM_REPO}@{D1}"))
    for ahead, phase in (
        (timedelta(minutes=5), Phase.REFRESHING),
        (timedelta(minutes=5, seconds=1), Phase.ERROR),
    ):
        (status,) = tick.status.targets
        pending = status.pending.model_copy(update={"started_at": tick.now + ahead})
        tick.status = tick.status.model_copy(
            update={
                "targets": (
                    status.model_copy(update={"pending": pending, "phase": Phase.REFRESHING}),
                )
            }
        )
        plan = tick.run(
            {JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})},
            advance=timedelta(0),
        )
        assert plan.patches == ()
        assert tick.target("jobs-manager").phase is phase, ahead


def test_a_refusal_up_to_five_minutes_ahead_is_another_replica_s_clock_a_second_more_not() -> None:
    for ahead, sent in ((timedelta(minutes=5), True), (timedelta(minutes=5, seconds=1), False)):
        tick = Tick(spec(target("jobs-manager", api=JM)))
        refused_at = T0 + timedelta(seconds=1) + ahead
        owed = rollback_intent(f"{JM_REPO}@{D1}", f"{JM_REPO}@{D2}").model_copy(
            update={"refusals": 1, "refused_at": refused_at}
        )
        with_pending(tick, owed, refresh_attempts=1, phase=Phase.REFUSED)
        tick.now = T0 + timedelta(seconds=1)
        plan = tick.run(
            {JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), digests={"api": D2})},
            advance=timedelta(0),
        )
        status = tick.target("jobs-manager")
        if sent:
            assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]
            continue
        assert plan.patches == ()
        assert (status.phase, status.message) == (
            Phase.ERROR,
            f"status.pending of {JOBS} was refused in the future ({refused_at.isoformat()}): it "
            "was not written by imagerefresh for this target, so nothing is patched on it; reset "
            "the policy to rebuild its status: imagerefresh reset tracebloc/control-plane",
        )


def test_the_write_guard_allows_tags_and_digests_of_the_tracked_repository_only() -> None:
    def verdict(image: str) -> tuple[str, ...]:
        change = ImageChange("api", "/x", "old", image, repository=f"docker.io/{JM_REPO}")
        return unsafe_changes(ImagePatch(JOBS, PatchPurpose.ROLLBACK, (change,)))

    assert verdict(f"{JM_REPO}@{D1}") == ()
    assert verdict(f"docker.io/{JM_REPO}:prod") == ()
    assert verdict(f"index.docker.io/{JM_REPO}:prod") == ()
    assert "not the tracked repository" in verdict(f"ghcr.io/{JM_REPO}:prod")[0]
    assert "not the tracked repository" in verdict("tracebloc/miner:prod")[0]
    assert "not an image reference" in verdict("https://evil/x")[0]
    assert "neither a tag nor a digest" in verdict(JM_REPO)[0]


def test_unknown_status_fields_a_newer_version_wrote_are_ignored() -> None:
    raw = {
        "futureField": {"x": 1},
        "targets": [
            {"kind": "Deployment", "namespace": NS, "name": "a", "phase": "Current", "new": 1}
        ],
    }
    status = PolicyStatus.model_validate(raw)
    assert status.targets[0].name == "a"
