"""revise_target: when a guarded patch is refused after planning, the shell replaces that one
target's status and the policy's summary and conditions are derived again from it."""

from __future__ import annotations

from imagerefresh.models import Phase
from imagerefresh.planner import revise_target

from support.ticks import JM, Tick, budget, digest, evidence, key, spec, target
from support.workloads import deployment

D1, D2 = digest(1), digest(2)
HUB = ("registry-1.docker.io", "anonymous")


def test_a_refused_target_makes_the_policy_refused_and_keeps_the_tick_s_other_findings() -> None:
    tick = Tick(
        spec(
            target("jobs-manager", api=JM),
            target("requests-proxy", proxy=JM),
            target("absent", api=JM),
        )
    )
    tick.reset = "2026-11-29T12:30"
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), digests={"api": D2}
            ),
            key("requests-proxy"): evidence(
                deployment("requests-proxy", {"proxy": f"{JM}@{D2}"}), digests={"proxy": D2}
            ),
            key("absent"): evidence(None, error="the API server answered 503"),
        },
        {HUB: budget(HUB[0], remaining=90)},
    )
    assert len(plan.patches) == 1
    planned = plan.status
    refused = next(t for t in planned.targets if t.name == "jobs-manager").model_copy(
        update={"phase": Phase.REFUSED, "message": "admission webhook denied the patch"}
    )

    revised = revise_target(tick.input({}).policy, planned, refused, tick.now)

    assert [(t.name, t.phase) for t in revised.targets] == [
        ("jobs-manager", Phase.REFUSED),
        ("requests-proxy", Phase.CURRENT),
        ("absent", Phase.ERROR),
    ]
    assert (revised.phase, revised.target_count, revised.observed_generation) == (
        Phase.REFUSED,
        3,
        1,
    )
    conditions = {c.type: c for c in revised.conditions}
    assert conditions["Ready"].status == "False"
    assert "Deployment tracebloc/jobs-manager is Refused" in conditions["Ready"].message
    # The tick's own findings stand: the unreadable target, the budget, the reset honoured.
    assert conditions["Degraded"].status == "True"
    assert conditions["Degraded"].message.endswith(": Deployment tracebloc/absent")
    assert conditions["RateLimited"].status == "False"
    assert revised.registries == planned.registries != ()
    assert revised.last_reset == "2026-11-29T12:30"


def test_a_carried_over_degraded_message_is_not_wrapped_twice() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), target("absent", api=JM)))
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), digests={"api": D2}
            ),
            key("absent"): evidence(None, error="the API server answered 503"),
        }
    )
    refused = plan.status.targets[0].model_copy(update={"phase": Phase.REFUSED})
    revised = revise_target(tick.input({}).policy, plan.status, refused, tick.now)
    before = {c.type: c.message for c in plan.status.conditions}
    after = {c.type: c.message for c in revised.conditions}
    assert after["Degraded"] == before["Degraded"]


def test_a_revision_keeps_what_the_tick_planned_not_what_it_read() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)), generation=7)
    read = tick.input({}).policy  # the policy as the shell read it, before planning
    tick.reset = "2026-11-29T12:30"
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), digests={"api": D2}
            )
        },
        {HUB: budget(HUB[0], remaining=90)},
    )
    refused = plan.status.targets[0].model_copy(update={"phase": Phase.REFUSED})
    revised = revise_target(read, plan.status, refused, tick.now)
    assert (read.status.registries, read.status.last_reset) == ((), None)
    assert revised.registries == plan.status.registries != ()
    assert revised.last_reset == "2026-11-29T12:30"
    assert (revised.observed_generation, revised.phase) == (7, Phase.REFUSED)
    assert {c.observed_generation for c in revised.conditions} == {7}
