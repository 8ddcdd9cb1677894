"""A tick that finds its policy gone removes the policy's series instead of recording new ones."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from imagerefresh.metrics import Metrics
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.ticker import PolicyTicker


class NoPolicies:
    """The one API read a tick makes before anything else: the policy, here deleted."""

    def read_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


async def test_a_tick_that_finds_its_policy_deleted_leaves_no_series_of_it() -> None:
    metrics = Metrics(CollectorRegistry())
    # Series from the policy's earlier life, and from another policy that stays.
    for policy in ("deleted", "stays"):
        metrics.ticks.labels("ns", policy, "ok").inc()
        metrics.last_tick.labels("ns", policy).set(1.0)
        metrics.skip_streak.labels("ns", policy, "Deployment", "ns/app").set(3)
    anything: Any = object()
    ticker = PolicyTicker(
        api=NoPolicies(),  # type: ignore[arg-type]
        resolver=anything,
        ledger=anything,
        config=OperatorConfig(watch_evidence=False),
        metrics=metrics,
    )
    assert await ticker.tick("ns", "deleted") is None
    text = generate_latest(metrics.registry).decode()
    assert 'policy="deleted"' not in text
    assert text.count('policy="stays"') >= 3
