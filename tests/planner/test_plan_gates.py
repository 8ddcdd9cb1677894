"""What may be pinned (the gates of step j): signatures, failed builds, the cooldown.

Each table row feeds the planner one tick's evidence after another and checks what it patches,
the phase and message it reports, the events it posts and the status it keeps: a held container
is left as it is while the target's other containers still refresh, the worst phase wins, a
lockstep group with a held member holds, and verdicts and rollbacks never wait for a gate.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.models import FailedBuild, Phase, PolicyStatus, SeenDigest, TargetStatus
from imagerefresh.planner import Plan, revise_target
from imagerefresh.planner.evidence import (
    Resolved,
    SignaturesUnreadable,
    SignaturesWaiting,
    TargetEvidence,
)
from imagerefresh.signatures import Failure, Untrusted, Verified

from support.signing import TestKey
from support.ticks import JM, PM, T0, Tick, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D1, D2, D3, D4 = digest(1), digest(2), digest(3), digest(4)
P1, P2 = digest("p1"), digest("p2")
JM_REPO, PM_REPO = "tracebloc/jobs-manager", "tracebloc/pods-monitor"
TRACKED = "docker.io/tracebloc/jobs-manager:prod"
JOBS, PROXY = key("jobs-manager"), key("requests-proxy")
KEY = TestKey.p256()
FINGERPRINT = KEY.fingerprint
VERIFY = {"verify": {"publicKeys": [KEY.pem]}}


def short(value: str) -> str:
    return value[:19] + "…"


def verified(value: str) -> Verified:
    return Verified(digest=value, key=FINGERPRINT, format="bundle")


def untrusted(value: str, failure: Failure = Failure.NO_SIGNATURE) -> Untrusted:
    return Untrusted(digest=value, failure=failure, detail=f"the {failure} detail")


def jobs(api: str, monitor: str | None = None, generation: int = 1, **fields: Any) -> Any:
    images = {"api": f"{JM_REPO}@{api}" if api.startswith("sha256:") else api}
    if monitor is not None:
        images["pods-monitor-container"] = f"{PM_REPO}@{monitor}"
    return deployment("jobs-manager", images, generation=generation, **fields)


def patched(plan: Plan) -> dict[str, str]:
    """Container → image of every change the plan's patches write."""
    return {c.container: c.image for p in plan.patches for c in p.changes}


def reasons(plan: Plan) -> list[str]:
    return [e.reason for e in plan.events]


def one(tick: Tick, workload: Any, **fields: Any) -> Plan:
    return tick.run({JOBS: evidence(workload, **fields)})


def _failed_here(build: str, phase: Phase) -> PolicyStatus:
    """A status whose jobs-manager target saw ``build`` fail its rollout an hour ago."""
    failed = FailedBuild(digest=build, at=T0 - timedelta(hours=1))
    target = TargetStatus(
        kind="Deployment", namespace="tracebloc", name="jobs-manager", phase=phase, failed=(failed,)
    )
    return PolicyStatus(targets=(target,))


# --- signatures -------------------------------------------------------------------------


def test_a_verified_digest_is_pinned_and_the_status_names_the_key() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": verified(D2)})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}"}
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    (container,) = tick.target("jobs-manager").containers
    assert container.verified_by == FINGERPRINT


def test_a_refresh_in_flight_and_in_its_health_window_still_names_the_verifying_key() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    signed = {"digests": {"api": D2}, "signatures": {"api": verified(D2)}}
    tick.run({JOBS: evidence(jobs(D1), **signed)}, advance=timedelta(seconds=5))
    for workload in (jobs(D2, generation=2, available=0), jobs(D2, generation=2)):
        tick.run({JOBS: evidence(workload, **signed)}, advance=timedelta(seconds=5))
        status = tick.target("jobs-manager")
        assert status.phase is Phase.REFRESHING  # rolling out, then watching its pods
        assert status.containers[0].verified_by == FINGERPRINT


@pytest.mark.parametrize("failure", list(Failure))
def test_an_unverified_digest_is_not_pinned_the_target_is_untrusted_naming_digest_and_check(
    failure: Failure,
) -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": untrusted(D2, failure)})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.UNTRUSTED
    assert status.pending is None
    assert status.containers[0].verified_by is None
    (event,) = [e for e in plan.events if e.reason == "Untrusted"]
    assert event.type == "Warning"
    assert D2 in event.message
    assert f"{failure}: the {failure} detail" in event.message
    assert event.message in status.message
    assert tick.condition("Ready").status == "False"
    assert plan.status.phase is Phase.UNTRUSTED


def test_an_untrusted_hold_posts_its_event_once_and_rewrites_nothing_while_it_lasts() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    one(tick, jobs(D1), digests={"api": D2}, signatures={"api": untrusted(D2)})
    before = tick.status
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": untrusted(D2)})
    assert "Untrusted" not in reasons(plan)
    assert plan.status == before


