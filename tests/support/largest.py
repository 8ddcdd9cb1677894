"""The largest policies the CRD admits, built to cost the planner the most: for the planner's
cost tests (decisions counted) and `make bench` (CPU measured).

Each is a whole tick's input, within the CRD's bounds (64 targets, 16 containers a target, 256
in all), with every tag moved on:

- ``cascade``: 64 targets in 32 lockstep pairs, a registry answering ``ratelimit-remaining: 1``
  (no pair fits: a budget spent target by target in spec order once held one more group per
  round, a round re-deciding every target);
- ``wide``: 16 targets of 16 containers, no lockstep, every container drifted, no rate limit;
- ``dense``: the same 16 by 16, every target tracking the same 16 tags (16 groups of 16), with
  lockstep and one target that cannot move (Frozen);
- ``chain``: 64 targets of 4 containers, each tied to the next by a tag they share, all with a
  refresh of ours in flight and the first one's failed: each rollback orders the next;
- ``groups``: 64 targets of 4 containers, 4 tags each tracked by all 64, lockstep, the
  registry answering ``ratelimit-remaining: 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from imagerefresh.models import PendingRefresh, Phase, PolicySpec, PolicyStatus, TargetStatus
from imagerefresh.planner import (
    NamespacePolicy,
    ObservedPod,
    PolicyView,
    Resolved,
    TargetEvidence,
    TargetKey,
    TickInput,
    Workload,
)
from imagerefresh.ratelimit import BudgetSnapshot, RateLimitReport

from support.ticks import T0, digest
from support.workloads import deployment

__all__ = ["LARGEST", "largest"]

NS = "tenant"
HOST = "registry.tenant.example"


def _old(ref: str) -> str:
    return digest(f"{ref}-old")


def _new(ref: str) -> str:
    return digest(f"{ref}-new")


def _tick(
    containers: list[dict[str, str]],
    *,
    lockstep: bool = False,
    remaining: int | None = None,
    stuck: frozenset[int] = frozenset(),
    status: PolicyStatus | None = None,
    workloads: Callable[[int, dict[str, str]], dict[str, Any]] | None = None,
    after: timedelta = timedelta(minutes=15),
) -> TickInput:
    """``containers[i]`` is target i's container → tracked repository (tag ``prod``)."""
    targets, evidence = [], {}
    for index, refs in enumerate(containers):
        name = f"w{index}"
        targets.append(
            {
                "kind": "Deployment",
                "name": name,
                "containers": [{"name": c, "image": f"{HOST}/{r}:prod"} for c, r in refs.items()],
            }
        )
        live = {c: f"{HOST}/{r}@{_old(r)}" for c, r in refs.items()}
        obj = (
            workloads(index, refs)
            if workloads is not None
            else deployment(
                name, live, namespace=NS, generation=1, observed=0 if index in stuck else None
            )
        )
        evidence[TargetKey("Deployment", NS, name)] = TargetEvidence(  # type: ignore[arg-type]
            Workload.from_api(obj),
            pods=(ObservedPod(f"{name}-pod", {c: _old(r) for c, r in refs.items()}),),
            digests={c: Resolved(_new(r)) for c, r in refs.items()},
        )
    spec = PolicySpec.model_validate(
        {
            "targets": targets,
            "lockstep": lockstep,
            "maxSkipTicks": 1,
            "pullBudget": {"reserve": 0},
        }
    )
    report = RateLimitReport(limit=100, remaining=remaining, window_seconds=21600)
    budgets = (
        {(HOST, "anonymous"): BudgetSnapshot(HOST, "anonymous", report, remaining)}
        if remaining is not None
        else {}
    )
    view = PolicyView(NS, "largest", 1, spec, status or PolicyStatus())
    return TickInput(view, evidence, budgets, T0 + after, NamespacePolicy())


def cascade() -> TickInput:
    pairs = [{"c": f"{NS}/g{index // 2}"} for index in range(64)]
    return _tick(pairs, lockstep=True, remaining=1)


def wide() -> TickInput:
    return _tick([{f"c{c}": f"{NS}/t{t}c{c}" for c in range(16)} for t in range(16)])


def dense() -> TickInput:
    same = {f"c{c}": f"{NS}/shared{c}" for c in range(16)}
    return _tick([dict(same) for _ in range(16)], lockstep=True, stuck=frozenset({15}))


def groups() -> TickInput:
    same = {f"c{c}": f"{NS}/all{c}" for c in range(4)}
    return _tick([dict(same) for _ in range(64)], lockstep=True, remaining=1)


def chain() -> TickInput:
    """Target i's containers track tags i and i+1 (and two of its own): a chain of groups.
    Every target has our refresh to the new digests in flight; the first one's has failed."""
    refs = [
        {"a": f"{NS}/k{i}", "b": f"{NS}/k{i + 1}", "c": f"{NS}/own{i}c", "d": f"{NS}/own{i}d"}
        for i in range(64)
    ]

    def rolling(index: int, mine: dict[str, str]) -> dict[str, Any]:
        pinned = {c: f"{HOST}/{r}@{_new(r)}" for c, r in mine.items()}
        failed = (
            [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
            if index == 0
            else []
        )
        return deployment(
            f"w{index}", pinned, namespace=NS, generation=2, available=0, conditions=failed
        )

    targets = []
    for index, mine in enumerate(refs):
        pending = PendingRefresh(
            images={c: f"{HOST}/{r}@{_new(r)}" for c, r in mine.items()},
            previous={c: f"{HOST}/{r}@{_old(r)}" for c, r in mine.items()},
            started_at=T0,
            generation=2,
        )
        targets.append(
            TargetStatus(
                kind="Deployment",  # type: ignore[arg-type]
                namespace=NS,
                name=f"w{index}",
                phase=Phase.REFRESHING,
                pending=pending,
            )
        )
    return _tick(
        refs,
        lockstep=True,
        status=PolicyStatus(targets=tuple(targets)),
        workloads=rolling,
        after=timedelta(minutes=1),  # well inside every rollout's progress deadline
    )


LARGEST: dict[str, Callable[[], TickInput]] = {
    "cascade": cascade,
    "wide": wide,
    "dense": dense,
    "chain": chain,
    "groups": groups,
}


def largest() -> dict[str, TickInput]:
    """Every one of them, built."""
    return {name: build() for name, build in LARGEST.items()}
