"""Settled: compare what the workload runs with the desired digests.

The spec's step d. A container pinned by digest is current when that digest is the desired
one. A container on a tag is current when every pod already runs the desired digest (or one of
its platform manifests, which is what containers/image runtimes report): a fresh install or a
chart upgrade that re-rendered the tag costs no rollout — an adoption. Anything else (other
digests, mixed, unknown) is drift, which also repairs old skew.

A container whose digest could not be resolved is left alone while the others are compared:
unreadable registry evidence never becomes a patch, and with nothing else to do the target is
Error.

:func:`compare` only reads; :func:`conclude` decides on what the gates (:mod:`.gates`) let
through: Current when nothing drifted, the refresh (:mod:`.refresh`) otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from imagerefresh.models import ContainerSpec, Phase
from imagerefresh.planner.evidence import Resolved, Unresolved, Workload
from imagerefresh.planner.target.decision import Decision, TargetOutcome
from imagerefresh.planner.target.refresh import refresh
from imagerefresh.reference import parse

__all__ = ["Comparison", "compare", "conclude"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """What a settled workload runs, container by container, against the desired digests."""

    drifted: Mapping[str, str]  # container → the desired digest it does not run
    current: Mapping[str, str]  # container → the desired digest it runs
    unresolved: tuple[str, ...]  # "container: why" for each without a desired digest


def compare(decision: Decision, workload: Workload) -> Comparison:
    """Compare every declared container; this reads the evidence and changes nothing."""
    drifted: dict[str, str] = {}
    current: dict[str, str] = {}
    unresolved: list[str] = []
    for container in decision.target.containers:
        desired = decision.desired(container)
        if desired is None:
            outcome = decision.evidence.digests.get(container.name)
            detail = outcome.message if isinstance(outcome, Unresolved) else "not resolved"
            unresolved.append(f"{container.name}: {detail}")
            continue
        if not _is_current(decision, container, workload, desired):
            drifted[container.name] = desired
        else:
            current[container.name] = desired
    return Comparison(drifted, current, tuple(unresolved))


def conclude(decision: Decision, workload: Workload, comparison: Comparison) -> TargetOutcome:
    """Current when nothing drifted and nothing is held; otherwise the drift goes to the
    refresh, and the containers the gates hold are named."""
    decision.outcome.current.update(comparison.current)
    unresolved = comparison.unresolved
    if unresolved:
        decision.outcome.degraded = True
    held = decision.held()
    note = f"; not resolved, left alone: {'; '.join(unresolved)}" if unresolved else ""
    if held and not comparison.drifted:
        if decision.locked:
            return decision.finish(Phase.LOCKED, decision.locked_message(f"held: {held}{note}"))
        return decision.finish(Phase.WAITING, f"held: {held}{note}")
    note = f"; held: {held}{note}" if held else note
    if not comparison.drifted:
        if unresolved:
            return decision.finish(Phase.ERROR, f"registry unreadable, nothing patched{note}")
        decision.record_good()
        if decision.locked:
            return decision.finish(Phase.LOCKED, decision.locked_message("now current"))
        return decision.finish(Phase.CURRENT, "running the desired digests")
    return refresh(decision, workload, dict(comparison.drifted), note, comparison.current)


def _is_current(
    decision: Decision, container: ContainerSpec, workload: Workload, desired: str
) -> bool:
    live = parse(workload.containers[container.name].image)
    if live.digest is not None:
        return live.digest == desired
    # A tag: adopt it when every pod already runs the desired digest (no rollout needed) —
    # or one of its platform manifests, which is what containers/image runtimes report.
    outcome = decision.evidence.digests.get(container.name)
    wanted = outcome if isinstance(outcome, Resolved) else Resolved(desired)
    running = [pod.running.get(container.name) for pod in decision.evidence.pods]
    return bool(running) and all(wanted.is_content_of(digest) for digest in running)