def test_pods_already_running_an_unverified_digest_make_the_target_untrusted_never_current() -> (
    None
):
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    ran = [pod("jm-1", {"api": f"docker.io/{JM_REPO}@{D2}"})]
    plan = one(
        tick, jobs(f"{JM_REPO}:prod"), pods=ran, digests={"api": D2},
        signatures={"api": untrusted(D2)},
    )  # fmt: skip
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.UNTRUSTED
    pinned = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    plan = one(pinned, jobs(D2), digests={"api": D2}, signatures={"api": untrusted(D2)})
    assert plan.patches == ()
    assert pinned.target("jobs-manager").phase is Phase.UNTRUSTED


def test_a_current_verified_digest_is_current_and_reports_its_key() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    one(tick, jobs(D2), digests={"api": D2}, signatures={"api": verified(D2)})
    status = tick.target("jobs-manager")
    assert status.phase is Phase.CURRENT
    assert status.containers[0].verified_by == FINGERPRINT


def test_an_explicit_digest_pin_is_verified_too() -> None:
    pinned = {"kind": "Deployment", "name": "jobs-manager",
              "containers": [{"name": "api", "image": JM, "digest": D3}]}  # fmt: skip
    tick = Tick(spec(pinned, **VERIFY))
    plan = one(tick, jobs(D1), signatures={"api": untrusted(D3)})
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.UNTRUSTED
    tick = Tick(spec(pinned, **VERIFY))
    plan = one(tick, jobs(D1), signatures={"api": verified(D3)})
    assert patched(plan) == {"api": f"{JM_REPO}@{D3}"}


@pytest.mark.parametrize(
    "signatures",
    [
        {"api": SignaturesUnreadable(D2, "registry.example answered 500")},
        {},  # not read at all
        {"api": verified(D3)},  # a verdict about another digest is no verdict about this one
        {"api": SignaturesUnreadable(D3, "about another digest")},
    ],
    ids=["unreadable", "not-read", "verdict-for-another-digest", "unreadable-other-digest"],
)
def test_signatures_that_could_not_be_read_for_the_digest_hold_it_as_unreadable_evidence(
    signatures: dict[str, Any],
) -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures=signatures)
    assert plan.patches == ()
    assert plan.degraded
    assert tick.target("jobs-manager").phase is Phase.ERROR
    assert tick.condition("Degraded").status == "True"
    assert "SignaturesUnreadable" in reasons(plan)


def test_a_verification_queued_for_the_next_tick_holds_the_digest_without_blame() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    queued = SignaturesWaiting(D2, "the policy looks up at most 16 digests' signatures a tick")
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": queued})
    assert plan.patches == ()
    assert not plan.degraded  # nothing was unreadable
    assert not plan.rate_limited
    status = tick.target("jobs-manager")
    assert status.phase is Phase.WAITING
    message = f"api: signature verification of {short(D2)} queued: {queued.message}"
    assert f"held: {message}" in status.message
    assert [(e.type, e.message) for e in plan.events if e.reason == "VerificationQueued"] == [
        ("Normal", message)
    ]
    # It lasts: no new event, and the next tick's verdict pins it.
    again = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": queued})
    assert "VerificationQueued" not in reasons(again)
    pinned = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": verified(D2)})
    assert patched(pinned) == {"api": f"{JM_REPO}@{D2}"}


def test_a_lookup_held_by_the_pull_budget_s_reserve_defers_the_target_without_blame() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    held = SignaturesWaiting(D2, "registry.example has 2 pulls left; 2 stay reserved", budget=True)
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": held})
    assert plan.patches == ()
    assert not plan.degraded
    assert plan.rate_limited
    assert tick.condition("RateLimited").status == "True"
    status = tick.target("jobs-manager")
    assert status.phase is Phase.DEFERRED
    message = f"api: the signatures of {short(D2)} are not looked up: {held.message}"
    assert f"held: {message}" in status.message
    assert ("Normal", "VerificationDeferred", message) in [
        (e.type, e.reason, e.message) for e in plan.events
    ]


def test_a_waiting_verdict_about_another_digest_is_no_verdict_about_this_one() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    plan = one(
        tick, jobs(D1), digests={"api": D2}, signatures={"api": SignaturesWaiting(D3, "queued")}
    )
    assert tick.target("jobs-manager").phase is Phase.ERROR
    assert plan.degraded


def test_a_held_container_stays_while_the_others_refresh_and_the_worst_phase_wins() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, **{"pods-monitor-container": PM}), **VERIFY))
    plan = one(
        tick, jobs(D1, monitor=P1), digests={"api": D2, "pods-monitor-container": P2},
        signatures={"api": untrusted(D2), "pods-monitor-container": verified(P2)},
    )  # fmt: skip
    assert patched(plan) == {"pods-monitor-container": f"{PM_REPO}@{P2}"}
    status = tick.target("jobs-manager")
    assert status.phase is Phase.UNTRUSTED  # worse than the Refreshing the monitor is in
    assert status.pending is not None
    assert set(status.pending.images) == {"pods-monitor-container"}
    assert "refreshing pods-monitor-container" in status.message
    assert f"held: api: {D2}" in status.message


