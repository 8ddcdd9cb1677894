"""Gather a tick's evidence: the planner's input from the API's reads and the registry's answers.

The shell's read half, in three steps that the operator's ticks run apart — so that waiting on
a registry holds nothing else — and :func:`gather` runs in a row (``imagerefresh plan``, tests):
:func:`~.reads.read_targets` (the policy, its workloads, pods and pull secrets, and the nodes'
image lists that the policies ticking together share: :mod:`.nodes`),
:func:`~.answers.resolve_digests` and :func:`~.answers.verify_signatures` (the registries), and
:func:`assemble` (one :class:`~imagerefresh.planner.TickInput`). Every failure is explicit
evidence, so the planner can fail closed instead of mistaking silence for an answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.readcache import ReadCache
from imagerefresh.planner import DigestOutcome, TargetEvidence, TargetKey, TickInput
from imagerefresh.planner.evidence import SignatureOutcome
from imagerefresh.ratelimit import BudgetSnapshot, RateLimitLedger
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.answers import Digests, Signatures, resolve_digests, verify_signatures
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.nodes import NodeReads
from imagerefresh.runtime.reads import TargetReads, WorkloadRead, read_targets, unreadable_message
from imagerefresh.runtime.restorable import RollbackEvidence, rollback_evidence
from imagerefresh.verifier import SignatureVerifier

__all__ = ["Gathered", "assemble", "budgets", "gather"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Gathered:
    """The planner's input plus what the shell needs afterwards of each workload (for events:
    its apiVersion, kind and metadata name, namespace, uid and resourceVersion), and the
    ledger's account behind each (registry host, identity) the tick may spend."""

    tick: TickInput
    workloads: Mapping[TargetKey, Mapping[str, Any]]
    accounts: Mapping[tuple[str, str], str] = field(default_factory=dict)


def _evidence(
    read: WorkloadRead,
    digests: Mapping[str, DigestOutcome],
    identities: Mapping[str, str],
    signatures: Mapping[str, SignatureOutcome],
    children: Mapping[str, frozenset[str]] | None = None,
) -> TargetEvidence:
    if read.error is not None:
        return TargetEvidence(error=read.error)
    if read.workload is None:
        return TargetEvidence()
    if read.unreadable is not None or read.parsed is None:
        return TargetEvidence(
            error=read.unreadable or unreadable_message(ValueError("no workload"))
        )
    return TargetEvidence(
        read.parsed,
        None,
        read.pods,
        digests,
        identities,
        signatures,
        helpers=read.helpers,
        helpers_error=read.helpers_error,
        previous_template=read.previous_template,
        children=children or {},
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
    rollbacks: RollbackEvidence | None = None,
) -> Gathered:
    """The planner's input from a tick's reads, digests and (with ``spec.verify``) signature
    verdicts (``budgets``: see :func:`budgets`); ``rollbacks``: what the targets with a
    rollout of ours in flight may be rolled back to (verdicts, indexes' children)."""
    view = found.view
    verdicts = signatures or {}
    restorable = rollbacks or RollbackEvidence()
    evidence = {
        key: _evidence(
            read,
            digests.get(key, {}),
            found.identities.get(key, {}),
            verdicts.get(key, {}),
            restorable.children.get(key, {}),
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
    tick = TickInput(
        view,
        evidence,
        budgets or {},
        now,
        config.namespaces,
        found.claims,
        follow_up,
        nodes=found.nodes,
        pre_pull_pods=config.pre_pull_pods,
        pre_pull_max_deadline=config.pre_pull_max_deadline,
        pre_pull_run_as=config.pre_pull_run_as,
        verified=restorable.verified,
    )
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
    nodes: NodeReads | None = None,
) -> Gathered:
    """Everything one tick of ``policy`` decides on (``claimed_elsewhere``: other policies'
    containers, see :mod:`.claims`; ``shared_reads``: ServiceAccounts and pull secrets read
    by the policies ticking together, see :class:`ReadCache`), budgets as ``ledger`` has them.
    ``verifier``: where signature verdicts are remembered (none: verified afresh, with the
    resolver's registry client). ``nodes``: the nodes' image lists, shared by the policies
    ticking together (none: node reads are off, only pods prove what a node holds).

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
        nodes=nodes,
    )
    digests, _ = await resolve_digests(found, resolver, follow_up=follow_up, asked_at=asked_at)
    verifier = verifier or SignatureVerifier(resolver.client)
    signatures, _ = await verify_signatures(found, digests, verifier, asked_at=asked_at)
    rollbacks = await rollback_evidence(found, resolver, verifier, asked_at=asked_at)
    return assemble(
        found,
        digests,
        now,
        config,
        budgets(ledger, found.accounts),
        follow_up=follow_up,
        signatures=signatures,
        rollbacks=rollbacks,
    )
