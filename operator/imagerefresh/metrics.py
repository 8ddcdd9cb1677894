"""Prometheus metrics, all prefixed ``imagerefresh_``, in a registry of their own.

The :class:`Metrics` object is created by ``imagerefresh run`` (never at import time) and
passed to what records into it; tests make their own. Per-target gauges are keyed by
(namespace, policy, kind, target) so an alert can name the workload. Rate-limit gauges are
keyed by (registry, identity), the identity being the account's pull secret
(``namespace/name``) or ``anonymous`` — never a username.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from imagerefresh.models import PolicySpec, PolicyStatus
from imagerefresh.ratelimit import RequestKind

__all__ = ["Metrics"]

_TARGET = ("namespace", "policy", "kind", "target")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
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
        self.events_dropped = Counter(
            "imagerefresh_events_dropped",
            "Events not posted because the backlog of events to post was full",
            registry=r,
        )

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        start_http_server(port, addr=address, registry=self.registry)

    def registry_request(self, registry: str, kind: RequestKind, outcome: str) -> None:
        self.registry_requests.labels(registry, str(kind), outcome).inc()

    def record_status(
        self, namespace: str, policy: str, spec: PolicySpec, status: PolicyStatus
    ) -> None:
        """Per-target gauges from the status a tick produced."""
        for target in status.targets:
            labels = (namespace, policy, str(target.kind), f"{target.namespace}/{target.name}")
            self.skip_streak.labels(*labels).set(target.skip_streak)
            self.refresh_attempts.labels(*labels).set(target.refresh_attempts)
            self.frozen.labels(*labels).set(int(target.skip_streak >= spec.max_skip_ticks))
            self.locked.labels(*labels).set(
                int(target.refresh_attempts >= spec.max_refresh_attempts)
            )
        for condition in status.conditions:
            self.condition.labels(namespace, policy, condition.type).set(
                int(condition.status == "True")
            )
        for budget in status.registries:
            if budget.limit is not None:
                self.ratelimit_limit.labels(budget.host, budget.identity).set(budget.limit)
            if budget.remaining is not None:
                self.ratelimit_remaining.labels(budget.host, budget.identity).set(budget.remaining)
