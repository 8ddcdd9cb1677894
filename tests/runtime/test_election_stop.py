"""Stopping a leader's renewals: a cancelled ``hold`` ends, whenever the stop arrives — also in
the turn of the loop in which a renewal lands (where ``asyncio.wait_for`` of Python 3.11 would
return the renewal and swallow the stop, and the renewals would go on after a graceful stop
released the Lease). No API server: the round's I/O is replaced, only asyncio's order runs."""

from __future__ import annotations

import asyncio
import time

import pytest

from imagerefresh.runtime.election import ElectionTimings, Elector, _Round

QUICK = ElectionTimings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.01)


async def test_a_hold_stopped_as_its_renewal_lands_stops_and_never_renews_again() -> None:
    elector = Elector(None, "ns", "lease", "a", QUICK)  # type: ignore[arg-type]
    elector.gate.extend(time.monotonic() + 60)
    rounds = 0
    holding: asyncio.Task[str]

    async def renewal_landing_as_the_stop_arrives(valid_until: float) -> _Round:
        nonlocal rounds
        rounds += 1
        if rounds > 1:
            raise AssertionError("renewed again after hold was cancelled")
        holding.cancel()
        return _Round.HELD

    elector._try = renewal_landing_as_the_stop_arrives  # type: ignore[method-assign]
    holding = asyncio.create_task(elector.hold())
    with pytest.raises(asyncio.CancelledError):
        await holding
    assert rounds == 1
    elector.close()
