"""Spending a tick's pull budget: the refreshes it would start, in spec order, a lockstep
group's all at once or not at all.

Each target is decided first as if the budget were unlimited, and reports the registry pulls
the refresh it would start costs (:attr:`~.target.TargetOutcome.pulls`: each distinct digest
once per pod, per account). The budget is then spent once, over *units* in spec order: a
target on its own, or the targets lockstep groups tie together (a connected component — one
patch per workload means a target in two groups ties them). A unit's pulls are spent only if
all of them fit above ``pullBudget.reserve`` for every account they need; otherwise every
target of the unit that would start is deferred, naming why, and spends nothing, so a later
unit may still fit.

Deciding the budget after the targets keeps each target's decision independent of the
others' (lockstep's rounds then decide again only the targets an order touches), makes the
cost of a tick linear in its size, and gives one answer per unit however the targets are
ordered within it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from imagerefresh.planner.evidence import Account, TargetKey
from imagerefresh.planner.lockstep import Group
from imagerefresh.ratelimit import BudgetSnapshot

__all__ = ["Unit", "spend", "units"]

Unit = tuple[TargetKey, ...]


def units(keys: Sequence[TargetKey], groups: Iterable[Group]) -> list[Unit]:
    """``keys`` (in spec order) as the units their pulls are spent by, in spec order."""
    root = {key: key for key in keys}

    def find(key: TargetKey) -> TargetKey:
        while root[key] != key:
            root[key] = root[root[key]]
            key = root[key]
        return key

    for group in groups:
        first, *rest = group.members
        for other in rest:
            root[find(other)] = find(first)
    members: dict[TargetKey, list[TargetKey]] = {}
    for key in dict.fromkeys(keys):
        members.setdefault(find(key), []).append(key)
    return [tuple(unit) for unit in members.values()]


def _references(unit: Unit, groups: Iterable[Group]) -> list[str]:
    return [g.reference for g in groups if any(key in g.members for key in unit)]


def spend(
    ordered: Iterable[Unit],
    pulls: Mapping[TargetKey, Mapping[Account, int]],
    budgets: Mapping[Account, BudgetSnapshot],
    reserve: int,
    groups: Sequence[Group] = (),
    committed: Mapping[Account, int] | None = None,
) -> dict[TargetKey, str]:
    """Spend ``pulls`` unit by unit, after what is ``committed`` already (the rollbacks this
    tick sends, which are never deferred); why each target deferred is deferred."""
    spent: Counter[Account] = Counter(committed or {})
    deferred: dict[TargetKey, str] = {}
    for unit in ordered:
        starting = [key for key in unit if pulls.get(key)]
        if not starting:
            continue
        cost: Counter[Account] = Counter()
        for key in starting:
            cost.update(pulls[key])
        together = len(starting) > 1
        refusal = None
        for account, needed in sorted(cost.items()):
            budget = budgets.get(account) or BudgetSnapshot(*account)
            needs = f"their {len(starting)} refreshes need" if together else "this refresh needs"
            answer = budget.can_afford(needed, reserve, spent[account], needs=needs)
            if not answer.allowed:
                refusal = answer.reason
                break
        if refusal is None:
            spent.update(cost)
            continue
        if together:
            names = ", ".join(str(key) for key in sorted(starting))
            refusal = (
                f"lockstep: {', '.join(_references(unit, groups))} moves together, and the pull "
                f"budget does not cover all of its refreshes at once ({names}): {refusal}"
            )
        deferred.update(dict.fromkeys(starting, refusal))
    return deferred
