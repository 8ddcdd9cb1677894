"""imagerefresh.planner.follow: which rollouts the shell follows, and when a verdict falls due."""

from __future__ import annotations

from datetime import timedelta

from imagerefresh.models import PendingPurpose, PendingRefresh, Phase, PolicyStatus, TargetStatus
from imagerefresh.planner import NOTHING_IN_FLIGHT, TargetKey, in_flight, owed_retry_at

from support.ticks import NS, T0, digest, spec, target

IMAGE = "tracebloc/jobs-manager"


def status(
    name: str, *, started: timedelta | None, progressed: timedelta | None = None
) -> TargetStatus:
    pending = (
        PendingRefresh(
            images={"api": f"{IMAGE}@{digest(2)}"},
            previous={"api": f"{IMAGE}@{digest(1)}"},
            started_at=T0 + started,
            progressed_at=T0 + progressed if progressed is not None else None,
        )
        if started is not None
        else None
    )
    return TargetStatus(
        kind="Deployment", namespace=NS, name=name, phase=Phase.CURRENT, pending=pending
    )


def test_only_targets_with_a_pending_patch_are_followed_and_the_earliest_deadline_wins() -> None:
    policy = spec(
        target("a", api=f"{IMAGE}:prod"),
        target("b", api=f"{IMAGE}:prod"),
        target("c", api=f"{IMAGE}:prod"),
        rolloutTimeout="10m",
    )
    policy_status = PolicyStatus(
        targets=(
            status("c", started=None),  # settled, listed first: the others are still looked at
            status("a", started=timedelta(minutes=0), progressed=timedelta(minutes=4)),
            status("b", started=timedelta(minutes=2)),
        )
    )
    flying = in_flight(policy, policy_status, NS)
    assert flying.workloads == {TargetKey("Deployment", NS, "a"), TargetKey("Deployment", NS, "b")}
    # b: started at +2m, no progress since → due just past +12m (a's is +14m).
    assert flying.deadline == T0 + timedelta(minutes=12, seconds=1)


def test_a_target_override_sets_its_deadline_and_nothing_pending_is_nothing_in_flight() -> None:
    overriding = target("a", api=f"{IMAGE}:prod")
    overriding["rolloutTimeout"] = "30m"
    policy = spec(overriding, rolloutTimeout="10m")
    flying = in_flight(policy, PolicyStatus(targets=(status("a", started=timedelta(0)),)), NS)
    assert flying.deadline == T0 + timedelta(minutes=30, seconds=1)
    assert (
        in_flight(policy, PolicyStatus(targets=(status("a", started=None),)), NS)
        == NOTHING_IN_FLIGHT
    )
    assert not NOTHING_IN_FLIGHT.workloads


def test_a_status_entry_for_a_workload_the_spec_no_longer_declares_is_not_followed() -> None:
    policy = spec(target("a", api=f"{IMAGE}:prod"))
    stray = PolicyStatus(targets=(status("removed", started=timedelta(0)),))
    assert in_flight(policy, stray, NS) == NOTHING_IN_FLIGHT


def refused_rollback(refusals: int) -> PendingRefresh:
    return PendingRefresh(
        purpose=PendingPurpose.ROLLBACK,
        images={"api": f"{IMAGE}@{digest(1)}"},
        previous={"api": f"{IMAGE}@{digest(2)}"},
        started_at=T0 - timedelta(hours=1),  # its progress deadline is long past
        refusals=refusals,
        refused_at=T0,
    )


def test_a_refused_rollback_is_sent_again_backing_off_up_to_the_interval() -> None:
    policy = spec(target("a", api=f"{IMAGE}:prod"), interval="5m", rolloutTimeout="1m")
    waits = []
    for refusals in range(1, 11):
        owed = TargetStatus(
            kind="Deployment",
            namespace=NS,
            name="a",
            phase=Phase.REFUSED,
            pending=refused_rollback(refusals),
        )
        flying = in_flight(policy, PolicyStatus(targets=(owed,)), NS)
        assert flying.deadline is not None
        waits.append((flying.deadline - T0).total_seconds())
    assert waits == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


def test_a_forged_refusal_count_waits_at_most_the_interval() -> None:
    assert owed_retry_at(refused_rollback(10**6), timedelta(minutes=15)) == T0 + timedelta(
        minutes=15
    )
    assert owed_retry_at(refused_rollback(0), timedelta(minutes=15)) == T0 + timedelta(seconds=2)


def test_a_refused_rollback_listed_first_leaves_the_targets_after_it_followed() -> None:
    policy = spec(
        target("a", api=f"{IMAGE}:prod"),
        target("b", api=f"{IMAGE}:prod"),
        interval="5m",
        rolloutTimeout="10m",
    )
    owed = TargetStatus(
        kind="Deployment", namespace=NS, name="a", phase=Phase.REFUSED, pending=refused_rollback(1)
    )
    flying = in_flight(policy, PolicyStatus(targets=(owed, status("b", started=timedelta(0)))), NS)
    assert flying.workloads == {TargetKey("Deployment", NS, "a"), TargetKey("Deployment", NS, "b")}
    # a is sent again 2 s after its refusal, sooner than b's progress deadline.
    assert flying.deadline == T0 + timedelta(seconds=2)


def test_a_settled_refresh_s_pods_are_followed_until_its_window_ends_and_not_from_then() -> None:
    """a settled at T0 with a window of 1m (a success held for a lockstep peer once it ends),
    listed before b, which still rolls out."""
    policy = spec(
        target("a", api=f"{IMAGE}:prod"),
        target("b", api=f"{IMAGE}:prod"),
        healthyFor="1m",
        rolloutTimeout="10m",
    )
    rolled_out = status("a", started=timedelta(seconds=-10))
    assert rolled_out.pending is not None
    settled = rolled_out.model_copy(
        update={"pending": rolled_out.pending.model_copy(update={"settled_at": T0})}
    )
    policy_status = PolicyStatus(targets=(settled, status("b", started=timedelta(0))))
    both = {TargetKey("Deployment", NS, "a"), TargetKey("Deployment", NS, "b")}
    rolling = T0 + timedelta(minutes=10, seconds=1)  # b's progress deadline
    window = T0 + timedelta(minutes=1, milliseconds=100)  # just after a's window ends
    for now, pods, deadline in [
        (None, both, window),
        (T0 + timedelta(seconds=59), both, window),
        (T0 + timedelta(minutes=1), {TargetKey("Deployment", NS, "b")}, rolling),  # its end
        (T0 + timedelta(minutes=1, seconds=1), {TargetKey("Deployment", NS, "b")}, rolling),
    ]:
        flying = in_flight(policy, policy_status, NS, now)
        assert (flying.workloads, flying.pods, flying.deadline) == (both, pods, deadline), now
