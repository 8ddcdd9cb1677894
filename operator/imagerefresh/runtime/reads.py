"""The API half of a tick's evidence: the policy as the planner sees it (:mod:`.policyview`),
its workloads, pods and pull secrets, and (with node reads on) the nodes' image lists, shared
with the policies ticking together (:mod:`.nodes`).

Reads run concurrently on threads (the official Kubernetes client is synchronous), bounded by
the operator's configuration, and are reduced as they arrive to what a tick keeps. Every failure
becomes explicit evidence — a target whose reads failed carries the error — so the planner can
fail closed instead of mistaking silence for an answer. What each container's tag is to be
resolved with (its pull secret's credentials) is decided here too; the registry is asked in
:mod:`.answers`.

With watches on, workloads and pods come from the watch-fed copies (:mod:`.watches`) wherever
those are synced, and from the API server wherever they are not: a tick never learns which.

**A verdict that writes reads the object, not a copy.** A copy may lag behind the API server
— by an event in flight, or by a stream that fell silent and is not yet taken for dead — and a
verdict drawn from a stale copy writes something wrong for good: our own landed patch read as
someone's revert (a contested attempt, the refresh dropped, a failing build never rolled back),
a rollout that progressed read as stalled (rolled back, its good build barred). So a target's
workload *and its pods* are read directly when its copy:

- is older than our last landed patch of it: its ``metadata.generation`` below the one the
  patch produced, as the operator remembers it (:mod:`.watches`, which then reports nothing
  for the copy) or as status claims it (``pending.generation``). Status is a claim anyone with
  access to the status subresource may write: a forged, higher generation costs a direct read
  and decides nothing — the verdict is still drawn from the object as the API server holds it;
- or could yield a verdict that writes on the pending patch of ours in flight: the workload,
  or the patch's images, are not in it (a deletion, a revert, a contest, a patch that never
  landed: each counts or sends something), its progress deadline has passed (a failure, a
  rollback, builds barred on what the pods ran), or the controller reports the rollout failed.

Pods feed the same verdicts (a failed build is barred only if its pods ran it; a refresh
succeeds on what they run), from a stream of their own that may lag the workload's. Besides
being read directly with their workload above, the pods of a rollout in flight are read
directly when its copy reports it settled but its status counts another number of pods than
the pods' copy holds: one of the two streams is behind, and the moment of a success verdict is
no time to guess which. The rest — an idle target, a rollout in progress — is decided on the
copies, and a write drawn from them still carries its precondition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from imagerefresh.credentials import ANONYMOUS, Credentials, credentials_for
from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.kube.pods import HelperPodApi
from imagerefresh.kube.readcache import ReadCache
from imagerefresh.kube.selectors import InvalidSelector, label_selector
from imagerefresh.models import ContainerSpec, PendingRefresh
from imagerefresh.offline import NodeInventory
from imagerefresh.planner import ObservedPod, PolicyView, TargetKey, Workload, in_flight
from imagerefresh.planner.helperpod import LABEL as HELPER_LABEL
from imagerefresh.planner.helperpod import HelperPod
from imagerefresh.reference import InvalidReference, parse, registry_host
from imagerefresh.resolver import ResolutionKey
from imagerefresh.rollout import RolloutState, rollout_verdict
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.nodes import NodeReads
from imagerefresh.runtime.policyview import policy_view
from imagerefresh.runtime.revisions import PreviousRevisions
from imagerefresh.runtime.schedule import on_clock
from imagerefresh.runtime.watches import EvidenceWatches, WatchedPod

__all__ = [
    "TargetReads",
    "WorkloadRead",
    "owned_helper",
    "read_targets",
    "unreadable_message",
]

log = structlog.get_logger(__name__)


@dataclass
class WorkloadRead:
    """One target's reads, reduced as they arrive to what the rest of the tick keeps.

    The API's objects are large (a Deployment with its managedFields is several KiB of JSON,
    tens of KiB as Python objects) and a round of many policies ticking together holds all of
    theirs at once: pods become :class:`ObservedPod` as soon as they are listed, and the
    workload becomes :class:`Workload` plus a reference (for events) once the reads are done.
    """

    workload: dict[str, Any] | None = None
    parsed: Workload | None = None
    pods: tuple[ObservedPod, ...] = ()
    # Pre-pull helper pods found for it (owner reference and label): None when not read.
    helpers: tuple[HelperPod, ...] | None = None
    helpers_error: str | None = None
    secrets: list[dict[str, Credentials]] = field(default_factory=list)
    error: str | None = None
    unreadable: str | None = None  # an object the API returned that we cannot read
    watched: bool = False  # the workload came from a watch-fed copy
    direct_pods: bool = False  # its pods are read from the API server, never from a copy
    in_flight: bool = False  # a patch of ours is pending on it (status)
    # With a patch of ours in flight: the images of the workload's previous revision (what a
    # rollback may restore; None when none is kept or it was not read), and why not read.
    previous_template: dict[str, str] | None = None
    revisions_error: str | None = None


@dataclass(frozen=True, slots=True)
class OurWrite:
    """What status records of our patch on a target: the pending patch (None: none in
    flight) and the progress deadline it runs to. Claims, never permissions: each can at most
    make the workload be read directly."""

    pending: PendingRefresh | None
    timeout: timedelta


def _read_workload(
    api: KubeApi,
    key: TargetKey,
    watches: EvidenceWatches | None,
    ours: OurWrite | None = None,
    now: datetime | None = None,
) -> WorkloadRead:
    pending = ours.pending if ours is not None else None
    direct = False
    if watches is not None:
        known, workload = watches.workload(key)
        why = _stale_for_a_verdict(workload, ours, now) if known else None
        if known and why is None:
            return WorkloadRead(workload, watched=True, in_flight=pending is not None)
        if not known and watches.behind(key):
            why = "it is older than our last landed patch"
        if why is not None:
            log.debug("read directly: the copy may not decide", workload=str(key), why=why)
            direct = True
    try:
        found = api.read_workload(key.kind, key.namespace, key.name)
    except KubeError as error:
        return WorkloadRead(error=str(error))
    return WorkloadRead(found, direct_pods=direct, in_flight=pending is not None)


def _stale_for_a_verdict(
    copy: Mapping[str, Any] | None, ours: OurWrite | None, now: datetime | None
) -> str | None:
    """Why the copy of a workload may not be decided on (see the module docs); None: it may."""
    if ours is None or ours.pending is None:
        return None  # nothing of ours in flight: the planner draws no verdict that writes
    if copy is None:
        return "the workload our pending patch is on is not in it"
    pending = ours.pending
    metadata = copy.get("metadata") or {}
    generation = metadata.get("generation")
    if pending.generation is not None and (
        not isinstance(generation, int) or generation < pending.generation
    ):
        return (
            f"its generation {generation} is below the {pending.generation} status says our "
            "patch produced"
        )
    try:
        template = copy["spec"]["template"]["spec"]
        live = {
            c["name"]: c.get("image")
            for section in ("initContainers", "containers")
            for c in template.get(section) or ()
        }
        verdict = rollout_verdict(copy)
    except (KeyError, TypeError, ValueError, AttributeError):
        return "it cannot be read (the object decides how)"
    if any(live.get(name) != image for name, image in pending.images.items()):
        return "the images of our pending patch are not all in it"
    if verdict.state is RolloutState.FAILED and verdict.failed_since(pending.started_at):
        return "the controller reports our rollout failed"
    since = pending.progressed_at or pending.started_at
    if pending.settled_at is None and (now or datetime.now(UTC)) - since > ours.timeout:
        return "our rollout's progress deadline has passed"
    return None


def _read_secrets(api: KubeApi, key: TargetKey, read: WorkloadRead, cache: ReadCache) -> None:
    assert read.workload is not None
    try:
        pod_spec = read.workload["spec"]["template"]["spec"]
        read.secrets = api.read_pull_secrets(key.namespace, pod_spec, cache)
    except KubeError as error:
        read.error = read.error or str(error)


def _read_pods(
    api: KubeApi, namespace: str, reads: list[WorkloadRead], watches: EvidenceWatches | None
) -> None:
    selectors = [(read.workload or {})["spec"].get("selector") or {} for read in reads]
    if watches is not None:
        unknown = _watched_pods(watches, namespace, reads, selectors)
        if not unknown:
            return
        reads, selectors = [read for read, _ in unknown], [selector for _, selector in unknown]
    for read, pods in zip(reads, api.list_pods_of(namespace, selectors), strict=True):
        if isinstance(pods, KubeError):
            read.error = str(pods)
            continue
        try:
            read.pods = tuple(ObservedPod.from_api(pod) for pod in pods)
        except (KeyError, TypeError, ValueError) as error:
            read.unreadable = unreadable_message(error)


def _watched_pods(
    watches: EvidenceWatches,
    namespace: str,
    reads: list[WorkloadRead],
    selectors: list[Mapping[str, Any]],
) -> list[tuple[WorkloadRead, Mapping[str, Any]]]:
    """The workloads' pods from the watched copy, where it may answer; the reads (and their
    selectors) it may not answer for, to be read directly."""
    asked: list[tuple[WorkloadRead, Mapping[str, Any]]] = []
    unknown: list[tuple[WorkloadRead, Mapping[str, Any]]] = []
    for read, selector in zip(reads, selectors, strict=True):
        try:
            label_selector(selector)  # one that cannot be a query is reported by the direct read
        except InvalidSelector:
            unknown.append((read, selector))
            continue
        (unknown if read.direct_pods else asked).append((read, selector))
    if not asked:
        return unknown
    found = watches.pods_of(namespace, [selector for _, selector in asked])
    for (read, selector), watched in zip(asked, found, strict=True):
        if watched is None or (read.in_flight and _counts_disagree(read, watched)):
            unknown.append((read, selector))
            continue
        unreadable = next((p.pod for p in watched if isinstance(p.pod, str)), None)
        if unreadable is not None:
            read.unreadable = unreadable
        else:
            read.pods = tuple(p.pod for p in watched if not isinstance(p.pod, str))
    return unknown


def _counts_disagree(read: WorkloadRead, watched: list[WatchedPod]) -> bool:
    """Whether a rollout the workload reports settled counts another number of pods than the
    pods' copy holds (one of the two streams is behind: the pods are read directly)."""
    workload = read.workload or {}
    try:
        if not rollout_verdict(workload).settled:
            return False
        status = workload.get("status") or {}
        if workload.get("kind") == "DaemonSet":
            counted = int(status.get("currentNumberScheduled") or 0) + int(
                status.get("numberMisscheduled") or 0
            )
        else:
            counted = int(status.get("replicas") or 0)
    except (KeyError, TypeError, ValueError, AttributeError):
        return True  # the direct read reports what cannot be read
    disagree = counted != sum(1 for pod in watched if pod.counted)
    if disagree:
        log.debug("read directly: the workload counts other pods than the copy holds")
    return disagree


