"""What a target with a rollout of ours in flight may be rolled back to: verdicts and indexes.

A rollback is sent only to images live evidence proves the workload ran, and under ``verify``
only to digests verified for the policy's keys (:mod:`imagerefresh.planner.target.rollback`).
Before the planner may decide one, the shell asks, for each target whose status records a
patch of ours (and that passed its checks):

- the verifier, about every digest a rollback could restore there — those the recorded patch
  names, those its previous revision's template names, and those its pods run — so that a
  verified rollback target is in memory even after a restart (nothing in status is evidence
  of a signature);
- the registry, for the platform manifests of each index digest among them that some pod does
  not report itself (a containers/image runtime reports the platform manifest it pulled, while
  cosign signs the index): one counted GET per index, remembered for good.

Nothing is asked for a policy with no rollout in flight.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from imagerefresh.planner import TargetKey, in_flight
from imagerefresh.reference import InvalidReference, parse, registry_host
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.answers import checked
from imagerefresh.runtime.reads import TargetReads
from imagerefresh.runtime.schedule import on_clock
from imagerefresh.signatures import Verified
from imagerefresh.verifier import MAX_VERIFICATIONS_PER_TICK, SignatureVerifier, VerifyRequest

__all__ = ["RollbackEvidence", "rollback_evidence"]


@dataclass(frozen=True)
class RollbackEvidence:
    """(repository, digest) verified among the candidates; per target, index → children."""

    verified: frozenset[tuple[str, str]] = frozenset()
    children: dict[TargetKey, dict[str, frozenset[str]]] = field(default_factory=dict)


def _digests(images: Iterable[str | None]) -> set[str]:
    found = set()
    for image in images:
        try:
            digest = parse(image).digest if image else None
        except InvalidReference:
            continue
        if digest is not None:
            found.add(digest)
    return found


async def rollback_evidence(
    found: TargetReads,
    resolver: SharedResolver,
    verifier: SignatureVerifier,
    *,
    asked_at: float | None = None,
) -> RollbackEvidence:
    """The verdicts and indexes' children a rollback of the policy's targets may need."""
    view, spec = found.view, found.view.spec
    flying = in_flight(spec, view.status, view.namespace).workloads
    if not flying:
        return RollbackEvidence()
    pending = {(t.kind, t.namespace, t.name): t.pending for t in view.status.targets}
    keys = [view.target_key(index) for index in range(len(spec.targets))]
    twice = {key for key, count in Counter(keys).items() if count > 1}
    candidates: dict[tuple[TargetKey, str], set[str]] = {}
    indexes: dict[tuple[TargetKey, str], set[str]] = {}
    for key, target in zip(keys, spec.targets, strict=True):
        recorded = pending.get((key.kind, key.namespace, key.name))
        if key not in flying or recorded is None or not checked(found, key, target, twice):
            continue
        read = found.reads[key]
        previous = read.previous_template or {}
        for container in target.containers:
            name = container.name
            written = _digests(
                (recorded.images.get(name), recorded.previous.get(name), previous.get(name))
            )
            running = {d for pod in read.pods if (d := pod.running.get(name)) is not None}
            candidates[(key, name)] = written | running
            if running - written:
                indexes[(key, name)] = written
    children = await _children(found, resolver, indexes)
    for (key, name), found_children in children.items():
        for index, platforms in found_children.items():
            if platforms:
                candidates[(key, name)].add(index)
    verified = await _verified(found, verifier, candidates, asked_at)
    by_target: dict[TargetKey, dict[str, frozenset[str]]] = {}
    for (key, _), found_children in children.items():
        by_target.setdefault(key, {}).update(found_children)
    return RollbackEvidence(verified, by_target)


async def _children(
    found: TargetReads,
    resolver: SharedResolver,
    indexes: dict[tuple[TargetKey, str], set[str]],
) -> dict[tuple[TargetKey, str], dict[str, frozenset[str]]]:
    """The platform manifests of each candidate index, where its tag is resolved (pinned
    containers are not: their pods report what the pin names)."""
    asks = [
        (where, digest, found.wanted[where])
        for where, digests in indexes.items()
        if where in found.wanted
        for digest in sorted(digests)
    ]
    answers = await asyncio.gather(*(resolver.children(k, d) for _, d, k in asks))
    children: dict[tuple[TargetKey, str], dict[str, frozenset[str]]] = {}
    for (where, digest, _), answer in zip(asks, answers, strict=True):
        if isinstance(answer, frozenset):
            children.setdefault(where, {})[digest] = answer
    return children


async def _verified(
    found: TargetReads,
    verifier: SignatureVerifier,
    candidates: dict[tuple[TargetKey, str], set[str]],
    asked_at: float | None,
) -> frozenset[tuple[str, str]]:
    spec = found.view.spec
    if spec.verify is None or not candidates:
        return frozenset()
    tracked = {
        (found.view.target_key(i), c.name): c.tracked
        for i, target in enumerate(spec.targets)
        for c in target.containers
    }
    requests = [
        VerifyRequest(
            tracked[where],
            digest,
            spec.verify.keys,
            found.credentials.get((where[0], registry_host(tracked[where].domain))),
            spec.interval.total_seconds(),
            spec.pull_budget.reserve,
        )
        for where, digests in sorted(candidates.items())
        for digest in sorted(digests)
    ]
    verdicts = await verifier.verify(
        requests,
        since=on_clock(verifier.clock, asked_at) if asked_at is not None else None,
        owner=(found.view.namespace, found.view.name),
        limit=MAX_VERIFICATIONS_PER_TICK,
    )
    return frozenset(
        (request.repository.repository, request.digest)
        for request, verdict in verdicts.items()
        if isinstance(verdict, Verified)
    )
