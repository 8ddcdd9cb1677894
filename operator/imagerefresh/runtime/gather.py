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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from imagerefresh.credentials import ANONYMOUS, Credentials, credentials_for
from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.models import PolicySpec, PolicyStatus
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
)
from imagerefresh.ratelimit import BudgetSnapshot, RateLimitLedger
from imagerefresh.reference import registry_host
from imagerefresh.resolver import ResolutionKey, SharedResolver
from imagerefresh.runtime.config import OperatorConfig

__all__ = ["RESET_ANNOTATION", "Gathered", "gather", "policy_view"]

log = structlog.get_logger(__name__)

RESET_ANNOTATION = "images.tracebloc.io/reset"


@dataclass
class _Read:
    """One target's raw reads."""

    workload: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Credentials]] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True)
class Gathered:
    """The planner's input plus the raw objects the shell needs afterwards (for events)."""

    tick: TickInput
    workloads: Mapping[TargetKey, Mapping[str, Any]]


def policy_view(policy: Mapping[str, Any]) -> PolicyView:
    """The planner's view of a policy object; raises pydantic's ValidationError if malformed."""
    metadata = policy["metadata"]
    return PolicyView(
        namespace=metadata["namespace"],
        name=metadata["name"],
        generation=int(metadata.get("generation") or 0),
        spec=PolicySpec.model_validate(policy["spec"]),
        status=PolicyStatus.model_validate(policy.get("status") or {}),
        reset_request=(metadata.get("annotations") or {}).get(RESET_ANNOTATION),
    )


def _read_target(api: KubeApi, key: TargetKey) -> _Read:
    try:
        workload = api.read_workload(key.kind, key.namespace, key.name)
        if workload is None:
            return _Read()
        spec = workload["spec"]
        pods = api.list_pods(key.namespace, spec.get("selector") or {})
        secrets = api.read_pull_secrets(key.namespace, spec["template"]["spec"])
        return _Read(workload, pods, secrets)
    except KubeError as error:
        return _Read(error=str(error))


async def _read_all(
    api: KubeApi, keys: list[TargetKey], concurrency: int
) -> dict[TargetKey, _Read]:
    gate = asyncio.Semaphore(concurrency)

    async def one(key: TargetKey) -> _Read:
        async with gate:
            return await asyncio.to_thread(_read_target, api, key)

    reads = await asyncio.gather(*(one(key) for key in keys))
    return dict(zip(keys, reads, strict=True))


def _evidence(
    read: _Read, digests: Mapping[str, DigestOutcome], identities: Mapping[str, str]
) -> TargetEvidence:
    if read.error is not None:
        return TargetEvidence(error=read.error)
    if read.workload is None:
        return TargetEvidence()
    try:
        workload = Workload.from_api(read.workload)
        pods = tuple(ObservedPod.from_api(pod) for pod in read.pods)
    except (KeyError, TypeError, ValueError) as error:
        return TargetEvidence(error=f"the API returned an object we cannot read: {error!r}")
    return TargetEvidence(workload, None, pods, digests, identities)


async def gather(
    policy: Mapping[str, Any],
    *,
    api: KubeApi,
    resolver: SharedResolver,
    ledger: RateLimitLedger,
    config: OperatorConfig,
    now: datetime,
) -> Gathered:
    """Everything one tick of ``policy`` decides on."""
    view = policy_view(policy)
    spec = view.spec
    if spec.suspend:
        return Gathered(TickInput(view, {}, {}, now, config.namespaces), {})
    keys = [view.target_key(index) for index in range(len(spec.targets))]
    reachable = [k for k in keys if config.namespaces.allows(view.namespace, k.namespace)]
    reads = await _read_all(api, reachable, config.kube_concurrency)

    wanted: dict[tuple[TargetKey, str], ResolutionKey] = {}
    identities: dict[TargetKey, dict[str, str]] = {}
    for index, target in enumerate(spec.targets):
        key = keys[index]
        read = reads.get(key)
        if read is None or read.workload is None:
            continue
        for container in target.containers:
            domain = container.tracked.domain
            credentials = credentials_for(domain, read.secrets)
            identity = credentials.identity if credentials else ANONYMOUS
            identities.setdefault(key, {})[registry_host(domain)] = identity
            if container.digest is None:
                wanted[(key, container.name)] = ResolutionKey.of(container.tracked, credentials)
    outcomes = await resolver.resolve(wanted.values())

    digests: dict[TargetKey, dict[str, DigestOutcome]] = {}
    for (key, name), resolution_key in wanted.items():
        outcome = outcomes[resolution_key]
        digests.setdefault(key, {})[name] = (
            Unresolved(outcome.reason, str(outcome))
            if isinstance(outcome, Exception)
            else Resolved(outcome.digest)
        )
    wall = time.time()
    budgets: dict[tuple[str, str], BudgetSnapshot] = {}
    for per_target in identities.values():
        for host, identity in per_target.items():
            budgets[(host, identity)] = ledger.snapshot(host, identity, wall)
    evidence = {
        key: _evidence(read, digests.get(key, {}), identities.get(key, {}))
        for key, read in reads.items()
    }
    workloads = {key: read.workload for key, read in reads.items() if read.workload is not None}
    log.debug(
        "gathered",
        policy=f"{view.namespace}/{view.name}",
        targets=len(evidence),
        resolutions=len(set(wanted.values())),
    )
    return Gathered(TickInput(view, evidence, budgets, now, config.namespaces), workloads)
