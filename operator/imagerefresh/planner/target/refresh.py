"""Drift: whether a refresh starts now, and the one guarded patch that starts it.

The spec's step e. In this order, each may stop the refresh: a Locked target waits for a reset;
outside every refresh window it waits for the next one to open (a pre-pull in flight excepted:
it started inside a window, and is carried to its patch); a follow-up tick only judges
rollouts and starts nothing; lockstep peers that cannot move hold the containers they share
(the others still refresh); the pull budget may defer it (RateLimited); a dry run reports what
it would patch. Otherwise ONE patch sets every drifted container of the workload to its digest,
so the pod rolls once, and pins in the same patch the tags whose pods already run the desired
digest (free, as the workload rolls anyway). The intent is recorded as ``pending`` first, so a
landed patch is always recognised as ours. Re-pinning images another writer moved away from
what we last wrote counts as a contested attempt (:mod:`.contest`).

A refresh that starts also reports the registry pulls it costs, per account, for the tick to
spend from the pull budget (:mod:`~imagerefresh.planner.budget`). With ``prePull`` the digests
are first pulled onto the workload's nodes (:mod:`.prepull`), ahead of lockstep and the budget:
the refresh starts once every node holds them, and costs no pull then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from imagerefresh.models import PendingRefresh, Phase
from imagerefresh.models.base import format_timestamp
from imagerefresh.planner import reasons
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.lockstep import held_message
from imagerefresh.planner.proof import runs_everywhere
from imagerefresh.planner.pulls import patch_pulls
from imagerefresh.planner.target.contest import contest_repin
from imagerefresh.planner.target.decision import Decision, TargetOutcome, short
from imagerefresh.planner.target.landing import produced
from imagerefresh.planner.target.prepull import carried_pre_pull, pre_pull, wants_pre_pull
from imagerefresh.planner.windows import WINDOW_OVERRIDE_ANNOTATION
from imagerefresh.reference import parse

__all__ = ["refresh"]


def refresh(
    decision: Decision,
    workload: Workload,
    drifted: dict[str, str],
    note: str,
    current: Mapping[str, str] = MappingProxyType({}),
) -> TargetOutcome:
    """Refresh ``drifted`` (container → desired digest), or say what it waits for.

    ``note`` tells of the containers left alone, for the status message; ``current`` are the
    containers that run their desired digest already (the gates let them through), of which
    those still on a tag are pinned in the same patch (an adoption).
    """
    plan = _plan_text(decision, workload, drifted)
    recorded = carried_pre_pull(decision, workload, drifted)
    if recorded is not None and recorded.failure is not None:
        decision.update(pre_pull=recorded)  # held until a reset or a new digest, whatever else
    if decision.locked:
        return decision.finish(Phase.LOCKED, decision.locked_message(f"drift: {plan}"))
    in_flight = recorded is not None and recorded.failure is None
    if not decision.ctx.window.open and not in_flight:
        return _wait_for_window(decision, plan, note)
    if decision.ctx.follow_up:
        # Following rollouts only judges them: a refresh starts at a tick of the interval
        # (or a prompt one), so a digest that just failed and was rolled back is not
        # retried the moment its rollback settles, and the registry is asked afresh first.
        return decision.finish(
            Phase.WAITING, f"drift: {plan}; the refresh starts at the next tick{note}"
        )
    if wants_pre_pull(decision) and not decision.ctx.spec.dry_run:
        pulling = pre_pull(decision, workload, drifted, plan, note)
        if pulling is not None:
            return pulling
    held = sorted(name for name in drifted if name in decision.orders.held)
    if held:
        why = held_message(decision.orders, held)
        if len(held) == len(drifted):
            return _wait_for_peers(decision, plan, why, note)
        drifted = {n: d for n, d in drifted.items() if n not in decision.orders.held}
        plan = _plan_text(decision, workload, drifted)
        note = f"; {', '.join(held)} held back ({why}){note}"
    if decision.orders.deferred is not None:
        decision.outcome.rate_limited = True
        return decision.finish(Phase.DEFERRED, f"deferred: {decision.orders.deferred}{note}")
    adopted = _adopted_tags(decision, workload, current)
    if decision.ctx.spec.dry_run:
        _starts(decision, workload, drifted, adopted)  # what would start: lockstep, the budget
        return decision.finish(Phase.DRIFTED, f"dry run, would patch {plan}{note}")
    return _start(decision, workload, drifted, adopted, plan, note)


def _start(
    decision: Decision,
    workload: Workload,
    drifted: dict[str, str],
    adopted: dict[str, str],
    plan: str,
    note: str,
) -> TargetOutcome:
    """Record the refresh as ``pending`` and plan its patch, unless a contest locks it now."""
    writers = contest_repin(decision, workload, drifted)
    contest = ""
    if writers is not None:
        # The status message names the other writer too: events expire, status does not.
        contest = (
            f"; contested by {writers} (attempt {decision.status.refresh_attempts} of "
            f"{decision.ctx.spec.max_refresh_attempts})"
        )
        if decision.locked:
            # Locked by this contest: nothing starts, so its lockstep peers must wait.
            return decision.finish(
                Phase.LOCKED, decision.locked_message(f"contested by {writers}: {plan}")
            )
    _starts(decision, workload, drifted, adopted)
    if decision.outcome.pre_pulled:
        # The pods find the images on their nodes (its helpers paid for the pulls): they are
        # no longer needed.
        decision.outcome.helpers_kept.clear()
        decision.update(pre_pull=None)
    pins = {**adopted, **drifted}
    pending = PendingRefresh(
        images={
            name: parse(workload.containers[name].image).pinned(digest).familiar
            for name, digest in pins.items()
        },
        previous={name: workload.containers[name].image for name in pins},
        started_at=decision.ctx.now,
        generation=produced(workload),
        adopted=tuple(sorted(set(adopted) - set(drifted))),
    )
    patch = decision.patch(workload, pending)
    decision.outcome.patch = replace(patch, pulls=tuple(sorted(decision.outcome.pulls.items())))
    decision.update(pending=pending)
    decision.event("Normal", reasons.REFRESHING, f"patching {decision.key}: {plan}")
    return decision.finish(Phase.REFRESHING, f"refreshing {plan}{contest}{note}")


def _wait_for_peers(decision: Decision, plan: str, why: str, note: str) -> TargetOutcome:
    """Every drifted container is held back by a lockstep peer that cannot move now."""
    message = f"drift: {plan}; {why}{note}"
    if decision.previous_phase is not Phase.WAITING or decision.status.message != message:
        decision.event("Normal", reasons.LOCKSTEP_WAITING, message)
    return decision.finish(Phase.WAITING, message)


def _wait_for_window(decision: Decision, plan: str, note: str) -> TargetOutcome:
    """Outside every refresh window: the refresh starts when the next one opens.

    The message names that instant, so it — and the status — change only when it does: an
    idle tick outside a window writes nothing. One event per next start, never per tick.
    """
    opens = decision.ctx.window.next_start
    assert opens is not None  # a closed window always says when the next one opens
    message = (
        f"drift: {plan}; outside the refresh windows (spec.windows): the refresh starts "
        f"when the next window opens, at {format_timestamp(opens)}; to refresh once now: "
        f"imagerefresh refresh-now {decision.ctx.policy} --outside-window (a new value of the "
        f"annotation {WINDOW_OVERRIDE_ANNOTATION}){note}"
    )
    if decision.previous_phase is not Phase.WAITING or decision.status.message != message:
        decision.event("Normal", reasons.WAITING_FOR_WINDOW, message)
    decision.outcome.wake_at = opens
    return decision.finish(Phase.WAITING, message)


def _plan_text(decision: Decision, workload: Workload, drifted: Mapping[str, str]) -> str:
    return ", ".join(
        f"{name} {short(_live_digest(decision, workload, name))} → {short(digest)}"
        for name, digest in sorted(drifted.items())
    )


def _live_digest(decision: Decision, workload: Workload, name: str) -> str | None:
    live = parse(workload.containers[name].image)
    if live.digest is not None:
        return live.digest
    running = {pod.running.get(name) for pod in decision.evidence.pods}
    return running.pop() if len(running) == 1 else None


def _adopted_tags(
    decision: Decision, workload: Workload, current: Mapping[str, str]
) -> dict[str, str]:
    """Containers still on a tag whose pods all run the desired digest already (proven by
    the pods, and let through by the gates): pinned in the same patch, which moves nothing for
    them and keeps a rescheduled pod from pulling whatever the tag is by then.

    Only what every pod is proven to run is adopted: a container whose new build a gate holds
    (unsigned, cooling down) stays on its tag, and so does one running a build that failed
    here (a pin is a write, and no write names a failed build).
    """
    failed = {build.digest for build in decision.status.failed}
    return {
        name: digest
        for name, digest in sorted(current.items())
        if name not in decision.orders.held
        and parse(workload.containers[name].image).digest is None
        and digest not in failed
        and runs_everywhere(decision.evidence, name, digest)
    }


def _starts(
    decision: Decision, workload: Workload, drifted: Mapping[str, str], adopted: Mapping[str, str]
) -> None:
    """This decision starts a refresh of ``drifted`` (and pins ``adopted``): what it moves,
    and the pulls its patch causes per account (:mod:`~imagerefresh.planner.pulls`)."""
    decision.outcome.starting = dict(drifted)
    changes = [
        (name, parse(workload.containers[name].image).pinned(digest).familiar)
        for name, digest in {**adopted, **drifted}.items()
    ]
    decision.outcome.pulls = patch_pulls(changes, decision.evidence, decision.ctx.nodes)