@pytest.mark.parametrize("verdict_on_api", ["unsigned", "failed here"])
def test_a_held_container_keeps_the_target_held_through_its_sibling_s_rollout(
    verdict_on_api: str,
) -> None:
    """The monitor's refresh rolls out, then is watched; the api stays held all along: the
    target never reads Refreshing in between, and the hold's Warning is posted once."""
    tick = Tick(spec(target("jobs-manager", api=JM, **{"pods-monitor-container": PM}), **VERIFY))
    api = untrusted(D2) if verdict_on_api == "unsigned" else verified(D2)
    if verdict_on_api == "failed here":
        tick.status = _failed_here(D2, Phase.CURRENT)
    held = Phase.UNTRUSTED if verdict_on_api == "unsigned" else Phase.WAITING
    reason = "Untrusted" if verdict_on_api == "unsigned" else "BuildFailed"
    signed = {
        "digests": {"api": D2, "pods-monitor-container": P2},
        "signatures": {"api": api, "pods-monitor-container": verified(P2)},
    }
    five = timedelta(seconds=5)
    first = tick.run({JOBS: evidence(jobs(D1, monitor=P1), **signed)}, advance=five)
    assert reasons(first).count(reason) == 1
    # Mid-flight, the monitor's own signatures are not read again: what its refresh pins
    # passed the gates when it was sent, and is not held for want of a verdict now.
    signed["signatures"] = {"api": api}
    rolling = jobs(D1, monitor=P2, generation=2, available=0)
    for workload in (rolling, jobs(D1, monitor=P2, generation=2)):
        plan = tick.run({JOBS: evidence(workload, **signed)}, advance=five)
        status = tick.target("jobs-manager")
        assert status.pending is not None  # still our monitor's refresh, in flight
        assert status.phase is held
        assert status.message.split("; held: ")[1].startswith(f"api: {D2}")
        assert "pods-monitor-container:" not in status.message
        assert not plan.degraded
        assert reason not in reasons(plan)
        assert plan.patches == ()


def test_a_tag_that_moves_on_while_its_refresh_rolls_out_faces_the_gates_at_once() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    five = timedelta(seconds=5)
    signed = {"digests": {"api": D2}, "signatures": {"api": verified(D2)}}
    tick.run({JOBS: evidence(jobs(D1), **signed)}, advance=five)
    moved = {"digests": {"api": D3}, "signatures": {"api": untrusted(D3)}}
    plan = tick.run({JOBS: evidence(jobs(D2, generation=2, available=0), **moved)}, advance=five)
    status = tick.target("jobs-manager")
    assert status.pending is not None
    assert status.pending.images == {"api": f"{JM_REPO}@{D2}"}
    assert status.phase is Phase.UNTRUSTED
    assert f"held: api: {D3}" in status.message
    assert reasons(plan) == ["Untrusted"]
    assert plan.patches == ()


def test_without_verify_signatures_are_neither_asked_for_nor_reported() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": untrusted(D2)})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}"}
    assert tick.target("jobs-manager").containers[0].verified_by is None


def test_a_forged_verified_by_in_status_is_no_evidence() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    one(tick, jobs(D1), digests={"api": D2}, signatures={"api": untrusted(D2)})
    forged = tick.status.targets[0].model_copy(
        update={
            "containers": tuple(
                c.model_copy(update={"verified_by": FINGERPRINT})
                for c in tick.status.targets[0].containers
            )
        }
    )
    tick.status = tick.status.model_copy(update={"targets": (forged,)})
    plan = one(tick, jobs(D1), digests={"api": D2}, signatures={"api": untrusted(D2)})
    assert plan.patches == ()
    assert tick.target("jobs-manager").containers[0].verified_by is None


def _edge(**fields: Any) -> Tick:
    return Tick(
        spec(
            target("jobs-manager", api=JM), target("requests-proxy", proxy=JM),
            lockstep=True, **fields,
        )
    )  # fmt: skip


def _proxy(image: str) -> Any:
    return deployment("requests-proxy", {"proxy": f"{JM_REPO}@{image}"})


def test_a_lockstep_group_with_an_untrusted_member_holds_every_member() -> None:
    tick = _edge(**VERIFY)
    plan = tick.run(
        {
            JOBS: evidence(jobs(D1), digests={"api": D2}, signatures={"api": verified(D2)}),
            PROXY: evidence(_proxy(D1), digests={"proxy": D2},
                            signatures={"proxy": SignaturesUnreadable(D2, "timed out")}),
        }
    )  # fmt: skip
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.WAITING
    assert "requests-proxy (Error)" in tick.target("jobs-manager").message
    assert tick.target("requests-proxy").phase is Phase.ERROR


