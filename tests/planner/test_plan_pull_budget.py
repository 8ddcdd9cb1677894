"""The pull-budget deferral across targets and accounts (SPEC §4.3e): what a tick spends is
counted per (registry, account), every drifted image of a workload costs a pull per pod, and
the account is the one the pods pull with."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from imagerefresh.models import PendingRefresh, Phase, PolicyStatus, TargetStatus

from support.ticks import JM, PM, T0, Tick, budget, digest, evidence, key, spec, target
from support.workloads import deployment

D1, D2 = digest(1), digest(2)
HUB = "registry-1.docker.io"


def drifted(name: str, replicas: int = 2) -> dict[str, object]:
    return deployment(name, {"app": JM}, replicas=replicas)


def test_every_target_s_pulls_are_spent_from_one_budget_until_the_next_does_not_fit() -> None:
    names = ("first", "second", "third")
    tick = Tick(spec(*(target(n, app=JM) for n in names), pullBudget={"reserve": 0}))
    plan = tick.run(
        {key(n): evidence(drifted(n), digests={"app": D1}) for n in names},
        {(HUB, "anonymous"): budget(HUB, remaining=5)},
    )
    # 2 pods each: 5 - 2 - 2 leaves 1, too few for the third.
    assert [p.target.name for p in plan.patches] == ["first", "second"]
    assert tick.target("third").phase is Phase.DEFERRED
    assert (
        "has 1 pulls left of 100 per 21600s; this refresh needs 2" in tick.target("third").message
    )


def test_two_drifted_images_of_one_workload_cost_a_pull_each_per_pod() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, monitor=PM), pullBudget={"reserve": 0}))
    work = deployment("jobs-manager", {"api": JM, "monitor": PM}, replicas=2)
    plan = tick.run(
        {key("jobs-manager"): evidence(work, digests={"api": D1, "monitor": D2})},
        {(HUB, "anonymous"): budget(HUB, remaining=3)},
    )
    assert plan.patches == ()
    assert "this refresh needs 4" in tick.target("jobs-manager").message


def test_the_budget_spent_is_the_one_of_the_account_the_pods_pull_with() -> None:
    tick = Tick(spec(target("jobs-manager", app=JM), pullBudget={"reserve": 0}))
    budgets = {
        (HUB, "anonymous"): budget(HUB, remaining=100),
        (HUB, "tracebloc/regcred"): budget(HUB, remaining=0, identity="tracebloc/regcred"),
    }
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                drifted("jobs-manager"),
                digests={"app": D1},
                identities={HUB: "tracebloc/regcred"},
            )
        },
        budgets,
    )
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.DEFERRED
    assert f"{HUB} for tracebloc/regcred has 0 pulls left" in status.message


def test_an_image_of_another_registry_spends_that_registry_s_budget_never_docker_hub_s() -> None:
    ghcr = "ghcr.io/tracebloc/jobs-manager:prod"
    tick = Tick(spec(target("jobs-manager", app=ghcr), pullBudget={"reserve": 0}))
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"app": ghcr}), digests={"app": D1}
            )
        },
        {
            (HUB, "anonymous"): budget(HUB, remaining=100),
            ("ghcr.io", "anonymous"): budget("ghcr.io", remaining=0),
        },
    )
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.DEFERRED
    assert "ghcr.io for anonymous has 0 pulls left" in status.message


def test_a_refresh_s_patch_carries_its_pulls_per_account_for_the_shell_to_reserve() -> None:
    ghcr = "ghcr.io/tracebloc/pods-monitor:prod"
    tick = Tick(spec(target("jobs-manager", api=JM, worker=JM, monitor=ghcr)))
    work = deployment("jobs-manager", {"api": JM, "worker": JM, "monitor": ghcr}, replicas=3)
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                work,
                digests={"api": D1, "worker": D1, "monitor": D2},
                identities={HUB: "tracebloc/regcred"},
            )
        },
        {(HUB, "tracebloc/regcred"): budget(HUB, remaining=100, identity="tracebloc/regcred")},
    )
    (patch,) = plan.patches
    # One digest per registry, three pods each: what the kubelet will pull, per account.
    assert patch.pulls == ((("ghcr.io", "anonymous"), 3), ((HUB, "tracebloc/regcred"), 3))


def test_a_rollback_is_charged_first_and_a_refresh_spends_only_what_it_leaves() -> None:
    """Rollbacks are never deferred, so what they pull is spent before any refresh: a refresh
    in the same tick may not take the budget below the reserve with them."""
    tick = Tick(spec(target("failing", app=JM), target("fresh", app=JM), pullBudget={"reserve": 1}))
    old, new = f"tracebloc/jobs-manager@{D1}", f"tracebloc/jobs-manager@{D2}"
    landed = PendingRefresh(
        images={"app": new}, previous={"app": old}, started_at=T0 - timedelta(hours=1), generation=2
    )
    tick.status = PolicyStatus(
        targets=(
            TargetStatus(
                kind="Deployment", namespace="tracebloc", name="failing", phase=Phase.REFRESHING,
                pending=landed,
            ),
        )
    )  # fmt: skip
    failing = deployment("failing", {"app": new}, replicas=2, generation=2, available=0)
    failing["status"]["conditions"] = [
        {"type": "Progressing", "reason": "ProgressDeadlineExceeded"}
    ]
    found = evidence(failing, digests={"app": D2})
    found = replace(found, previous_template={"app": old})
    plan = tick.run(
        {key("failing"): found, key("fresh"): evidence(drifted("fresh"), digests={"app": D2})},
        {(HUB, "anonymous"): budget(HUB, remaining=4)},
    )
    # The rollback pulls 2 (its pods run neither image everywhere); 4 - 2 leaves 2, and the
    # refresh's 2 would leave 0, under the reserve of 1.
    (rollback,) = plan.patches
    assert rollback.target.name == "failing"
    assert rollback.pulls == (((HUB, "anonymous"), 2),)
    assert tick.target("fresh").phase is Phase.DEFERRED
