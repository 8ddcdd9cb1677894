"""Gather a tick's evidence: read the policy's workloads, their pods and pull secrets, resolve.

This is the read half of the imperative shell. Reads run concurrently on threads (the
official Kubernetes client is synchronous), bounded by the operator's configuration. Every
failure becomes explicit evidence — a target whose reads failed carries the error, a digest
the registry would not give is :class:`~imagerefresh.planner.Unresolved` — so the planner
can fail closed instead of mistaking silence for an answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from pydantic import ValidationError

from imagerefresh.credentials import ANONYMOUS, Credentials, credentials_for
from imagerefresh.kube.api import KubeApi, ReadCache
from imagerefresh.kube.errors import KubeError
from imagerefresh.models import ContainerSpec, PolicySpec, PolicyStatus
from imagerefresh.planner import (
    DigestOutcome,
    ObservedPod,
    PolicyView,
    Resolved,
    TargetEvidence,
    TargetKey,
    TickInput,
    Unresolved,
    Workload,
    in_flight,
)
from imagerefresh.planner.evidence import SignatureOutcome, SignaturesUnreadable
from imagerefresh.planner.windows import WINDOW_OVERRIDE_ANNOTATION
from imagerefresh.ratelimit import BudgetSnapshot, RateLimitLedger
from imagerefresh.reference import InvalidReference, parse, registry_host
from imagerefresh.registry import RegistryUnavailable
from imagerefresh.resolver import (
    ChildrenOutcome,
    ResolutionKey,
    ResolutionOutcome,
    SharedResolver,
)
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.verifier import SignatureVerifier, VerifyRequest

__all__ = [
    "RESET_ANNOTATION",
    "WINDOW_OVERRIDE_ANNOTATION",
    "Gathered",
    "PolicyUnreadable",
    "TargetReads",
    "assemble",
    "budgets",
    "gather",
    "policy_view",
    "read_targets",
    "resolve_digests",
    "verify_signatures",
]

log = structlog.get_logger(__name__)

RESET_ANNOTATION = "images.tracebloc.io/reset"


@dataclass
class _Read:
    """One target's reads, reduced as they arrive to what the rest of the tick keeps.

    The API's objects are large (a Deployment with its managedFields is several KiB of JSON,
    tens of KiB as Python objects) and a round of many policies ticking together holds all of
    theirs at once: pods become :class:`ObservedPod` as soon as they are listed, and the
    workload becomes :class:`Workload` plus a reference (for events) once the reads are done.
    """

    workload: dict[str, Any] | None = None
    parsed: Workload | None = None
    pods: tuple[ObservedPod, ...] = ()
    secrets: list[dict[str, Credentials]] = field(default_factory=list)
    error: str | None = None
    unreadable: str | None = None  # an object the API returned that we cannot read


@dataclass(frozen=True)
class Gathered:
    """The planner's input plus what the shell needs afterwards of each workload (for events:
    its apiVersion, kind and metadata name, namespace, uid and resourceVersion), and the
    ledger's account behind each (registry host, identity) the tick may spend."""

    tick: TickInput
    workloads: Mapping[TargetKey, Mapping[str, Any]]
    accounts: Mapping[tuple[str, str], str] = field(default_factory=dict)


