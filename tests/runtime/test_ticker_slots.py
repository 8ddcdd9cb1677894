"""Policies that tick at the same instant read and decide a bounded number at a time, and a
tick waiting on a registry holds no slot at all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from imagerefresh.metrics import Metrics
from imagerefresh.runtime import ticker as ticker_module
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.restorable import RollbackEvidence
from imagerefresh.runtime.ticker import PolicyTicker, TickOutcome


class Counted:
    """How many ticks are inside one step at once, and the most there were."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def inside(self, seconds: float) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1


async def test_reads_and_decisions_take_slots_and_waiting_on_a_registry_takes_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    anything: Any = object()
    ticker = PolicyTicker(
        api=anything,
        resolver=anything,
        ledger=anything,
        config=OperatorConfig(watch_evidence=False, tick_concurrency=3),
        metrics=Metrics(),
        verifier=anything,
    )
    reading, resolving, deciding = Counted(), Counted(), Counted()
    waiting = asyncio.Event()

    async def read(*_: Any) -> tuple[dict[str, Any], Any]:
        await reading.inside(0.01)
        return {}, None

    async def resolve(*_: Any, **__: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        resolving.now += 1
        resolving.most = max(resolving.most, resolving.now)
        await waiting.wait()  # a registry that answers only once every tick is asking it
        resolving.now -= 1
        return {}, {}

    async def decide(*_: Any) -> TickOutcome:
        await deciding.inside(0.01)
        return anything

    monkeypatch.setattr(ticker, "_read", read)
    monkeypatch.setattr(ticker, "_decide", decide)

    async def verify(*_: Any, **__: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return {}, {}  # signatures are read after the digests, as registry waits too

    async def restorable(*_: Any, **__: Any) -> RollbackEvidence:
        return RollbackEvidence()  # what a rollback may restore: asked of registries too

    monkeypatch.setattr(ticker_module, "resolve_digests", resolve)
    monkeypatch.setattr(ticker_module, "verify_signatures", verify)
    monkeypatch.setattr(ticker_module, "rollback_evidence", restorable)
    ticks = asyncio.gather(*(ticker.tick("ns", f"p{i}") for i in range(20)))
    for _ in range(500):
        if resolving.now == 20:
            break
        await asyncio.sleep(0.01)
    assert resolving.now == 20  # every tick waits on the registry at once: no slot held
    waiting.set()
    await ticks
    assert (reading.most, deciding.most) == (3, 3)
