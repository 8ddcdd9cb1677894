"""Prometheus metrics, all prefixed ``imagerefresh_``, in a registry of their own.

The :class:`Metrics` object is created by ``imagerefresh run`` (never at import time) and
passed to what records into it; tests make their own. Per-target gauges are keyed by
(namespace, policy, kind, target) so an alert can name the workload. Rate-limit gauges are
keyed by (registry, identity), the identity being the account's pull secret
(``namespace/name``) or ``anonymous`` — never a username.

A series lives only as long as what it describes: a deleted policy's series are
removed (:meth:`Metrics.forget_policy`), and each status recorded removes the series of the
targets, conditions and registry budgets it no longer reports — else an alert on a stale
series (a target frozen, a policy not ticking) would fire until the operator restarts.

Two series belong to the process, not to any policy, and so outlive every policy: the heartbeat
``imagerefresh_build_info{version}`` (always 1) and ``imagerefresh_leader`` (1 while this
process is the one that writes), next to the standard ``process_*`` series, whose
``process_start_time_seconds`` changes with every restart. An alert built on them fires when
the operator is Pending, crash-looping or not scraped; one built on per-policy series would go
quiet instead, since those vanish with the operator and with every deleted policy. The gauge
``imagerefresh_crd_outdated`` belongs to the process too: the installed CRD is the cluster's.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)

from imagerefresh.models import Phase, PolicySpec, PolicyStatus, TargetStatus
from imagerefresh.ratelimit import RequestKind

__all__ = ["Metrics"]

_TARGET = ("namespace", "policy", "kind", "target")
PolicyKey = tuple[str, str]  # (namespace, policy)
TargetLabels = tuple[str, str]  # (kind, "namespace/name"), as the per-target series carry them
BudgetLabels = tuple[str, str]  # (registry, identity)


def _installed_version() -> str:
    """The installed distribution's version; "unknown" when run from an uninstalled tree."""
    try:
        return distribution_version("imagerefresh")
    except PackageNotFoundError:
        return "unknown"


class Metrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, version: str | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.build_info = Gauge(
            "imagerefresh_build_info",
            "Always 1 while the operator process runs (its heartbeat), labelled with its version",
            ["version"],
            registry=r,
        )
        self.build_info.labels(version if version is not None else _installed_version()).set(1)
        # CPU, memory, open files and the start time that tells a restart (crash loop).
        ProcessCollector(registry=r)
        self.leader = Gauge(
            "imagerefresh_leader",
            "1 while this process is the leader that writes, 0 while it waits (standby)",
            registry=r,
        )
        self.registry_requests = Counter(
            "imagerefresh_registry_requests",
            "Registry requests sent",
            ["registry", "kind", "outcome"],
            registry=r,
        )
        self.ratelimit_limit = Gauge(
            "imagerefresh_ratelimit_limit",
            "Pull limit the registry reports, per account (identity: pull secret or anonymous)",
            ["registry", "identity"],
            registry=r,
        )
        self.ratelimit_remaining = Gauge(
            "imagerefresh_ratelimit_remaining",
            "Pulls left as the registry reports, per account (identity: pull secret or anonymous)",
            ["registry", "identity"],
            registry=r,
        )
        self.refreshes = Counter(
            "imagerefresh_refreshes",
            "Refresh outcomes",
            ["namespace", "policy", "outcome"],
            registry=r,
        )
        self.skip_streak = Gauge(
            "imagerefresh_target_skip_streak", "Consecutive unsettled ticks", _TARGET, registry=r
        )
        self.refresh_attempts = Gauge(
            "imagerefresh_target_refresh_attempts",
            "Consecutive failed refreshes",
            _TARGET,
            registry=r,
        )
        self.frozen = Gauge(
            "imagerefresh_target_frozen",
            "1 while the skip streak is at its ceiling",
            _TARGET,
            registry=r,
        )
        self.locked = Gauge(
            "imagerefresh_target_locked",
            "1 while refresh attempts are at their ceiling",
            _TARGET,
            registry=r,
        )
        self.untrusted = Gauge(
            "imagerefresh_target_untrusted",
            "1 while a desired digest of the target has no valid signature by a listed key",
            _TARGET,
            registry=r,
        )
        self.failed_builds = Gauge(
            "imagerefresh_target_failed_builds",
            "Builds whose rollout failed on the target, not tried again until a reset",
            _TARGET,
            registry=r,
        )
        self.offline_ready = Gauge(
            "imagerefresh_target_offline_ready",
            "1 while every pod of the target would restart with the registry unreachable, 0 "
            "while some would not (absent while not assessed)",
            _TARGET,
            registry=r,
        )
        self.signature_lookups = Counter(
            "imagerefresh_signature_lookups",
            "Signature lookups by outcome: verified, untrusted or unreadable (they read the "
            "registry), deferred (held by the pull budget's reserve), queued (the policy's "
            "lookups for the tick were used up)",
            ["registry", "outcome"],
            registry=r,
        )
        self.signature_checks = Histogram(
            "imagerefresh_signature_check_cpu_seconds",
            "CPU time of each signature check on the verification threads (one candidate of "
            "one digest, the .sig tag's layers or one referrer's bundle, under the listed keys)",
            buckets=(0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        )
        self.signature_checks_running = Gauge(
            "imagerefresh_signature_checks_in_progress",
            "Signature checks running on the verification threads now",
            registry=r,
        )
        self.tick_duration = Histogram(
            "imagerefresh_tick_duration_seconds",
            "Time for one policy tick",
            ["namespace", "policy"],
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
        )
        self.ticks = Counter(
            "imagerefresh_ticks",
            "Ticks by outcome",
            ["namespace", "policy", "outcome"],
            registry=r,
        )
        self.ticks_asked = Counter(
            "imagerefresh_ticks_asked",
            "Prompt ticks asked for, by what asked: the policy first seen (noticed), a new "
            "generation (spec), a new reset, refresh-now or refresh-outside-window annotation",
            ["namespace", "policy", "reason"],
            registry=r,
        )
        self.ticks_answered = Counter(
            "imagerefresh_ticks_answered",
            "Asks answered: counted when the first tick that started after the ask ends, "
            "whatever its outcome",
            ["namespace", "policy", "reason"],
            registry=r,
        )
        self.follow_ups = Counter(
            "imagerefresh_follow_up_ticks",
            "Ticks between interval ticks that judged only the rollouts in flight",
            ["namespace", "policy", "outcome"],
            registry=r,
        )
        self.last_tick = Gauge(
            "imagerefresh_last_tick_timestamp_seconds",
            "When a policy last ticked",
            ["namespace", "policy"],
            registry=r,
        )
        self.condition = Gauge(
            "imagerefresh_policy_condition",
            "1 while the policy's condition is True",
            ["namespace", "policy", "condition"],
            registry=r,
        )
        self.status_writes = Counter(
            "imagerefresh_status_writes",
            "Policy status writes",
            ["namespace", "policy"],
            registry=r,
        )
        self.write_refusals = Counter(
            "imagerefresh_write_refusals",
            "Writes (image patches, pre-pull pods) the write guard refused to send: a bug in "
            "imagerefresh, or a status edited by hand",
            ["namespace", "policy"],
            registry=r,
        )
        self.crd_outdated = Gauge(
            "imagerefresh_crd_outdated",
            "1 while the installed CRD lacks fields the operator uses (or its schema cannot be "
            "read): no policy is acted on",
            registry=r,
        )
        self.events_dropped = Counter(
            "imagerefresh_events_dropped",
            "Events not posted because the backlog of events to post was full",
            registry=r,
        )

        # What each policy's last recorded status reported: the series it owns.
        self._targets: dict[PolicyKey, set[TargetLabels]] = {}
        self._conditions: dict[PolicyKey, set[str]] = {}
        self._limits: dict[PolicyKey, set[BudgetLabels]] = {}
        self._remaining: dict[PolicyKey, set[BudgetLabels]] = {}

    @property
    def _per_policy(self) -> tuple[Counter | Gauge | Histogram, ...]:
        """Every family with (namespace, policy) labels."""
        return (
            self.refreshes,
            self.skip_streak,
            self.refresh_attempts,
            self.frozen,
            self.locked,
            self.untrusted,
            self.failed_builds,
            self.offline_ready,
            self.tick_duration,
            self.ticks,
            self.ticks_asked,
            self.ticks_answered,
            self.follow_ups,
            self.last_tick,
            self.condition,
            self.status_writes,
            self.write_refusals,
        )

    @property
    def _per_target(self) -> tuple[Gauge, ...]:
        """Every family with (namespace, policy, kind, target) labels."""
        return (
            self.skip_streak,
            self.refresh_attempts,
            self.frozen,
            self.locked,
            self.untrusted,
            self.failed_builds,
            self.offline_ready,
        )

    def set_leader(self, leading: bool) -> None:
        """Report whether this process now writes (runs the handlers) or stands by."""
        self.leader.set(int(leading))

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        start_http_server(port, addr=address, registry=self.registry)

    def tick_asked(self, namespace: str, policy: str, reason: str) -> None:
        """A prompt tick of the policy was asked for (``reason``: what asked)."""
        self.ticks_asked.labels(namespace, policy, reason).inc()

    def tick_answered(self, namespace: str, policy: str, reason: str, count: int) -> None:
        """A tick that started after ``count`` asks of ``reason`` has ended: they are answered."""
        self.ticks_answered.labels(namespace, policy, reason).inc(count)

    def registry_request(self, registry: str, kind: RequestKind, outcome: str) -> None:
        self.registry_requests.labels(registry, str(kind), outcome).inc()

    def signature_lookup(self, registry: str, outcome: str) -> None:
        """One lookup's outcome: ``verified``, ``untrusted``, ``unreadable``, ``deferred`` or
        ``queued``."""
        self.signature_lookups.labels(registry, outcome).inc()

    def verification_started(self) -> None:
        """A signature check starts on a verification thread (called on that thread)."""
        self.signature_checks_running.inc()

    def verification_finished(self, cpu_seconds: float) -> None:
        """It ended, after ``cpu_seconds`` of its thread's CPU (called on that thread). The
        check is counted before it stops being in progress: a reader that sees the count
        unchanged and a check in progress on both sides of something saw one check span it."""
        self.signature_checks.observe(cpu_seconds)
        self.signature_checks_running.dec()

    def record_status(
        self, namespace: str, policy: str, spec: PolicySpec, status: PolicyStatus
    ) -> None:
        """Per-target gauges from the status a tick produced; what it no longer reports goes."""
        key = (namespace, policy)
        targets: set[TargetLabels] = set()
        for target in status.targets:
            kind, name = str(target.kind), f"{target.namespace}/{target.name}"
            targets.add((kind, name))
            labels = (namespace, policy, kind, name)
            self.skip_streak.labels(*labels).set(target.skip_streak)
            self.refresh_attempts.labels(*labels).set(target.refresh_attempts)
            self.frozen.labels(*labels).set(int(target.skip_streak >= spec.max_skip_ticks))
            self.locked.labels(*labels).set(int(target.locked_at is not None))
            self.untrusted.labels(*labels).set(int(target.phase is Phase.UNTRUSTED))
            self.failed_builds.labels(*labels).set(len(target.failed))
            self._record_offline(labels, target)
        self.forget_targets(namespace, policy, self._targets.get(key, set()) - targets)
        self._targets[key] = targets

        conditions = {condition.type for condition in status.conditions}
        for condition in status.conditions:
            self.condition.labels(namespace, policy, condition.type).set(
                int(condition.status == "True")
            )
        for gone in self._conditions.get(key, set()) - conditions:
            self.condition.remove(namespace, policy, gone)
        self._conditions[key] = conditions

        limits: set[BudgetLabels] = set()
        remaining: set[BudgetLabels] = set()
        for budget in status.registries:
            if budget.limit is not None:
                self.ratelimit_limit.labels(budget.host, budget.identity).set(budget.limit)
                limits.add((budget.host, budget.identity))
            if budget.remaining is not None:
                self.ratelimit_remaining.labels(budget.host, budget.identity).set(budget.remaining)
                remaining.add((budget.host, budget.identity))
        self._report_budgets(key, limits, remaining)

    def _record_offline(self, labels: tuple[str, str, str, str], target: TargetStatus) -> None:
        """1 when every declared container would restart offline, 0 when one would not; no
        series while the target is not assessed (a verdict of another time would be stale)."""
        verdicts = [container.offline for container in target.containers]
        assessed = [verdict for verdict in verdicts if verdict is not None]
        if not verdicts or len(assessed) < len(verdicts):
            self.offline_ready.remove(*labels)
            return
        self.offline_ready.labels(*labels).set(int(all(v.ready for v in assessed)))

    def forget_targets(self, namespace: str, policy: str, targets: Iterable[TargetLabels]) -> None:
        """Remove the per-target series of ``targets`` ((kind, "namespace/name") pairs) of the
        policy: targets removed from its spec, or whose key changed."""
        for kind, name in targets:
            for gauge in self._per_target:
                gauge.remove(namespace, policy, kind, name)
        known = self._targets.get((namespace, policy))
        if known is not None:
            known.difference_update(targets)

    def forget_policy(self, namespace: str, policy: str) -> None:
        """Remove every series of a deleted policy (a policy of that name created later starts
        afresh) and the registry budgets only it reported."""
        key = (namespace, policy)
        for family in self._per_policy:
            family.remove_by_labels({"namespace": namespace, "policy": policy})
        self._targets.pop(key, None)
        self._conditions.pop(key, None)
        self._report_budgets(key, set(), set())
        self._limits.pop(key, None)
        self._remaining.pop(key, None)

    def _report_budgets(
        self, key: PolicyKey, limits: set[BudgetLabels], remaining: set[BudgetLabels]
    ) -> None:
        """Record what one policy reports; a (registry, identity) series that no policy reports
        any longer is removed (one registry and identity is often shared by many policies)."""
        for gauge, reported, now in (
            (self.ratelimit_limit, self._limits, limits),
            (self.ratelimit_remaining, self._remaining, remaining),
        ):
            before = reported.get(key, set())
            reported[key] = now
            still = set().union(*reported.values())
            for host, identity in before - still:
                gauge.remove(host, identity)