class PolicyUnreadable(ValueError):
    """The policy's spec or status cannot be read: the tick does nothing but say so."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part  # "spec", "status", or "crd" (runtime/schema: the installed CRD)


def _errors(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in error.errors()[:5]
    )


def policy_view(policy: Mapping[str, Any], *, follow_up: bool = False) -> PolicyView:
    """The planner's view of a policy object; :class:`PolicyUnreadable` if it cannot be read.

    A status that does not parse fails closed — unless a new reset was requested, which
    rebuilds the status from live evidence (the tick then starts from an empty one). Only a
    tick that reads every target may rebuild it: a ``follow_up`` fails closed and leaves the
    reset to that tick.
    """
    metadata = policy["metadata"]
    name = f"{metadata['namespace']}/{metadata['name']}"
    annotations = metadata.get("annotations") or {}
    reset = annotations.get(RESET_ANNOTATION)
    try:
        spec = PolicySpec.model_validate(policy.get("spec") or {})
    except ValidationError as error:
        raise PolicyUnreadable(
            "spec",
            f"the spec of {name} is invalid ({_errors(error)}); nothing is refreshed until it "
            "is fixed",
        ) from error
    raw = policy.get("status") or {}
    try:
        status = PolicyStatus.model_validate(raw)
    except ValidationError as error:
        honoured = raw.get("lastReset") if isinstance(raw, dict) else None
        if follow_up or reset is None or reset == honoured:
            raise PolicyUnreadable(
                "status",
                f"the status of {name} cannot be read ({_errors(error)}); it was not written "
                "by this operator, so nothing is patched on it. Reset the policy to rebuild "
                f"it from live evidence: imagerefresh reset {name}",
            ) from error
        status = PolicyStatus()
    return PolicyView(
        namespace=metadata["namespace"],
        name=metadata["name"],
        generation=int(metadata.get("generation") or 0),
        spec=spec,
        status=status,
        reset_request=reset,
        window_override=annotations.get(WINDOW_OVERRIDE_ANNOTATION),
    )


def _read_workload(api: KubeApi, key: TargetKey) -> _Read:
    try:
        return _Read(api.read_workload(key.kind, key.namespace, key.name))
    except KubeError as error:
        return _Read(error=str(error))


def _read_secrets(api: KubeApi, key: TargetKey, read: _Read, cache: ReadCache) -> None:
    assert read.workload is not None
    try:
        pod_spec = read.workload["spec"]["template"]["spec"]
        read.secrets = api.read_pull_secrets(key.namespace, pod_spec, cache)
    except KubeError as error:
        read.error = read.error or str(error)


def _read_pods(api: KubeApi, namespace: str, reads: list[_Read]) -> None:
    selectors = [(read.workload or {})["spec"].get("selector") or {} for read in reads]
    for read, pods in zip(reads, api.list_pods_of(namespace, selectors), strict=True):
        if isinstance(pods, KubeError):
            read.error = str(pods)
            continue
        try:
            read.pods = tuple(ObservedPod.from_api(pod) for pod in pods)
        except (KeyError, TypeError, ValueError) as error:
            read.unreadable = _unreadable(error)


def _unreadable(error: Exception) -> str:
    return f"the API returned an object we cannot read: {error!r}"


def _reduced(read: _Read) -> _Read:
    """What the tick keeps of a target's reads (see :class:`_Read`)."""
    if read.error is not None:
        return _Read(error=read.error)  # as if nothing was read
    if read.workload is None:
        return read
    try:
        read.parsed = Workload.from_api(read.workload)
    except (KeyError, TypeError, ValueError) as error:
        read.unreadable = _unreadable(error)
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
    api: KubeApi, keys: list[TargetKey], concurrency: int, shared: ReadCache | None
) -> dict[TargetKey, _Read]:
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

    found = await asyncio.gather(*(bounded(_read_workload, key) for key in keys))
    reads = dict(zip(keys, found, strict=True))
    present = {key: read for key, read in reads.items() if read.workload is not None}
    by_namespace: dict[str, list[_Read]] = {}
    for key, read in present.items():
        by_namespace.setdefault(key.namespace, []).append(read)
    await asyncio.gather(
        *(bounded(_read_pods, namespace, group) for namespace, group in by_namespace.items()),
        *(bounded(_read_secrets, key, read, cache) for key, read in present.items()),
    )
    return {key: _reduced(read) for key, read in reads.items()}


def _evidence(
    read: _Read,
    digests: Mapping[str, DigestOutcome],
    identities: Mapping[str, str],
    signatures: Mapping[str, SignatureOutcome],
) -> TargetEvidence:
    if read.error is not None:
        return TargetEvidence(error=read.error)
    if read.workload is None:
        return TargetEvidence()
    if read.unreadable is not None or read.parsed is None:
        return TargetEvidence(error=read.unreadable or _unreadable(ValueError("no workload")))
    return TargetEvidence(read.parsed, None, read.pods, digests, identities, signatures)


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


def _reports_other(read: _Read, name: str, digest: str) -> bool:
    """Whether the container is on a tag and a pod reports a known digest other than
    ``digest`` (a pinned container is judged by its pin, never by what pods report)."""
    live = read.parsed.containers.get(name) if read.parsed is not None else None
    if live is None:
        return False
    try:
        if parse(live.image).digest is not None:
            return False
    except InvalidReference:
        return False
    return any(pod.running.get(name) not in (None, digest) for pod in read.pods)


@dataclass
class TargetReads:
    """A tick's API reads, done: what the registry is to be asked, and with which account."""

    view: PolicyView
    claims: Mapping[tuple[TargetKey, str], str]
    reads: dict[TargetKey, _Read] = field(default_factory=dict)
    # (target, container) → what resolves its tracked tag (unpinned, running the tracked repo)
    wanted: dict[tuple[TargetKey, str], ResolutionKey] = field(default_factory=dict)
    identities: dict[TargetKey, dict[str, str]] = field(default_factory=dict)
    accounts: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, name) → account
    # (target, registry host) → the pull secret's credentials the registry is asked with
    credentials: dict[tuple[TargetKey, str], Credentials | None] = field(default_factory=dict)


