"""imagerefresh.runtime.scheduler: when each policy ticks, on a clock the test moves.

A narrow unit test of the shell's timing rules (the ticker is a stand-in that records its
calls); the real operator's behaviour is in test_rollout_following and test_operator_scenarios.
Nothing here waits for time to pass: the clock is the test's, a move of it is followed by a
pass of the scheduler's loop the test waits for (what must not happen has then not happened,
for good), and a watch event is delivered by a thread the test joins.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from imagerefresh.kube.errors import KubeUnavailable
from imagerefresh.planner import InFlight, TargetKey
from imagerefresh.runtime.scheduler import FOLLOW_SETTLE, Scheduler
from imagerefresh.runtime.ticker import TickOutcome

INTERVAL = 900.0
APP = TargetKey("Deployment", "ns", "app")  # type: ignore[arg-type]


class Clock:
    now = 1_000_000.0  # on the grid of phase 0 and a 900 s interval: 1111·900 + 100

    def __call__(self) -> float:
        return self.now


@dataclass
class Api:
    version: str = "1"
    versions: dict[str, str] = field(default_factory=dict)  # by workload name, over version
    reads: int = 0
    read_names: list[str] = field(default_factory=list)
    # Cleared: every read waits for it (an API server slow to answer).
    answering: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.answering.set()

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        self.read_names.append(name)
        assert self.answering.wait(10)
        return {"metadata": {"resourceVersion": self.versions.get(name, self.version)}}


@dataclass
class Metrics:
    forgotten: list[tuple[str, str]] = field(default_factory=list)
    asked: Counter[str] = field(default_factory=Counter)  # asks by reason
    answered: Counter[str] = field(default_factory=Counter)

    def forget_policy(self, namespace: str, name: str) -> None:
        self.forgotten.append((namespace, name))

    def tick_asked(self, namespace: str, policy: str, reason: str) -> None:
        self.asked[reason] += 1

    def tick_answered(self, namespace: str, policy: str, reason: str, count: int) -> None:
        self.answered[reason] += count


@dataclass
class Watches:
    """Watch-fed copies as the scheduler sees them: a version per watched workload."""

    versions: dict[TargetKey, str] = field(default_factory=dict)  # watched and synced
    listener: Callable[[TargetKey, str], None] | None = None
    pod_listener: Callable[[str, Mapping[str, str]], None] | None = None
    synced_pods: set[str] = field(default_factory=set)  # namespaces whose pods are watched
    selectors: dict[TargetKey, dict[str, str]] = field(default_factory=dict)  # matchLabels

    def listen(self, listener: Callable[[TargetKey, str], None]) -> None:
        self.listener = listener

    def listen_pods(self, listener: Callable[[str, Mapping[str, str]], None]) -> None:
        self.pod_listener = listener

    def pods_synced(self, namespace: str) -> bool:
        return namespace in self.synced_pods

    def selects(self, key: TargetKey, labels: Mapping[str, str]) -> bool:
        wanted = self.selectors.get(key, {})
        return all(labels.get(k) == v for k, v in wanted.items())

    def pod_change(self, namespace: str, labels: dict[str, str]) -> None:
        """A pod watch delivers a change from its own thread; returns once the thread has
        handed it on (a barrier: what it asks of the loop is queued by then, or nothing is)."""
        assert self.pod_listener is not None
        thread = threading.Thread(target=self.pod_listener, args=(namespace, labels))
        thread.start()
        thread.join()

    def version(self, key: TargetKey) -> str | None:
        return self.versions.get(key)

    def change(self, key: TargetKey, version: str, late: float = 0.0) -> None:
        """A watch delivers a change from its own thread, which starts ``late`` seconds late
        (a busy machine); returns once the thread has handed it on (a barrier, not a wait)."""
        self.versions[key] = version
        listener = self.listener
        assert listener is not None

        def deliver() -> None:
            time.sleep(late)
            listener(key, version)

        thread = threading.Thread(target=deliver)
        thread.start()
        thread.join()


@dataclass
class Ticker:
    api: Api = field(default_factory=Api)
    watches: Watches | None = None
    metrics: Metrics = field(default_factory=Metrics)
    calls: list[bool] = field(default_factory=list)  # follow_up of each tick
    # The asks answered (metrics) as each tick started.
    answered_before: list[dict[str, int]] = field(default_factory=list)
    asked: list[float | None] = field(default_factory=list)  # asked_at of each tick
    rounds: list[float | None] = field(default_factory=list)  # round_at of each tick
    next: list[object] = field(default_factory=list)  # outcomes (or errors) to hand out
    # Cleared: every tick waits for it (a tick that takes a while).
    ticking: asyncio.Event = field(default_factory=asyncio.Event)

    # Cleared: every interval tick waits for it while it says it is waiting on registries.
    registry: asyncio.Event = field(default_factory=asyncio.Event)
    forgotten: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ticking.set()
        self.registry.set()

    def forget(self, namespace: str, name: str) -> None:
        self.forgotten.append((namespace, name))

    async def tick(
        self,
        namespace: str,
        name: str,
        *,
        follow_up: bool = False,
        asked_at: float | None = None,
        round_at: float | None = None,
        resolving: Callable[[bool], None] | None = None,
    ) -> Any:
        self.calls.append(follow_up)
        self.answered_before.append(dict(self.metrics.answered))
        self.asked.append(asked_at)
        self.rounds.append(round_at)
        assert (resolving is None) == follow_up  # only interval and prompt ticks may step aside
        if resolving is not None and not self.registry.is_set():
            resolving(True)
            await self.registry.wait()
            resolving(False)
        await self.ticking.wait()
        result = self.next.pop(0) if self.next else None
        if isinstance(result, Exception):
            raise result
        return result


def flying(deadline: float | None, *workloads: TargetKey, pods: bool = False) -> TickOutcome:
    """After a tick: ``workloads`` (or APP) in flight; ``pods``: in their health windows."""
    when = datetime.fromtimestamp(deadline, UTC) if deadline is not None else None
    keys = frozenset(workloads or {APP})
    judged = InFlight(keys, when, keys if pods else frozenset())
    return TickOutcome(None, None, judged, dict.fromkeys(keys, "1"))  # type: ignore[arg-type]


class Observed(Scheduler):
    """The scheduler, counting what the tests wait on instead of time: the passes of its loop
    (each looks at every policy at the clock's instant, and starts what is due), the polls it
    starts (each reads the rollouts no synced watch reports, if any) and the watch events it
    receives."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passes = self.polls = self.moves = self.pod_moves = 0

    def _sleep(self, now: float, ticking: bool) -> float:
        self.passes += 1  # the pass at `now` has started whatever was due
        return super()._sleep(now, ticking)

    async def _poll(self) -> None:
        self.polls += 1
        await super()._poll()

    def moved(self, key: TargetKey, version: str) -> None:
        self.moves += 1
        super().moved(key, version)

    def pods_moved(self, key: TargetKey) -> None:
        self.pod_moves += 1
        super().pods_moved(key)


def observed(ticker: Ticker, clock: Clock) -> Observed:
    return Observed(ticker, phase=0.0, follow_period=2.0, retry_delay=30.0, clock=clock)  # type: ignore[arg-type]


@pytest.fixture
async def running() -> AsyncIterator[tuple[Observed, Ticker, Clock]]:
    ticker, clock = Ticker(), Clock()
    scheduler = observed(ticker, clock)
    task = asyncio.create_task(scheduler.run())
    await until(lambda: scheduler.passes > 0)  # its first look, at no policy, is behind it
    yield scheduler, ticker, clock
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await scheduler.stop()


async def at(scheduler: Observed, clock: Clock, now: float) -> None:
    """Move the clock and return once the loop has looked at every policy at that instant and
    what it started there has begun (its first step ran before this returns: the loop runs
    ready tasks in the order they were scheduled). What must NOT happen at ``now`` has then
    not happened, however slow the machine."""
    clock.now = now
    passes = scheduler.passes
    scheduler.wake()
    await until(lambda: scheduler.passes > passes)
    await asyncio.sleep(0)


async def until(check: Callable[[], bool]) -> None:
    """What MUST happen: wait for it, generously (a loaded machine is slow, never wrong)."""
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.01)
    assert check()


