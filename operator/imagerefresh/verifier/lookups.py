"""Look digests' signatures up at their registry, check them off the event loop, and remember.

:class:`SignatureVerifier` reads the two places cosign stores signatures (the registry client
does: HEAD before GET, every body capped, within a deadline, counted, manifest GETs charged to
the pull budget and held to the asking policy's reserve) and hands the bytes to the pure
:func:`imagerefresh.signatures.verify` on a worker thread of its
:class:`~.pool.VerificationPool`, in the asking policy's turn. What it concludes is kept in
:class:`~.memory.VerdictMemory`.

Each tenant pays for itself:

* a call looks up at most ``limit`` digests (the runtime passes
  :data:`MAX_VERIFICATIONS_PER_TICK` per policy and tick); the others are
  :class:`~imagerefresh.planner.evidence.SignaturesWaiting` this time, the least recently
  attempted being looked up first, so a digest whose registry keeps failing does not starve
  the rest;
* a lookup whose next GET would take the account's pull budget below the policy's reserve
  stops before it (:class:`~imagerefresh.registry.PullBudgetHeld`) and waits too;
* it reads at most :data:`MAX_READS_PER_POLICY` digests' signatures at once, so however many
  it has to look up it holds at most that many of a registry's turns (the client lets a few
  lookups at a time to one registry): another policy's lookup or tag at the same registry
  never queues behind its whole batch;
* its checks are queued under the policy that asked, and the pool serves policies in turn.

An unsigned (or wrongly signed) digest is asked again with backoff — at the policy's next
interval, then doubling up to :data:`~.memory.MAX_BACKOFF` — because signatures are often
pushed after the image; a tick someone asked for (``refresh-now``) asks again at once. A
registry that fails to answer is not remembered: the next tick asks again, and meanwhile
nothing is pinned.

A verdict is as old as the lookup that concluded it: a tick asked for shares no lookup that
started before it was asked (as resolutions do). An interval tick's backoff is measured at its
round's grid instant rather than when it asks, as the resolver measures its window: the late
ticks of a slow round take the verdicts its first ticks took or concluded.

The order of the lookups keeps the cost down: the legacy ``.sig`` tag first (one HEAD when
there is none), the referrers only when it verified nothing. Callers of one account asking
about the same digest at once share one lookup; accounts never share one (see
:mod:`.memory`: what one account reads is not what another may).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from dataclasses import dataclass
from functools import partial

import structlog

from imagerefresh.credentials import ANONYMOUS, Credentials
from imagerefresh.planner.evidence import (
    SignatureOutcome,
    SignaturesUnreadable,
    SignaturesWaiting,
)
from imagerefresh.reference import ImageReference, registry_host
from imagerefresh.registry import PullBudgetHeld, RegistryClient, RegistryError
from imagerefresh.signatures import MAX_CANDIDATES, PublicKey, Untrusted, Verified, verify
from imagerefresh.verifier.memory import MAX_REMEMBERED, Memo, VerdictMemory, memo_of
from imagerefresh.verifier.pool import VerificationPool

__all__ = [
    "MAX_READS_PER_POLICY",
    "MAX_VERIFICATIONS_PER_TICK",
    "LookupObserver",
    "SignatureVerifier",
    "VerifyRequest",
]

log = structlog.get_logger(__name__)

# Digests one policy looks up in one tick, at most: a release of a whole control plane (a
# dozen images) is verified in one tick, and a hostile policy costs at most this many lookups
# (each at most 16 referrers of 16 envelope signatures each, under 8 keys) a tick.
MAX_VERIFICATIONS_PER_TICK = 16

# Digests' signatures one policy reads at once, at most (the registry client lets 4 lookups at
# a time to one registry by default: a policy holds at most half of its turns).
MAX_READS_PER_POLICY = 2

# (registry host, outcome) → None: the metrics module counts lookups here. Outcomes:
# verified, untrusted, unreadable (the registry was read), deferred (held by the pull
# budget's reserve), queued (the policy's lookups for the tick were used up).
LookupObserver = Callable[[str, str], None]

# (memo, account): what one lookup is about and whose reads it makes.
_Key = tuple[Memo, str]


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """One digest to verify: its tracked repository, the keys, and who asks the registry."""

    repository: ImageReference  # the tracked reference (its repository is the claim checked)
    digest: str
    keys: tuple[PublicKey, ...]
    credentials: Credentials | None = None
    interval: float = 900.0  # the asking policy's interval: the first backoff step
    reserve: int | None = None  # the asking policy's pullBudget.reserve (None: not held)

    @property
    def memo(self) -> Memo:
        """What a verdict is about: the verdict does not depend on who read the signatures."""
        return memo_of(self.repository.repository, self.digest, self.keys)

    @property
    def account(self) -> str:
        """Whose reads the lookup makes (the ledger's account key, never shown)."""
        return self.credentials.account if self.credentials is not None else ANONYMOUS

    @property
    def key(self) -> _Key:
        return self.memo, self.account


class SignatureVerifier:
    """Verdicts on digests' signatures, looked up at the registry and remembered."""

    def __init__(
        self,
        client: RegistryClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        observer: LookupObserver | None = None,
        pool: VerificationPool | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self._observer = observer
        self.pool = pool if pool is not None else VerificationPool()
        self._memory = VerdictMemory()
        # The newest lookup of each (memo, account) in flight, and when it started.
        self._flying: dict[_Key, tuple[float, asyncio.Task[SignatureOutcome]]] = {}
        # When each was last looked up: the least recent go first when a call is capped.
        self._attempted: OrderedDict[_Key, float] = OrderedDict()
        # Each policy's reads in flight (kept only while it has some).
        self._reading: dict[Hashable, tuple[asyncio.Semaphore, int]] = {}

    def verified(self, repository: str, digest: str, keys: Iterable[PublicKey]) -> bool:
        """Whether memory holds a verified verdict on ``digest`` of ``repository`` (fully
        qualified, as :attr:`ImageReference.repository` spells it) for the key set ``keys``
        (a policy's ``spec.verify`` keys; their order does not matter). A pure read: no
        registry is asked, no verdict is refreshed — for the write guard."""
        return self._memory.verified(memo_of(repository, digest, keys)) is not None

    async def verify(
        self,
        requests: Iterable[VerifyRequest],
        *,
        since: float | None = None,
        round_at: float | None = None,
        owner: Hashable = None,
        limit: int | None = None,
    ) -> dict[VerifyRequest, SignatureOutcome]:
        """A verdict for each request: remembered, or looked up now.

        ``since`` (this verifier's clock): a tick asked for then — an untrusted verdict
        whose lookup started before it is asked again, whatever its backoff, and no lookup
        that started before it is shared. ``round_at`` (this verifier's clock): the grid
        instant of an interval tick's round — whether a backoff is over is judged at that
        instant (a later one than now counts as now), so every tick of the round judges alike.
        ``owner``: who asks (the policy), whose turn the checks wait for in the pool.
        ``limit``: at most this many lookups are started (joining one in flight is free); the
        others are :class:`SignaturesWaiting`.
        """
        now = self.clock()
        judged_at = now if round_at is None else min(now, round_at)
        outcomes: dict[VerifyRequest, SignatureOutcome] = {}
        due: list[VerifyRequest] = []
        for request in dict.fromkeys(requests):
            known = self._memory.recall(
                request.memo,
                request.account,
                interval=request.interval,
                since=since,
                judged_at=judged_at,
            )
            if known is not None:
                outcomes[request] = known
            else:
                due.append(request)
        # The least recently attempted first (sort is stable: never attempted, in order).
        due.sort(key=lambda r: self._attempted.get(r.key, float("-inf")))
        lookups: dict[VerifyRequest, asyncio.Task[SignatureOutcome]] = {}
        started = 0
        for request in due:
            flying = self._flying.get(request.key)
            if flying is not None and (since is None or flying[0] >= since):
                lookups[request] = flying[1]
            elif limit is None or started < limit:
                started += 1
                lookups[request] = self._start(request, owner)
            else:
                outcomes[request] = self._queued(request, limit)
        answers = await asyncio.gather(*(asyncio.shield(task) for task in lookups.values()))
        outcomes.update(zip(lookups, answers, strict=True))
        return outcomes

    def _start(self, request: VerifyRequest, owner: Hashable) -> asyncio.Task[SignatureOutcome]:
        key, started = request.key, self.clock()
        task = asyncio.ensure_future(self._look_up(request, owner, started))
        self._flying[key] = (started, task)
        task.add_done_callback(lambda done: self._landed(key, done))
        self._attempted.pop(key, None)
        self._attempted[key] = started
        while len(self._attempted) > MAX_REMEMBERED:
            self._attempted.popitem(last=False)
        return task

    def _queued(self, request: VerifyRequest, limit: int) -> SignaturesWaiting:
        self._observe(registry_host(request.repository.domain), "queued")
        return SignaturesWaiting(
            request.digest,
            f"the policy looks up at most {limit} digests' signatures a tick and had more "
            "due; this one is looked up at its next tick",
        )

    def _landed(self, key: _Key, task: asyncio.Task[SignatureOutcome]) -> None:
        flying = self._flying.get(key)
        if flying is not None and flying[1] is task:
            del self._flying[key]

    async def _look_up(
        self, request: VerifyRequest, owner: Hashable, started: float
    ) -> SignatureOutcome:
        host = registry_host(request.repository.domain)
        try:
            verdict = await self._read_and_verify(request, owner)
        except PullBudgetHeld as held:
            self._observe(host, "deferred")
            return SignaturesWaiting(
                request.digest, f"{held}; it is looked up at the next tick", budget=True
            )
        except RegistryError as error:
            self._observe(host, "unreadable")
            return SignaturesUnreadable(request.digest, str(error))
        except Exception as error:  # the last line: one digest, one outcome
            log.exception("verifying a signature failed unexpectedly", digest=request.digest)
            self._observe(host, "unreadable")
            return SignaturesUnreadable(
                request.digest,
                f"verifying failed unexpectedly ({type(error).__name__}); this is a bug in "
                "imagerefresh — report it with the operator's log",
            )
        self._memory.remember(request.memo, request.account, verdict, started)
        self._observe(host, "verified" if isinstance(verdict, Verified) else "untrusted")
        return verdict

    async def _read_and_verify(
        self, request: VerifyRequest, owner: Hashable
    ) -> Verified | Untrusted:
        """The legacy tag first; the referrers only when it verified nothing. Each candidate
        (the ``.sig`` tag's layers, one referrer's bundle) is one check on the pool's thread,
        so another policy's check waits for one candidate at most, never for a whole digest;
        together they conclude what :func:`verify` concludes of all of them at once."""
        reference, digest, keys = request.repository, request.digest, request.keys
        credentials, reserve = request.credentials, request.reserve
        async with self._reads(owner):
            legacy = await self.client.legacy_signature(
                reference, digest, credentials, reserve=reserve
            )
        found: Verified | Untrusted | None = None
        if legacy is not None:
            found = await self.pool.run(
                owner, partial(verify, digest, reference, keys, legacy=legacy)
            )
            if isinstance(found, Verified):
                return found
        async with self._reads(owner):
            bundles = await self.client.bundle_signatures(
                reference, digest, credentials, reserve=reserve
            )
        for evidence in bundles[:MAX_CANDIDATES]:
            one = await self.pool.run(
                owner, partial(verify, digest, reference, keys, bundles=(evidence,))
            )
            found = one if found is None else _furthest(found, one)
            if isinstance(found, Verified):
                return found
        # No candidate at all: nothing to check, and verify says so at once.
        return found if found is not None else verify(digest, reference, keys)

    @contextlib.asynccontextmanager
    async def _reads(self, owner: Hashable) -> AsyncIterator[None]:
        """One of ``owner``'s :data:`MAX_READS_PER_POLICY` turns to read a registry."""
        gate, users = self._reading.get(owner) or (asyncio.Semaphore(MAX_READS_PER_POLICY), 0)
        self._reading[owner] = (gate, users + 1)
        try:
            async with gate:
                yield
        finally:
            gate, users = self._reading[owner]
            if users == 1:
                del self._reading[owner]
            else:
                self._reading[owner] = (gate, users - 1)

    def _observe(self, host: str, outcome: str) -> None:
        if self._observer is not None:
            self._observer(host, outcome)


def _furthest(before: Verified | Untrusted, then: Verified | Untrusted) -> Verified | Untrusted:
    """One verdict from two candidates' in the order they were checked: verified if either
    verified; else the failure that got furthest, the earlier among equals (as :func:`verify`
    ranks candidates)."""
    if isinstance(before, Verified):
        return before
    if isinstance(then, Verified):
        return then
    return then if then.failure.rank > before.failure.rank else before
