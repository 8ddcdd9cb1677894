"""Scope and shape: whether the operator may decide on the target at all, and on which containers.

The first step of a target's decision (the spec's step a, with the suspension of step 1). Each
of these ends the decision with nothing patched: a suspended policy; a namespace the policy may
not reach; containers another target or policy claims; a workload that could not be read
(Error: unreadable evidence never becomes a patch) or does not exist (Missing); a declared
container missing from the pod template, a live image in another repository than the tracked
one, or an update strategy the operator cannot roll out (OnDelete) — all Conflict, because the
operator changes digests and tags only, never repositories or workloads' shapes.

Before the shape is judged, what is in play is recorded in status for every declared container:
its tracked reference, the desired digest, the live image, the digests its pods run, its pull
policy and whether its pods would restart offline (:mod:`imagerefresh.offline`) — so even a
Conflict shows what the operator saw.
"""

from __future__ import annotations

from imagerefresh.models import (
    ContainerSpec,
    ContainerStatus,
    OfflineStatus,
    Phase,
    TargetSpec,
    WorkloadKind,
)
from imagerefresh.offline import OfflineVerdict, offline_readiness
from imagerefresh.planner.evidence import TargetKey, Workload
from imagerefresh.planner.target.decision import (
    Decision,
    TargetOutcome,
    normalised,
    replace_status,
)
from imagerefresh.reference import InvalidReference, parse
from imagerefresh.rollout import RolloutState

__all__ = ["admit", "shape_conflict"]


def admit(decision: Decision, allowed: bool, claimed: str | None) -> Workload | TargetOutcome:
    """The workload, when the decision may go on with it; otherwise the outcome that ends it.

    ``allowed``: the policy may reach the target's namespace; ``claimed``: why another target or
    policy claims the same containers, if one does.
    """
    refused = _refused(decision, allowed, claimed)
    if refused is not None:
        # Not assessed this tick: an earlier verdict would be a report of another time.
        decision.outcome.status = replace_status(
            refused.status,
            containers=tuple(
                c.model_copy(update={"offline": None}) for c in refused.status.containers
            ),
        )
        return decision.outcome
    workload = decision.evidence.workload
    if workload is None:
        # Not assessed either: the verdict of the workload that was there is of another time.
        decision.update(
            pending=None,
            containers=tuple(
                c.model_copy(update={"offline": None}) for c in decision.status.containers
            ),
        )
        return decision.finish(
            Phase.MISSING,
            f"{decision.key} does not exist; create it or remove it from the policy",
        )
    offline = offline_readiness(
        [c.template_image for c in workload.containers.values()],
        [pod.proof for pod in decision.evidence.pods],
        [c.name for c in decision.target.containers if c.name in workload.containers],
        decision.ctx.nodes,
        scheduled=workload.expected_pods if workload.key.kind is WorkloadKind.DAEMONSET else None,
    )
    decision.update(
        containers=tuple(
            _container_status(decision, c, workload, offline.get(c.name))
            for c in decision.target.containers
        )
    )
    conflict = shape_conflict(decision.target, decision.key, workload)
    if conflict is not None:
        return decision.finish(Phase.CONFLICT, conflict)
    return workload


def _refused(decision: Decision, allowed: bool, claimed: str | None) -> TargetOutcome | None:
    """What ends the decision before the workload is looked at."""
    if decision.ctx.spec.suspend:
        return decision.finish(Phase.SUSPENDED, "the policy is suspended")
    if not allowed:
        return decision.finish(
            Phase.CONFLICT,
            f"{decision.key} is outside the policy's namespace and the operator's allow-list "
            "does not permit it; allow the namespace pair in the operator configuration "
            "or move the policy",
        )
    if claimed is not None:
        return decision.finish(Phase.CONFLICT, claimed)
    if decision.evidence.error is not None:
        decision.outcome.degraded = True
        return decision.finish(
            Phase.ERROR, f"could not read {decision.key}: {decision.evidence.error}"
        )
    return None


def _container_status(
    decision: Decision,
    container: ContainerSpec,
    workload: Workload,
    offline: OfflineVerdict | None,
) -> ContainerStatus:
    live = workload.containers.get(container.name)
    running = sorted(
        {
            digest
            for pod in decision.evidence.pods
            if (digest := pod.running.get(container.name)) is not None
        }
    )
    return ContainerStatus(
        name=container.name,
        tracked=str(container.tracked),
        desired=decision.desired(container),
        live=normalised(live.image) if live else None,
        running=tuple(running),
        pull_policy=live.pull_policy if live else None,
        offline=OfflineStatus(ready=offline.ready, reason=offline.reason, nodes=offline.nodes)
        if offline is not None
        else None,
    )


def shape_conflict(target: TargetSpec, key: TargetKey, workload: Workload) -> str | None:
    """Why ``workload`` cannot be refreshed as ``target`` declares it (a Conflict), if it
    cannot: a declared container missing, a live image in another repository (or none that
    parses), an update strategy the operator cannot roll out."""
    for container in target.containers:
        live = workload.containers.get(container.name)
        if live is None:
            names = ", ".join(workload.containers) or "none"
            return (
                f"container {container.name!r} is not in the pod template of {key} "
                f"(it has: {names}); fix the policy"
            )
        try:
            live_repository = parse(live.image).repository
        except InvalidReference as error:
            return f"container {container.name!r} runs an unparseable image: {error}"
        if live_repository != container.tracked.repository:
            return (
                f"container {container.name!r} runs {live_repository}, but the policy tracks "
                f"{container.tracked.repository}; imagerefresh never changes repositories — "
                "fix the policy or the workload"
            )
    if workload.verdict.state is RolloutState.UNSUPPORTED:
        return f"{workload.verdict.message}; use RollingUpdate to have it refreshed"
    return None