# --- failed builds --------------------------------------------------------------------------


def _failing(tick: Tick, desired: str, *, pulled: bool = True) -> tuple[Plan, Plan]:
    """Refresh jobs-manager from D1 to ``desired`` and let it run out of progress deadline
    (its pods reporting the new image, or none of them ever pulling it); the failure's plan
    and the plan of the tick its rollback settles in."""
    plan = one(tick, jobs(D1), digests={"api": desired})
    assert patched(plan) == {"api": f"{JM_REPO}@{desired}"}
    ran = [pod("jm-new", {"api": f"docker.io/{JM_REPO}@{desired}" if pulled else None})]
    stuck = jobs(desired, generation=2, available=0)
    failed = one(tick, stuck, pods=ran, digests={"api": desired})
    assert patched(failed) == {"api": f"{JM_REPO}@{D1}"}  # rolled back
    return failed, one(tick, jobs(D1, generation=3), digests={"api": desired})


def test_a_build_whose_pods_ran_it_and_failed_is_never_tried_again_until_a_reset() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    _, settled = _failing(tick, D2)
    assert [b.digest for b in tick.target("jobs-manager").failed] == [D2]
    assert settled.patches == ()  # rolled back, and not tried again
    status = tick.target("jobs-manager")
    assert status.phase is Phase.WAITING
    assert f"{D2} failed its rollout here" in status.message
    assert "imagerefresh reset tracebloc/control-plane" in status.message
    assert [e.type for e in settled.events if e.reason == "BuildFailed"] == ["Normal"]
    again = one(tick, jobs(D1, generation=3), digests={"api": D2})
    assert again.patches == ()
    assert "BuildFailed" not in reasons(again)
    moved = one(tick, jobs(D1, generation=3), digests={"api": D3})  # a new push is tried
    assert patched(moved) == {"api": f"{JM_REPO}@{D3}"}


def test_a_failed_build_stays_barred_when_the_tag_moves_away_and_back() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    _failing(tick, D2)
    _failing(tick, D3)
    assert [b.digest for b in tick.target("jobs-manager").failed] == [D3, D2]
    back = one(tick, jobs(D1, generation=3), digests={"api": D2})
    assert back.patches == ()
    assert tick.target("jobs-manager").phase is Phase.WAITING


def test_a_reset_clears_the_failed_builds_and_the_build_is_tried_again() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    _failing(tick, D2)
    tick.reset = "after-the-fix"
    plan = one(tick, jobs(D1, generation=3), digests={"api": D2})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}"}
    assert tick.target("jobs-manager").failed == ()


def test_a_build_whose_pods_never_pulled_it_is_not_blamed_but_counts_an_attempt() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    failed, settled = _failing(tick, D2, pulled=False)
    status = tick.target("jobs-manager")
    assert status.failed == ()
    assert status.refresh_attempts == 1
    (event,) = [e for e in failed.events if e.reason == "RefreshFailed"]
    assert "no pod ran the new image" in event.message
    assert patched(settled) == {"api": f"{JM_REPO}@{D2}"}  # tried again


def test_the_failed_list_keeps_the_newest_five_and_attempts_still_lock() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m", maxRefreshAttempts=9))
    for n in range(6):
        _failing(tick, digest(f"bad-{n}"))
    status = tick.target("jobs-manager")
    assert [b.digest for b in status.failed] == [digest(f"bad-{n}") for n in (5, 4, 3, 2, 1)]
    assert status.refresh_attempts == 6
    locked = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m", maxRefreshAttempts=2))
    _failing(locked, D2)
    _failing(locked, D3)
    assert locked.target("jobs-manager").phase is Phase.LOCKED


def test_a_refresh_undone_by_another_writer_blames_no_build() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    one(tick, jobs(D1), digests={"api": D2})
    ran = [pod("jm-new", {"api": f"docker.io/{JM_REPO}@{D2}"})]
    one(tick, jobs(D3, generation=2), pods=ran, digests={"api": D2})  # someone set D3
    assert tick.target("jobs-manager").failed == ()


def test_a_failed_build_in_a_lockstep_member_holds_the_group() -> None:
    tick = _edge()
    failed = (FailedBuild(digest=D2, at=T0),)
    status = tick.run({JOBS: evidence(jobs(D1), digests={"api": D1}),
                       PROXY: evidence(_proxy(D1), digests={"proxy": D1})}).status  # fmt: skip
    jobs_status = status.targets[0].model_copy(update={"failed": failed})
    tick.status = status.model_copy(update={"targets": (jobs_status, status.targets[1])})
    plan = tick.run({JOBS: evidence(jobs(D1), digests={"api": D2}),
                     PROXY: evidence(_proxy(D1), digests={"proxy": D2})})  # fmt: skip
    assert plan.patches == ()
    assert "jobs-manager (Waiting)" in tick.target("requests-proxy").message