async def polls_done(scheduler: Observed) -> None:
    """Wait until the reads of rollouts the scheduler started have all been answered (what
    a poll would have read, it has read by then)."""
    await until(lambda: scheduler._polling is None or scheduler._polling.done())


def spec(generation: int, **annotations: str) -> dict[str, object]:
    """A trigger: the policy's generation and the annotations that ask for a tick."""
    return {"spec": generation, **annotations}


async def test_a_policy_ticks_when_first_seen_then_on_its_grid_and_at_once_on_a_new_trigger(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, clock.now)
    await until(lambda: ticker.calls == [False])
    grid = 1_000_800.0  # the next multiple of 900 s after 1,000,000
    await at(scheduler, clock, grid - 1)
    assert ticker.calls == [False]
    await at(scheduler, clock, grid)
    await until(lambda: ticker.calls == [False, False])
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))  # the same: nothing
    await at(scheduler, clock, grid + 5)
    assert ticker.calls == [False, False]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(2))
    await at(scheduler, clock, grid + 6)
    await until(lambda: ticker.calls == [False, False, False])


def waiting(opens: float) -> TickOutcome:
    """A tick after which a drifted target waits for a refresh window opening at ``opens``."""
    when = datetime.fromtimestamp(opens, UTC)
    return TickOutcome(None, None, wake_at=when)  # type: ignore[arg-type]


