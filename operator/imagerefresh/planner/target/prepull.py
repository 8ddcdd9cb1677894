"""Pre-pull: the new digests go onto the workload's nodes before the workload is switched.

The spec's step k, for a target with ``prePull``. A DaemonSet's rollout kills each node's old
pod before the new one is pulled: on a slow link the node runs without its agent for as long
as the pull takes, and a pull that fails is found only after the old pod is gone. So, once a
refresh may start (the target is not Locked, a window is open, it is not a follow-up), it first
pulls its digests onto the nodes the workload runs on — for a DaemonSet the nodes of its pods;
for a Deployment or StatefulSet the nodes its pods run on now (best effort: surge pods may land
elsewhere) — skipping, and naming, nodes that are not Ready or are cordoned (known when the
operator reads nodes). One helper pod per node does the pull (:mod:`~imagerefresh.planner.
helperpod`). A node holds an image when its kubelet reports the helper's container at the
digest, when a pod of the workload there runs it, or when the node's ``status.images`` lists it.

- The intent (``status.targets[].prePull``) is recorded before the first helper pod is created.
  Each helper pod is charged the pulls it causes as it is created — never from the intent, which
  anyone may write into status: a pre-pull carried on by a later tick, a restart or a new
  leader charges only the helpers it creates, and the patch that follows charges nothing for
  the images every node is proven to hold (its pods find them there).
- While nodes are missing an image the target is ``Refreshing`` ("pre-pulling n/m"), ticked
  again within seconds; the pre-pull is bounded by the target's progress deadline.
- A node whose pull fails (the kubelet's reason), or a pre-pull out of time, holds the refresh:
  ``Waiting``, ``PrePullFailed``, naming the node. It is not retried until a reset or a new
  digest — a pull that fails for auth, a rate limit or a full disk does not fix itself, and
  retrying it would spend pulls in a loop.
- Helper pods are kept only while the pre-pull needs them: every other one found for the
  workload is deleted, so a crash, a failover, a failure or a patch leaves none behind.
- Windows gate its start, not its end: a pre-pull in flight when its window closes (or started
  by a one-off override) is carried to its patch — the refresh started inside the window. A
  failed one stays failed across windows and locks.
- Lockstep: a target pre-pulling is not starting, so its group's other members wait; each
  member pre-pulls on its own, and the group switches once every member's nodes hold D.
"""

from __future__ import annotations

from datetime import timedelta

from imagerefresh.models import Phase, PrePullFailure, PrePullIntent, format_duration
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import HelperPodCreate
from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.helperpod import HelperPod, helper_manifest
from imagerefresh.planner.proof import holds_on, pre_pull_nodes
from imagerefresh.planner.pulls import helper_pulls
from imagerefresh.planner.target.decision import Decision, TargetOutcome
from imagerefresh.reference import parse

__all__ = ["PRE_PULL_POLL", "carried_pre_pull", "pre_pull", "wants_pre_pull"]

PRE_PULL_POLL = timedelta(seconds=5)  # how soon a pre-pull in flight is looked at again
_NAMED = 8  # nodes a message names; it counts the rest


def wants_pre_pull(decision: Decision) -> bool:
    """Whether this target's refreshes pre-pull (the target's prePull, else the policy's)."""
    return decision.ctx.spec.pre_pulls(decision.target)


def carried_pre_pull(
    decision: Decision, workload: Workload, drifted: dict[str, str]
) -> PrePullIntent | None:
    """The recorded pre-pull of exactly ``drifted``'s digests, if this target pre-pulls.

    The refresh step keeps a failed one whatever holds the refresh (a closed window, a lock),
    so a failure is retried only after a reset or for a new digest; and carries one in flight
    to its patch past the end of the window it started in (the refresh started inside it).
    """
    before = decision.pre_pull
    if before is None or not wants_pre_pull(decision):
        return None
    return before if before.images == _images(workload, drifted) else None


def _images(workload: Workload, drifted: dict[str, str]) -> dict[str, str]:
    return {
        name: parse(workload.containers[name].image).pinned(digest).familiar
        for name, digest in drifted.items()
    }


