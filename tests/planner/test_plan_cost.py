"""What planning costs, counted: the decisions a tick makes for the largest admitted policies.

A policy's size is the tenant's to choose within the CRD's bounds, and planning runs on the
operator's CPU: each target must be decided about once, plus once per lockstep order or
budget deferral it is given — never once per target per round (a budget spent target by target
once held one more lockstep group per round: 101 rounds of every target for one policy).
Seconds are `make bench`'s to measure; here the count is the verdict.
"""

from __future__ import annotations

import pytest

from imagerefresh.models import MAX_POLICY_CONTAINERS, MAX_TARGETS, Phase
from imagerefresh.planner import plan_tick

from support.largest import LARGEST


@pytest.mark.parametrize("case", list(LARGEST))
def test_the_largest_admitted_policies_are_within_the_crd_s_bounds(case: str) -> None:
    spec = LARGEST[case]().policy.spec
    assert len(spec.targets) <= MAX_TARGETS
    assert sum(len(t.containers) for t in spec.targets) <= MAX_POLICY_CONTAINERS


@pytest.mark.parametrize("case", list(LARGEST))
def test_each_target_is_decided_at_most_twice(case: str) -> None:
    tick = LARGEST[case]()
    plan = plan_tick(tick)
    assert len(tick.policy.spec.targets) <= plan.decisions <= 2 * len(tick.policy.spec.targets)


def test_a_budget_no_lockstep_pair_fits_defers_every_pair_in_one_decision_each_more() -> None:
    plan = plan_tick(LARGEST["cascade"]())
    assert plan.patches == ()
    assert {t.phase for t in plan.status.targets} == {Phase.DEFERRED}
    assert plan.decisions == 2 * MAX_TARGETS


def test_a_chain_of_rollbacks_across_groups_decides_each_target_once_more() -> None:
    tick = LARGEST["chain"]()
    plan = plan_tick(tick)
    assert {t.phase for t in plan.status.targets} == {Phase.ROLLING_BACK}
    assert plan.decisions == 2 * len(tick.policy.spec.targets) - 1  # all but the failed one
