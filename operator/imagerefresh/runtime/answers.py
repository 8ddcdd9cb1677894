"""The registry half of a tick's evidence: each tag's digest, and with ``spec.verify`` each
desired digest's signatures.

Both are asked for after the API reads (:mod:`.reads`) and without holding a tick slot, so a
slow or hostile registry holds only the ticks that need it. Failures are values: a digest the
registry would not give is :class:`~imagerefresh.planner.Unresolved`, signatures it would not
let be read are :class:`~imagerefresh.planner.evidence.SignaturesUnreadable` — never silence.
A tick that read its workloads again after waiting on a registry passes the answers it already
has (``known``) and asks nothing again. An interval tick passes its round's grid instant
(``round_at``): the answers it shares are those of its round, however long the round lasts.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping

from imagerefresh.models import TargetSpec
from imagerefresh.planner import DigestOutcome, Resolved, TargetKey, Unresolved
from imagerefresh.planner.evidence import SignatureOutcome, SignaturesUnreadable
from imagerefresh.planner.target.scope import shape_conflict
from imagerefresh.reference import InvalidReference, parse, registry_host
from imagerefresh.registry import RegistryUnavailable
from imagerefresh.resolver import (
    ROUND_HORIZON,
    ChildrenOutcome,
    ResolutionKey,
    ResolutionOutcome,
    SharedResolver,
)
from imagerefresh.runtime.reads import TargetReads, WorkloadRead
from imagerefresh.runtime.schedule import on_clock
from imagerefresh.verifier import MAX_VERIFICATIONS_PER_TICK, SignatureVerifier, VerifyRequest

__all__ = [
    "Digests",
    "Outcomes",
    "Signatures",
    "Verdicts",
    "checked",
    "resolve_digests",
    "verify_signatures",
]


def _reports_other(read: WorkloadRead, name: str, digest: str) -> bool:
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


Outcomes = Mapping[ResolutionKey, ResolutionOutcome]
Digests = dict[TargetKey, dict[str, DigestOutcome]]


async def resolve_digests(
    found: TargetReads,
    resolver: SharedResolver,
    *,
    follow_up: bool = False,
    asked_at: float | None = None,
    round_at: float | None = None,
    known: Outcomes | None = None,
) -> tuple[Digests, Outcomes]:
    """The registry half: each wanted tag's digest (and, where pods report another, the index's
    platform manifests), as :class:`Resolved` or :class:`Unresolved`; and the raw outcomes.

    ``asked_at`` (epoch seconds): a tick asked for then shares no answer asked before it.
    ``round_at`` (epoch seconds): the grid instant of an interval tick's round, from which the
    resolver's window is measured (see :class:`~imagerefresh.resolver.SharedResolver`).

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
        # The resolver keeps its own clock: each instant as that clock read it then.
        outcomes = await resolver.resolve(
            wanted.values(),
            remembered=follow_up,
            since=on_clock(resolver.clock, asked_at) if asked_at is not None else None,
            round_at=on_clock(resolver.clock, round_at) if round_at is not None else None,
        )
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


def checked(found: TargetReads, key: TargetKey, target: TargetSpec, twice: set[TargetKey]) -> bool:
    """Whether ``target`` passed the checks before any registry is asked about its signatures:
    a namespace the policy may reach (only those are read), a workload read, readable and
    present, its containers declared by this target alone, and the shape the policy declares
    (the planner's Conflict, :func:`~imagerefresh.planner.target.scope.shape_conflict`)."""
    read = found.reads.get(key)
    if read is None or read.error is not None or read.unreadable is not None:
        return False
    if read.parsed is None or key in twice:
        return False
    if any((key, c.name) in found.claims for c in target.containers):
        return False
    return shape_conflict(target, key, read.parsed) is None


def _verify_requests(
    found: TargetReads, digests: Digests
) -> dict[tuple[TargetKey, str], VerifyRequest]:
    """(target, container) → what verifying its desired digest asks: with ``spec.verify``, for
    every container of a target that passed its checks this tick (:func:`checked`) whose
    desired digest is known (its pin, or what its tag resolved to) — the digest a refresh
    would pin, or the one its pods already run."""
    spec = found.view.spec
    if spec.verify is None:
        return {}
    keys, interval = spec.verify.keys, spec.interval.total_seconds()
    reserve = spec.pull_budget.reserve
    targets = [found.view.target_key(index) for index in range(len(spec.targets))]
    twice = {key for key, count in Counter(targets).items() if count > 1}
    requests = {}
    for key, target in zip(targets, spec.targets, strict=True):
        if not checked(found, key, target, twice):
            continue
        for container in target.containers:
            outcome = digests.get(key, {}).get(container.name)
            digest = container.digest or (outcome.digest if isinstance(outcome, Resolved) else None)
            if digest is None:
                continue
            host = registry_host(container.tracked.domain)
            requests[(key, container.name)] = VerifyRequest(
                container.tracked,
                digest,
                keys,
                found.credentials.get((key, host)),
                interval,
                reserve,
            )
    return requests


async def verify_signatures(
    found: TargetReads,
    digests: Digests,
    verifier: SignatureVerifier,
    *,
    asked_at: float | None = None,
    round_at: float | None = None,
    known: Verdicts | None = None,
) -> tuple[Signatures, Verdicts]:
    """With ``spec.verify``: each container's desired digest's signatures, as the verifier
    finds them (remembered, or read now); and the raw verdicts.

    ``asked_at`` and ``round_at`` (epoch seconds) as for :func:`resolve_digests`: an untrusted
    verdict's backoff is measured at the round's grid instant, so a slow round's late ticks
    take the verdicts its first ticks saw.

    ``known``: verdicts this tick already has; a digest not among them is not looked up (it
    is unreadable this tick) — for a tick that read again after waiting on a registry.

    The policy pays for itself: at most
    :data:`~imagerefresh.verifier.MAX_VERIFICATIONS_PER_TICK` digests are looked up (the rest
    wait for its next tick), its checks wait for its own turn on the verification threads, and
    no lookup takes an account's pull budget below the policy's ``pullBudget.reserve``.
    """
    requests = _verify_requests(found, digests)
    if known is not None:
        verdicts: Verdicts = {r: known.get(r) or _not_verified(r) for r in requests.values()}
    else:
        # A round far behind is judged no earlier than the horizon ago (its resolver answers
        # are forgotten by then too): a late tick of it is no more lenient than that.
        judged_at = (
            max(on_clock(verifier.clock, round_at), verifier.clock() - ROUND_HORIZON)
            if round_at is not None
            else None
        )
        view = found.view
        verdicts = await verifier.verify(
            requests.values(),
            since=on_clock(verifier.clock, asked_at) if asked_at is not None else None,
            round_at=judged_at,
            owner=(view.namespace, view.name),
            limit=MAX_VERIFICATIONS_PER_TICK,
        )
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
