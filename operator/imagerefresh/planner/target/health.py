"""A refresh's health window: settled is necessary, not sufficient, for a refresh to succeed.

A build without a readiness probe that exits after starting completes its rollout for an
instant — ``kubectl rollout status`` says "successfully rolled out" — and crash-loops after. So
a refresh of ours counts as a success only once its rollout settled *and* its pods stayed up for
``healthyFor`` after that (per target, else the policy's; 0: settled alone). Until then the
target stays Refreshing, saying until when its pods are watched.

What fails it — exactly as a failed rollout (an attempt, a rollback, the build barred) — is a
**crash** of the new build: a container the refresh changed, in a pod that reports running the
new digest, that restarted, ended (any exit of a long-running container; a failed one of an
init container) or backs off (``CrashLoopBackOff``), **at an instant inside the window**: from
the patch (``pending.startedAt``, so a crash while the rollout is still going counts too) to the
window's end (``settledAt + healthyFor``), both included. Never a crash of:

- a container the refresh did not change (another container of the pod, an adopted tag): it is
  not the new build;
- a pod that does not run the new digest (an old pod, or one that never pulled it);
- an instance that ended because its pod was being deleted or was over (evicted, its node shut
  down), or one that ended before the refresh started (a restart that predates it) or after the
  window ended (that one is not the refresh's: the skip and freeze rules take it, and say which
  build the pods run and since when it was judged healthy — :func:`after_window`).

When a crash is known only by its count (the kubelet keeps the latest ended instance; earlier
restarts have no time), its instant is bounded: after the pod was created and before the next
instance started. It counts only when the whole bound lies inside the window — a pod created
after the refresh started can only have crashed since. Evidence the rule cannot place is not a
crash: it blames no build on a guess.

A DaemonSet is judged per node: each node runs its own pod of the new build, and a crash on any
one node fails the refresh (the message names the nodes). A pod replaced during the window is
judged by its replacement, which runs the new build too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from imagerefresh.models import PendingRefresh, format_duration
from imagerefresh.models.base import format_timestamp
from imagerefresh.planner.evidence import ObservedPod, Resolved, Workload
from imagerefresh.planner.podhealth import CRASH_LOOP, ContainerHealth
from imagerefresh.planner.target.decision import Decision, short
from imagerefresh.reference import InvalidReference, parse

__all__ = [
    "Crash",
    "HealthWindow",
    "after_window",
    "crashes",
    "crashes_of",
    "failure_message",
    "health_window",
    "nodes_crashing",
    "watching_message",
]


@dataclass(frozen=True, slots=True)
class HealthWindow:
    """When crashes of a refresh's new build count: from its patch to ``healthyFor`` after its
    rollout settled (no end while it has not settled)."""

    started: datetime  # the patch's intent was recorded (pending.startedAt)
    settled: datetime | None  # the rollout settled (pending.settledAt); None: not yet
    length: timedelta  # healthyFor

    @property
    def end(self) -> datetime | None:
        return self.settled + self.length if self.settled is not None else None

    def over(self, now: datetime) -> bool:
        """Whether the window has ended: the refresh has stayed healthy through it."""
        end = self.end
        return end is not None and now >= end

    def holds(self, earliest: datetime | None, latest: datetime | None) -> bool:
        """Whether an instant known to lie between ``earliest`` and ``latest`` lies inside."""
        if earliest is None or earliest < self.started:
            return False
        end = self.end
        return end is None or (latest is not None and latest <= end)


@dataclass(frozen=True, slots=True)
class Crash:
    """A container of the new build that crashed inside the window."""

    pod: str
    node: str | None
    container: str
    digest: str  # the new build
    what: str  # what the kubelet reported
    at: datetime | None  # when, if known (else the earliest it can have been)

    def __str__(self) -> str:
        where = f"pod {self.pod}" + (f" on node {self.node}" if self.node else "")
        when = f" at {format_timestamp(self.at)}" if self.at is not None else ""
        return f"container {self.container} ({short(self.digest)}) in {where} {self.what}{when}"


Bounds = tuple[datetime | None, datetime | None, str]


def _ends(pod: ObservedPod, health: ContainerHealth, now: datetime) -> Iterator[Bounds]:
    """Each crash the container shows: (earliest, latest, what the kubelet said).

    An instant the kubelet gave is both bounds. An end known only by its count lies after the
    pod's creation (or the ended instance's start) and before the next instance started (or
    now): the kubelet keeps only the latest ended instance.
    """
    ended, last, created = health.ended, health.last, pod.created
    if pod.stopping:
        ended = None  # told to stop: the end is not the build's (its restarts before are)
    # When the instance that runs (or ran) last started: every earlier end came before it.
    current = health.since or (ended.started if ended is not None else None)
    if ended is not None and (not health.init or ended.failed):
        yield (ended.at or ended.started or created, ended.at or now, f"ended with {ended}")
    if last is not None and (not health.init or last.failed):
        yield (
            last.at or last.started or created,
            last.at or current or now,
            f"restarted after {last}",
        )
    earlier = health.restarts - (1 if last is not None else 0)
    if earlier <= 0 and last is None and health.waiting == CRASH_LOOP:
        earlier = 1  # backing off means it ended at least once
    if earlier > 0:
        before = (last.started if last is not None else None) or current or now
        counted = f"restarted {health.restarts} time(s)"
        yield (created, before, counted if health.restarts else f"backs off ({health.waiting})")


def crashes(
    pods: Iterable[ObservedPod],
    builds: Mapping[str, Resolved],
    window: HealthWindow,
    now: datetime,
) -> tuple[Crash, ...]:
    """Every crash inside ``window`` of a container of ``builds`` (container → the new build)
    in a pod that runs it, earliest first. Pure: see the module docs for the rule."""
    found: list[Crash] = []
    for pod in pods:
        for name, build in builds.items():
            health = pod.health.get(name)
            if health is None or not build.is_content_of(pod.running.get(name)):
                continue
            for earliest, latest, what in _ends(pod, health, now):
                if window.holds(earliest, latest):
                    found.append(Crash(pod.name, pod.scheduled, name, build.digest, what, earliest))
                    break  # one crash per container is enough to tell
    return tuple(sorted(found, key=lambda c: (c.at or now, c.pod, c.container)))


def nodes_crashing(found: Iterable[Crash]) -> tuple[str, ...]:
    """The nodes a crash was seen on (a DaemonSet's are judged node by node)."""
    return tuple(sorted({crash.node for crash in found if crash.node is not None}))


# --- the decision's part ---------------------------------------------------------------------


def health_window(decision: Decision, pending: PendingRefresh) -> HealthWindow:
    return HealthWindow(pending.started_at, pending.settled_at, decision.healthy_for)


def _builds(decision: Decision, pending: PendingRefresh) -> dict[str, Resolved]:
    """The containers the refresh changed (not the adopted), each with its new build; a build
    resolved this tick brings its platform manifests, which a runtime may report instead."""
    builds: dict[str, Resolved] = {}
    for name, image in pending.images.items():
        if name in pending.adopted:
            continue
        try:
            digest = parse(image).digest
        except InvalidReference:
            # Never taken: PendingRefresh parsed each of its images when the status was read.
            continue  # pragma: no mutate: unreachable, pending images are validated on read
        if digest is None:
            continue
        outcome = decision.evidence.digests.get(name)
        known = isinstance(outcome, Resolved) and outcome.digest == digest
        builds[name] = outcome if known and isinstance(outcome, Resolved) else Resolved(digest)
    return builds


def crashes_of(
    decision: Decision, pending: PendingRefresh, window: HealthWindow
) -> tuple[Crash, ...]:
    """The crashes of the refresh's new builds inside its window (none with a window of 0)."""
    if not window.length:
        return ()
    builds = _builds(decision, pending)
    return crashes(decision.evidence.pods, builds, window, decision.ctx.now)


def failure_message(found: tuple[Crash, ...], window: HealthWindow, kind: str) -> str:
    """Why the refresh failed: the first crash, how many there were, where."""
    end = window.end
    within = (
        f"within its health window (healthyFor {format_duration(window.length)}, until "
        f"{format_timestamp(end)})"
        if end is not None
        else "while it rolled out"
    )
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    nodes = nodes_crashing(found)
    where = f"; crashing on node(s) {', '.join(nodes)}" if kind == "DaemonSet" and nodes else ""
    return f"the new build crashed {within}: {found[0]}{more}{where}"


def watching_message(window: HealthWindow) -> str:
    """The Refreshing message while the window runs: stable, so the status is written once."""
    end = window.end
    assert end is not None
    return (
        f"our refresh rolled out; watching its pods until {format_timestamp(end)} (healthyFor "
        f"{format_duration(window.length)}): a container of the new build that restarts or "
        "crash-loops by then fails the refresh"
    )


def after_window(decision: Decision, workload: Workload) -> str:
    """For a target that no longer settles because the build our refresh pinned crashes after
    that refresh was judged healthy: which build its pods run and since when it was judged
    healthy (its crash came after the window: not the refresh's). Empty for anything else."""
    last = decision.status.last_refresh
    good = decision.status.last_good
    ours = {
        name: digest
        for name, container in workload.containers.items()
        if name in good and (digest := _same(good[name], container.image)) is not None
    }
    since = HealthWindow(last, None, timedelta(0)) if last is not None else None
    builds = {name: Resolved(digest) for name, digest in ours.items()}
    if since is None or not crashes(decision.evidence.pods, builds, since, decision.ctx.now):
        return ""
    runs = ", ".join(f"{name}@{short(digest)}" for name, digest in sorted(ours.items()))
    return (
        f". Its pods run {runs}, judged healthy at {format_timestamp(since.started)} when its "
        "refresh's health window ended: a crash since is not that refresh's, so it is not rolled "
        "back (roll it back by hand, or push a fixed build)"
    )


def _same(recorded: str, image: str) -> str | None:
    """The digest ``image`` pins when it is the build ``recorded`` (lastGood) names."""
    try:
        ours, live = parse(recorded), parse(image)
    except InvalidReference:
        return None
    same = ours.digest is not None and (ours.repository, ours.digest) == (
        live.repository,
        live.digest,
    )
    return ours.digest if same else None
