"""What plan_tick decides for the policy as a whole: the namespace allow-list, a target whose
workload was not read, the reset it honoured, and every budget a registry reported."""

from __future__ import annotations

from imagerefresh.models import Phase
from imagerefresh.planner import NamespacePolicy
from imagerefresh.ratelimit import BudgetSnapshot

from support.ticks import JM, Tick, budget, digest, evidence, key, spec, target
from support.workloads import deployment

D1 = digest(1)


def test_the_allow_list_permits_exactly_its_pairs() -> None:
    pairs = NamespacePolicy(frozenset({("tracebloc", "tracebloc-node-agents"), ("ops", "*")}))
    assert pairs.allows("tracebloc", "tracebloc")  # its own namespace needs no pair
    assert pairs.allows("tracebloc", "tracebloc-node-agents")
    assert not pairs.allows("tracebloc", "kube-system")
    assert not pairs.allows("other", "tracebloc-node-agents")
    assert pairs.allows("ops", "anything")


def test_a_target_whose_workload_was_not_read_is_an_error_and_patched_nowhere() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = tick.run({})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.ERROR
    assert "the workload was not read this tick" in status.message


def test_the_honoured_reset_is_remembered_after_its_annotation_is_gone() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    work = {
        key("jobs-manager"): evidence(deployment("jobs-manager", {"api": JM}), digests={"api": D1})
    }
    tick.reset = "2026-11-29T12:00"
    tick.run(work)
    tick.reset = None
    tick.run(work)
    assert tick.status.last_reset == "2026-11-29T12:00"
    tick.reset = "2026-11-29T12:00"  # the same value again is no new reset
    assert "Reset" not in [e.reason for e in tick.run(work).events]


def test_every_registry_that_reported_a_budget_is_in_status() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    budgets = {
        ("a.example", "anonymous"): BudgetSnapshot("a.example", "anonymous"),  # no report yet
        ("b.example", "anonymous"): budget("b.example", remaining=7),
    }
    tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), digests={"api": D1}
            )
        },
        budgets,
    )
    assert [(r.host, r.remaining) for r in tick.status.registries] == [("b.example", 7)]
