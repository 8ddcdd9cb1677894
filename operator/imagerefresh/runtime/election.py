"""Leader election's I/O: take the Lease, keep it, let go of it.

The decisions are :mod:`imagerefresh.lease`'s; this module only reads and writes the Lease
(through :class:`~imagerefresh.kube.api.KubeApi`, on one thread of its own so that a busy tick
can never delay a renewal) and keeps the :class:`LeaderGate` every other write asks first.

Timings are client-go's (lease 15 s, renew deadline 10 s, retry period 2 s). The gate is a
deadline, not a flag set by the loop: after each renewal the process may write for
``renew_deadline`` seconds counted from when that renewal was *sent*. So even a stalled event
loop, or a renewal hanging in a dead connection, stops every write at the deadline — five
seconds before any standby may consider the Lease expired (``lease_duration``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import secrets
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.lease import (
    Action,
    LeaseRecord,
    Observation,
    claim,
    decide,
    expires_at,
    observe,
    record_from_api,
    record_to_api,
    released,
)

__all__ = ["ElectionTimings", "Elector", "LeaderGate", "default_identity"]

log = structlog.get_logger(__name__)

JITTER = 1.2  # client-go's JitterFactor: retries are spread over [retry, retry * 2.2)
T = TypeVar("T")


class _Round(Enum):
    HELD = "held"  # we took or renewed it
    OTHER = "other"  # another candidate holds it, unexpired
    CONFLICT = "conflict"  # our write met a 409: someone wrote first


@dataclass(frozen=True)
class ElectionTimings:
    """client-go's defaults; tests shorten them.

    The lease duration is whole seconds: the Lease stores ``leaseDurationSeconds`` as an
    integer, and a standby waits out what is stored. A fraction would have to be rounded
    before it is written, so the checks below would judge a duration nobody waits for (10.5
    against a renew deadline of 10.2 passes, 10 is written: both would write for 0.2 s).
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not float(self.lease_duration).is_integer():
            raise ValueError(
                f"the lease duration must be a whole number of seconds (got "
                f"{self.lease_duration}): a Lease stores leaseDurationSeconds as an integer"
            )
        # client-go's own checks: a leader must give up before a standby may take over, and
        # must get at least one retry within its deadline.
        if not self.lease_duration > self.renew_deadline:
            raise ValueError("the lease duration must be longer than the renew deadline")
        if not self.renew_deadline > JITTER * self.retry_period:
            raise ValueError(f"the renew deadline must exceed {JITTER} times the retry period")
        if self.retry_period <= 0:
            raise ValueError("the retry period must be positive")

    @property
    def lease_seconds(self) -> int:
        """The lease duration as the Lease stores it: exactly the value validated above."""
        return int(self.lease_duration)


def default_identity() -> str:
    """The pod's name (``POD_NAME``, else the hostname) and a random suffix: a restarted pod
    of the same name is a new candidate, never mistaken for the holder it replaced."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{secrets.token_hex(4)}"


class LeaderGate:
    """Whether this process may write: only until its last renewal's deadline, never after
    :meth:`close`. Called from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = float("-inf")
        self._closed = False

    def __call__(self) -> bool:
        return not self._closed and self._clock() < self._until

    def extend(self, until: float) -> None:
        self._until = max(self._until, until)

    def close(self) -> None:
        self._closed = True

    @property
    def until(self) -> float:
        return self._until