def _read_helpers(api: KubeApi, namespace: str, reads: list[WorkloadRead]) -> None:
    """The helper pods of each workload in ``namespace``, from one LIST by label; a pod is a
    workload's only when its owner reference *and* its label name that workload's uid."""
    try:
        pods = HelperPodApi(api).list(namespace)
    except KubeError as error:
        for read in reads:
            read.helpers_error = str(error)
        return
    for read in reads:
        uid = ((read.workload or {}).get("metadata") or {}).get("uid")
        read.helpers = tuple(
            HelperPod.from_api(pod) for pod in pods if uid and owned_helper(pod, uid)
        )


def owned_helper(pod: Mapping[str, Any], uid: str) -> bool:
    """Whether ``pod`` is a helper of the workload ``uid``: its owner reference and its label
    both name it (anyone may label a pod; only an owner reference resolves)."""
    metadata = pod.get("metadata") or {}
    owners = metadata.get("ownerReferences") or ()
    labelled = (metadata.get("labels") or {}).get(HELPER_LABEL) == uid
    return labelled and any(isinstance(o, dict) and o.get("uid") == uid for o in owners)


def unreadable_message(error: Exception) -> str:
    return f"the API returned an object we cannot read: {error!r}"


def _reduced(read: WorkloadRead) -> WorkloadRead:
    """What the tick keeps of a target's reads (see :class:`WorkloadRead`)."""
    if read.error is not None:
        return WorkloadRead(error=read.error)  # as if nothing was read
    if read.workload is None:
        return read
    try:
        read.parsed = Workload.from_api(read.workload)
    except (KeyError, TypeError, ValueError) as error:
        read.unreadable = unreadable_message(error)
    metadata = read.workload.get("metadata") or {}
    read.workload = {
        "apiVersion": read.workload.get("apiVersion"),
        "kind": read.workload.get("kind"),
        "metadata": {
            key: metadata[key]
            for key in ("name", "namespace", "uid", "resourceVersion")
            if key in metadata
        },
    }
    return read


