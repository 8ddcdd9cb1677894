"""One tick of one policy, end to end: read, gather, plan, apply, record.

:class:`PolicyTicker` holds what lives as long as the operator — the Kubernetes API facade,
the shared resolver (one registry request per unique reference across every policy ticking in
the same window, or in the same round of the grid), the rate-limit ledger, the metrics — and
runs a policy's tick on demand.
The handlers decide *when*; this module decides nothing itself (that is the planner's job).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.readcache import ReadCache
from imagerefresh.metrics import Metrics
from imagerefresh.planner import (
    NOTHING_IN_FLIGHT,
    ImagePatch,
    InFlight,
    PatchPurpose,
    Plan,
    TargetKey,
    TickInput,
    in_flight,
    permits,
    plan_tick,
    reasons,
)
from imagerefresh.planner.actions import HelperPodCreate
from imagerefresh.ratelimit import RateLimitLedger, Reservation
from imagerefresh.resolver import ROUND_HORIZON, SharedResolver
from imagerefresh.runtime.answers import Digests, Signatures, resolve_digests, verify_signatures
from imagerefresh.runtime.apply import Applied, apply_plan, mark_unreadable
from imagerefresh.runtime.claims import ClaimIndex
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.gather import Gathered, assemble, budgets, gather
from imagerefresh.runtime.nodes import NodeReads
from imagerefresh.runtime.policyview import PolicyUnreadable
from imagerefresh.runtime.reads import TargetReads, read_targets
from imagerefresh.runtime.restorable import RollbackEvidence, rollback_evidence
from imagerefresh.runtime.revisions import PreviousRevisions
from imagerefresh.runtime.schema import CrdCheck
from imagerefresh.runtime.watches import EvidenceWatches
from imagerefresh.verifier import SignatureVerifier

__all__ = ["PolicyTicker", "TickOutcome"]

log = structlog.get_logger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class TickOutcome:
    plan: Plan
    applied: Applied | None  # None for a dry planning pass (imagerefresh plan)
    in_flight: InFlight = NOTHING_IN_FLIGHT  # our rollouts still to be judged
    # resourceVersion of each in-flight workload as this tick read it: a change since is
    # worth a follow-up tick.
    versions: Mapping[TargetKey, str] = field(default_factory=dict)
    wake_at: datetime | None = None  # a refresh waits until then (a window opens, a cooldown ends)


@dataclass
class _PolicyTicks:
    """One policy's ticks, serialised where they decide: a tick reads and decides holding
    ``lock``, and waits on registries without it (see :meth:`PolicyTicker.tick`)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    decided: int = 0  # decisions applied so far: a change says a tick's reads are stale


def _unread(read: PolicyUnreadable | None) -> str:
    """The tick outcome of a policy that is gone (None) or cannot be read."""
    if read is None:
        return "gone"
    return {"spec": "invalid", "crd": "crd_outdated"}.get(read.part, "unreadable_status")


