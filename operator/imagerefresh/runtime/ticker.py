"""One tick of one policy, end to end: read, gather, plan, apply, record.

:class:`PolicyTicker` holds what lives as long as the operator — the Kubernetes API facade,
the shared resolver (one registry request per unique reference across every policy ticking in
the same window), the rate-limit ledger, the metrics — and runs a policy's tick on demand.
The handlers decide *when*; this module decides nothing itself (that is the planner's job).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from imagerefresh.kube.api import KubeApi, ReadCache
from imagerefresh.metrics import Metrics
from imagerefresh.planner import (
    NOTHING_IN_FLIGHT,
    InFlight,
    PatchPurpose,
    Plan,
    TargetKey,
    in_flight,
    plan_tick,
)
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.apply import Applied, apply_plan, mark_unreadable
from imagerefresh.runtime.claims import ClaimIndex
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.gather import Gathered, PolicyUnreadable, gather

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
    window_opens: datetime | None = None  # a refresh waits for the window opening then


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
    ) -> None:
        self.api, self.resolver, self.ledger = api, resolver, ledger
        self.config, self.metrics, self.clock = config, metrics, clock
        self.events = events if events is not None else EventRecorder(api)
        self.claims = ClaimIndex()  # fed by the watch on policies (handlers)
        # Policies ticking together share their ServiceAccount and pull-secret reads, as they
        # share registry answers: within the resolution window, never older than it.
        self.shared_reads = ReadCache(lifetime=config.resolution_window)
        self._slots = asyncio.Semaphore(config.tick_concurrency)

    async def _gather(
        self,
        policy: dict[str, Any],
        now: datetime,
        *,
        follow_up: bool = False,
        asked_at: float | None = None,
    ) -> Gathered:
        metadata = policy["metadata"]
        return await gather(
            policy,
            api=self.api,
            resolver=self.resolver,
            ledger=self.ledger,
            config=self.config,
            now=now,
            claimed_elsewhere=self.claims.elsewhere(metadata["namespace"], metadata["name"]),
            follow_up=follow_up,
            shared_reads=self.shared_reads,
            asked_at=asked_at,
        )

    async def plan(self, namespace: str, name: str) -> tuple[Gathered, Plan] | None:
        """What the next tick would do, with no writes (None when the policy is gone)."""
        policy = await asyncio.to_thread(self.api.read_policy, namespace, name)
        if policy is None:
            return None
        gathered = await self._gather(policy, self.clock())
        return gathered, plan_tick(gathered.tick)

    async def tick(
        self,
        namespace: str,
        name: str,
        *,
        follow_up: bool = False,
        asked_at: float | None = None,
    ) -> TickOutcome | None:
        """Run one tick of the policy, when a slot is free; None when it no longer exists.

        ``follow_up``: judge only the rollouts in flight, between interval ticks (see
        :mod:`imagerefresh.planner.follow`). ``asked_at``: when someone asked for this tick
        (a new trigger, epoch seconds): nothing read before then is taken for an answer (see
        :func:`.gather`).

        Policies on one interval tick at the same instant (:mod:`.schedule`); the slots bound
        how many run at once, and so how many ticks' API objects are held in memory at once
        — never more work for the API server than it can take, never a heap sized for the
        whole fleet.
        """
        async with self._slots:
            return await self._tick(namespace, name, follow_up, asked_at)

    async def _tick(
        self, namespace: str, name: str, follow_up: bool, asked_at: float | None = None
    ) -> TickOutcome | None:
        started = time.monotonic()
        outcome = "error"
        try:
            policy = await asyncio.to_thread(self.api.read_policy, namespace, name)
            if policy is None:
                outcome = "gone"
                return None
            now = self.clock()
            try:
                gathered = await self._gather(policy, now, follow_up=follow_up, asked_at=asked_at)
            except PolicyUnreadable as error:
                outcome = "invalid" if error.part == "spec" else "unreadable_status"
                await self._unreadable(policy, error, now)
                return None
            plan = plan_tick(gathered.tick)
            applied = await apply_plan(plan, policy, gathered, self.api, now, self.events)
            self._record(namespace, name, gathered, applied)
            outcome = "ok"
            flying = in_flight(gathered.tick.policy.spec, applied.status, namespace)
            versions = {
                key: str(workload["metadata"].get("resourceVersion", ""))
                for key, workload in gathered.workloads.items()
                if key in flying.workloads
            }
            return TickOutcome(plan, applied, flying, versions, plan.window_opens)
        finally:
            if outcome == "gone":  # deleted: its series go with it, none are made anew
                self.metrics.forget_policy(namespace, name)
            elif follow_up:  # not a tick of the interval: the interval's series stay its own
                self.metrics.follow_ups.labels(namespace, name, outcome).inc()
            else:
                elapsed = time.monotonic() - started
                self.metrics.tick_duration.labels(namespace, name).observe(elapsed)
                self.metrics.ticks.labels(namespace, name, outcome).inc()
                self.metrics.last_tick.labels(namespace, name).set(time.time())

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
        if error.part == "spec":
            self.metrics.condition.labels(namespace, name, "Ready").set(0)
        if written:
            self.metrics.status_writes.labels(namespace, name).inc()

    def _record(self, namespace: str, name: str, gathered: Gathered, applied: Applied) -> None:
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
        results = {"Refreshed": "succeeded", "RefreshFailed": "failed", "Contested": "contested"}
        for event in applied.events:
            if event.reason in results:
                self.metrics.refreshes.labels(namespace, name, results[event.reason]).inc()
        if applied.status_written:
            self.metrics.status_writes.labels(namespace, name).inc()
        log.info(
            "tick",
            policy=f"{namespace}/{name}",
            phase=str(applied.status.phase),
            patched=[str(p.target) for p in applied.patched],
            refused=[str(p.target) for p in applied.refused],
            events=[e.reason for e in applied.events],
            status_written=applied.status_written,
            follow_up=gathered.tick.follow_up,
        )