async def _read_all(
    api: KubeApi,
    keys: list[TargetKey],
    concurrency: int,
    shared: ReadCache | None,
    pre_pulling: frozenset[TargetKey] = frozenset(),
    watches: EvidenceWatches | None = None,
    ours: Mapping[TargetKey, OurWrite] | None = None,
    now: datetime | None = None,
    flying: frozenset[TargetKey] = frozenset(),
    revisions: PreviousRevisions | None = None,
) -> dict[TargetKey, WorkloadRead]:
    """Every target's workload, then (concurrently) its pods and pull secrets.

    The tick's reads share a :class:`ReadCache` (each ServiceAccount and pull secret is read
    once per tick, not once per target — or once per window across the policies ticking
    together, with ``shared``) and the pods of one namespace's targets are listed together,
    in one request when their selectors allow it.
    """
    gate = asyncio.Semaphore(concurrency)
    cache = shared if shared is not None else ReadCache()

    async def bounded(call: Callable[..., Any], *args: Any) -> Any:
        async with gate:
            return await asyncio.to_thread(call, api, *args)

    recorded = ours or {}
    found = await asyncio.gather(
        *(bounded(_read_workload, key, watches, recorded.get(key), now) for key in keys)
    )
    reads = dict(zip(keys, found, strict=True))
    present = {key: read for key, read in reads.items() if read.workload is not None}
    by_namespace: dict[str, list[WorkloadRead]] = {}
    for key, read in present.items():
        by_namespace.setdefault(key.namespace, []).append(read)
    helpers: dict[str, list[WorkloadRead]] = {}
    for key, read in present.items():
        if key in pre_pulling:
            helpers.setdefault(key.namespace, []).append(read)
    await asyncio.gather(
        *(
            bounded(_read_pods, namespace, group, watches)
            for namespace, group in by_namespace.items()
        ),
        *(bounded(_read_helpers, namespace, group) for namespace, group in helpers.items()),
        *(bounded(_read_secrets, key, read, cache) for key, read in present.items()),
        *(
            bounded(_read_revisions, read, revisions)
            for key, read in present.items()
            if key in flying
        ),
    )
    return {key: _reduced(read) for key, read in reads.items()}