async def test_a_policy_waiting_for_a_window_ticks_when_it_opens_not_an_interval_later(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    opens = clock.now + 300  # before the grid's next instant, 1,000,800
    ticker.next = [waiting(opens), waiting(clock.now + 7200)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, clock.now)
    await until(lambda: ticker.calls == [False])
    await at(scheduler, clock, opens - 1)
    assert ticker.calls == [False]
    await at(scheduler, clock, opens)
    await until(lambda: ticker.calls == [False, False])
    # A window opening after the grid's next instant changes nothing: the grid comes first.
    await at(scheduler, clock, 1_000_800.0 - 1)
    assert ticker.calls == [False, False]
    await at(scheduler, clock, 1_000_800.0)
    await until(lambda: ticker.calls == [False, False, False])


async def test_a_failed_tick_is_retried_after_the_retry_delay_not_before(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    ticker.next = [KubeUnavailable("down"), RuntimeError("a bug")]
    start = clock.now
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    await at(scheduler, clock, start + 29)
    assert len(ticker.calls) == 1
    await at(scheduler, clock, start + 30)
    await until(lambda: len(ticker.calls) == 2)  # and an unexpected error is retried the same way
    await at(scheduler, clock, start + 60)
    await until(lambda: len(ticker.calls) == 3)


async def test_a_rollout_in_flight_is_followed_when_its_workload_changes(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    for step in range(1, 4):  # unchanged: read every period, no tick
        await at(scheduler, clock, start + 2 * step)
    assert ticker.calls == [False]
    await until(lambda: ticker.api.reads >= 2)
    ticker.api.version = "2"  # the controller reported progress
    ticker.next = [None]  # the follow-up judged it: nothing in flight any more
    await at(scheduler, clock, start + 8)
    await until(lambda: ticker.calls == [False, True])
    await polls_done(scheduler)
    reads = ticker.api.reads
    await at(scheduler, clock, start + 20)
    await polls_done(scheduler)
    assert ticker.api.reads == reads  # nothing in flight: nothing read


@pytest.fixture
async def watched() -> AsyncIterator[tuple[Observed, Ticker, Clock]]:
    ticker, clock = Ticker(watches=Watches({APP: "1"})), Clock()
    scheduler = observed(ticker, clock)
    task = asyncio.create_task(scheduler.run())
    await until(lambda: scheduler.passes > 0)  # its first look, at no policy, is behind it
    yield scheduler, ticker, clock
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await scheduler.stop()


@pytest.mark.parametrize("late", [0.0, 0.3], ids=["prompt", "watch-thread-late"])
async def test_a_watched_rollout_is_judged_on_its_watch_event_and_never_polled(
    watched: tuple[Observed, Ticker, Clock], late: float
) -> None:
    scheduler, ticker, clock = watched
    assert ticker.watches is not None
    start = clock.now
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    for step in range(1, 4):  # a synced watch reports it: nothing is read, no tick
        await at(scheduler, clock, start + 2 * step)
    assert ticker.calls == [False]
    await polls_done(scheduler)
    assert ticker.api.reads == 0
    ticker.next = [None]  # the follow-up judges it: nothing in flight any more
    ticker.watches.change(APP, "2", late=late)  # the controller reported progress
    await until(lambda: scheduler.moves == 1)  # the event reached the loop
    await at(scheduler, clock, clock.now + FOLLOW_SETTLE / 2)  # a burst is judged once settled
    assert ticker.calls == [False]
    await at(scheduler, clock, clock.now + FOLLOW_SETTLE / 2)
    await until(lambda: ticker.calls == [False, True])
    await polls_done(scheduler)
    assert ticker.api.reads == 0


async def test_a_rollout_whose_watch_is_not_synced_is_polled_until_it_is(
    watched: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = watched
    assert ticker.watches is not None
    ticker.watches.versions.clear()  # the stream broke: no synced copy reports it
    start = clock.now
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    await at(scheduler, clock, start + 2)
    await until(lambda: ticker.api.reads >= 1)
    ticker.api.version = "2"
    ticker.next = [None]
    await at(scheduler, clock, start + 4)
    await until(lambda: ticker.calls == [False, True])


async def test_a_change_the_watch_saw_while_the_tick_ran_is_judged_when_it_ends(
    watched: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = watched
    assert ticker.watches is not None
    start = clock.now
    ticker.ticking.clear()  # the first tick takes a while
    ticker.next = [flying(deadline=start + 600), None]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    ticker.watches.change(APP, "2")  # after the tick read "1", before it ended
    ticker.ticking.set()
    await until(lambda: scheduler._policies["uid"].running is None)
    await at(scheduler, clock, clock.now + FOLLOW_SETTLE)
    await until(lambda: ticker.calls == [False, True])  # no poll, no deadline: the event


async def test_a_rollout_that_stops_changing_is_judged_at_its_deadline_and_never_spins(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    stale = start + 60
    ticker.next = [flying(deadline=stale), flying(deadline=stale)]  # the planner did not act
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    await at(scheduler, clock, stale - 1)
    assert ticker.calls == [False]
    await at(scheduler, clock, stale)
    await until(lambda: ticker.calls == [False, True])
    await at(scheduler, clock, stale + 1)  # the same deadline again: not before a period
    assert ticker.calls == [False, True]
    await at(scheduler, clock, stale + 2)
    await until(lambda: ticker.calls == [False, True, True])


async def test_a_forgotten_policy_never_ticks_again_and_its_series_go(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, clock.now)
    scheduler.forget("uid")
    await at(scheduler, clock, clock.now + 10 * INTERVAL)
    assert ticker.calls == [False]
    assert ticker.metrics.forgotten == [("ns", "p")]


async def test_following_many_rollouts_reads_each_workload_once_and_never_holds_up_ticks(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    shared = TargetKey("Deployment", "ns", "shared")  # type: ignore[arg-type]
    own = [TargetKey("Deployment", "ns", f"app-{i}") for i in range(20)]  # type: ignore[arg-type]
    ticker.next = [flying(start + 600, shared, *own[:10]), flying(start + 600, shared, *own[10:])]
    scheduler.observe("uid-1", "ns", "p1", INTERVAL, spec(1))
    scheduler.observe("uid-2", "ns", "p2", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 2)
    ticker.api.answering.clear()  # the API server is slow: the poll hangs on its reads
    await at(scheduler, clock, start + 2)
    await until(lambda: ticker.api.reads > 0)
    scheduler.observe("uid-3", "ns", "p3", INTERVAL, spec(1))  # a new policy ticks meanwhile
    await at(scheduler, clock, start + 2)
    await until(lambda: len(ticker.calls) == 3)
    ticker.api.answering.set()
    await until(lambda: ticker.api.reads == 21)
    await at(scheduler, clock, start + 3)
    assert sorted(ticker.api.read_names) == sorted(["shared"] + [k.name for k in own])


async def test_the_reads_of_rollouts_wait_for_running_ticks_but_no_longer_than_their_bound(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid-1", "ns", "p1", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    await at(scheduler, clock, start + 2)
    await until(lambda: ticker.api.reads == 1)  # followed every period
    ticker.ticking.clear()  # the next tick takes a while
    scheduler.observe("uid-2", "ns", "p2", INTERVAL, spec(1))
    await at(scheduler, clock, start + 2)
    await until(lambda: len(ticker.calls) == 2)
    polls = scheduler.polls
    await at(scheduler, clock, start + 4)  # a read is due, but a tick is running: it waits
    await at(scheduler, clock, start + 8.9)
    assert scheduler.polls == polls
    await at(scheduler, clock, start + 9)  # no longer than the bound (5 s past its time)
    await until(lambda: ticker.api.reads == 2)
    ticker.ticking.set()
    await until(lambda: len(ticker.calls) == 2 and not scheduler._ticking())
    await at(scheduler, clock, start + 11)  # the tick is done: every period again
    await until(lambda: ticker.api.reads == 3)


async def test_a_follow_up_that_takes_a_while_does_not_hold_up_the_reads_of_other_rollouts(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    one, other = (TargetKey("Deployment", "ns", n) for n in ("one", "other"))  # type: ignore[arg-type]
    ticker.next = [flying(start + 600, one), flying(start + 600, other)]
    scheduler.observe("uid-1", "ns", "p1", INTERVAL, spec(1))
    scheduler.observe("uid-2", "ns", "p2", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 2)
    await at(scheduler, clock, start + 2)
    await until(lambda: ticker.api.reads == 2)
    ticker.ticking.clear()  # the follow-up below takes a while
    ticker.api.versions["one"] = "2"
    await at(scheduler, clock, start + 4)
    await until(lambda: ticker.calls == [False, False, True])
    await at(scheduler, clock, start + 6)  # p2's rollout is still read every period
    await until(lambda: ticker.api.reads == 5)
    ticker.ticking.set()
    await until(lambda: not any(p.running for p in scheduler._policies.values()))


async def test_a_tick_someone_asked_for_says_when_and_the_grid_and_follow_ups_do_not(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1, refresh_now="1"))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)  # first seen: nothing to be fresher than
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1, refresh_now="2"))  # asked for
    await at(scheduler, clock, start + 1)
    await until(lambda: len(ticker.calls) == 2)
    ticker.api.version = "2"  # its rollout moves: a follow-up
    await at(scheduler, clock, start + 4)
    await until(lambda: len(ticker.calls) == 3)
    await at(scheduler, clock, 1_000_800.0)  # the grid's next instant
    await until(lambda: len(ticker.calls) == 4)
    assert ticker.calls == [False, False, True, False]
    assert ticker.asked == [None, start, None, None]
    assert ticker.rounds == [None, None, None, 1_000_800.0]  # only the grid's tick has a round


async def test_an_ask_is_answered_by_the_first_tick_that_starts_after_it_never_by_one_running(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    """What "the tick I asked for has run" means in the metrics: a tick in flight when the ask
    came answers none of it; the next one answers every ask made meanwhile, by reason."""
    scheduler, ticker, clock = running
    start = clock.now
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: ticker.metrics.answered == {"noticed": 1})  # the first sighting's
    ticker.ticking.clear()  # the next tick takes a while
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1, refresh_now="a"))
    await at(scheduler, clock, start + 1)
    await until(lambda: len(ticker.calls) == 2)
    # Asked while that tick runs: a new spec and another refresh-now, seen as one change.
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(2, refresh_now="b"))
    assert ticker.metrics.asked == {"noticed": 1, "refresh_now": 2, "spec": 1}
    ticker.ticking.set()
    await until(lambda: len(ticker.calls) == 3)  # the one asked for while the other ran
    assert ticker.answered_before[2] == {"noticed": 1, "refresh_now": 1}
    await until(lambda: ticker.metrics.answered == ticker.metrics.asked)
    await at(scheduler, clock, 1_000_800.0)  # an interval tick answers nothing more
    await until(lambda: len(ticker.calls) == 4)
    assert ticker.metrics.answered == {"noticed": 1, "refresh_now": 2, "spec": 1}


async def test_a_follow_up_answers_no_ask(running: tuple[Observed, Ticker, Clock]) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: ticker.calls == [False])
    ticker.registry.clear()  # the prompt tick below waits on a registry...
    ticker.next = [None, None]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1, refresh_now="a"))
    await at(scheduler, clock, start + 1)
    await until(lambda: ticker.calls == [False, False])
    ticker.api.version = "2"  # ...while a follow-up judges the rollout beside it
    await at(scheduler, clock, start + 3)
    await until(lambda: ticker.calls == [False, False, True])
    await until(lambda: scheduler._policies["uid"].aside is None)
    assert ticker.metrics.answered == {"noticed": 1}  # the follow-up answered nothing
    ticker.registry.set()
    await until(lambda: ticker.metrics.answered == {"noticed": 1, "refresh_now": 1})


