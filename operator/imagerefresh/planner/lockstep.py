"""Lockstep: the targets tracking one reference move to a new digest together, or not at all.

With ``spec.lockstep``, the containers of a policy that track one reference (``image`` without
a ``digest`` pin) in two or more targets form a *group*: jobs-manager's ``api`` and
requests-proxy's ``proxy`` on ``tracebloc/jobs-manager:prod`` must never run different builds
for longer than one rollout. Each target is still decided on its own evidence first
(:mod:`.target`); this module then reads every target's outcome and issues *orders* that the
targets are decided again with, until the orders stop changing:

- **starts.** A refresh of a group's containers to digest D starts only if every other member
  is ready for D: it starts to D in the same tick, already runs D (found current), or has a
  refresh of ours to D in flight. Otherwise the starters are *held* (``Waiting``), their
  message naming each blocker and its phase — Frozen, Locked, Deferred, Conflict, Missing,
  Error, outside a window, or another refresh in flight. A member already on D needs no move,
  so skew between members (one on D, one behind) is repaired by moving the one behind.
- **verdicts.** The members with a refresh of ours to D in flight are one rollout. One that
  settles is not yet a success while another is still rolling (it *holds*, ``Refreshing``,
  with ``pending.settledAt``); when any of them fails, or a member that should have moved to D
  is known not to run it (its patch refused, its workload gone), every other one that moved is
  rolled back to the images it replaced — without counting an attempt against it: the attempt
  is the failing member's. A member whose evidence could not be read is unknown: the others
  hold, they are never rolled back on unreadable evidence. So is a member a follow-up tick
  never decided and has no status for (added to the spec since the last tick): it has no phase
  yet, and is named "not yet decided" until a tick that reads every target decides it.

Orders only ever grow (a hold, a success held, a rollback; the first reason given stays), so
the iteration ends; its bound is the number of orders there can be. Each round decides again
only the targets whose orders changed, and reads again only the groups they belong to, so a
tick costs about one decision per target plus one per order given. The pull budget is not
decided here: a group's refreshes are spent from it together, once their starts are known
(:mod:`.budget`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from imagerefresh.models import (
    ContainerStatus,
    PendingPurpose,
    PendingRefresh,
    Phase,
    PolicySpec,
    TargetStatus,
)
from imagerefresh.planner.evidence import DigestOutcome, Resolved, TargetKey
from imagerefresh.reference import InvalidReference, parse

__all__ = [
    "NO_ORDERS",
    "Group",
    "Hold",
    "Judged",
    "LockstepOrders",
    "LockstepReport",
    "Result",
    "lockstep_groups",
    "lockstep_orders",
    "order_bound",
]

_NOTHING: Mapping[str, str] = MappingProxyType({})


class Result(StrEnum):
    """What a refresh of ours judged this tick came to, on its own evidence."""

    SETTLED = "settled"
    IN_FLIGHT = "in flight"
    FAILED = "failed"  # failed, out of time, or superseded by another writer


@dataclass(frozen=True, slots=True)
class Judged:
    """A pending refresh judged this tick, and its result before any lockstep order."""

    pending: PendingRefresh
    result: Result


@dataclass(frozen=True, slots=True)
class LockstepReport:
    """What one target's decision says about its containers, for the group rules."""

    starting: Mapping[str, str] = field(default_factory=lambda: _NOTHING)  # → digest it pins
    current: Mapping[str, str] = field(default_factory=lambda: _NOTHING)  # → digest it is on
    judged: Judged | None = None
    # False for a target a follow-up tick did not decide (its status carried as it was): what
    # it says of the workload is the last tick's, and it could not have started a refresh.
    decided: bool = True


NO_REPORT = LockstepReport()
# A member no decision speaks for yet (a follow-up's target new in the spec): not decided.
_UNSEEN = LockstepReport(decided=False)
_UNSEEN_PHASE = "not yet decided"


@dataclass(frozen=True, slots=True)
class Hold:
    """Why a group's refresh may not start in this tick."""

    reason: str


_NO_HOLDS: Mapping[str, Hold] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class LockstepOrders:
    """What the group rules ask of one target's decision."""

    held: Mapping[str, Hold] = field(default_factory=lambda: _NO_HOLDS)  # container → why
    hold_success: str | None = None  # why a settled refresh is not a success yet
    roll_back: str | None = None  # why a refresh of ours rolls back although its own is fine
    deferred: str | None = None  # why the pull budget does not cover the refresh it would start

    def merged(self, other: LockstepOrders) -> LockstepOrders:
        """Both orders; the first reason given for each stays (orders only ever grow)."""
        return LockstepOrders(
            held=MappingProxyType({**other.held, **self.held}),
            hold_success=self.hold_success or other.hold_success,
            roll_back=self.roll_back or other.roll_back,
            deferred=self.deferred or other.deferred,
        )

    @property
    def size(self) -> int:
        flags = (self.hold_success, self.roll_back, self.deferred)
        return len(self.held) + sum(flag is not None for flag in flags)


NO_ORDERS = LockstepOrders()