async def read_targets(
    policy: Mapping[str, Any],
    *,
    api: KubeApi,
    config: OperatorConfig,
    claimed_elsewhere: Mapping[tuple[TargetKey, str], str] | None = None,
    follow_up: bool = False,
    shared_reads: ReadCache | None = None,
    asked_at: float | None = None,
) -> TargetReads:
    """The API half of a tick's evidence: the policy's view, its workloads, pods and pull
    secrets, and what each container's tag is to be resolved with (see :func:`gather`)."""
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
    found.reads = await _read_all(
        api, reachable, config.kube_concurrency, None if asked_at is not None else shared_reads
    )
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


Outcomes = Mapping[ResolutionKey, ResolutionOutcome]
Digests = dict[TargetKey, dict[str, DigestOutcome]]


async def resolve_digests(
    found: TargetReads,
    resolver: SharedResolver,
    *,
    follow_up: bool = False,
    asked_at: float | None = None,
    known: Outcomes | None = None,
) -> tuple[Digests, Outcomes]:
    """The registry half: each wanted tag's digest (and, where pods report another, the index's
    platform manifests), as :class:`Resolved` or :class:`Unresolved`; and the raw outcomes.

    ``known``: answers this tick already has; a key not among them is not asked (it is
    unresolved this tick) — for a tick that read its workloads again after waiting on a
    registry, which must not wait again.
    """
    wanted = found.wanted
    if known is not None:
        outcomes: Outcomes = {
            k: known.get(k) or _not_asked(k) for k in dict.fromkeys(wanted.values())
        }
    else:
        # The resolver keeps its own clock: the instant asked for, as that clock read it then.
        since = (
            resolver.clock() - max(0.0, time.time() - asked_at) if asked_at is not None else None
        )
        outcomes = await resolver.resolve(wanted.values(), remembered=follow_up, since=since)
    # Where pods report another digest than the tag resolved to, it may be one of the index's
    # platform manifests (containers/image runtimes report those): read the index's children.
    # A tag the registry answered with a single-platform manifest has none: no request.
    indexes: dict[tuple[TargetKey, str], tuple[ResolutionKey, str]] = {}
    for (key, name), resolution_key in wanted.items():
        outcome = outcomes[resolution_key]
        if (
            not isinstance(outcome, Exception)
            and outcome.may_be_index
            and _reports_other(found.reads[key], name, outcome.digest)
        ):
            indexes[(key, name)] = (resolution_key, outcome.digest)
    unique = list(dict.fromkeys(indexes.values()))
    read_children = await asyncio.gather(*(resolver.children(k, d) for k, d in unique))
    children = dict(zip(unique, read_children, strict=True))

    digests: Digests = {}
    for (key, name), resolution_key in wanted.items():
        outcome = outcomes[resolution_key]
        if isinstance(outcome, Exception):
            digests.setdefault(key, {})[name] = Unresolved(outcome.reason, str(outcome))
            continue
        ask = indexes.get((key, name))
        platforms: ChildrenOutcome = children[ask] if ask is not None else frozenset()
        digests.setdefault(key, {})[name] = (
            Unresolved(
                platforms.reason,
                f"its pods report a digest other than {outcome.digest}, which may be one of that "
                f"index's platform manifests, but they could not be read: {platforms}",
            )
            if isinstance(platforms, Exception)
            else Resolved(outcome.digest, platforms)
        )
    return digests, outcomes


Signatures = dict[TargetKey, dict[str, SignatureOutcome]]
Verdicts = Mapping[VerifyRequest, SignatureOutcome]


def _verify_requests(
    found: TargetReads, digests: Digests
) -> dict[tuple[TargetKey, str], VerifyRequest]:
    """(target, container) → what verifying its desired digest asks: with ``spec.verify``, for
    every container of a target read this tick whose desired digest is known (its pin, or what
    its tag resolved to) — the digest a refresh would pin, or the one its pods already run."""
    spec = found.view.spec
    if spec.verify is None:
        return {}
    keys, interval = spec.verify.keys, spec.interval.total_seconds()
    requests = {}
    for index, target in enumerate(spec.targets):
        key = found.view.target_key(index)
        if key not in found.reads:
            continue
        for container in target.containers:
            outcome = digests.get(key, {}).get(container.name)
            digest = container.digest or (outcome.digest if isinstance(outcome, Resolved) else None)
            if digest is None:
                continue
            host = registry_host(container.tracked.domain)
            requests[(key, container.name)] = VerifyRequest(
                container.tracked, digest, keys, found.credentials.get((key, host)), interval
            )
    return requests


