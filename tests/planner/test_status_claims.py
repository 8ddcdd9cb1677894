"""Status is a claim, never a permission: what a forgery of each field read back can at most do.

Anyone with ``update`` on ``imagerefreshpolicies/status`` writes any status. docs/security.md
has one row per field the operator reads back, saying the most a forgery of it can do; each row
is proven here, by the test :data:`ROWS` names (tests/docs checks that the table and
:data:`ROWS` name the same rows). The bound throughout: never a write the guard refuses, and
otherwise no more than a reset from the same live evidence — a refresh to a digest every gate
admits now — save for ``seen``, which can shorten a cooldown (the cooldown is a safety delay;
``verify`` is the security boundary).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from imagerefresh.models import (
    FailedBuild,
    PendingPurpose,
    PendingRefresh,
    Phase,
    PolicyStatus,
    PrePullIntent,
    SeenDigest,
    TargetStatus,
)
from imagerefresh.planner import Plan, TickInput, plan_tick

from support.guarded import sent_writes
from support.ticks import JM, NS, T0, Tick, digest, evidence, key, spec, target
from support.workloads import daemonset, deployment, pod

D1, D2, D3 = digest(1), digest(2), digest(3)
REPO = "tracebloc/jobs-manager"
FULL = f"docker.io/{REPO}"
JOBS = key("jobs-manager")
HUB = ("registry-1.docker.io", "anonymous")


def writes(plan: Plan, tick: TickInput) -> list[Any]:
    sent, refused = sent_writes(plan, tick)
    assert refused == []  # never a write the guard refuses
    return sent


def run(tick: Tick, found: Any, **kw: Any) -> tuple[Plan, list[Any]]:
    given = tick.input({JOBS: found}, kw.pop("budgets", None), **kw)
    plan = plan_tick(given)
    tick.status = plan.status
    tick.now += timedelta(minutes=15)
    return plan, writes(plan, given)


def forged(tick: Tick, **fields: Any) -> None:
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(update={"targets": (status.model_copy(update=fields),)})


def current(tick: Tick, image: str = f"{REPO}@{D1}") -> None:
    """A first tick: the Deployment settled on ``image``, the tag answering it."""
    run(tick, evidence(deployment("jobs-manager", {"api": image}), digests={"api": D1}))


def test_a_forged_landed_refresh_rolls_back_only_to_what_the_workload_ran() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    current(tick)
    forged(
        tick,
        pending=PendingRefresh(
            images={"api": f"{REPO}@{D1}"},
            previous={"api": f"{REPO}@{D3}"},  # a build this workload never ran
            started_at=T0 - timedelta(hours=1),
            generation=1,
        ),
    )
    failing = deployment(
        "jobs-manager",
        {"api": f"{REPO}@{D1}"},
        available=0,
        conditions=[{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}],
    )
    plan, sent = run(tick, evidence(failing, digests={"api": D1}))
    assert sent == []
    assert tick.target("jobs-manager").phase is Phase.REFUSED
    assert "RollbackNotAllowed" in [e.reason for e in plan.events]


def test_a_forged_owed_rollback_is_sent_only_to_what_the_workload_ran() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    current(tick)
    for restored, allowed in ((f"{REPO}@{D3}", False), (f"{REPO}:prod", False)):
        forged(
            tick,
            pending=PendingRefresh(
                purpose=PendingPurpose.ROLLBACK,
                images={"api": restored},
                previous={"api": f"{REPO}@{D1}"},
                started_at=T0,
            ),
        )
        _, sent = run(tick, evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"})))
        assert bool(sent) is allowed
        assert tick.target("jobs-manager").pending is None  # not owed: no loop
    # What its pods run is what it ran: a rollback there is what live evidence allows.
    forged(
        tick,
        pending=PendingRefresh(
            purpose=PendingPurpose.ROLLBACK,
            images={"api": f"{REPO}@{D2}"},
            previous={"api": f"{REPO}@{D1}"},
            started_at=T0,
        ),
    )
    pods = [pod("jm-0", {"api": f"{FULL}@{D2}"})]
    _, sent = run(tick, evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), pods))
    (rollback,) = sent
    assert rollback.changes[0].image == f"{REPO}@{D2}"


def test_a_forged_pre_pull_intent_charges_each_helper_it_creates() -> None:
    agent = daemonset("agent", {"agent": f"{REPO}@{D1}"}, namespace=NS)
    agent["apiVersion"], agent["metadata"]["uid"] = "apps/v1", "uid-agent"
    pods = [pod(f"a-{n}", {"agent": f"{FULL}@{D1}"}, node=n) for n in ("n1", "n2", "n3")]
    tick = Tick(spec(target("agent", kind="DaemonSet", namespace=NS, agent=JM), prePull=True))
    tick.pre_pull_pods = True
    tick.status = PolicyStatus(
        targets=(
            TargetStatus(
                kind="DaemonSet",
                namespace=NS,
                name="agent",
                phase=Phase.REFRESHING,
                pre_pull=PrePullIntent(images={"agent": f"{REPO}@{D2}"}, started_at=T0),
            ),
        )
    )
    found = evidence(agent, pods, digests={"agent": D2}, helpers=[])
    given = tick.input({key("agent", "DaemonSet", NS): found})
    sent = writes(plan_tick(given), given)
    assert len(sent) == 3
    assert all(dict(c.pulls) == {HUB: 1} for c in sent)


def test_a_forged_failed_list_holds_builds_back_or_does_what_a_reset_does() -> None:
    drift = evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), digests={"api": D2})
    held = Tick(spec(target("jobs-manager", api=JM)))
    current(held)
    forged(held, failed=(FailedBuild(digest=D2, at=T0),))
    _, sent = run(held, drift)
    assert sent == []
    assert held.target("jobs-manager").phase is Phase.WAITING
    emptied = Tick(spec(target("jobs-manager", api=JM)))
    current(emptied)
    forged(emptied, failed=())  # as a reset leaves it
    reset = Tick(spec(target("jobs-manager", api=JM)))
    current(reset)
    reset.reset = "now"
    assert [w.changes for w in run(emptied, drift)[1]] == [w.changes for w in run(reset, drift)[1]]


def test_a_forged_seen_clock_can_shorten_a_cooldown_and_nothing_more() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), minimumAge="1h"))
    current(tick)
    old = SeenDigest(tracked=f"{FULL}:prod", digest=D2, since=T0 - timedelta(days=30))
    tick.status = tick.status.model_copy(update={"seen": (old,)})
    drift = evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), digests={"api": D2})
    _, sent = run(tick, drift)
    (patch,) = sent
    assert patch.changes[0].image == f"{REPO}@{D2}"  # the tag's answer, and nothing else


def test_forged_good_images_decide_only_whether_a_re_pin_is_a_contest() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    current(tick)
    forged(tick, last_good={"api": f"{FULL}@{D3}"}, contested_images={})
    drift = evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), digests={"api": D2})
    plan, sent = run(tick, drift)
    (patch,) = sent
    assert patch.changes[0].image == f"{REPO}@{D2}"
    assert tick.target("jobs-manager").contested == 1  # counted as a fight: at most a Lock
    assert "Contested" in [e.reason for e in plan.events]


def test_forged_counters_can_lock_or_freeze_a_target_until_a_reset() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    current(tick)
    forged(tick, refresh_attempts=99, locked_at=T0)
    drift = evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), digests={"api": D2})
    _, sent = run(tick, drift)
    assert sent == []
    assert tick.target("jobs-manager").phase is Phase.LOCKED
    tick.reset = "clear"
    _, sent = run(tick, drift)
    assert len(sent) == 1


def test_a_forged_last_reset_buys_what_one_new_annotation_value_buys() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    current(tick)
    tick.reset = "once"
    forged(tick, refresh_attempts=3, locked_at=T0)
    run(tick, evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), digests={"api": D1}))
    assert tick.status.last_reset == "once"
    forged(tick, refresh_attempts=3, locked_at=T0)
    tick.status = tick.status.model_copy(update={"last_reset": "something else"})
    run(tick, evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), digests={"api": D1}))
    # The same value honoured again: one reset, which live evidence could justify anyway.
    assert tick.target("jobs-manager").refresh_attempts == 0


def test_forged_reports_change_no_write() -> None:
    drift = evidence(deployment("jobs-manager", {"api": f"{REPO}@{D1}"}), digests={"api": D2})
    honest = Tick(spec(target("jobs-manager", api=JM)))
    current(honest)
    lying = Tick(spec(target("jobs-manager", api=JM)))
    current(lying)
    (status,) = lying.status.targets
    containers = tuple(
        c.model_copy(update={"verified_by": "sha256:" + "0" * 64, "desired": D3, "running": (D3,)})
        for c in status.containers
    )
    forged(lying, containers=containers, phase=Phase.CURRENT, message="all good")
    lying.status = lying.status.model_copy(update={"registries": (), "conditions": ()})
    _, expected = run(honest, drift)
    _, sent = run(lying, drift)
    assert [w.changes for w in sent] == [w.changes for w in expected]
    assert [w.pulls for w in sent] == [w.pulls for w in expected]


# docs/security.md's "Status is a claim" table, row by row (its first column) → its proof.
ROWS = {
    "pending, a refresh": test_a_forged_landed_refresh_rolls_back_only_to_what_the_workload_ran,
    "pending, a rollback": test_a_forged_owed_rollback_is_sent_only_to_what_the_workload_ran,
    "prePull": test_a_forged_pre_pull_intent_charges_each_helper_it_creates,
    "failed": test_a_forged_failed_list_holds_builds_back_or_does_what_a_reset_does,
    "seen": test_a_forged_seen_clock_can_shorten_a_cooldown_and_nothing_more,
    "lastGood, contestedImages": test_forged_good_images_decide_only_whether_a_re_pin_is_a_contest,
    "refreshAttempts, contested, lockedAt, skipStreak": (
        test_forged_counters_can_lock_or_freeze_a_target_until_a_reset
    ),
    "lastReset, lastWindowOverride": (
        test_a_forged_last_reset_buys_what_one_new_annotation_value_buys
    ),
    "reports": test_forged_reports_change_no_write,
}