def pre_pull(
    decision: Decision, workload: Workload, drifted: dict[str, str], plan: str, note: str
) -> TargetOutcome | None:
    """Carry the pre-pull of ``drifted`` (container → digest) one step; None once every node
    holds every image, when the refresh may start."""
    images = _images(workload, drifted)
    before = decision.pre_pull
    intent = carried_pre_pull(decision, workload, drifted)
    if not decision.ctx.pre_pull_pods:
        return _wait(
            decision,
            reasons.PRE_PULL_NOT_ALLOWED,
            f"drift: {plan}; spec.prePull asks for helper pods, but this operator may not create "
            "pods: nothing is pulled or patched — install it with the chart value "
            f"prePull.enabled=true (imagerefresh run --pre-pull-pods), or set prePull: false{note}",
        )
    if intent is not None and intent.failure is not None:
        decision.update(pre_pull=intent)
        return _failed(decision, plan, intent.failure, note, new=False)
    helpers = decision.evidence.helpers
    if helpers is None:
        decision.update(pre_pull=before)  # unreadable: nothing decided on it, nothing dropped
        decision.outcome.degraded = True
        why = decision.evidence.helpers_error or "they were not read this tick"
        return decision.finish(
            Phase.ERROR,
            f"drift: {plan}; the pre-pull helper pods could not be read ({why}); nothing is "
            f"pulled or patched on it{note}",
        )
    nodes, skipped = pre_pull_nodes(decision.evidence, decision.ctx.nodes)
    pairs = list(images.items())
    held = {n for n in nodes if holds_on(decision.evidence, decision.ctx.nodes, n, pairs)}
    missing = [node for node in nodes if node not in held]
    if not missing:
        if intent is not None:
            decision.update(pre_pull=intent)
            decision.outcome.pre_pulled = True
            decision.outcome.helpers_kept.update(h.name for h in helpers)
        return None
    starts = intent is None
    if intent is None:
        intent = PrePullIntent(images=images, started_at=decision.ctx.now)
    failure = _failure(decision, intent, helpers, missing)
    if failure is not None:
        decision.update(pre_pull=intent.model_copy(update={"failure": failure}))
        return _failed(decision, plan, failure, note, new=True)
    creates = _keep_or_create(decision, workload, helpers, missing, images)
    if creates and decision.orders.deferred is not None:
        # Each helper pod's pulls are charged as it is created: what the budget cannot cover
        # waits, with the intent (if any) kept as it was.
        decision.update(pre_pull=None if starts else intent)
        decision.outcome.rate_limited = True
        return decision.finish(Phase.DEFERRED, f"deferred: {decision.orders.deferred}{note}")
    decision.outcome.helper_creates += creates
    for create in creates:
        for account, pulls in create.pulls:
            decision.outcome.pulls[account] = decision.outcome.pulls.get(account, 0) + pulls
    if starts:
        decision.event(
            "Normal",
            reasons.PRE_PULLING,
            f"pre-pulling {plan} onto {len(missing)} node(s) before the patch: {_names(missing)}",
        )
    decision.update(pre_pull=intent)
    poll = decision.ctx.now + PRE_PULL_POLL
    wake = decision.outcome.wake_at
    decision.outcome.wake_at = poll if wake is None else min(wake, poll)
    left = f"; skipped (not Ready, or cordoned): {_names(skipped)}" if skipped else ""
    return decision.finish(
        Phase.REFRESHING,
        f"pre-pulling {plan}: {len(held)}/{len(nodes)} nodes hold it, waiting for "
        f"{_names(missing)}{left}{note}",
    )


def _failure(
    decision: Decision, intent: PrePullIntent, helpers: tuple[HelperPod, ...], missing: list[str]
) -> PrePullFailure | None:
    """A node whose pull failed, or the pre-pull out of time."""
    wanted = set(intent.images.values())
    for helper in sorted(helpers, key=lambda h: h.name):
        if helper.node in missing and helper.failure and set(helper.images) == wanted:
            return PrePullFailure(node=helper.node, reason=helper.failure)
    timeout = decision.rollout_timeout
    if decision.ctx.now - intent.started_at > timeout:
        return PrePullFailure(
            node=missing[0],
            reason=(
                f"not pulled within the rollout timeout ({format_duration(timeout)}); still "
                f"missing on {_names(missing)}"
            ),
        )
    return None


def _keep_or_create(
    decision: Decision,
    workload: Workload,
    helpers: tuple[HelperPod, ...],
    missing: list[str],
    images: dict[str, str],
) -> list[HelperPodCreate]:
    """Keep the helper pods of this pre-pull (they are its proof); the helper to create on each
    missing node that has none, each charged the pulls it causes. Every other helper found is
    deleted (:func:`~..tick.plan_tick`)."""
    wanted = tuple(sorted(images.values()))
    ours = [h for h in helpers if h.images == wanted and h.node is not None]
    decision.outcome.helpers_kept.update(h.name for h in ours)
    placement = workload.placement
    if placement is None:
        return []
    covered = {h.node for h in ours}
    repositories = frozenset(parse(image).repository for image in wanted)
    pulls = tuple(sorted(helper_pulls(wanted, decision.evidence.identities).items()))
    return [
        HelperPodCreate(
            decision.key,
            node,
            helper_manifest(
                workload.key.namespace,
                placement,
                node,
                wanted,
                decision.rollout_timeout,
                decision.ctx.pre_pull_max_deadline,
                decision.ctx.pre_pull_run_as,
            ),
            repositories,
            pulls,
        )
        for node in missing
        if node not in covered
    ]


def _failed(
    decision: Decision, plan: str, failure: PrePullFailure, note: str, *, new: bool
) -> TargetOutcome:
    message = (
        f"drift: {plan}; the pre-pull failed on node {failure.node}: {failure.reason}. Nothing "
        "was patched. Fix what it names (a pull secret, the registry, disk space, an admission "
        "rule), then "
        f"reset to try again: imagerefresh reset {decision.ctx.policy}; a new digest is "
        f"pre-pulled afresh{note}"
    )
    return _wait(decision, reasons.PRE_PULL_FAILED, message, new=new)


def _wait(decision: Decision, reason: str, message: str, *, new: bool = False) -> TargetOutcome:
    """Waiting, with one Warning when the hold is new (not on every tick it lasts)."""
    if new or decision.previous_phase is not Phase.WAITING or decision.previous_message != message:
        decision.event("Warning", reason, message)
    return decision.finish(Phase.WAITING, message)


def _names(nodes: list[str]) -> str:
    shown = ", ".join(nodes[:_NAMED])
    return shown + (f" and {len(nodes) - _NAMED} more" if len(nodes) > _NAMED else "")