async def verify_signatures(
    found: TargetReads,
    digests: Digests,
    verifier: SignatureVerifier,
    *,
    asked_at: float | None = None,
    known: Verdicts | None = None,
) -> tuple[Signatures, Verdicts]:
    """With ``spec.verify``: each container's desired digest's signatures, as the verifier
    finds them (remembered, or read now); and the raw verdicts.

    ``known``: verdicts this tick already has; a digest not among them is not looked up (it
    is unreadable this tick) — for a tick that read again after waiting on a registry.
    """
    requests = _verify_requests(found, digests)
    if known is not None:
        verdicts: Verdicts = {r: known.get(r) or _not_verified(r) for r in requests.values()}
    else:
        since = (
            verifier.clock() - max(0.0, time.time() - asked_at) if asked_at is not None else None
        )
        verdicts = await verifier.verify(requests.values(), since=since)
    signatures: Signatures = {}
    for (key, name), request in requests.items():
        signatures.setdefault(key, {})[name] = verdicts[request]
    return signatures, verdicts


def _not_verified(request: VerifyRequest) -> SignatureOutcome:
    return SignaturesUnreadable(
        request.digest,
        "not verified this tick: the workload changed while its registry was asked; it is "
        "verified at the next tick",
    )


def _not_asked(key: ResolutionKey) -> ResolutionOutcome:
    return RegistryUnavailable(
        f"not resolved this tick: the workload changed while its registry was asked, and "
        f"{key.reference} was not among the answers; it is asked at the next tick",
        registry=registry_host(key.reference.domain),
        reference=str(key.reference),
    )


def assemble(
    found: TargetReads,
    digests: Digests,
    now: datetime,
    config: OperatorConfig,
    budgets: Mapping[tuple[str, str], BudgetSnapshot] | None = None,
    *,
    follow_up: bool = False,
    signatures: Signatures | None = None,
) -> Gathered:
    """The planner's input from a tick's reads, digests and (with ``spec.verify``) signature
    verdicts (``budgets``: see :func:`budgets`)."""
    view = found.view
    verdicts = signatures or {}
    evidence = {
        key: _evidence(
            read, digests.get(key, {}), found.identities.get(key, {}), verdicts.get(key, {})
        )
        for key, read in found.reads.items()
    }
    workloads = {
        key: read.workload for key, read in found.reads.items() if read.workload is not None
    }
    log.debug(
        "gathered",
        policy=f"{view.namespace}/{view.name}",
        targets=len(evidence),
        resolutions=len(set(found.wanted.values())),
    )
    tick = TickInput(view, evidence, budgets or {}, now, config.namespaces, found.claims, follow_up)
    return Gathered(tick, workloads, found.accounts)


def budgets(
    ledger: RateLimitLedger, accounts: Mapping[tuple[str, str], str]
) -> dict[tuple[str, str], BudgetSnapshot]:
    """The budget of every account a tick may spend, as the ledger holds it now."""
    wall = time.time()
    return {
        (host, name): ledger.snapshot(host, account, wall, label=name)
        for (host, name), account in accounts.items()
    }


async def gather(
    policy: Mapping[str, Any],
    *,
    api: KubeApi,
    resolver: SharedResolver,
    ledger: RateLimitLedger,
    config: OperatorConfig,
    now: datetime,
    claimed_elsewhere: Mapping[tuple[TargetKey, str], str] | None = None,
    follow_up: bool = False,
    shared_reads: ReadCache | None = None,
    asked_at: float | None = None,
    verifier: SignatureVerifier | None = None,
) -> Gathered:
    """Everything one tick of ``policy`` decides on (``claimed_elsewhere``: other policies'
    containers, see :mod:`.claims`; ``shared_reads``: ServiceAccounts and pull secrets read
    by the policies ticking together, see :class:`ReadCache`), budgets as ``ledger`` has them.
    ``verifier``: where signature verdicts are remembered (none: verified afresh, with the
    resolver's registry client).

    ``follow_up``: a tick between interval ticks that judges only the rollouts in flight —
    only their workloads are read, and the registry is asked nothing already answered.
    ``asked_at`` (epoch seconds): a tick someone asked for then — no registry answer whose
    request started before it is taken, and ServiceAccounts and pull secrets are read anew.
    The operator's ticks run the same steps apart (:func:`read_targets`,
    :func:`resolve_digests`, :func:`verify_signatures`, :func:`assemble`), so that waiting on a
    registry holds nothing else.
    """
    found = await read_targets(
        policy,
        api=api,
        config=config,
        claimed_elsewhere=claimed_elsewhere,
        follow_up=follow_up,
        shared_reads=shared_reads,
        asked_at=asked_at,
    )
    digests, _ = await resolve_digests(found, resolver, follow_up=follow_up, asked_at=asked_at)
    signatures, _ = await verify_signatures(
        found, digests, verifier or SignatureVerifier(resolver.client), asked_at=asked_at
    )
    return assemble(
        found,
        digests,
        now,
        config,
        budgets(ledger, found.accounts),
        follow_up=follow_up,
        signatures=signatures,
    )
