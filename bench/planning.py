"""Planning the largest policies the CRD admits: CPU per plan, and what it is at the chart's
CPU limit.

Planning is pure and CPU-bound, so it is measured in-process on the policies of
``tests/support/largest.py`` (each built to cost the planner the most within the CRD's
bounds): each is planned once to warm up, then ``ROUNDS`` times; the row gives the median and
the worst of the planning thread's CPU time per plan, and the same at the chart's CPU limit (the
operator's whole container gets ``LIMIT`` of a core, so a plan's wall time there is its CPU
time divided by it). The target is < 0.1 s of CPU for the largest policy.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import harness  # noqa: F401  (it puts tests/ on the path, for support.largest)

from imagerefresh.collector import freeze_startup_heap
from imagerefresh.planner import plan_tick

from support.largest import LARGEST

__all__ = ["ROUNDS", "PlanningCost", "measure"]

ROUNDS = 9
LIMIT = 0.1  # the chart's cpu (values.yaml resources.cpu: 100m)


@dataclass(frozen=True)
class PlanningCost:
    case: str
    targets: int
    containers: int
    decisions: int
    median: float  # CPU seconds per plan
    worst: float


def measure(rounds: int = ROUNDS) -> list[PlanningCost]:
    costs = []
    for case, build in LARGEST.items():
        tick = build()
        plan = plan_tick(tick)  # warm: imports, caches
        # As the operator does once start-up is over: full collections walk only what was
        # made since (imagerefresh.collector), not this process's imports.
        freeze_startup_heap()
        times = []
        for _ in range(rounds):
            started = time.thread_time()
            plan_tick(tick)
            times.append(time.thread_time() - started)
        spec = tick.policy.spec
        costs.append(
            PlanningCost(
                case,
                len(spec.targets),
                sum(len(t.containers) for t in spec.targets),
                plan.decisions,
                statistics.median(times),
                max(times),
            )
        )
    return costs