def _read_revisions(api: KubeApi, read: WorkloadRead, revisions: PreviousRevisions | None) -> None:
    """The previous revision of a workload with a patch of ours in flight (what a rollback
    may restore); a failure to read it proves nothing, and says why."""
    assert read.workload is not None
    reader = revisions if revisions is not None else PreviousRevisions()
    read.previous_template, read.revisions_error = reader.read(api, read.workload)
    if read.revisions_error is not None:
        log.warning("previous revision unreadable", error=read.revisions_error)


def _our_writes(view: PolicyView, keys: list[TargetKey]) -> dict[TargetKey, OurWrite]:
    """What status records of our patches on the policy's targets (see :class:`OurWrite`)."""
    recorded = {(t.kind, t.namespace, t.name): t.pending for t in view.status.targets}
    ours = {}
    for index, target in enumerate(view.spec.targets):
        key = keys[index]
        pending = recorded.get((key.kind, key.namespace, key.name))
        timeout = target.rollout_timeout or view.spec.rollout_timeout
        ours[key] = OurWrite(pending, timeout)
    return ours


def _pre_pulling(view: PolicyView, keys: list[TargetKey]) -> frozenset[TargetKey]:
    """The targets whose helper pods are read: those that pre-pull, and those whose status
    still records a pre-pull (turned off since: its helpers are found, and deleted). Policies
    without prePull cost no read."""
    recorded = {
        (t.kind, t.namespace, t.name) for t in view.status.targets if t.pre_pull is not None
    }
    wanted = set()
    for index, target in enumerate(view.spec.targets):
        key = keys[index]
        if view.spec.pre_pulls(target) or (key.kind, key.namespace, key.name) in recorded:
            wanted.add(key)
    return frozenset(wanted)


def _identities(
    chosen: Mapping[tuple[TargetKey, str], Credentials | None],
) -> tuple[dict[TargetKey, dict[str, str]], dict[tuple[str, str], str]]:
    """Each target's account per registry host, named by its pull secret (or ``anonymous``),
    and the ledger's account key behind each (host, name).

    The name is the pull secret's ``namespace/name``, never a username. Budgets are per
    account, so pull secrets holding the same credential share one name (the first in order)
    and the planner spends one budget for them, not one each.
    """
    names: dict[tuple[str, str], str] = {}
    for (_, host), credentials in chosen.items():
        account, name = (
            (credentials.account, credentials.identity) if credentials else (ANONYMOUS, ANONYMOUS)
        )
        names[(host, account)] = min(name, names.get((host, account), name))
    identities: dict[TargetKey, dict[str, str]] = {}
    for (key, host), credentials in chosen.items():
        account = credentials.account if credentials else ANONYMOUS
        identities.setdefault(key, {})[host] = names[(host, account)]
    accounts = {(host, name): account for (host, account), name in names.items()}
    return identities, accounts


