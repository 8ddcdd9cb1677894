"""Resolve many tracked references at once: one registry request per unique reference.

Every container in every policy that tracks the same reference with the same credentials shares
one resolution per tick. :class:`SharedResolver` collapses duplicates, asks the registries
concurrently (the client bounds how many at once per registry host, the wait for a turn inside
each resolution's deadline) and remembers each answer for a short window, so that all
policies ticking within that window share it (and an in-flight request is joined, never
repeated).

Interval ticks come in rounds: every policy of one interval ticks at the same grid instant
(:mod:`imagerefresh.runtime.schedule`), but a fleet's round may take longer than the window to
get through every policy. So an interval tick measures the window from its round's grid
instant, not from the moment it asks: it shares any answer whose request started within the
window before that instant or at any time since, and a slow round costs one request per
reference like a fast one. Other ticks (no grid instant) measure it from now. The
platform
manifests of an index (asked for only when pods report a digest other than the one resolved,
as runtimes built on containers/image do) are read once per index digest and remembered for
good: an index digest's content never changes, so steady state sends no GET. Failures are values
in the result, not exceptions: one unreadable reference blocks only the containers that needed
it — whatever it raised. A registry error is the outcome as it is; anything else (a bug no
hostile answer should be able to reach, but if it does) becomes a
:class:`~imagerefresh.registry.RegistryInternalError` for that reference alone, and is logged.

The last answer for each reference is also remembered (for a day), so that a follow-up tick —
judging a rollout in flight between interval ticks — asks the registry nothing it has already
answered; only interval ticks ask afresh. A tick someone asked for (``refresh-now``, a reset, a
spec change) shares no answer whose request started before it was asked for — the point of
asking is often a build pushed a moment ago — but shares any started since, so many policies
asked for at once still cost one request per reference.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from imagerefresh.credentials import Credentials
from imagerefresh.reference import ImageReference, registry_host
from imagerefresh.registry import RegistryClient, RegistryError, RegistryInternalError, Resolution

__all__ = [
    "MAX_REMEMBERED_INDEXES",
    "ROUND_HORIZON",
    "ChildrenOutcome",
    "ResolutionKey",
    "ResolutionOutcome",
    "SharedResolver",
    "resolve_all",
]

log = structlog.get_logger(__name__)

# How long a last answer is kept for follow-up ticks: past any interval, so a reference of a
# deleted policy is forgotten eventually rather than kept for the operator's life.
REMEMBERED_FOR = 86_400.0
# How long an answer is kept for the rest of its round, however slow the round (longer than any
# window). A fleet's round lasts tens of seconds, each resolution ends by the registry deadline
# (20 s by default): a round still running after five minutes is an operator far behind, and
# its late ticks had better ask again than take an answer this old. It bounds memory too: one
# entry per reference asked within it.
ROUND_HORIZON = 300.0
# Index digests whose platform manifests are remembered; each entry is a few hundred bytes.
MAX_REMEMBERED_INDEXES = 4096

T = TypeVar("T")
ResolutionOutcome = Resolution | RegistryError
ChildrenOutcome = frozenset[str] | RegistryError


@dataclass(frozen=True, slots=True)
class ResolutionKey:
    """What makes two resolutions the same request: the tracked reference and the identity."""

    reference: ImageReference
    credentials: Credentials | None = None

    @classmethod
    def of(cls, reference: ImageReference, credentials: Credentials | None = None) -> ResolutionKey:
        return cls(reference.tracked(), credentials)


class SharedResolver:
    """Resolutions shared across callers for ``window`` seconds (from a round's grid instant,
    for the ticks of a round; see the module docs)."""

    def __init__(
        self,
        client: RegistryClient,
        *,
        window: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.window = window
        self.clock = clock
        self._recent: dict[ResolutionKey, tuple[float, asyncio.Task[ResolutionOutcome]]] = {}
        self._last: dict[ResolutionKey, tuple[float, ResolutionOutcome]] = {}
        # (repository, index digest) → its platform manifests, in the order first asked.
        self._indexes: dict[tuple[str, str], asyncio.Task[ChildrenOutcome]] = {}

    async def _ask(self, key: ResolutionKey) -> ResolutionOutcome:
        outcome = await self._guarded(key, self.client.resolve(key.reference, key.credentials))
        self._last[key] = (self.clock(), outcome)
        return outcome

    async def _guarded(self, key: ResolutionKey, request: Awaitable[T]) -> T | RegistryError:
        """``request`` to ``key``'s registry; failures as values."""
        try:
            return await request
        except RegistryError as error:
            return error
        except Exception as error:  # the last line: one reference, one outcome
            reference = str(key.reference)
            log.exception("resolving a reference failed unexpectedly", reference=reference)
            return RegistryInternalError(
                f"resolving {reference} failed unexpectedly ({type(error).__name__}); this "
                "is a bug in imagerefresh — report it with the operator's log. Nothing is "
                "pinned on it; other references are unaffected",
                registry=registry_host(key.reference.domain),
                reference=reference,
            )

    async def children(self, key: ResolutionKey, digest: str) -> ChildrenOutcome:
        """The platform manifests of the index ``digest`` that ``key`` resolved to, or the
        error that kept them unread.

        Read once per (repository, index digest) — an index's content never changes — and
        remembered for the process's life (up to :data:`MAX_REMEMBERED_INDEXES`, oldest
        forgotten first); callers asking at once share one request. Failures are not
        remembered: the next tick asks again.
        """
        memo = (key.reference.repository, digest)
        task = self._indexes.get(memo)
        failed = (
            task is not None
            and task.done()
            and (task.cancelled() or not isinstance(task.result(), frozenset))
        )
        if task is None or failed:
            request = self.client.children(key.reference, digest, key.credentials)
            task = asyncio.ensure_future(self._guarded(key, request))
            self._indexes.pop(memo, None)
            self._indexes[memo] = task
            while len(self._indexes) > MAX_REMEMBERED_INDEXES:
                del self._indexes[next(iter(self._indexes))]
        return await task

    def _task(
        self, key: ResolutionKey, now: float, since: float | None, anchor: float
    ) -> asyncio.Task[ResolutionOutcome]:
        """The request for ``key`` to share, or a new one. ``anchor``: the instant the window
        is measured from (now, or the grid instant of the caller's round)."""
        recent = self._recent.get(key)
        if (
            recent is not None
            and (since is None or recent[0] >= since)
            and (not recent[1].done() or anchor - recent[0] < self.window)
        ):
            return recent[1]
        task = asyncio.ensure_future(self._ask(key))
        self._recent[key] = (now, task)
        return task

    async def resolve(
        self,
        keys: Iterable[ResolutionKey],
        *,
        remembered: bool = False,
        since: float | None = None,
        round_at: float | None = None,
    ) -> dict[ResolutionKey, ResolutionOutcome]:
        """Resolve each unique key once: the resolution, or the error that blocked it.

        ``remembered``: take the last answer for a key when there is one, whatever its age
        (a follow-up tick); only keys never asked go to the registry. ``since`` (on this
        resolver's clock): share no request that started before it (a tick asked for then);
        it wins over ``round_at``. ``round_at`` (on this resolver's clock): the grid instant
        of the interval tick's round — the window is measured from it, so every tick of the
        round shares the round's answers however long the round lasts (up to
        :data:`ROUND_HORIZON`); a later instant than now counts as now.
        """
        now = self.clock()
        anchor = now if round_at is None else min(now, round_at)
        # Kept past the window while a round may still use them (the horizon bounds that).
        self._forget_before(now - max(self.window, ROUND_HORIZON), now - REMEMBERED_FOR)
        unique = list(dict.fromkeys(ResolutionKey.of(k.reference, k.credentials) for k in keys))
        known = {k: self._last[k][1] for k in unique if remembered and k in self._last}
        asked = [key for key in unique if key not in known]
        results = await asyncio.gather(*(self._task(key, now, since, anchor) for key in asked))
        return known | dict(zip(asked, results, strict=True))

    def _forget_before(self, cutoff: float, forgotten: float) -> None:
        for key in [k for k, (at, task) in self._recent.items() if task.done() and at < cutoff]:
            del self._recent[key]
        for key in [k for k, (at, _) in self._last.items() if at < forgotten]:
            del self._last[key]


async def resolve_all(
    client: RegistryClient, keys: Iterable[ResolutionKey]
) -> dict[ResolutionKey, ResolutionOutcome]:
    """One-shot: resolve each unique key once, nothing remembered afterwards."""
    return await SharedResolver(client).resolve(keys)