async def test_an_interval_tick_names_its_round_however_late_and_wakes_and_retries_name_none(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start, grid = clock.now, 1_000_800.0
    ticker.next = [waiting(start + 300), KubeUnavailable("down")]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)  # first seen
    await until(lambda: len(ticker.calls) == 1)
    await at(scheduler, clock, start + 300)  # a window opens (wake_at); the tick fails
    await until(lambda: len(ticker.calls) == 2)
    await at(scheduler, clock, start + 330)  # the retry
    await until(lambda: len(ticker.calls) == 3)
    await at(scheduler, clock, grid + 25)  # the grid's tick, started late (a busy round)
    await until(lambda: len(ticker.calls) == 4)
    assert ticker.rounds == [None, None, None, grid]


async def test_a_rollout_is_judged_while_its_policy_s_tick_waits_on_a_registry(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    """A verdict never waits on a registry: while the interval tick of a policy waits for its
    answers, a follow-up of the same policy judges the rollout that moved."""
    scheduler, ticker, clock = running
    start = clock.now
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: ticker.calls == [False])
    ticker.registry.clear()  # the registry of the next tick never answers
    ticker.next = [None, None]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(2))  # a prompt tick, waiting on it
    await at(scheduler, clock, start + 1)
    await until(lambda: ticker.calls == [False, False])
    ticker.api.version = "2"  # meanwhile the rollout moved
    await at(scheduler, clock, start + 3)
    await until(lambda: ticker.calls == [False, False, True])
    assert not ticker.registry.is_set()  # judged beside the tick that still waits
    ticker.registry.set()
    await until(lambda: not scheduler._ticking() and scheduler._policies["uid"].running is None)


