"""The policy's conditions and the events their changes post, as `kubectl describe` shows them.

Every condition is always present: a False condition says why it is False (its own reason, an
empty message), a True one names the targets it is about; an SRE's alert matches on the reason
and reads the message. Only Ready turning True, and Degraded or RateLimited changing, post an
event about the policy.
"""

from __future__ import annotations

from imagerefresh.planner import Event

from support.ticks import JM, Tick, budget, digest, evidence, key, spec, target, without_offline
from support.workloads import deployment, pod

D1, D2 = digest(1), digest(2)
JM_REPO = "tracebloc/jobs-manager"
NAMES = ("jobs-manager", "requests-proxy")
HUB = "registry-1.docker.io"


def conditions(tick: Tick) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in tick.status.conditions}


def policy_events(plan_events: tuple[Event, ...]) -> list[Event]:
    return [e for e in plan_events if e.target is None]


def policy_events_but_offline(plan_events: tuple[Event, ...]) -> list[Event]:
    return without_offline(policy_events(plan_events))


def test_a_quiet_policy_says_why_each_condition_is_false() -> None:
    tick = Tick(spec(*(target(n, api=JM) for n in NAMES)))
    pinned = {"api": f"{JM_REPO}@{D1}"}
    on_edge = [pod("p", {"api": f"{JM_REPO}@{D1}"}, node="edge-1", images=pinned)]
    plan = tick.run(
        {key(n): evidence(deployment(n, pinned), on_edge, digests={"api": D1}) for n in NAMES}
    )
    offline = "the pods of all 2 targets would restart with the registry unreachable"
    assert conditions(tick) == {
        "Ready": ("True", "AllCurrent", "all 2 targets run their desired digests"),
        "Refreshing": ("False", "NoRolloutInFlight", ""),
        "Frozen": ("False", "NoTargetFrozen", ""),
        "Locked": ("False", "NoTargetLocked", ""),
        "RateLimited": ("False", "WithinPullBudget", ""),
        "Degraded": ("False", "EvidenceRead", ""),
        "OfflineReady": ("True", "RestartsOffline", offline),
    }
    assert policy_events(plan.events) == [
        Event("Normal", "AllCurrent", "all 2 targets run their desired digests"),
        Event("Normal", "RestartsOffline", offline),
    ]
    assert (plan.degraded, plan.rate_limited) == (False, False)


def test_true_conditions_name_every_target_they_are_about() -> None:
    tick = Tick(
        spec(*(target(n, api=JM) for n in NAMES), maxSkipTicks=1, pullBudget={"reserve": 0})
    )
    drifted = {key(n): evidence(deployment(n, {"api": JM}), digests={"api": D1}) for n in NAMES}
    tick.run(drifted, {(HUB, "anonymous"): budget(HUB, remaining=10)})
    workloads = ", ".join(f"Deployment tracebloc/{n}" for n in NAMES)
    assert conditions(tick)["Refreshing"] == (
        "True",
        "RolloutInFlight",
        f"rolling out: {workloads}",
    )
    assert conditions(tick)["Ready"] == (
        "False",
        "TargetsNotCurrent",
        "; ".join(f"Deployment tracebloc/{n} is Refreshing" for n in NAMES),
    )

    tick = Tick(spec(*(target(n, api=JM) for n in NAMES), maxSkipTicks=1))
    unsettled = {
        key(n): evidence(deployment(n, {"api": JM}, replicas=2, available=1), digests={"api": D1})
        for n in NAMES
    }
    tick.run(unsettled)
    assert conditions(tick)["Frozen"] == (
        "True",
        "SkipCeilingReached",
        f"unsettled for 1 ticks or more: {workloads}",
    )


def test_deferred_and_unreadable_targets_are_named_and_announced_once_each_way() -> None:
    tick = Tick(spec(*(target(n, api=JM) for n in NAMES), pullBudget={"reserve": 0}))
    drifted = {key(n): evidence(deployment(n, {"api": JM}), digests={"api": D1}) for n in NAMES}
    workloads = ", ".join(f"Deployment tracebloc/{n}" for n in NAMES)
    plan = tick.run(drifted, {(HUB, "anonymous"): budget(HUB, remaining=0)})
    message = f"deferred for the pull budget: {workloads}"
    assert conditions(tick)["RateLimited"] == ("True", "PullBudgetBelowReserve", message)
    assert Event("Warning", "PullBudgetBelowReserve", message) in plan.events
    assert (plan.degraded, plan.rate_limited) == (False, True)
    plan = tick.run(drifted, {(HUB, "anonymous"): budget(HUB, remaining=50)})
    assert policy_events(plan.events) == [Event("Normal", "WithinPullBudget", "RateLimited")]

    unread = {key(n): evidence(None, error="503") for n in NAMES}
    plan = tick.run(unread)
    message = f"evidence unreadable, nothing patched on it: {workloads}"
    assert conditions(tick)["Degraded"] == ("True", "EvidenceUnreadable", message)
    assert policy_events(plan.events) == [Event("Warning", "EvidenceUnreadable", message)]
    assert (plan.degraded, plan.rate_limited) == (True, False)
    plan = tick.run(drifted, {(HUB, "anonymous"): budget(HUB, remaining=50)})
    assert policy_events_but_offline(plan.events) == [Event("Normal", "EvidenceRead", "Degraded")]


def test_a_suspended_policy_is_not_ready_and_says_so() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), suspend=True))
    tick.run({key("jobs-manager"): evidence(deployment("jobs-manager", {"api": JM}))})
    assert conditions(tick)["Ready"] == ("False", "Suspended", "the policy is suspended")