# --- the cooldown ---------------------------------------------------------------------------


def _cooling() -> Tick:
    return Tick(spec(target("jobs-manager", api=JM), minimumAge="1h"))


def _at(tick: Tick, when: timedelta, desired: str, *, current: str = D1) -> Plan:
    tick.now = T0 + when
    return tick.run({JOBS: evidence(jobs(current), digests={"api": desired})}, advance=timedelta())


def test_a_new_digest_waits_out_the_cooldown_then_is_pinned_at_its_end() -> None:
    tick = _cooling()
    first = _at(tick, timedelta(), D2)
    assert first.patches == ()
    assert first.wake_at == T0 + timedelta(hours=1)
    status = tick.target("jobs-manager")
    assert status.phase is Phase.WAITING
    assert "is pinned from 2026-11-29T13:00:00Z (spec.minimumAge 1h0m0s)" in status.message
    assert [(e.type, e.reason) for e in first.events if e.reason == "CoolingDown"] == [
        ("Normal", "CoolingDown")
    ]
    assert tick.status.seen == (SeenDigest(tracked=TRACKED, digest=D2, since=T0),)
    before = tick.status
    midway = _at(tick, timedelta(minutes=59, seconds=59), D2)  # a refresh-now changes nothing
    assert midway.patches == ()
    assert midway.status == before
    assert "CoolingDown" not in reasons(midway)
    done = _at(tick, timedelta(hours=1), D2)
    assert patched(done) == {"api": f"{JM_REPO}@{D2}"}


def test_a_tag_moving_within_the_cooldown_restarts_the_clock_the_first_never_pinned() -> None:
    tick = _cooling()
    _at(tick, timedelta(), D2)
    moved = _at(tick, timedelta(minutes=30), D3)
    assert moved.patches == ()
    assert tick.status.seen[0].digest == D3
    assert tick.status.seen[0].since == T0 + timedelta(minutes=30)
    assert _at(tick, timedelta(hours=1), D3).patches == ()
    assert patched(_at(tick, timedelta(hours=1, minutes=30), D3)) == {"api": f"{JM_REPO}@{D3}"}


def test_the_clock_is_kept_in_status_across_a_restart() -> None:
    tick = _cooling()
    _at(tick, timedelta(), D2)
    restarted = _cooling()  # a new process: nothing but the status it reads back
    restarted.status = PolicyStatus.model_validate(tick.status.to_api())
    assert _at(restarted, timedelta(minutes=30), D2).patches == ()
    assert patched(_at(restarted, timedelta(hours=1), D2)) == {"api": f"{JM_REPO}@{D2}"}


def test_a_since_in_the_future_restarts_the_clock_and_an_old_one_allows_at_most_no_wait() -> None:
    tick = _cooling()
    ahead = SeenDigest(tracked=TRACKED, digest=D2, since=T0 + timedelta(days=30))
    tick.status = PolicyStatus(seen=(ahead,))
    assert _at(tick, timedelta(), D2).patches == ()
    assert tick.status.seen[0].since == T0
    forged = _cooling()
    old = SeenDigest(tracked=TRACKED, digest=D2, since=T0 - timedelta(days=3650))
    forged.status = PolicyStatus(seen=(old,))
    assert patched(_at(forged, timedelta(), D2)) == {"api": f"{JM_REPO}@{D2}"}


def test_pins_and_adoptions_do_not_cool_down() -> None:
    pinned = {"kind": "Deployment", "name": "jobs-manager",
              "containers": [{"name": "api", "image": JM, "digest": D3}]}  # fmt: skip
    tick = Tick(spec(pinned, minimumAge="1h"))
    assert patched(_at(tick, timedelta(), D2)) == {"api": f"{JM_REPO}@{D3}"}
    assert tick.status.seen == ()
    adopting = _cooling()
    ran = [pod("jm-1", {"api": f"docker.io/{JM_REPO}@{D2}"})]
    tick_input = {JOBS: evidence(jobs(f"{JM_REPO}:prod"), pods=ran, digests={"api": D2})}
    adopting.run(tick_input)
    assert adopting.target("jobs-manager").phase is Phase.CURRENT


def test_without_minimum_age_no_clock_is_kept_and_a_follow_up_keeps_the_clock_as_it_was() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    _at(tick, timedelta(), D2)
    assert tick.status.seen == ()
    cooling = _cooling()
    _at(cooling, timedelta(), D2)
    kept = cooling.status.seen
    cooling.now = T0 + timedelta(minutes=5)
    cooling.run({JOBS: evidence(jobs(D1), digests={"api": D3})}, follow_up=True)
    assert cooling.status.seen == kept


