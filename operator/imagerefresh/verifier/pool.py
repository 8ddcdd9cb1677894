"""The worker threads signature checks run on: bounded, and shared fairly between policies.

Checking a signature is CPU work — an RSA-8192 verification takes about half a millisecond
here, and a hostile digest may ask for 2,048 of them (16 referrers, 16 envelope signatures
each, under 8 keys; one referrer is one check) — so it never runs on the event loop, which
must go on answering ``/healthz``, renewing the Lease and judging rollouts.
:class:`VerificationPool` runs each check on one of a few worker threads (one by default: the
checks hold the GIL, so more threads would only take more of the loop's turns) and queues the
rest per *owner* (the policy that asked). When a thread is free it takes the oldest check of
the owner served least since it last had nothing queued or running (the longest waiting among
equals): one policy with hundreds of checks queued delays another policy's check by at most
the checks already running, never by its backlog, and a policy that comes with one check goes
next.

A check whose caller gave up (its tick was cancelled) while it was queued never runs; one
already running finishes on its thread and its answer is dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

__all__ = ["DEFAULT_WORKERS", "PoolObserver", "VerificationPool"]

T = TypeVar("T")

DEFAULT_WORKERS = 1


class PoolObserver(Protocol):
    """What the metrics are told: a check starts, and ends after ``cpu_seconds`` of its
    thread's CPU. Called on the worker thread."""

    def verification_started(self) -> None: ...

    def verification_finished(self, cpu_seconds: float) -> None: ...


@dataclass(slots=True)
class _Check:
    work: Callable[[], Any]
    answer: asyncio.Future[Any]


@dataclass(slots=True)
class _Owner:
    """An owner with checks queued or running: how many it was served since it had none."""

    queue: deque[_Check] = field(default_factory=deque)
    served: int = 0
    running: int = 0
    last: int = -1  # the turn it was last served in: among equals, the longest waiting first


class VerificationPool:
    """At most ``workers`` checks at once, on threads; the next check goes to the owner
    served least since it last had nothing to do, the longest waiting among equals."""

    def __init__(self, workers: int = DEFAULT_WORKERS, observer: PoolObserver | None = None):
        if workers < 1:
            raise ValueError(f"a verification pool needs at least one worker, not {workers}")
        self.workers = workers
        self._observer = observer
        self._executor: ThreadPoolExecutor | None = None
        self._owners: dict[Hashable, _Owner] = {}
        self._running = 0
        self._turns = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def queued(self) -> int:
        """Checks waiting for a thread."""
        return sum(len(owner.queue) for owner in self._owners.values())

    async def run(self, owner: Hashable, work: Callable[[], T]) -> T:
        """``work()`` on a worker thread, in ``owner``'s turn; its answer (or exception)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Everything queued belongs to one loop; a loop that ended (a test's asyncio.run)
            # took its callers with it.
            self._loop, self._running = loop, 0
            self._owners.clear()
        check = _Check(work, loop.create_future())
        self._owners.setdefault(owner, _Owner()).queue.append(check)
        self._dispatch(loop)
        answer: T = await check.answer
        return answer

    def _next(self) -> tuple[Hashable, _Owner] | None:
        """The owner whose turn it is (any hashable, None included), if one has checks queued."""
        waiting = [(key, owner) for key, owner in self._owners.items() if owner.queue]
        if not waiting:
            return None
        return min(waiting, key=lambda entry: (entry[1].served, entry[1].last))

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._running < self.workers and (turn := self._next()) is not None:
            key, owner = turn
            check = owner.queue.popleft()
            if check.answer.cancelled():
                self._forget_if_idle(key)
                continue
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="verify")
            owner.served += 1
            owner.running += 1
            owner.last = next(self._turns)
            self._running += 1
            done = loop.run_in_executor(self._executor, self._timed, check.work)
            done.add_done_callback(partial(self._finished, loop, key, check))

    def _forget_if_idle(self, key: Hashable) -> None:
        owner = self._owners.get(key)
        if owner is not None and not owner.queue and not owner.running:
            del self._owners[key]  # it starts afresh next time: served counts only while busy

    def _timed(self, work: Callable[[], T]) -> T:
        observer = self._observer
        if observer is None:
            return work()
        observer.verification_started()
        started = time.thread_time()
        try:
            return work()
        finally:
            observer.verification_finished(time.thread_time() - started)

    def _finished(
        self,
        loop: asyncio.AbstractEventLoop,
        key: Hashable,
        check: _Check,
        finished: asyncio.Future[Any],
    ) -> None:
        self._running -= 1
        owner = self._owners.get(key)
        if owner is not None:
            owner.running -= 1
            self._forget_if_idle(key)
        if finished.cancelled():
            check.answer.cancel()
        elif not check.answer.cancelled():
            error = finished.exception()
            if error is not None:
                check.answer.set_exception(error)
            else:
                check.answer.set_result(finished.result())
        self._dispatch(loop)
