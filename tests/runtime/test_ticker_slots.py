"""Policies that tick at the same instant run a bounded number at a time."""

from __future__ import annotations

import asyncio
from typing import Any

from imagerefresh.metrics import Metrics
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.ticker import PolicyTicker, TickOutcome


async def test_no_more_ticks_run_at_once_than_the_configured_slots() -> None:
    anything: Any = object()
    ticker = PolicyTicker(
        api=anything,
        resolver=anything,
        ledger=anything,
        config=OperatorConfig(tick_concurrency=3),
        metrics=Metrics(),
    )
    running, most = 0, 0

    async def one_tick(
        namespace: str, name: str, follow_up: bool, asked_at: float | None = None
    ) -> TickOutcome | None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        return None

    ticker._tick = one_tick  # type: ignore[method-assign]
    await asyncio.gather(*(ticker.tick("ns", f"p{i}") for i in range(20)))
    assert most == 3