async def test_no_follow_up_runs_beside_a_tick_that_is_not_waiting_on_a_registry(
    running: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = running
    start = clock.now
    ticker.next = [flying(deadline=start + 600)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: ticker.calls == [False])
    ticker.ticking.clear()  # the next tick takes a while, deciding (not waiting on a registry)
    ticker.next = [None, None]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(2))
    await at(scheduler, clock, start + 1)
    await until(lambda: ticker.calls == [False, False])
    ticker.api.version = "2"
    for step in range(2, 12):
        await at(scheduler, clock, start + step)
    assert ticker.calls == [False, False]  # one tick of a policy decides at a time
    ticker.ticking.set()
    await until(lambda: scheduler._policies["uid"].running is None)


# --- a refresh's health window: its pods, and its end ----------------------------------------

OTHER = TargetKey("Deployment", "ns", "other")  # type: ignore[arg-type]


@pytest.fixture
async def pods_watched() -> AsyncIterator[tuple[Observed, Ticker, Clock]]:
    watches = Watches({APP: "1", OTHER: "1"}, synced_pods={"ns"})
    watches.selectors = {APP: {"app": "app"}, OTHER: {"app": "other"}}
    ticker, clock = Ticker(watches=watches), Clock()
    scheduler = observed(ticker, clock)
    task = asyncio.create_task(scheduler.run())
    await until(lambda: scheduler.passes > 0)  # its first look, at no policy, is behind it
    yield scheduler, ticker, clock
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await scheduler.stop()


