"""The snapshot the write guard checks a tick's writes against, taken from the tick's input.

Everything here comes from what the shell gathered before planning — the spec, the status as
read, live evidence, the verdicts in the operator's memory, the pull budget — never from the
plan: the guard must not learn what is allowed from the decision it checks. The status read
back is a claim: its ``failed`` list only narrows what may be written (a forged entry bars a
build, a removed one does what a reset does), and its ``seen`` clock is the documented
exception that can shorten a cooldown.
"""

from __future__ import annotations

from types import MappingProxyType

from imagerefresh.planner.cooldown import observed_clock
from imagerefresh.planner.evidence import NOT_READ, TickInput
from imagerefresh.planner.guard import ContainerRules, Permits, TargetRules
from imagerefresh.planner.proof import ran

__all__ = ["permits"]


def permits(tick: TickInput) -> Permits:
    """What may be written in ``tick``: its rules per target, and the shared snapshot."""
    view, spec = tick.policy, tick.policy.spec
    previous = {(t.kind, t.namespace, t.name): t for t in view.status.targets}
    reset = tick.honours_reset
    targets = {}
    for index, target in enumerate(spec.targets):
        key = view.target_key(index)
        evidence = tick.evidence.get(key, NOT_READ)
        status = previous.get((key.kind, key.namespace, key.name))
        failed = frozenset(b.digest for b in status.failed) if status and not reset else frozenset()
        containers = {
            c.name: ContainerRules(
                repository=c.tracked.repository,
                tracked=str(c.tracked),
                pin=c.digest,
                ran=ran(evidence, c.name, c.tracked.repository),
            )
            for c in target.containers
        }
        targets[key] = TargetRules(MappingProxyType(containers), failed, evidence)
    return Permits(
        targets=MappingProxyType(targets),
        now=tick.now,
        verify=spec.verify is not None,
        verified=tick.verified_digests(),
        minimum_age=spec.minimum_age,
        seen=MappingProxyType({s.tracked: s for s in observed_clock(tick)}),
        budgets=tick.budgets,
        reserve=spec.pull_budget.reserve,
        nodes=tick.nodes,
    )
