"""The policy's conditions and the events their changes post, as `kubectl describe` shows them.

Every condition is always present: a False condition says why it is False (its own reason, an
empty message), a True one names the targets it is about; an SRE's alert matches on the reason
and reads the message. Only Ready turning True, Degraded or RateLimited changing, and
OfflineReady reaching a verdict (True or False) post an event about the policy.
"""

from __future__ import annotations

import pytest

from imagerefresh.planner import Event

from support.ticks import JM, Tick, budget, digest, evidence, key, spec, target, without_offline
from support.workloads import deployment, pod

D1, D2 = digest(1), digest(2)
JM_REPO = "tracebloc/jobs-manager"
NAMES = ("jobs-manager", "requests-proxy")
HUB = "registry-1.docker.io"
PINNED = {"api": f"{JM_REPO}@{D1}"}
# A pinned workload scaled to zero: no pod proves that any node holds its image.
NO_POD = "no pods prove it: no pod of the workload runs on any node (scaled to zero?)"
OFFLINE_REASONS = {"RestartsOffline", "NeedsRegistryToRestart", "OfflineNotAssessed"}


def conditions(tick: Tick) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in tick.status.conditions}


def policy_events(plan_events: tuple[Event, ...]) -> list[Event]:
    return [e for e in plan_events if e.target is None]


def offline_events(plan_events: tuple[Event, ...]) -> list[Event]:
    return [e for e in policy_events(plan_events) if e.reason in OFFLINE_REASONS]


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


def test_a_suspended_policy_leaves_offline_readiness_unknown_and_says_so() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), suspend=True))
    plan = tick.run({key("jobs-manager"): evidence(deployment("jobs-manager", {"api": JM}))})
    assert conditions(tick)["OfflineReady"] == (
        "Unknown",
        "OfflineNotAssessed",
        "not assessed: the policy is suspended",
    )
    assert offline_events(plan.events) == []


@pytest.mark.parametrize(
    ("count", "rest"),
    [(1, ""), (5, ""), (6, "; and 1 more"), (8, "; and 3 more")],
)
def test_offline_ready_false_names_the_first_five_containers_and_counts_the_rest(
    count: int, rest: str
) -> None:
    names = [f"edge-{n}" for n in range(count)]
    tick = Tick(spec(*(target(n, api=JM) for n in names)))
    plan = tick.run({key(n): evidence(deployment(n, PINNED), digests={"api": D1}) for n in names})
    named = "; ".join(f"Deployment tracebloc/{n}: api: {NO_POD}" for n in names[:5])
    expected = ("False", "NeedsRegistryToRestart", named + rest)
    assert conditions(tick)["OfflineReady"] == expected
    # Never set before, the condition counts as Unknown: its first verdict, False, warns.
    assert offline_events(plan.events) == [Event("Warning", *expected[1:])]


def test_offline_ready_warns_when_lost_is_announced_when_regained_quiet_when_unknown() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    scaled_to_zero = {
        key("jobs-manager"): evidence(deployment("jobs-manager", PINNED), digests={"api": D1})
    }
    running = {
        key("jobs-manager"): evidence(
            deployment("jobs-manager", PINNED),
            [pod("p", PINNED, node="edge-1", images=PINNED)],
            digests={"api": D1},
        )
    }
    lost = Event(
        "Warning",
        "NeedsRegistryToRestart",
        "Deployment tracebloc/jobs-manager: api: no pods prove it: "
        "no pod of the workload runs on any node (scaled to zero?)",
    )
    assert offline_events(tick.run(scaled_to_zero).events) == [lost]
    assert offline_events(tick.run(scaled_to_zero).events) == []
    assert offline_events(tick.run(running).events) == [
        Event(
            "Normal",
            "RestartsOffline",
            "the pods of all 1 targets would restart with the registry unreachable",
        )
    ]
    plan = tick.run({key("jobs-manager"): evidence(None)})
    assert conditions(tick)["OfflineReady"] == (
        "Unknown",
        "OfflineNotAssessed",
        "not assessed: Deployment tracebloc/jobs-manager",
    )
    assert offline_events(plan.events) == []
    assert offline_events(tick.run(scaled_to_zero).events) == [lost]


def test_a_deleted_workload_drops_the_offline_verdict_it_had() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    running = [pod("p", PINNED, node="edge-1", images=PINNED)]
    found = evidence(deployment("jobs-manager", PINNED), running, digests={"api": D1})
    tick.run({key("jobs-manager"): found})
    assert conditions(tick)["OfflineReady"][0] == "True"
    tick.run({key("jobs-manager"): evidence(None)})
    # Gone, it proves nothing about a restart: the old verdict would outlive the workload.
    assert [c.offline for c in tick.target("jobs-manager").containers] == [None]
    assert conditions(tick)["OfflineReady"] == (
        "Unknown",
        "OfflineNotAssessed",
        "not assessed: Deployment tracebloc/jobs-manager",
    )
