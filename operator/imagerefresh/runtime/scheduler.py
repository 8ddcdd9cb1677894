"""When each policy ticks: one scheduler for every policy, and no finalizer on any of them.

kopf's daemons and timers would serve one policy each, but they put a finalizer on every policy
they serve, so a policy (and its namespace) deleted while the operator is away stays
``Terminating`` until someone strips it by hand. Instead, kopf only *reports* the policies (a
raw-event handler, which persists nothing) and this scheduler decides when each one ticks:

- **interval ticks**, on the grid of :mod:`.schedule` (policies of one interval tick together
  and share registry answers). Each tells the ticker the grid instant it belongs to
  (``round_at``): the registry answers of a round are shared by all of its ticks however long
  the round takes to get through a fleet, the resolver's window being measured from that
  instant. Only a tick that starts at a grid instant has one: a retry, a ``wake_at`` tick or a
  prompt tick is of no round;
- **prompt ticks**, at once, when a policy is first seen or its spec, reset, refresh-now or
  refresh-outside-window annotation changes (such a tick takes no registry answer whose
  request started before it was asked for), and when what a drifted target waits for comes (a
  refresh window opening, a cooldown ending: the tick's ``wake_at``), rather than up to an
  interval later. Each of those changes is an *ask*, counted by what asked
  (``imagerefresh_ticks_asked_total``); the first tick that starts after it answers it, and
  every ask it answered is counted when it ends (``imagerefresh_ticks_answered_total``),
  whatever its outcome. A tick in flight when the ask came answers nothing: so "the tick I
  asked for has run" is a fact the metrics state, not an inference from a count of ticks;
- **follow-up ticks**, while a rollout of ours is in flight (:mod:`imagerefresh.planner.follow`):
  a change of an in-flight workload — the controller reporting progress, completion or
  failure — ticks the policy at once. With watches on (:mod:`.watches`) the change is the watch
  event itself; a workload no synced watch reports (watches off, a stream broken and not yet
  listed again) is read every ``follow_period`` seconds instead (a GET by name, which
  ``resourceNames`` RBAC allows) and a change of its ``resourceVersion`` does the same. A
  rollout that stops changing is ticked once its progress deadline passes. A refresh in its
  health window (``healthyFor``) is judged on its pods too: a change of one of its pods (a
  restart, a back-off) in a synced pod copy ticks the policy the same way, the window's end is
  a deadline like the progress deadline, and where no synced copy reports its pods they are
  read by a follow-up every ``follow_period`` seconds until the window ends. A follow-up judges
  only the rollouts in flight and asks the registry nothing new. While interval or prompt
  ticks run, follow-ups and the reads wait for them (at most ``poll_defer`` seconds): the
  ticks that start refreshes go first, and a fleet's policies ticking together on the grid
  are not slowed by the rollouts they have just started.

While a tick waits on registries (a slow or hostile one may take the whole resolution
deadline), a follow-up of the same policy may run beside it: a verdict or a rollback never
waits on a registry. The ticker serialises what they decide.

A tick that fails on the API server is retried after ``retry_delay`` seconds; the loop itself
never dies of one policy's error. Ticks run as tasks bounded by the ticker's slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

import structlog

from imagerefresh.kube.errors import KubeError
from imagerefresh.planner import NOTHING_IN_FLIGHT, InFlight, TargetKey
from imagerefresh.runtime.schedule import seconds_until_next_tick
from imagerefresh.runtime.ticker import PolicyTicker, TickOutcome

__all__ = ["NOTICED", "Scheduler", "Trigger"]

log = structlog.get_logger(__name__)

DEFAULT_FOLLOW_PERIOD = 2.0
DEFAULT_RETRY_DELAY = 30.0
DEFAULT_POLL_CONCURRENCY = 8  # workload reads in flight at once while following rollouts
DEFAULT_POLL_DEFER = 5.0  # how long the reads of rollouts may wait for ticks that are running
# A rollout's watch events come in bursts (the controller and the kubelets write its status
# several times within milliseconds): its follow-up waits this long after the first, and judges
# the burst once — one status write, not one per intermediate state.
FOLLOW_SETTLE = 0.25
# Whether some rollout in flight needs polling is looked at no more often than this.
_UNWATCHED_EVERY = 0.5
# What asks for a prompt tick when it changes, by name (the ask's reason in the metrics).
Trigger = Mapping[str, Hashable]
NOTICED = "noticed"  # the ask of a policy's first sighting by this process


@dataclass
class _Policy:
    """What the scheduler keeps of one policy between its ticks."""

    namespace: str
    name: str
    interval: float
    trigger: Trigger
    due: float = 0.0  # the next interval tick (epoch seconds); 0: at once
    grid: float | None = None  # the grid instant ``due`` was last set to (equal: on the grid)
    follow_due: float | None = None  # the next follow-up tick, if one is owed
    in_flight: InFlight = NOTHING_IN_FLIGHT
    versions: dict[TargetKey, str] = field(default_factory=dict)
    running: asyncio.Task[None] | None = None
    running_follow_up: bool = False  # whether the tick running is a follow-up
    pods_moved: bool = False  # a pod judged for a health window changed since the last tick began
    resolving: bool = False  # the tick running waits on registries: a follow-up may run aside
    aside: asyncio.Task[None] | None = None  # that follow-up
    asked_at: float | None = None  # when the next tick was asked for (a new trigger)
    # The asks (by reason) the next interval or prompt tick answers; the first sighting's own.
    asks: Counter[str] = field(default_factory=lambda: Counter({NOTICED: 1}))
    gone: bool = False

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def may_follow_aside(self) -> bool:
        """Whether a follow-up may start beside the tick running (it waits on registries)."""
        return self.running is not None and self.resolving and self.aside is None

    def next_tick(self) -> tuple[float, bool]:
        """When this policy ticks next, and whether that tick is a follow-up."""
        if self.follow_due is not None and self.follow_due < self.due:
            return self.follow_due, True
        return self.due, False


class Scheduler:
    """Ticks every policy it has been told about, at its time (see the module docs)."""

    def __init__(
        self,
        ticker: PolicyTicker,
        *,
        phase: float,
        follow_period: float = DEFAULT_FOLLOW_PERIOD,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        poll_concurrency: int = DEFAULT_POLL_CONCURRENCY,
        poll_defer: float = DEFAULT_POLL_DEFER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ticker, self.phase, self.clock = ticker, phase, clock
        self.follow_period, self.retry_delay = follow_period, retry_delay
        self._policies: dict[str, _Policy] = {}
        # The policies following each workload in flight (by label), and the keys alone for
        # the watch threads, which drop every other change before it reaches the loop.
        self._following: dict[TargetKey, dict[str, _Policy]] = {}
        self._followed: frozenset[TargetKey] = frozenset()
        # Namespace → the workloads in flight whose pods are judged (a health window), for the
        # pod watches' threads.
        self._pods_followed: dict[str, frozenset[TargetKey]] = {}
        self._unwatched_at: tuple[float, bool] = (float("-inf"), False)
        self._changed = asyncio.Event()
        self._next_poll = 0.0
        self._polling: asyncio.Task[None] | None = None
        self.poll_concurrency, self.poll_defer = poll_concurrency, poll_defer

    # --- what kopf reports ------------------------------------------------------------------

    def observe(
        self, uid: str, namespace: str, name: str, interval: float, trigger: Trigger
    ) -> None:
        """A policy exists (or changed): the first sighting and a new trigger tick at once.

        ``trigger`` names what asks for a tick when it changes (the spec's generation, the
        annotations); each part that changed is one ask, of that name."""
        policy = self._policies.get(uid)
        if policy is None:
            self._policies[uid] = _Policy(namespace, name, interval, dict(trigger))
            self.ticker.metrics.tick_asked(namespace, name, NOTICED)
            # Its first tick starts now: a policy noticed that never logs a tick is stuck in
            # the operator, one never noticed was not reported by the watch.
            log.info("policy noticed", policy=f"{namespace}/{name}")
        else:
            changed = sorted(
                part
                for part in {*policy.trigger, *trigger}
                if policy.trigger.get(part) != trigger.get(part)
            )
            if changed:
                policy.trigger, policy.due, policy.asked_at = dict(trigger), 0.0, self.clock()
                for part in changed:
                    policy.asks[part] += 1
                    self.ticker.metrics.tick_asked(namespace, name, part)
            if policy.interval != interval:
                policy.interval = interval
                grid = self._grid_after(interval, self.clock())
                if grid < policy.due:
                    policy.due = policy.grid = grid
        self._changed.set()

    def forget(self, uid: str) -> None:
        """The policy is gone: no tick of it starts again (one running finishes as ``gone``)."""
        policy = self._policies.pop(uid, None)
        if policy is not None:
            policy.gone = True
            self._index(policy, NOTHING_IN_FLIGHT)
            self.ticker.metrics.forget_policy(policy.namespace, policy.name)
            self.ticker.forget(policy.namespace, policy.name)

    def wake(self) -> None:
        """Look at every policy's time again now (a clock that moved, a test)."""
        self._changed.set()

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Tick policies as they fall due, forever (cancel to stop)."""
        watches = self.ticker.watches
        if watches is not None:
            loop = asyncio.get_running_loop()

            def moved(key: TargetKey, version: str) -> None:  # on a watch's thread
                if key in self._followed:
                    loop.call_soon_threadsafe(self.moved, key, version)

            def pod_moved(namespace: str, labels: Mapping[str, str]) -> None:  # likewise
                for key in self._pods_followed.get(namespace, ()):
                    if watches.selects(key, labels):
                        loop.call_soon_threadsafe(self.pods_moved, key)

            watches.listen(moved)
            watches.listen_pods(pod_moved)
        while True:
            self._changed.clear()
            now = self.clock()
            ticking = self._ticking()
            for policy in list(self._policies.values()):
                when, follow_up = self._starts_at(policy, ticking)
                if when > now:
                    continue
                if policy.running is None:
                    policy.running_follow_up = follow_up
                    policy.running = asyncio.create_task(self._tick(policy, follow_up))
                elif follow_up and policy.may_follow_aside:
                    policy.aside = asyncio.create_task(self._tick(policy, True, aside=True))
            if self._poll_due(now) and (self._polling is None or self._polling.done()):
                self._next_poll = now + self.follow_period
                self._polling = asyncio.create_task(self._poll())
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
            # that arrives as the event is set, and the loop would outlive its stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._sleep(now, ticking)):
                    await self._changed.wait()

    def moved(self, key: TargetKey, version: str) -> None:
        """A watch saw ``key`` change: the policies following it judge it (once its burst of
        changes settled, :data:`FOLLOW_SETTLE`)."""
        for policy in list(self._following.get(key, {}).values()):
            if key in policy.in_flight.workloads and policy.versions.get(key) != version:
                log.debug("rollout moved", policy=policy.label, workload=str(key))
                self._judge_soon(policy)

    def pods_moved(self, key: TargetKey) -> None:
        """A pod of ``key``, in its health window, changed: the policies following it judge it."""
        for policy in list(self._following.get(key, {}).values()):
            if key in policy.in_flight.pods:
                log.debug(
                    "a pod in its health window moved", policy=policy.label, workload=str(key)
                )
                policy.pods_moved = True
                self._judge_soon(policy)

    def _judge_soon(self, policy: _Policy) -> None:
        due = self.clock() + FOLLOW_SETTLE
        if policy.follow_due is None or policy.follow_due > due:
            policy.follow_due = due
            self._changed.set()

    def _starts_at(self, policy: _Policy, ticking: bool) -> tuple[float, bool]:
        """When the policy's next tick starts, and whether it is a follow-up: a follow-up waits
        while interval or prompt ticks run (at most ``poll_defer``), so the ticks that start
        refreshes go first."""
        when, follow_up = policy.next_tick()
        if follow_up and ticking:
            when += self.poll_defer
        return when, follow_up

    async def stop(self) -> None:
        """Cancel the ticks in flight (kopf's cleanup)."""
        running = [
            task
            for p in self._policies.values()
            for task in (p.running, p.aside)
            if task is not None
        ]
        if self._polling is not None:
            running.append(self._polling)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def _ticking(self) -> bool:
        """Whether an interval or prompt tick is running (a follow-up does not count, nor a
        tick waiting on registries: it asks the API server nothing meanwhile)."""
        return any(
            policy.running is not None and not policy.running_follow_up and not policy.resolving
            for policy in self._policies.values()
        )

    def _watched(self, key: TargetKey) -> bool:
        """Whether a synced watch reports ``key``'s changes (no poll needed)."""
        watches = self.ticker.watches
        return watches is not None and watches.version(key) is not None

    def _unwatched(self) -> bool:
        """Whether some rollout in flight is not reported by a synced watch: it is polled.
        Looked at every :data:`_UNWATCHED_EVERY` at most (the loop turns on every event)."""
        now = time.monotonic()
        at, unwatched = self._unwatched_at
        if now - at < _UNWATCHED_EVERY:
            return unwatched
        unwatched = any(not self._watched(key) for key in self._following)
        self._unwatched_at = (now, unwatched)
        return unwatched

    def _poll_due(self, now: float) -> bool:
        """The reads of rollouts are due every period, but wait for running ticks a while."""
        if now < self._next_poll:
            return False
        return not self._ticking() or now >= self._next_poll + self.poll_defer

    def _sleep(self, now: float, ticking: bool) -> float:
        waits = [
            self._starts_at(policy, ticking)[0] - now
            for policy in self._policies.values()
            if policy.running is None
        ] + [
            policy.follow_due - now
            for policy in self._policies.values()
            if policy.may_follow_aside and policy.follow_due is not None
        ]
        polling = self._polling is not None and not self._polling.done()
        if not polling and self._unwatched():
            # A tick that ends wakes the loop; the bound on the wait does not.
            deferred = self.poll_defer if self._ticking() else 0.0
            waits.append(self._next_poll + deferred - now)
        return max(0.05, min(waits, default=3600.0))

    def _grid_after(self, interval: float, now: float) -> float:
        return now + seconds_until_next_tick(interval, now, self.phase)

    async def _tick(self, policy: _Policy, follow_up: bool, *, aside: bool = False) -> None:
        started = self.clock()
        policy.pods_moved = False  # this tick reads the pods as they are from now
        asked_at = round_at = None
        answering: Counter[str] = Counter()  # a follow-up answers no ask
        if not follow_up:
            asked_at, policy.asked_at = policy.asked_at, None
            answering, policy.asks = policy.asks, Counter()
            if asked_at is None and policy.due == policy.grid:
                round_at = policy.due  # an interval tick: its round's registry answers
            policy.due = policy.grid = self._grid_after(policy.interval, started)

        def resolving(waiting: bool) -> None:
            policy.resolving = waiting
            self._changed.set()  # a follow-up due may start beside it now

        try:
            outcome = await self.ticker.tick(
                policy.namespace,
                policy.name,
                follow_up=follow_up,
                asked_at=asked_at,
                round_at=round_at,
                resolving=None if follow_up else resolving,
            )
        except KubeError as error:
            log.warning(
                "tick failed; retrying",
                policy=policy.label,
                error=str(error),
                retry_in=self.retry_delay,
            )
            policy.due = min(policy.due, started + self.retry_delay)
            outcome = None
        except Exception:  # one policy's bug must not stop every other policy's ticks
            log.exception("tick failed unexpectedly; retrying", policy=policy.label)
            policy.due = min(policy.due, started + self.retry_delay)
            outcome = None
        finally:
            if aside:
                policy.aside = None
            else:
                policy.running, policy.resolving = None, False
            if not policy.gone:
                for reason, count in sorted(answering.items()):
                    self.ticker.metrics.tick_answered(policy.namespace, policy.name, reason, count)
            self._changed.set()
        if policy.gone:  # deleted while it ticked: nothing it recorded may outlive it
            self.ticker.metrics.forget_policy(policy.namespace, policy.name)
            return
        self._follow(policy, outcome)
        wake = outcome.wake_at if outcome is not None else None
        if wake is not None:
            # The planner named an instant after its own clock; never sooner than that.
            policy.due = min(policy.due, wake.timestamp())

    def _follow(self, policy: _Policy, outcome: TickOutcome | None) -> None:
        """Start, continue or stop following the policy's rollouts after a tick."""
        self._index(policy, outcome.in_flight if outcome is not None else NOTHING_IN_FLIGHT)
        policy.versions = dict(outcome.versions) if outcome is not None else {}
        deadline, now = policy.in_flight.deadline, self.clock()
        # A deadline to come is kept to the instant (a window's end is judged within the
        # second); one already past is not sooner than a period: a deadline the planner did not
        # (yet) act on must not spin the loop.
        policy.follow_due = (
            (due if (due := deadline.timestamp()) > now else now + self.follow_period)
            if deadline is not None
            else None
        )
        watches = self.ticker.watches
        if self._pods_unwatched(policy):
            # Pods in a health window that no synced copy reports: read them every period.
            policy.follow_due = min(policy.follow_due or math.inf, now + self.follow_period)
        if policy.pods_moved:  # a pod changed while the tick ran: judge it soon
            self._judge_soon(policy)
            return
        if watches is None:
            return
        for key in policy.in_flight.workloads:  # changed while the tick ran: judge it soon
            seen = watches.version(key)
            if seen is not None and seen != policy.versions.get(key):
                self._judge_soon(policy)
                return

    def _pods_unwatched(self, policy: _Policy) -> bool:
        """Whether some workload of ``policy`` whose pods are judged has no synced pod copy."""
        watches = self.ticker.watches
        return any(
            watches is None or not watches.pods_synced(key.namespace)
            for key in policy.in_flight.pods
        )

    def _index(self, policy: _Policy, flying: InFlight) -> None:
        """Record what ``policy`` follows now, in the index the watch events are matched by."""
        for key in policy.in_flight.workloads - flying.workloads:
            following = self._following.get(key, {})
            following.pop(policy.label, None)
            if not following:
                self._following.pop(key, None)
        for key in flying.workloads:
            self._following.setdefault(key, {})[policy.label] = policy
        policy.in_flight = flying
        self._followed = frozenset(self._following)
        pods: dict[str, set[TargetKey]] = {}
        for followed in self._policies.values():
            for key in followed.in_flight.pods:
                pods.setdefault(key.namespace, set()).add(key)
        self._pods_followed = {ns: frozenset(keys) for ns, keys in pods.items()}
        self._unwatched_at = (float("-inf"), False)

    async def _poll(self) -> None:
        """Read the in-flight workloads; a changed one makes its policy's follow-up due now.

        Each workload is read once however many policies follow it, a few at a time, in a task
        of its own: the loop goes on starting ticks while hundreds of rollouts are read.
        """
        following = [
            policy
            for policy in self._policies.values()
            if policy.in_flight.workloads and (policy.running is None or policy.may_follow_aside)
        ]
        keys = sorted(
            {
                key
                for policy in following
                for key in policy.in_flight.workloads
                if not self._watched(key)
            }
        )
        gate = asyncio.Semaphore(self.poll_concurrency)

        async def version(key: TargetKey) -> str | None:
            async with gate:
                return await self._version(key)

        try:
            found = await asyncio.gather(*map(version, keys))
        finally:
            self._changed.set()  # the loop may start the next poll (or the follow-ups below)
        versions = dict(zip(keys, found, strict=True))
        for policy in following:
            changed = [
                str(key)
                for key in sorted(policy.in_flight.workloads)
                if versions.get(key) is not None and versions.get(key) != policy.versions.get(key)
            ]
            if changed:
                log.debug("rollout moved", policy=policy.label, workloads=changed)
                policy.follow_due = self.clock()

    async def _version(self, key: TargetKey) -> str | None:
        """The workload's resourceVersion now (None when it could not be read)."""
        try:
            workload = await asyncio.to_thread(
                self.ticker.api.read_workload, key.kind, key.namespace, key.name
            )
        except KubeError as error:
            log.debug("following a rollout: read failed", workload=str(key), error=str(error))
            return None
        return str((workload or {}).get("metadata", {}).get("resourceVersion", ""))
