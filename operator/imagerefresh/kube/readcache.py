"""A memo of the reads many targets share: each ServiceAccount and pull secret read once per
tick, or once per round for the policies that tick together, and never used past its age.

Thread-safe: the ticks' reads run on the loop's executor threads, and concurrent askers of one
key wait for the first asker's answer rather than read again.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["ReadCache"]

T = TypeVar("T")


class ReadCache:
    """Answers of reads that many targets share, each read once (thread-safe).

    A tick's targets mostly run under the same ServiceAccount and pull secrets; without this,
    each target would read them again. Without a ``lifetime`` it lives as long as one tick, so
    what it holds is never older than the tick itself; concurrent askers of the same key wait
    for the first one's answer — or its error, which is the answer for all of them.

    With a ``lifetime`` (seconds) it is shared by the ticks of many policies: policies ticking
    together (the resolution window) read each ServiceAccount and secret once, not once each,
    and no answer is used once it is older than ``lifetime``. An error is the answer only for
    the askers already waiting for it: the next one reads again, so a transient failure is
    never remembered.

    The ticks of one round of the grid see it through :meth:`for_round`: an answer's age is
    measured at the round's instant, so a round that takes longer than ``lifetime`` still
    reads each once (as the resolver shares its registry answers). Answers are kept for
    ``horizon`` seconds (at least ``lifetime``) for such a round, and never used past it.
    """

    def __init__(
        self,
        lifetime: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        horizon: float = 0.0,
    ) -> None:
        self._lock = threading.Lock()
        self._answers: dict[Hashable, tuple[Future[Any], float]] = {}
        self._lifetime, self._clock = lifetime, clock
        self._kept = max(lifetime, horizon) if lifetime is not None else None
        self._round: float | None = None  # the round's instant, in a view of :meth:`for_round`

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the ages of answers are measured on."""
        return self._clock

    def for_round(self, round_at: float | None) -> ReadCache:
        """This cache as the ticks of the round of ``round_at`` (on :attr:`clock`) see it: the
        same answers, aged at that instant (a later one than now counts as now). None, or a
        cache without a lifetime: this cache as it is."""
        if round_at is None or self._lifetime is None:
            return self
        view = copy.copy(self)  # shares the answers and the lock: only the instant differs
        view._round = round_at
        return view

    def get(self, key: Hashable, read: Callable[[], T]) -> T:
        with self._lock:
            now = self._clock()
            entry = self._answers.get(key)
            first = entry is None or self._expired(entry, now)
            if first:
                self._forget_expired(now)
                entry = self._answers[key] = (Future(), now)
            assert entry is not None
            answer = entry[0]
        if first:
            try:
                answer.set_result(read())
            except BaseException as error:
                answer.set_exception(error)
                if self._lifetime is not None:
                    with self._lock:
                        if self._answers.get(key) is entry:
                            del self._answers[key]
        result: T = answer.result()
        return result

    def __len__(self) -> int:
        """How many answers it holds (expired ones go when the next read is made)."""
        with self._lock:
            return len(self._answers)

    def _expired(self, entry: tuple[Future[Any], float], now: float) -> bool:
        if self._lifetime is None or self._kept is None:
            return False
        aged_at = now if self._round is None else min(now, self._round)
        return aged_at - entry[1] >= self._lifetime or now - entry[1] >= self._kept

    def _forget_expired(self, now: float) -> None:
        """Drop the answers no round may use any more (the cache never outgrows the reads of
        its horizon, or of one window without one)."""
        if self._kept is None:
            return
        for key in [k for k, entry in self._answers.items() if now - entry[1] >= self._kept]:
            del self._answers[key]
