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

- The intent (``status.targets[].prePull``) is recorded before the first helper pod is created,
  and the pre-pull's pulls are charged to the pull budget then, once: a pre-pull carried on by
  a later tick, a restart or a new leader charges nothing, and neither does the patch that
  follows it (its pods find the images on their nodes).
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
from imagerefresh.offline import held_name
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import HelperPodCreate
from imagerefresh.planner.evidence import ANONYMOUS, Account, Resolved, Workload
from imagerefresh.planner.helperpod import HelperPod, helper_manifest
from imagerefresh.planner.target.decision import Decision, TargetOutcome
from imagerefresh.reference import parse, registry_host

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
    nodes, skipped = _nodes(decision, workload)
    held = {node for node in nodes if _holds(decision, workload, helpers, node, images)}
    missing = [node for node in nodes if node not in held]
    if not missing:
        if intent is not None:
            decision.update(pre_pull=intent)
            decision.outcome.pre_pulled = True
            decision.outcome.helpers_kept.update(h.name for h in helpers)
        return None
    if intent is None:
        if decision.orders.deferred is not None:
            decision.outcome.rate_limited = True
            return decision.finish(Phase.DEFERRED, f"deferred: {decision.orders.deferred}{note}")
        intent = PrePullIntent(images=images, started_at=decision.ctx.now)
        decision.outcome.pulls = _charge(decision, workload, images, len(missing))
        decision.event(
            "Normal",
            reasons.PRE_PULLING,
            f"pre-pulling {plan} onto {len(missing)} node(s) before the patch: {_names(missing)}",
        )
    decision.update(pre_pull=intent)
    failure = _failure(decision, intent, helpers, missing)
    if failure is not None:
        decision.update(pre_pull=intent.model_copy(update={"failure": failure}))
        return _failed(decision, plan, failure, note, new=True)
    _keep_or_create(decision, workload, helpers, missing, images)
    poll = decision.ctx.now + PRE_PULL_POLL
    wake = decision.outcome.wake_at
    decision.outcome.wake_at = poll if wake is None else min(wake, poll)
    left = f"; skipped (not Ready, or cordoned): {_names(skipped)}" if skipped else ""
    return decision.finish(
        Phase.REFRESHING,
        f"pre-pulling {plan}: {len(held)}/{len(nodes)} nodes hold it, waiting for "
        f"{_names(missing)}{left}{note}",
    )


def _nodes(decision: Decision, workload: Workload) -> tuple[list[str], list[str]]:
    """The nodes to pre-pull onto, and those skipped (not Ready, or cordoned)."""
    running = sorted({pod.scheduled for pod in decision.evidence.pods if pod.scheduled})
    inventory = decision.ctx.nodes
    if inventory is None or inventory.unreadable is not None:
        return running, []
    wanted, skipped = [], []
    for node in running:
        known = inventory.nodes.get(node)
        if known is not None and not (known.ready and known.schedulable):
            skipped.append(node)
        else:
            wanted.append(node)
    return wanted, skipped


def _digests(decision: Decision, container: str, digest: str) -> frozenset[str]:
    """The digests a kubelet may report for ``digest`` (a multi-platform index's children)."""
    found = decision.evidence.digests.get(container)
    if isinstance(found, Resolved) and found.digest == digest:
        return frozenset({digest, *found.children})
    return frozenset({digest})


def _holds(
    decision: Decision,
    workload: Workload,
    helpers: tuple[HelperPod, ...],
    node: str,
    images: dict[str, str],
) -> bool:
    """Whether ``node`` is proven to hold every image: a helper there pulled it, a pod of the
    workload there runs it, or the node lists it."""
    listed = decision.ctx.nodes.nodes.get(node) if decision.ctx.nodes is not None else None
    for container, image in images.items():
        digests = _digests(decision, container, parse(image).digest or "")
        if any(h.node == node and h.holds(image, digests) for h in helpers):
            continue
        pods = (p for p in decision.evidence.pods if p.scheduled == node)
        if any(p.running.get(container) in digests for p in pods):
            continue
        if listed is not None and held_name(image) in listed.images:
            continue
        return False
    return True


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
) -> None:
    """Keep the helper pods of this pre-pull (they are its proof); create one on each missing
    node that has none. Every other helper found is deleted (:func:`~..tick.plan_tick`)."""
    wanted = tuple(sorted(images.values()))
    ours = [h for h in helpers if h.images == wanted and h.node is not None]
    decision.outcome.helpers_kept.update(h.name for h in ours)
    placement = workload.placement
    if placement is None:
        return
    covered = {h.node for h in ours}
    repositories = frozenset(parse(image).repository for image in wanted)
    for node in missing:
        if node in covered:
            continue
        manifest = helper_manifest(
            workload.key.namespace,
            placement,
            node,
            wanted,
            decision.rollout_timeout,
            decision.ctx.pre_pull_max_deadline,
            decision.ctx.pre_pull_run_as,
        )
        decision.outcome.helper_creates.append(
            HelperPodCreate(decision.key, node, manifest, repositories)
        )


def _charge(
    decision: Decision, workload: Workload, images: dict[str, str], nodes: int
) -> dict[Account, int]:
    """The pulls a pre-pull costs, per account: each image once per node missing it."""
    per_account: dict[Account, set[str]] = {}
    for image in images.values():
        host = registry_host(parse(image).domain)
        identity = decision.evidence.identities.get(host, ANONYMOUS)
        per_account.setdefault((host, identity), set()).add(image)
    return {account: len(found) * nodes for account, found in per_account.items()}


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
    return _wait(decision, reasons.PRE_PULL_FAILED, message, warning=True, new=new)


def _wait(
    decision: Decision, reason: str, message: str, *, warning: bool = True, new: bool = False
) -> TargetOutcome:
    """Waiting, with one event when the hold is new (not on every tick it lasts)."""
    if new or decision.previous_phase is not Phase.WAITING or decision.previous_message != message:
        decision.event("Warning" if warning else "Normal", reason, message)
    return decision.finish(Phase.WAITING, message)


def _names(nodes: list[str]) -> str:
    shown = ", ".join(nodes[:_NAMED])
    return shown + (f" and {len(nodes) - _NAMED} more" if len(nodes) > _NAMED else "")
