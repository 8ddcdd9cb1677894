"""The verification threads: checks never run on the event loop, and policies take turns.

The checks here are plain functions that record where and in which order they ran, or that
block on a :class:`threading.Event` only the event loop can set — so a check run on the loop
would wait for itself, and the test says so (after a bound that only a broken pool reaches).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from imagerefresh.verifier import VerificationPool

# Only a broken pool waits this long: a check run on the loop blocks the loop that would
# release it.
STUCK = 10.0


def test_a_check_runs_on_a_worker_thread_while_the_event_loop_goes_on() -> None:
    pool = VerificationPool()
    released = threading.Event()

    async def main() -> tuple[bool, int, int]:
        loop, loop_thread = asyncio.get_running_loop(), threading.get_ident()
        started = asyncio.Event()
        ran_on: list[int] = []

        def check() -> bool:
            ran_on.append(threading.get_ident())
            loop.call_soon_threadsafe(started.set)
            return released.wait(STUCK)  # the loop sets it while this runs

        running = asyncio.ensure_future(pool.run("policy", check))
        await started.wait()  # the loop turns while the check runs
        released.set()
        return await running, ran_on[0], loop_thread

    released_in_time, worker, loop_thread = asyncio.run(main())
    assert released_in_time
    assert worker != loop_thread


def test_a_policy_with_a_backlog_delays_another_policy_by_the_check_running_only() -> None:
    pool = VerificationPool(workers=1)
    order: list[str] = []
    first = threading.Event()

    def check(name: str, gate: threading.Event | None = None) -> Callable[[], None]:
        def run() -> None:
            if gate is not None:
                gate.wait(STUCK)
            order.append(name)

        return run

    async def main() -> None:
        hostile = [asyncio.ensure_future(pool.run("hostile", check("h0", first)))]
        await asyncio.sleep(0)
        hostile += [asyncio.ensure_future(pool.run("hostile", check(f"h{i}"))) for i in range(1, 6)]
        await asyncio.sleep(0)
        honest = asyncio.ensure_future(pool.run("honest", check("honest")))
        await asyncio.sleep(0)
        assert pool.queued == 6  # h1..h5 and the honest one: h0 runs
        first.set()
        await asyncio.gather(honest, *hostile)

    asyncio.run(main())
    assert order == ["h0", "honest", "h1", "h2", "h3", "h4", "h5"]


def test_policies_with_backlogs_take_turns_one_check_each() -> None:
    pool = VerificationPool(workers=1)
    order: list[str] = []
    gate = threading.Event()

    def check(name: str) -> Callable[[], None]:
        def run() -> None:
            gate.wait(STUCK)
            order.append(name)

        return run

    async def main() -> None:
        a = [pool.run("a", check(f"a{i}")) for i in range(3)]
        b = [pool.run("b", check(f"b{i}")) for i in range(3)]
        tasks = [asyncio.ensure_future(c) for c in (*a, *b)]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_at_most_the_pool_s_workers_run_at_once() -> None:
    pool = VerificationPool(workers=2)
    lock, running, most = threading.Lock(), [0], [0]
    gate = threading.Event()

    def check() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(STUCK)
        with lock:
            running[0] -= 1

    async def main() -> None:
        tasks = [asyncio.ensure_future(pool.run(f"p{i % 3}", check)) for i in range(7)]
        await asyncio.sleep(0)
        assert pool.queued == 5
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert most[0] == 2


def test_a_check_s_exception_reaches_its_caller_and_the_pool_goes_on() -> None:
    pool = VerificationPool()

    def broken() -> None:
        raise ValueError("not a signature")

    async def main() -> int:
        with pytest.raises(ValueError, match="not a signature"):
            await pool.run("policy", broken)
        return await pool.run("policy", lambda: 7)

    assert asyncio.run(main()) == 7


def test_a_queued_check_whose_caller_gave_up_never_runs() -> None:
    pool = VerificationPool(workers=1)
    ran: list[str] = []
    gate = threading.Event()

    def first() -> None:
        gate.wait(STUCK)
        ran.append("a")

    async def main() -> None:
        blocking = asyncio.ensure_future(pool.run("a", first))
        await asyncio.sleep(0)
        given_up = asyncio.ensure_future(pool.run("b", lambda: ran.append("b")))
        await asyncio.sleep(0)
        given_up.cancel()
        gate.set()
        await blocking
        await pool.run("c", lambda: ran.append("c"))

    asyncio.run(main())
    assert ran == ["a", "c"]


class Observed:
    def __init__(self) -> None:
        self.started = 0
        self.finished: list[float] = []

    def verification_started(self) -> None:
        self.started += 1

    def verification_finished(self, cpu_seconds: float) -> None:
        self.finished.append(cpu_seconds)


def test_each_check_is_counted_with_its_thread_s_cpu_time() -> None:
    observed = Observed()
    pool = VerificationPool(observer=observed)

    def busy() -> int:
        return sum(i * i for i in range(200_000))

    async def main() -> None:
        await asyncio.gather(*(pool.run("p", busy) for _ in range(3)))

    asyncio.run(main())
    assert observed.started == 3
    assert len(observed.finished) == 3
    assert all(seconds > 0 for seconds in observed.finished)