def test_an_unanswered_tag_keeps_its_clock_and_an_untracked_one_is_forgotten() -> None:
    tick = _cooling()
    _at(tick, timedelta(), D2)
    tick.now = T0 + timedelta(minutes=10)
    tick.run({JOBS: TargetEvidence(error="the API server timed out")}, advance=timedelta())
    assert tick.status.seen == (SeenDigest(tracked=TRACKED, digest=D2, since=T0),)
    tick.spec = spec(target("jobs-manager", api="tracebloc/jobs-manager:staging"),
                     minimumAge="1h")  # fmt: skip
    _at(tick, timedelta(minutes=20), D2)
    assert [s.tracked for s in tick.status.seen] == ["docker.io/tracebloc/jobs-manager:staging"]


def test_a_rollback_does_not_wait_for_the_cooldown() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    plan = one(tick, jobs(D1), digests={"api": D2})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}"}
    tick.spec = spec(target("jobs-manager", api=JM), rolloutTimeout="1m", minimumAge="1h")
    stuck = one(tick, jobs(D2, generation=2, available=0), digests={"api": D3})
    assert patched(stuck) == {"api": f"{JM_REPO}@{D1}"}


def test_a_lockstep_group_cools_down_together() -> None:
    tick = _edge(minimumAge="1h")
    plan = tick.run({JOBS: evidence(jobs(D1), digests={"api": D2}),
                     PROXY: evidence(_proxy(D1), digests={"proxy": D2})},
                    advance=timedelta(hours=1))  # fmt: skip
    assert plan.patches == ()
    plan = tick.run({JOBS: evidence(jobs(D1), digests={"api": D2}),
                     PROXY: evidence(_proxy(D1), digests={"proxy": D2})})  # fmt: skip
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}", "proxy": f"{JM_REPO}@{D2}"}


# --- what each hold says, and how holds combine -------------------------------------------------


def test_each_hold_says_exactly_what_held_which_container_and_what_to_do() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, **{"pods-monitor-container": PM}), **VERIFY))
    unreadable = SignaturesUnreadable(P2, "a 500")
    plan = one(
        tick, jobs(D1, monitor=P1), digests={"api": D2, "pods-monitor-container": P2},
        signatures={"api": untrusted(D2), "pods-monitor-container": unreadable},
    )  # fmt: skip
    untrusted_text = (
        f"api: {D2} carries no valid signature by a key of spec.verify (no-signature: the "
        "no-signature detail); it is not pinned — sign that digest with one of the listed keys "
        "(cosign sign --key), or push a signed build"
    )
    unreadable_text = (
        f"pods-monitor-container: the signatures of {short(P2)} could not be read (a 500); "
        "nothing is pinned on them"
    )
    status = tick.target("jobs-manager")
    assert status.message == f"held: {untrusted_text}; {unreadable_text}"
    assert status.phase is Phase.UNTRUSTED  # worse than the Error of the other hold
    assert [(e.type, e.reason, e.message) for e in plan.events if e.target is not None] == [
        ("Warning", "Untrusted", untrusted_text),
        ("Warning", "SignaturesUnreadable", unreadable_text),
    ]
    not_read = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    one(not_read, jobs(D1), digests={"api": D2})
    assert "(they were not read this tick)" in not_read.target("jobs-manager").message


def test_a_locked_target_whose_drift_is_held_says_both() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY, maxRefreshAttempts=1))
    failed_once = TargetStatus(
        kind="Deployment", namespace="tracebloc", name="jobs-manager", phase=Phase.ROLLING_BACK,
        refresh_attempts=1,
    )  # fmt: skip
    tick.status = PolicyStatus(targets=(failed_once,))
    one(tick, jobs(D1), digests={"api": D3}, signatures={"api": untrusted(D3)})
    status = tick.target("jobs-manager")
    assert status.phase is Phase.UNTRUSTED  # worse than Locked
    assert status.message.startswith("locked after 1 failed or contested refreshes (held: api: ")


def test_a_build_failed_hold_and_a_cooldown_name_their_container_and_the_clock() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, **{"pods-monitor-container": PM}),
                     minimumAge="1h"))  # fmt: skip
    seen = (
        SeenDigest(tracked=TRACKED, digest=D2, since=T0 - timedelta(minutes=50)),
        SeenDigest(tracked="docker.io/tracebloc/pods-monitor:prod", digest=P2,
                   since=T0 - timedelta(minutes=20)),
    )  # fmt: skip
    tick.status = PolicyStatus(seen=seen)
    plan = one(tick, jobs(D1, monitor=P1), digests={"api": D2, "pods-monitor-container": P2})
    assert plan.wake_at == T0 + timedelta(minutes=10)  # the earlier of the two ends
    message = tick.target("jobs-manager").message
    assert (
        f"api: {short(D2)} is cooling down — {TRACKED} has answered it since "
        "2026-11-29T11:10:00Z; it is pinned from 2026-11-29T12:10:00Z (spec.minimumAge 1h0m0s)"
    ) in message
    barred = Tick(spec(target("jobs-manager", api=JM)))
    barred.status = PolicyStatus(
        targets=(
            TargetStatus(kind="Deployment", namespace="tracebloc", name="jobs-manager",
                         phase=Phase.CURRENT, failed=(FailedBuild(digest=D2, at=T0),)),
        )
    )  # fmt: skip
    one(barred, jobs(D1), digests={"api": D2})
    assert barred.target("jobs-manager").message.startswith(
        f"held: api: {D2} failed its rollout here at 2026-11-29T12:00:00Z"
    )


