"""Verify digests' signatures at their registry, and remember the verdicts in memory only.

With ``spec.verify`` a digest is pinned only when it carries a valid cosign signature by a
listed key. :class:`SignatureVerifier` reads the two places cosign stores signatures (the
registry client does: HEAD before GET, every body capped, within a deadline, counted, manifest
GETs charged to the pull budget) and hands the bytes to the pure
:func:`imagerefresh.signatures.verify`.

What it concludes is kept in this process's memory, keyed by (repository, digest, key set) —
never in status, which anyone with ``update`` on the status subresource may write, so after a
restart every digest is verified again. A verified digest costs nothing more: signatures of an
immutable digest by a given key do not go away in any way that matters to a pin already
checked. An unsigned (or wrongly signed) digest is asked again with backoff — at the policy's
next interval, then doubling up to :data:`MAX_BACKOFF` — because signatures are often pushed
after the image; a tick someone asked for (``refresh-now``) asks again at once. A registry that
fails to answer is not remembered: the next tick asks again, and meanwhile nothing is pinned.

A verdict is as old as the lookup that concluded it — its reads may have come before a signature
was pushed, however late its answer — so a tick asked for shares no lookup that started before it
was asked (as resolutions do), and a lookup that started earlier never overwrites what a later
one concluded. An interval tick's backoff is measured at its round's grid instant rather than
when it asks, as the resolver measures its window: the late ticks of a slow round take the
verdicts its first ticks took or concluded, and do not look up again what the round already
looked up.

The order of the lookups keeps the cost down: the legacy ``.sig`` tag first (one HEAD when
there is none), the referrers only when it verified nothing. Callers asking about the same
digest at once share one lookup.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from imagerefresh.credentials import Credentials
from imagerefresh.planner.evidence import SignatureOutcome, SignaturesUnreadable
from imagerefresh.reference import ImageReference, registry_host
from imagerefresh.registry import RegistryClient, RegistryError
from imagerefresh.signatures import PublicKey, Untrusted, Verified, verify

__all__ = ["MAX_BACKOFF", "MAX_REMEMBERED", "SignatureVerifier", "VerifyRequest"]

log = structlog.get_logger(__name__)

# An unsigned digest is asked again at most this far apart.
MAX_BACKOFF = 6 * 3600.0
# Verdicts remembered (each a few hundred bytes); the least recently used are forgotten first.
MAX_REMEMBERED = 4096

# (registry host, outcome) → None: the metrics module counts lookups here.
LookupObserver = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """One digest to verify: its tracked repository, the keys, and who asks the registry."""

    repository: ImageReference  # the tracked reference (its repository is the claim checked)
    digest: str
    keys: tuple[PublicKey, ...]
    credentials: Credentials | None = None
    interval: float = 900.0  # the asking policy's interval: the first backoff step

    @property
    def memo(self) -> tuple[str, str, tuple[str, ...]]:
        """What a verdict is about: the verdict does not depend on who read the signatures."""
        return (
            self.repository.repository,
            self.digest,
            tuple(sorted(k.fingerprint for k in self.keys)),
        )


@dataclass(slots=True)
class _Remembered:
    verdict: Verified | Untrusted
    at: float  # when the lookup that concluded it started (this verifier's clock)
    misses: int = 0  # untrusted verdicts in a row: the backoff's exponent


class SignatureVerifier:
    """Verdicts on digests' signatures, looked up at the registry and remembered."""

    def __init__(
        self,
        client: RegistryClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        observer: LookupObserver | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self._observer = observer
        self._verdicts: OrderedDict[tuple[str, str, tuple[str, ...]], _Remembered] = OrderedDict()
        # The newest lookup of each memo in flight, and when it started.
        self._flying: dict[
            tuple[str, str, tuple[str, ...]], tuple[float, asyncio.Task[SignatureOutcome]]
        ] = {}

    async def verify(
        self,
        requests: Iterable[VerifyRequest],
        *,
        since: float | None = None,
        round_at: float | None = None,
    ) -> dict[VerifyRequest, SignatureOutcome]:
        """A verdict for each request: remembered, or looked up now.

        ``since`` (this verifier's clock): a tick asked for then — an untrusted verdict
        whose lookup started before it is asked again, whatever its backoff, and no lookup
        that started before it is shared. ``round_at`` (this verifier's clock): the grid
        instant of an interval tick's round — whether a backoff is over is judged at that
        instant (a later one than now counts as now), so every tick of the round judges alike.
        """
        now = self.clock()
        judged_at = now if round_at is None else min(now, round_at)
        unique = list(dict.fromkeys(requests))
        outcomes = await asyncio.gather(*(self._outcome(r, since, judged_at) for r in unique))
        return dict(zip(unique, outcomes, strict=True))

    def _fresh(
        self, request: VerifyRequest, since: float | None, judged_at: float
    ) -> Verified | Untrusted | None:
        remembered = self._verdicts.get(request.memo)
        if remembered is None:
            return None
        self._verdicts.move_to_end(request.memo)
        if isinstance(remembered.verdict, Verified):
            return remembered.verdict
        if since is not None and remembered.at < since:
            return None
        # Half an interval of slack: the next tick of the interval always asks again.
        backoff = min(request.interval * 2 ** (remembered.misses - 1), MAX_BACKOFF)
        due = remembered.at + backoff - request.interval / 2
        return remembered.verdict if judged_at < due else None

    async def _outcome(
        self, request: VerifyRequest, since: float | None, judged_at: float
    ) -> SignatureOutcome:
        fresh = self._fresh(request, since, judged_at)
        if fresh is not None:
            return fresh
        memo = request.memo
        flying = self._flying.get(memo)
        if flying is None or (since is not None and flying[0] < since):
            started = self.clock()
            task = asyncio.ensure_future(self._look_up(request, started))
            flying = self._flying[memo] = (started, task)
            task.add_done_callback(lambda done: self._landed(memo, done))
        return await flying[1]

    def _landed(
        self, memo: tuple[str, str, tuple[str, ...]], task: asyncio.Task[SignatureOutcome]
    ) -> None:
        flying = self._flying.get(memo)
        if flying is not None and flying[1] is task:
            del self._flying[memo]

    async def _look_up(self, request: VerifyRequest, started: float) -> SignatureOutcome:
        host = registry_host(request.repository.domain)
        try:
            verdict = await self._read_and_verify(request)
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
        self._remember(request, verdict, started)
        self._observe(host, "verified" if isinstance(verdict, Verified) else "untrusted")
        return verdict

    async def _read_and_verify(self, request: VerifyRequest) -> Verified | Untrusted:
        """The legacy tag first; the referrers only when it verified nothing."""
        reference, digest, keys = request.repository, request.digest, request.keys
        legacy = await self.client.legacy_signature(reference, digest, request.credentials)
        if legacy is not None:
            verdict = verify(digest, reference, keys, legacy=legacy)
            if isinstance(verdict, Verified):
                return verdict
        bundles = await self.client.bundle_signatures(reference, digest, request.credentials)
        return verify(digest, reference, keys, legacy=legacy, bundles=bundles)

    def _remember(
        self, request: VerifyRequest, verdict: Verified | Untrusted, started: float
    ) -> None:
        before = self._verdicts.pop(request.memo, None)
        if before is not None and (isinstance(before.verdict, Verified) or before.at > started):
            # What a later lookup concluded (or a verified signature) stands: this one read
            # earlier, however late it answered.
            self._verdicts[request.memo] = before
            return
        misses = 0
        if isinstance(verdict, Untrusted):
            misses = (before.misses if before is not None else 0) + 1
        self._verdicts[request.memo] = _Remembered(verdict, started, misses)
        while len(self._verdicts) > MAX_REMEMBERED:
            self._verdicts.popitem(last=False)

    def _observe(self, host: str, outcome: str) -> None:
        if self._observer is not None:
            self._observer(host, outcome)