class PolicyTicker:
    def __init__(
        self,
        *,
        api: KubeApi,
        resolver: SharedResolver,
        ledger: RateLimitLedger,
        config: OperatorConfig,
        metrics: Metrics,
        events: EventRecorder | None = None,
        clock: Callable[[], datetime] = _utcnow,
        verifier: SignatureVerifier | None = None,
    ) -> None:
        self.api, self.resolver, self.ledger = api, resolver, ledger
        # Signature verdicts live as long as the process (never in status).
        self._verifier = verifier
        self.config, self.metrics, self.clock = config, metrics, clock
        self.events = events if events is not None else EventRecorder(api)
        # Whether the installed CRD stores every field we use; asked before each tick acts.
        self.crd = CrdCheck(api, metrics)
        # Fed by the watch on policies (handlers); a declaration outside what its policy may
        # reach claims nothing.
        self.claims = ClaimIndex(config.namespaces)
        # Policies ticking together share their ServiceAccount and pull-secret reads, as they
        # share registry answers: within the resolution window (from the grid instant, for a
        # round's ticks), never older than it.
        self.shared_reads = ReadCache(lifetime=config.resolution_window, horizon=ROUND_HORIZON)
        # What a rollback may restore: each in-flight workload's previous revision, per generation.
        self.revisions = PreviousRevisions()
        # The nodes' image lists are the cluster's: one LIST per round of ticks, for all.
        self.nodes = NodeReads(api, config)
        # What the targets name, watched (the scheduler listens for their changes).
        self.watches = EvidenceWatches(api) if config.watch_evidence else None
        self._slots = asyncio.Semaphore(config.tick_concurrency)
        self._policies: dict[tuple[str, str], _PolicyTicks] = {}
        # Planning is pure and CPU-bound: it runs on a thread of its own, so the event loop —
        # the Lease's renewals, /healthz, every other tick's I/O — never waits for it; and one
        # plan at a time, spending the budget it read, so concurrent ticks never spend one pull
        # twice (the lock is held from the budget's snapshot to the reservation of its pulls).
        self._planner = ThreadPoolExecutor(1, thread_name_prefix="imagerefresh-plan")
        self._budget = asyncio.Lock()

    @property
    def verifier(self) -> SignatureVerifier:
        """The verdicts on signatures (made with the resolver's client when none was given)."""
        if self._verifier is None:
            self._verifier = SignatureVerifier(self.resolver.client)
        return self._verifier

    def close(self) -> None:
        """Stop the watches (the operator's cleanup)."""
        if self.watches is not None:
            self.watches.close()

    def forget(self, namespace: str, name: str) -> None:
        """The policy is gone: nothing of its ticks is kept."""
        self._policies.pop((namespace, name), None)

    async def plan(self, namespace: str, name: str) -> tuple[Gathered, Plan] | None:
        """What the next tick would do, with no writes (None when the policy is gone)."""
        policy = await asyncio.to_thread(self.api.read_policy, namespace, name)
        if policy is None:
            return None
        gathered = await gather(
            policy,
            api=self.api,
            resolver=self.resolver,
            ledger=self.ledger,
            config=self.config,
            now=self.clock(),
            claimed_elsewhere=self.claims.elsewhere(policy),
            shared_reads=self.shared_reads,
            verifier=self.verifier,
            nodes=self.nodes,
        )
        return gathered, plan_tick(gathered.tick)

    async def tick(
        self,
        namespace: str,
        name: str,
        *,
        follow_up: bool = False,
        asked_at: float | None = None,
        round_at: float | None = None,
        resolving: Callable[[bool], None] | None = None,
    ) -> TickOutcome | None:
        """Run one tick of the policy; None when it no longer exists (or cannot be read).

        ``follow_up``: judge only the rollouts in flight, between interval ticks (see
        :mod:`imagerefresh.planner.follow`). ``asked_at``: when someone asked for this tick
        (a new trigger, epoch seconds): nothing read before then is taken for an answer (see
        :func:`.gather`). ``round_at``: the grid instant an interval tick belongs to (epoch
        seconds): however late in its round it runs, it shares the round's registry answers and
        reads (see :class:`~imagerefresh.resolver.SharedResolver`). ``resolving`` is told when
        the tick starts (True) and stops (False) waiting on registries: meanwhile another tick
        of the policy may run (a follow-up).

        The tick reads, then asks the registries, then decides and applies. Reading and
        deciding take one of the ticker's slots — they bound how many ticks' API objects are
        in memory and how much the API server is asked at once — and the policy's lock;
        waiting on a registry takes neither, so a slow or hostile registry holds only the
        ticks that need its answers, never the slots of other policies' ticks, verdicts and
        rollbacks. If another tick of the policy decided while this one waited, what it read
        is stale: it reads again and decides on the answers it already has.
        """
        started = time.monotonic()
        outcome = "error"
        ticks = self._policies.setdefault((namespace, name), _PolicyTicks())
        try:
            async with ticks.lock, self._slots:
                read = await self._read(namespace, name, follow_up, asked_at, round_at)
                seen = ticks.decided
            if read is None or isinstance(read, PolicyUnreadable):
                outcome = _unread(read)
                return None
            policy, found = read
            if resolving is not None:
                resolving(True)
            try:
                digests, answers = await resolve_digests(
                    found,
                    self.resolver,
                    follow_up=follow_up,
                    asked_at=asked_at,
                    round_at=round_at,
                )
                signatures, verdicts = await verify_signatures(
                    found, digests, self.verifier, asked_at=asked_at, round_at=round_at
                )
                rollbacks = await rollback_evidence(
                    found, self.resolver, self.verifier, asked_at=asked_at
                )
            finally:
                if resolving is not None:
                    resolving(False)
            async with ticks.lock, self._slots:
                if ticks.decided != seen:
                    read = await self._read(namespace, name, follow_up, None, round_at)
                    if read is None or isinstance(read, PolicyUnreadable):
                        outcome = _unread(read)
                        return None
                    policy, found = read
                    digests, _ = await resolve_digests(found, self.resolver, known=answers)
                    signatures, _ = await verify_signatures(
                        found, digests, self.verifier, known=verdicts
                    )
                result = await self._decide(
                    policy, found, digests, signatures, rollbacks, follow_up, round_at
                )
                ticks.decided += 1
            outcome = "ok"
            return result
        finally:
            if outcome == "gone":  # deleted: its series go with it, none are made anew
                self.metrics.forget_policy(namespace, name)
                self.forget(namespace, name)
            elif follow_up:  # not a tick of the interval: the interval's series stay its own
                self.metrics.follow_ups.labels(namespace, name, outcome).inc()
            else:
                elapsed = time.monotonic() - started
                self.metrics.tick_duration.labels(namespace, name).observe(elapsed)
                self.metrics.ticks.labels(namespace, name, outcome).inc()
                self.metrics.last_tick.labels(namespace, name).set(time.time())

    async def _read(
        self,
        namespace: str,
        name: str,
        follow_up: bool,
        asked_at: float | None,
        round_at: float | None,
    ) -> tuple[dict[str, Any], TargetReads] | PolicyUnreadable | None:
        """The policy and its targets' reads; None when it is gone, or why it is unreadable
        (already reported in its status)."""
        policy = await asyncio.to_thread(self.api.read_policy, namespace, name)
        if policy is None:
            return None
        try:
            await self.crd.require()  # an outdated CRD: no policy is acted on (runtime/schema)
            found = await read_targets(
                policy,
                api=self.api,
                config=self.config,
                claimed_elsewhere=self.claims.elsewhere(policy),
                follow_up=follow_up,
                shared_reads=self.shared_reads,
                asked_at=asked_at,
                round_at=round_at,
                nodes=self.nodes,
                watches=self.watches,
                revisions=self.revisions,
            )
        except PolicyUnreadable as error:
            await self._unreadable(policy, error, self.clock())
            return error
        return policy, found

    async def _decide(
        self,
        policy: dict[str, Any],
        found: TargetReads,
        digests: Digests,
        signatures: Signatures,
        rollbacks: RollbackEvidence,
        follow_up: bool,
        round_at: float | None,
    ) -> TickOutcome:
        """Plan on the evidence, apply the plan, and say what is in flight."""
        now = self.clock()
        gathered = assemble(
            found,
            digests,
            now,
            self.config,
            follow_up=follow_up,
            signatures=signatures,
            rollbacks=rollbacks,
        )
        plan, reservations, planning, tick = await self._plan(gathered)
        applied = await apply_plan(
            plan, policy, gathered, self.api, now, self.events, permits(tick)
        )
        landed = {*applied.patched, *applied.unknown, *applied.created}
        for patch, held in reservations:
            if patch not in landed:
                self.ledger.release(held)  # that refresh never happened: its pulls are free
        metadata = policy["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        self._record(namespace, name, gathered, applied, plan, planning, round_at)
        flying = in_flight(gathered.tick.policy.spec, applied.status, namespace, now)
        versions = {
            key: str(workload["metadata"].get("resourceVersion", ""))
            for key, workload in gathered.workloads.items()
            if key in flying.workloads
        }
        return TickOutcome(plan, applied, flying, versions, plan.wake_at)

    async def _plan(
        self, gathered: Gathered
    ) -> tuple[Plan, list[tuple[ImagePatch | HelperPodCreate, Reservation]], float, TickInput]:
        """Plan on the budget as it is now, and reserve the pulls of the refreshes planned —
        before any other tick reads the budget; how long planning took (seconds), and the
        input it planned on (what the write guard checks the plan's writes against)."""
        async with self._budget:
            tick = replace(gathered.tick, budgets=budgets(self.ledger, gathered.accounts))
            loop = asyncio.get_running_loop()
            started = time.monotonic()
            plan = await loop.run_in_executor(self._planner, self._planned, tick)
            took = time.monotonic() - started
            return plan, self._reserve(plan, gathered), took, tick

    def _planned(self, tick: TickInput) -> Plan:
        if self.config.planning_delay > 0:  # tests: planning that takes the CPU for a while
            until = time.monotonic() + self.config.planning_delay
            while time.monotonic() < until:
                pass
        return plan_tick(tick)

    def _reserve(
        self, plan: Plan, gathered: Gathered
    ) -> list[tuple[ImagePatch | HelperPodCreate, Reservation]]:
        """Reserve each refresh's (and pre-pull's) pulls until its progress deadline has
        passed."""
        view = gathered.tick.policy
        timeouts = {
            view.target_key(index): (target.rollout_timeout or view.spec.rollout_timeout)
            for index, target in enumerate(view.spec.targets)
        }
        wall = time.time()
        held = []
        charged: list[ImagePatch | HelperPodCreate] = [*plan.patches, *plan.pod_creates]
        for patch in charged:
            settles_in = timeouts.get(patch.target, view.spec.rollout_timeout).total_seconds()
            for (host, identity), pulls in patch.pulls:
                account = gathered.accounts.get((host, identity), identity)
                reservation = self.ledger.reserve(host, account, pulls, wall, settles_in)
                held.append((patch, reservation))
        return held

    async def _unreadable(
        self, policy: dict[str, Any], error: PolicyUnreadable, now: datetime
    ) -> None:
        """Make an unreadable policy visible: conditions, a Warning event, the gauges."""
        metadata = policy["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        log.error("policy unreadable; nothing done", policy=f"{namespace}/{name}", error=str(error))
        written, events = await asyncio.to_thread(mark_unreadable, self.api, policy, error, now)
        for event in events:
            self.events.record(policy, event.type, event.reason, event.message)
        self.metrics.condition.labels(namespace, name, "Degraded").set(1)
        if error.part != "status":  # the policy does nothing: mark_unreadable set Ready False
            self.metrics.condition.labels(namespace, name, "Ready").set(0)
        if written:
            self.metrics.status_writes.labels(namespace, name).inc()

    def _record(
        self,
        namespace: str,
        name: str,
        gathered: Gathered,
        applied: Applied,
        plan: Plan,
        planning: float,
        round_at: float | None,
    ) -> None:
        spec = gathered.tick.policy.spec
        self.metrics.record_status(namespace, name, spec, applied.status)
        for patch in applied.patched:
            kind = "started" if patch.purpose is PatchPurpose.REFRESH else "rolled_back"
            self.metrics.refreshes.labels(namespace, name, kind).inc()
        for outcome, patches in (
            ("refused", applied.refused),
            ("conflicted", applied.conflicted),
            ("unknown", applied.unknown),
            ("held", applied.held),
        ):
            if patches:
                self.metrics.refreshes.labels(namespace, name, outcome).inc(len(patches))
        results = {
            reasons.REFRESHED: "succeeded",
            reasons.REFRESH_FAILED: "failed",
            reasons.CONTESTED: "contested",
        }
        for event in applied.events:
            if event.reason in results:
                self.metrics.refreshes.labels(namespace, name, results[event.reason]).inc()
        if applied.status_written:
            self.metrics.status_writes.labels(namespace, name).inc()
        if applied.guarded:
            self.metrics.write_refusals.labels(namespace, name).inc(len(applied.guarded))
        log.info(
            "tick",
            policy=f"{namespace}/{name}",
            phase=str(applied.status.phase),
            patched=[str(p.target) for p in applied.patched],
            refused=[str(p.target) for p in applied.refused],
            guard_refused=[str(r.write.target) for r in applied.guarded],
            events=[e.reason for e in applied.events],
            status_written=applied.status_written,
            follow_up=gathered.tick.follow_up,
            round=round_at,  # the grid instant of an interval tick's round; None: no round
            decisions=plan.decisions,
            planning_seconds=round(planning, 3),
        )