def _runs_tracked(workload: Workload | None, container: ContainerSpec) -> bool:
    """Whether the live container runs the tracked repository: only then is its registry
    asked (a Conflict is never patched, so its tag is nobody's business)."""
    live = workload.containers.get(container.name) if workload is not None else None
    if live is None:
        return False
    try:
        return parse(live.image).repository == container.tracked.repository
    except InvalidReference:
        return False


@dataclass
class TargetReads:
    """A tick's API reads, done: what the registry is to be asked, and with which account."""

    view: PolicyView
    claims: Mapping[tuple[TargetKey, str], str]
    reads: dict[TargetKey, WorkloadRead] = field(default_factory=dict)
    # (target, container) → what resolves its tracked tag (unpinned, running the tracked repo)
    wanted: dict[tuple[TargetKey, str], ResolutionKey] = field(default_factory=dict)
    identities: dict[TargetKey, dict[str, str]] = field(default_factory=dict)
    accounts: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, name) → account
    # (target, registry host) → the pull secret's credentials the registry is asked with
    credentials: dict[tuple[TargetKey, str], Credentials | None] = field(default_factory=dict)
    # The nodes' image lists (offline evidence); None when the operator may not read nodes.
    nodes: NodeInventory | None = None


def _shared(reads: ReadCache | None, round_at: float | None) -> ReadCache | None:
    """``reads`` as the ticks of the round of ``round_at`` (epoch seconds) see them."""
    if reads is None or round_at is None:
        return reads
    return reads.for_round(on_clock(reads.clock, round_at))


async def read_targets(
    policy: Mapping[str, Any],
    *,
    api: KubeApi,
    config: OperatorConfig,
    claimed_elsewhere: Mapping[tuple[TargetKey, str], str] | None = None,
    follow_up: bool = False,
    shared_reads: ReadCache | None = None,
    asked_at: float | None = None,
    round_at: float | None = None,
    nodes: NodeReads | None = None,
    watches: EvidenceWatches | None = None,
    now: datetime | None = None,
    revisions: PreviousRevisions | None = None,
) -> TargetReads:
    """The API half of a tick's evidence: the policy's view, its workloads, pods and pull
    secrets, and what each container's tag is to be resolved with (see :func:`gather`).
    ``nodes``: where the nodes' image lists come from (none: node reads are off).
    ``round_at`` (epoch seconds): an interval tick's grid instant — it shares the reads of its
    round in ``shared_reads`` (see :meth:`ReadCache.for_round`); a tick asked for shares none.
    ``watches``: the watch-fed copies of workloads and pods, read where synced and fit for
    the verdicts they may lead to (none: every read goes to the API server). ``now``: the
    instant a progress deadline is measured at (the wall clock when None)."""
    view = policy_view(policy, follow_up=follow_up)
    spec = view.spec
    found = TargetReads(view, claimed_elsewhere or {})
    if spec.suspend:
        return found
    keys = [view.target_key(index) for index in range(len(spec.targets))]
    reachable = [k for k in keys if config.namespaces.allows(view.namespace, k.namespace)]
    if follow_up:
        flying = in_flight(spec, view.status, view.namespace).workloads
        reachable = [k for k in reachable if k in flying]
    workloads = _read_all(
        api,
        reachable,
        config.kube_concurrency,
        _shared(shared_reads, round_at) if asked_at is None else None,
        _pre_pulling(view, keys) if config.pre_pull_pods and not follow_up else frozenset(),
        watches,
        _our_writes(view, keys) if watches is not None else None,
        now,
        in_flight(spec, view.status, view.namespace).workloads,
        revisions,
    )
    if nodes is not None and nodes.enabled and reachable:
        found.reads, found.nodes = await asyncio.gather(workloads, nodes.current(asked_at))
    else:
        found.reads = await workloads
    chosen: dict[tuple[TargetKey, str], Credentials | None] = {}
    for index, target in enumerate(spec.targets):
        key = keys[index]
        read = found.reads.get(key)
        if read is None or read.workload is None:
            continue
        for container in target.containers:
            domain = container.tracked.domain
            credentials = credentials_for(domain, read.secrets)
            chosen[(key, registry_host(domain))] = credentials
            if container.digest is None and _runs_tracked(read.parsed, container):
                found.wanted[(key, container.name)] = ResolutionKey.of(
                    container.tracked, credentials
                )
    found.identities, found.accounts = _identities(chosen)
    found.credentials = chosen
    return found