def test_a_verdict_about_another_digest_reports_no_key() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), **VERIFY))
    one(tick, jobs(D2), digests={"api": D2}, signatures={"api": verified(D3)})
    assert tick.target("jobs-manager").containers[0].verified_by is None


def test_a_lockstep_member_running_an_untrusted_digest_is_not_current_for_its_group() -> None:
    tick = _edge(**VERIFY)
    ran = [pod("jm-1", {"api": f"docker.io/{JM_REPO}@{D2}"})]
    plan = tick.run(
        {
            JOBS: evidence(jobs(f"{JM_REPO}:prod"), pods=ran, digests={"api": D2},
                           signatures={"api": untrusted(D2)}),
            PROXY: evidence(_proxy(D1), digests={"proxy": D2}, signatures={"proxy": verified(D2)}),
        }
    )  # fmt: skip
    assert plan.patches == ()
    assert "jobs-manager (Untrusted)" in tick.target("requests-proxy").message


# --- which builds a failure blames ---------------------------------------------------------------


def test_a_pod_running_a_platform_manifest_of_the_index_got_the_build() -> None:
    child = digest("arm64-child")
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    one(tick, jobs(D1), digests={"api": D2})
    ran = [pod("jm-new", {"api": f"docker.io/{JM_REPO}@{child}"})]
    index = Resolved(D2, frozenset({child}))
    one(tick, jobs(D2, generation=2, available=0), pods=ran, digests={"api": index})
    assert [b.digest for b in tick.target("jobs-manager").failed] == [D2]


def test_a_platform_manifest_of_another_index_is_not_the_build() -> None:
    child = digest("child-of-d3")
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    one(tick, jobs(D1), digests={"api": D2})
    ran = [pod("jm-new", {"api": f"docker.io/{JM_REPO}@{child}"})]
    moved_on = Resolved(D3, frozenset({child}))  # the tag answers another index by now
    failed = one(tick, jobs(D2, generation=2, available=0), pods=ran, digests={"api": moved_on})
    assert tick.target("jobs-manager").failed == ()
    (event,) = [e for e in failed.events if e.reason == "RefreshFailed"]
    assert event.message.endswith(
        "; no pod ran the new image, so the build is not blamed: it may be tried again"
    )


def test_two_containers_that_failed_together_are_both_blamed_and_named() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, **{"pods-monitor-container": PM}),
                     rolloutTimeout="1m"))  # fmt: skip
    one(tick, jobs(D1, monitor=P1), digests={"api": D2, "pods-monitor-container": P2})
    ran = [pod("jm-new", {"api": f"docker.io/{JM_REPO}@{D2}",
                          "pods-monitor-container": f"docker.io/{PM_REPO}@{P2}"})]  # fmt: skip
    failed = one(
        tick, jobs(D2, monitor=P2, generation=2, available=0), pods=ran,
        digests={"api": D2, "pods-monitor-container": P2},
    )  # fmt: skip
    assert {b.digest for b in tick.target("jobs-manager").failed} == {D2, P2}
    (event,) = [e for e in failed.events if e.reason == "RefreshFailed"]
    assert f"; {short(D2)}, {short(P2)} is not tried on this target again" in event.message


def test_a_failure_blames_the_build_its_pods_ran_even_once_the_tag_has_moved_on() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    one(tick, jobs(D1), digests={"api": D2})
    ran = [pod("jm-new", {"api": f"docker.io/{JM_REPO}@{D2}"})]
    one(tick, jobs(D2, generation=2, available=0), pods=ran, digests={"api": D3})
    assert [b.digest for b in tick.target("jobs-manager").failed] == [D2]


def test_a_target_not_read_and_a_pinned_container_leave_the_other_clocks_running() -> None:
    pinned = {"kind": "Deployment", "name": "pinned",
              "containers": [{"name": "api", "image": JM, "digest": D3}]}  # fmt: skip
    tick = Tick(
        spec(pinned, target("jobs-manager", api=JM), target("gone", api=PM), minimumAge="1h")
    )
    tick.run(
        {
            key("pinned"): evidence(jobs(D3)),
            JOBS: evidence(jobs(D1), digests={"api": D2}),
        }  # "gone" was not read at all this tick
    )
    assert tick.status.seen == (SeenDigest(tracked=TRACKED, digest=D2, since=T0),)