async def test_a_pod_of_a_refresh_in_its_health_window_that_changes_is_judged_at_once(
    pods_watched: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = pods_watched
    assert ticker.watches is not None
    start = clock.now
    ticker.next = [flying(start + 60, APP, OTHER, pods=True)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    # Another namespace's pod, and a pod the workloads in flight do not select: nothing.
    ticker.watches.pod_change("elsewhere", {"app": "app"})
    ticker.watches.pod_change("ns", {"app": "unrelated"})
    assert scheduler.pod_moves == 0  # the watch threads handed nothing on
    await at(scheduler, clock, start + 1)
    assert ticker.calls == [False]
    assert ticker.api.reads == 0  # the pods are watched: nothing is polled either
    ticker.next = [flying(start + 60, APP, OTHER, pods=True)]
    ticker.watches.pod_change("ns", {"app": "app", "pod-template-hash": "abc"})  # it restarted
    await until(lambda: scheduler.pod_moves == 1)  # the event reached the loop
    await at(scheduler, clock, clock.now + FOLLOW_SETTLE)
    await until(lambda: ticker.calls == [False, True])


async def test_pods_of_a_rollout_not_in_a_health_window_tick_nothing(
    pods_watched: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = pods_watched
    assert ticker.watches is not None
    start = clock.now
    ticker.next = [flying(start + 600, APP)]  # healthyFor 0s, or a rollback: the workload alone
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    ticker.watches.pod_change("ns", {"app": "app"})
    assert scheduler.pod_moves == 0  # the watch thread handed nothing on
    await at(scheduler, clock, start + 1)
    assert ticker.calls == [False]


async def test_a_pod_change_while_the_tick_ran_is_judged_when_it_ends(
    pods_watched: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = pods_watched
    assert ticker.watches is not None
    start = clock.now
    ticker.next = [flying(start + 60, APP, pods=True)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    ticker.ticking.clear()  # the next tick takes a while
    ticker.next = [flying(start + 60, APP, pods=True), None]
    ticker.watches.pod_change("ns", {"app": "app"})
    await until(lambda: scheduler.pod_moves == 1)  # the event reached the loop
    await at(scheduler, clock, clock.now + FOLLOW_SETTLE)
    await until(lambda: len(ticker.calls) == 2)
    ticker.watches.pod_change("ns", {"app": "app"})  # after that tick read the pods
    await until(lambda: scheduler.pod_moves == 2)
    ticker.ticking.set()
    await until(lambda: scheduler._policies["uid"].running is None)
    await at(scheduler, clock, clock.now + FOLLOW_SETTLE)
    await until(lambda: ticker.calls == [False, True, True])


async def test_a_health_window_s_end_is_judged_at_its_instant_even_within_a_period(
    pods_watched: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = pods_watched
    start = clock.now
    end = start + 0.5  # sooner than one follow period (2 s)
    ticker.next = [flying(end, APP, pods=True), None]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    await at(scheduler, clock, end - 0.1)
    assert ticker.calls == [False]
    await at(scheduler, clock, end)
    await until(lambda: ticker.calls == [False, True])


async def test_pods_in_a_health_window_no_synced_copy_reports_are_read_every_period(
    pods_watched: tuple[Observed, Ticker, Clock],
) -> None:
    scheduler, ticker, clock = pods_watched
    assert ticker.watches is not None
    ticker.watches.synced_pods.clear()  # the pod stream broke (or pods may not be watched)
    start = clock.now
    ticker.next = [flying(start + 60, APP, pods=True), flying(start + 60, APP, pods=True)]
    scheduler.observe("uid", "ns", "p", INTERVAL, spec(1))
    await at(scheduler, clock, start)
    await until(lambda: len(ticker.calls) == 1)
    await at(scheduler, clock, start + 1.9)
    assert ticker.calls == [False]
    await at(scheduler, clock, start + 2)
    await until(lambda: ticker.calls == [False, True])  # a follow-up reads them
    await until(lambda: scheduler._policies["uid"].running is None)
    ticker.watches.synced_pods.add("ns")  # listed again: their events tick it from now on
    ticker.next = [flying(start + 60, APP, pods=True)]
    await at(scheduler, clock, start + 4)
    await until(lambda: ticker.calls == [False, True, True])
    await at(scheduler, clock, start + 8)
    assert ticker.calls == [False, True, True]


async def test_a_scheduler_stopped_in_the_turn_it_is_woken_stops_rather_than_looking_again() -> (
    None
):
    ticker, clock = Ticker(), Clock()
    scheduler = observed(ticker, clock)
    task = asyncio.create_task(scheduler.run())
    await until(lambda: scheduler.passes > 0)
    passes = scheduler.passes
    scheduler.wake()
    task.cancel()  # the stop and the wake arrive in one turn of the loop
    await until(lambda: task.done() or scheduler.passes > passes)
    assert task.cancelled(), "the loop swallowed its cancellation and looked at its policies again"
    assert scheduler.passes == passes
    await scheduler.stop()