class Elector:
    """One candidate for the Lease ``namespace/name`` under ``identity``."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        timings: ElectionTimings | None = None,
        *,
        gate: LeaderGate | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings or ElectionTimings()
        self.gate = gate or LeaderGate(clock)
        self._clock = clock
        self._observed: Observation | None = None
        self._held: LeaseRecord | None = None  # the record we last wrote, while we hold it
        self._version = ""  # the Lease's resourceVersion as last read (what a watch starts at)
        # One thread, idle between requests: renewals never queue behind a tick's requests.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="imagerefresh-lease")

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def acquire(self) -> None:
        """Return once this candidate holds the Lease; until then only read it.

        While another candidate holds it, the Lease is watched rather than polled: each
        renewal is seen as it is written, and the next attempt to take it is made the moment
        it expires (by this candidate's clock) — so a killed leader is replaced one lease
        duration after its last renewal, not up to two retry periods later. A watch that
        fails falls back to client-go's jittered polling.
        """
        log.info("waiting to lead", lease=self.lease, identity=self.identity)
        while True:
            try:
                outcome = await self._try(self._clock() + self.timings.renew_deadline)
                if outcome is _Round.HELD:
                    log.info("leading", lease=self.lease, identity=self.identity)
                    return
                if outcome is _Round.OTHER:
                    await self._await_expiry()
                    continue
            except KubeError as error:
                log.warning("leader election: cannot read or take the Lease", error=str(error))
            await asyncio.sleep(self.timings.retry_period * random.uniform(1, 1 + JITTER))

    async def _await_expiry(self) -> None:
        """Until the observed holder's lease expires, or the Lease changes hands or goes.

        Raises KubeError when the watch fails (the caller then polls, as client-go does).
        """
        default = self.timings.lease_seconds
        while self._observed is not None and self._version:
            record = self._observed.record
            remaining = expires_at(record, self._observed.since, default) - self._clock()
            if remaining < 1:  # a watch's timeout is whole seconds: sleep out the rest
                await asyncio.sleep(max(0.0, remaining))
                return
            started = self._clock()
            event = await self._io(
                self.api.watch_lease, self.namespace, self.name, self._version, int(remaining)
            )
            if event is None:
                if self._clock() - started < 0.5:  # never a tight loop of empty watches
                    raise KubeError("the API server ended the Lease watch at once")
                continue
            lease = event.get("object") or {}
            if event.get("type") == "DELETED":
                return
            self._version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
            changed = record_from_api(lease)
            self._observed = observe(self._observed, changed, self._clock())
            if changed.holder != record.holder:
                return  # released, or taken by another: read and decide again

    async def hold(self) -> str:
        """Renew every retry period; return why leadership is lost (the gate is closed by then).

        A renewal that finds another holder loses at once (client-go would retry until its
        deadline, writing meanwhile); failing renewals lose at the renew deadline of the last
        one that landed.
        """
        while True:
            await asyncio.sleep(self.timings.retry_period)
            remaining = self.gate.until - self._clock()
            if remaining <= 0:
                return self._lost("no renewal landed within the renew deadline")
            try:
                # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that arrives
                # as the renewal lands, and a cancelled hold would go on renewing (and reopen
                # the gate) after the graceful stop released the Lease.
                async with asyncio.timeout(remaining):
                    outcome = await self._try(self._clock() + self.timings.renew_deadline)
            except TimeoutError:
                return self._lost("the renewal did not finish within the renew deadline")
            except KubeError as error:
                log.warning("leader election: renewal failed", error=str(error))
                continue
            if outcome is _Round.OTHER:
                return self._lost("another candidate holds the Lease")
            if outcome is _Round.CONFLICT:
                # The Lease changed under our write; the next round reads who holds it. Until
                # then the gate's deadline, not this answer, bounds our writes.
                log.warning("leader election: the Lease changed during renewal; reading again")

    async def release(self) -> None:
        """Stop writing, then hand the Lease over at once (if we still hold it) — for a
        graceful stop. Best-effort: an unreleased Lease simply expires."""
        held, holding = self._held, self.gate()
        self.gate.close()
        if held is None or not holding:
            return
        try:
            lease = await self._io(self.api.read_lease, self.namespace, self.name)
            if lease is None or record_from_api(lease).holder != self.identity:
                return
            version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
            record = released(record_from_api(lease), datetime.now(UTC))
            await self._io(
                self.api.replace_lease, self.namespace, self.name, version, record_to_api(record)
            )
            log.info("lease released", lease=self.lease, identity=self.identity)
        except KubeError as error:
            log.warning("lease not released; it expires by itself", error=str(error))

    def close(self) -> None:
        self._executor.shutdown(wait=False)

    def _lost(self, why: str) -> str:
        self.gate.close()
        self._held = None
        log.error("leadership lost", lease=self.lease, identity=self.identity, reason=why)
        return why

    async def _try(self, valid_until: float) -> _Round:
        """Read the Lease and take or renew it if that is the decision; how the round ended.

        ``valid_until`` is computed before the read: the gate then never outlives the moment
        this renewal began by more than the renew deadline. A write refused with 409 (another
        candidate wrote first: the resourceVersion moved, or the Lease was created meanwhile)
        means this candidate lost the round.
        """
        lease = await self._io(self.api.read_lease, self.namespace, self.name)
        now = self._clock()
        record = record_from_api(lease) if lease is not None else None
        self._version = str(((lease or {}).get("metadata") or {}).get("resourceVersion") or "")
        if record is not None:
            self._observed = observe(self._observed, record, now)
        since = self._observed.since if self._observed is not None else now
        duration = self.timings.lease_seconds
        action = decide(record, since, now, self.identity, duration)
        if action is Action.WAIT:
            self._held = None
            return _Round.OTHER
        wanted = claim(record, action, self.identity, duration, datetime.now(UTC))
        try:
            if lease is None:
                await self._io(
                    self.api.create_lease, self.namespace, self.name, record_to_api(wanted)
                )
            else:
                version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
                await self._io(
                    self.api.replace_lease,
                    self.namespace,
                    self.name,
                    version,
                    record_to_api(wanted),
                )
        except KubeError as error:
            if error.status == 409:
                return _Round.CONFLICT
            raise
        self._held = wanted
        self._observed = Observation(wanted, self._clock())
        self.gate.extend(valid_until)
        return _Round.HELD

    async def _io(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(call, *args))