def test_a_status_revised_after_a_refused_patch_keeps_the_tick_s_clock() -> None:
    tick = _cooling()
    read = tick.input({}).policy  # the policy as the tick read it: no clock yet
    plan = _at(tick, timedelta(), D2)
    refused = plan.status.targets[0].model_copy(update={"phase": Phase.REFUSED})
    revised = revise_target(read, plan.status, refused, T0)
    assert revised.seen == plan.status.seen == (SeenDigest(tracked=TRACKED, digest=D2, since=T0),)


def test_a_pinned_container_leaves_the_clock_of_its_neighbour_in_the_same_target_running() -> None:
    both = {"kind": "Deployment", "name": "jobs-manager",
            "containers": [{"name": "api", "image": JM, "digest": D3},
                           {"name": "pods-monitor-container", "image": PM}]}  # fmt: skip
    tick = Tick(spec(both, minimumAge="1h"))
    tick.run({JOBS: evidence(jobs(D3, monitor=P1), digests={"pods-monitor-container": P2})})
    assert tick.status.seen == (
        SeenDigest(tracked="docker.io/tracebloc/pods-monitor:prod", digest=P2, since=T0),
    )


# --- adoption pins only what every pod is proven to run, and only what the gates let through


def _siblings(**fields: Any) -> Tick:
    return Tick(spec(target("jobs-manager", api=JM, monitor=PM), **fields))


def _on_tags(pods: list[Any], **fields: Any) -> TargetEvidence:
    """Both containers on their tags; the tags answer D2 (api) and D4 (monitor)."""
    work = deployment(
        "jobs-manager", {"api": f"{JM_REPO}:prod", "monitor": f"{PM_REPO}:prod"}, replicas=2
    )
    return evidence(work, pods, digests={"api": D2, "monitor": D4}, **fields)


def _running(api: str, monitor: str, count: int = 2) -> list[Any]:
    return [
        pod(
            f"jm-{i}",
            {"api": f"docker.io/{JM_REPO}@{api}", "monitor": f"docker.io/{PM_REPO}@{monitor}"},
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("gate", ["unsigned", "cooling", "failed here"])
def test_a_sibling_s_refresh_never_pins_a_tag_whose_new_build_a_gate_holds(gate: str) -> None:
    """The sibling's patch once pinned every container still on a tag to its tag's new
    digest: an unsigned, cooling or failed build written past its gate."""
    fields: dict[str, Any] = {}
    if gate == "unsigned":
        fields = VERIFY
        found = _on_tags(
            _running(D1, D3), signatures={"api": verified(D2), "monitor": untrusted(D4)}
        )
    else:
        found = _on_tags(_running(D1, D3))
    if gate == "cooling":
        fields = {"minimumAge": "1h"}
    tick = _siblings(**fields)
    if gate == "cooling":  # the api tag has answered D2 for long; the monitor's D4 is new
        api = SeenDigest(tracked=TRACKED, digest=D2, since=T0 - timedelta(hours=2))
        tick.status = PolicyStatus(seen=(api,))
    if gate == "failed here":
        tick.status = _failed_here(D4, Phase.WAITING)
    plan = tick.run({JOBS: found})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}"}  # the monitor stays on its tag
    assert tick.target("jobs-manager").pending.adopted == ()


def test_a_tag_whose_pods_run_a_build_that_failed_here_is_left_on_its_tag() -> None:
    tick = _siblings()
    failed = FailedBuild(digest=D4, at=T0 - timedelta(hours=1))
    tick.status = PolicyStatus(
        targets=(
            TargetStatus(
                kind="Deployment",
                namespace="tracebloc",
                name="jobs-manager",
                phase=Phase.CURRENT,
                failed=(failed,),
            ),
        )
    )
    plan = tick.run({JOBS: _on_tags(_running(D1, D4))})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}"}


def test_a_tag_not_every_wanted_pod_runs_yet_is_not_adopted() -> None:
    """Two replicas wanted, one pod seen: the missing pod would pull whatever the tag is."""
    plan = _siblings().run({JOBS: _on_tags(_running(D1, D4, count=1))})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}"}


def test_a_tag_every_pod_runs_the_desired_digest_of_is_pinned_with_the_sibling_free() -> None:
    plan = _siblings().run({JOBS: _on_tags(_running(D1, D4))})
    assert patched(plan) == {"api": f"{JM_REPO}@{D2}", "monitor": f"{PM_REPO}@{D4}"}
    (patch,) = plan.patches
    assert patch.pulls == ((("registry-1.docker.io", "anonymous"), 2),)  # the api's alone