@dataclass(frozen=True, slots=True)
class Group:
    """The containers, in two or more targets, that track one reference."""

    reference: str  # fully qualified repo:tag
    members: Mapping[TargetKey, tuple[str, ...]]  # target → its containers tracking it


def lockstep_groups(spec: PolicySpec, keys: Iterable[TargetKey]) -> tuple[Group, ...]:
    """The groups of ``spec``'s targets (``keys`` in spec order); none unless ``lockstep``.

    A reference tracked by one target only is no group: a target's containers already move in
    one patch. Pinned containers (``digest:``) never move, so they belong to none.
    """
    if not spec.lockstep:
        return ()
    members: dict[str, dict[TargetKey, list[str]]] = {}
    for key, target in zip(keys, spec.targets, strict=True):
        for container in target.containers:
            if container.digest is None:
                members.setdefault(str(container.tracked), {}).setdefault(key, []).append(
                    container.name
                )
    return tuple(
        Group(reference, MappingProxyType({k: tuple(v) for k, v in by_target.items()}))
        for reference, by_target in sorted(members.items())
        if len(by_target) > 1
    )


def order_bound(groups: Iterable[Group]) -> int:
    """How many rounds can change the orders: each adds one at least, and there are at most
    this many (a hold per container, a success held and a rollback per member).

    Should every round change them, the last decisions were made under orders no round can
    add to: the round that would only confirm it is not needed.
    """
    return sum(len(names) + 2 for group in groups for names in group.members.values())


@dataclass(frozen=True, slots=True)
class Member:
    """One target of a group as its decision left it this round."""

    key: TargetKey
    containers: tuple[str, ...]
    status: TargetStatus | None  # None: never decided (new in the spec, a follow-up tick)
    report: LockstepReport
    orders: LockstepOrders
    digests: Mapping[str, DigestOutcome]  # what its containers' tags resolved to this tick

    @property
    def label(self) -> str:
        phase = self.status.phase if self.status is not None else _UNSEEN_PHASE
        return f"{self.key} ({phase})"

    def moving(self) -> str | None:
        """The digest a refresh of ours in flight moves this member's containers to."""
        if self.report.judged is not None:
            pending: PendingRefresh | None = self.report.judged.pending
        else:
            pending = self.status.pending if self.status is not None else None
        if pending is None or pending.purpose is not PendingPurpose.REFRESH:
            return None
        # Containers the refresh did not need to move (already pinned) are not in it, and those
        # it pinned where their pods already ran the digest (adopted) moved nothing. Its images
        # are references (PendingRefresh validates them); one naming no digest moves to none.
        digests = {
            parse(image).digest
            for name in self.containers
            if name not in pending.adopted and (image := pending.images.get(name)) is not None
        }
        return digests.pop() if len(digests) == 1 else None

    @property
    def result(self) -> Result | None:
        """The moving refresh's result; None when it was not judged (unreadable evidence)."""
        if self.orders.roll_back is not None:
            return Result.FAILED
        return self.report.judged.result if self.report.judged else None

    def _on(self, name: str, digest: str) -> bool:
        return self.report.starting.get(name) == digest or self.report.current.get(name) == digest

    def joins(self, digest: str) -> bool:
        """Whether this tick starts a refresh of this member to ``digest`` (the rest on it)."""
        starting = any(self.report.starting.get(name) == digest for name in self.containers)
        return starting and all(self._on(name, digest) for name in self.containers)

    def ready_for(self, digest: str) -> bool:
        """Whether this member lets the others start a refresh to ``digest`` now."""
        flying = self.moving() == digest and self.result in (Result.SETTLED, Result.IN_FLIGHT)
        return flying or all(self._on(name, digest) for name in self.containers)

    def runs(self, digest: str) -> bool | None:
        """Whether the template pins ``digest`` (or its pods run it): None when unknowable.

        Unknowable: its evidence was unreadable, or a follow-up tick did not read it — such a
        member would have started to ``digest`` at an interval tick, so it is not behind yet;
        one never decided (added to the spec since, no status yet) is read at the next one.
        """
        if self.status is not None and self.status.phase is Phase.ERROR:
            return None
        by_name = {c.name: c for c in self.status.containers} if self.status is not None else {}
        runs = all(self._runs(by_name.get(name), digest) for name in self.containers)
        return runs if runs or self.report.decided else None

    def _runs(self, container: ContainerStatus | None, digest: str) -> bool:
        if container is None or container.live is None:
            return False
        try:
            live = parse(container.live)
        except InvalidReference:
            return False
        if live.digest is not None:
            return live.digest == digest
        outcome = self.digests.get(container.name)
        wanted = outcome if isinstance(outcome, Resolved) and outcome.digest == digest else None
        running = container.running
        return bool(running) and all(
            d == digest or (wanted is not None and wanted.is_content_of(d)) for d in running
        )


def _names(members: Iterable[Member]) -> str:
    return ", ".join(member.label for member in sorted(members, key=lambda m: m.key))


def _verdict_orders(group: Group, members: list[Member]) -> dict[TargetKey, LockstepOrders]:
    """Orders for the refreshes of ours in flight in ``group``, one digest at a time."""
    orders: dict[TargetKey, LockstepOrders] = {}
    movers: dict[str, list[Member]] = {}
    for member in members:
        digest = member.moving()
        if digest is not None:
            movers.setdefault(digest, []).append(member)
    for digest, moved in sorted(movers.items()):
        others = [m for m in members if m not in moved]
        failed = [m for m in moved if m.result is Result.FAILED]
        behind = [m for m in others if not m.joins(digest) and m.runs(digest) is False]
        if failed or behind:
            why = (
                f"its lockstep peers on {group.reference} did not all move to "
                f"{digest[:19]}…: {_names(failed + behind)}"
            )
            for member in moved:
                if member.result in (Result.SETTLED, Result.IN_FLIGHT):
                    orders[member.key] = LockstepOrders(roll_back=why)
            continue
        waiting = [m for m in moved if m.result is not Result.SETTLED] + [
            m for m in others if m.joins(digest) or m.runs(digest) is None
        ]
        if waiting:
            why = (
                f"its lockstep peers on {group.reference} have not all settled on "
                f"{digest[:19]}…: {_names(waiting)}"
            )
            for member in moved:
                if member.result is Result.SETTLED:
                    orders[member.key] = LockstepOrders(hold_success=why)
    return orders


def _start_hold(group: Group, members: list[Member], starters: list[Member]) -> Hold | None:
    """Why the refreshes ``starters`` would start must wait, if they must."""
    digests = sorted({d for m in starters for n in m.containers if (d := m.report.starting.get(n))})
    if len(digests) > 1:
        return Hold(
            f"lockstep: its peers resolved {group.reference} to different digests "
            f"({', '.join(d[:19] + '…' for d in digests)}); they move when they agree"
        )
    blockers = [m for m in members if not m.ready_for(digests[0])]
    if not blockers:
        return None
    return Hold(
        f"lockstep: {group.reference} moves together, and {_names(blockers)} cannot "
        "refresh now; the refresh starts when every target tracking it can"
    )


def _start_orders(group: Group, members: list[Member]) -> dict[TargetKey, LockstepOrders]:
    """Holds for the refreshes of ``group``'s containers that would start alone.

    Once a group is held in a tick it stays held: a member that would start only because the
    others no longer spend the pull budget must not move alone either.
    """
    starters = [m for m in members if any(n in m.report.starting for n in m.containers)]
    if not starters:
        return {}
    held = [m.orders.held[n] for m in members for n in m.containers if n in m.orders.held]
    hold = held[0] if held else _start_hold(group, members, starters)
    if hold is None:
        return {}
    return {
        m.key: LockstepOrders(held=MappingProxyType(dict.fromkeys(m.containers, hold)))
        for m in starters
    }


def _member(
    key: TargetKey,
    names: tuple[str, ...],
    decided: Mapping[TargetKey, tuple[TargetStatus, LockstepReport]],
    digests: Mapping[TargetKey, Mapping[str, DigestOutcome]],
    orders: Mapping[TargetKey, LockstepOrders],
) -> Member:
    """``key``'s member of a group; one never decided (no status yet) is unknown."""
    found = decided.get(key)
    status, report = found if found is not None else (None, _UNSEEN)
    return Member(key, names, status, report, orders.get(key, NO_ORDERS), digests[key])


def lockstep_orders(
    groups: Iterable[Group],
    decided: Mapping[TargetKey, tuple[TargetStatus, LockstepReport]],
    digests: Mapping[TargetKey, Mapping[str, DigestOutcome]],
    orders: Mapping[TargetKey, LockstepOrders],
    touched: Collection[TargetKey] | None = None,
) -> dict[TargetKey, LockstepOrders]:
    """``orders`` with whatever the groups ask of this round's decisions (``decided``).

    ``digests`` (what each target's containers resolved to) holds every target; ``decided``
    every one but those a follow-up tick neither decides nor has a status for (added to the
    spec since the last tick): such a member is unknown, as one a follow-up did not read is.
    ``touched``: the targets decided anew since ``orders`` were last asked for (None: all).
    A group none of whose members was decided anew asks nothing new — what it asked before is
    in ``orders`` already, and orders only grow — so only the others are read again.
    """
    wanted = dict(orders)
    for group in groups:
        if touched is not None and not any(key in touched for key in group.members):
            continue
        members = [
            _member(key, names, decided, digests, orders) for key, names in group.members.items()
        ]
        # Verdicts hold successes and roll back, starts hold containers: each merged in turn.
        found = [*_verdict_orders(group, members).items(), *_start_orders(group, members).items()]
        for key, order in found:
            wanted[key] = wanted.get(key, NO_ORDERS).merged(order)
    return wanted


def held_message(orders: LockstepOrders, names: Iterable[str]) -> str:
    """The reason shown for ``names`` held back (one group's reason per group, in order)."""
    return "; ".join(dict.fromkeys(orders.held[name].reason for name in sorted(names)))
