"""The one guard before every write: image patches and helper pods alike, whatever built them.

A gate that guards a path guards nothing: a refresh, an adoption, a lockstep member, a
rollback, a contest's re-pin, a digest pin and a pre-pull helper are built by different code,
and some from status, which anyone with ``update`` on the status subresource writes. So every
rule is checked here, at the single place writes are sent (the shell clears each write
through :func:`clear_writes` and the Kubernetes adapter sends only a :class:`Cleared` one),
over a snapshot of what the operator knows this tick (:class:`Permits`, built by
:mod:`.permits`). Each image a write puts in place must be:

- **the tracked repository** — same registry host, same path — naming a tag or a digest;
- **signed**, under ``verify``: a digest, never a tag, with a Verified verdict in the
  operator's memory for the policy's keys;
- **not failed here**: not in the target's ``failed`` list (until a reset);
- **cooled down**, with ``minimumAge``: a tag's new digest only once its clock says so — a
  digest pin, an image every pod already runs, and a rollback's restored images excepted;
- **what ran**, for a rollback: an image live evidence proves the workload ran
  (:func:`~.proof.ran`);
- **charged**: the write carries at least the pulls it causes (:mod:`.pulls`), and what every
  write but a rollback spends leaves the pull budget's reserve (a rollback is charged, never
  deferred).

The planner never plans a write this refuses (a property test holds it to that), so a refusal
is a bug signal: the shell reports it as ``Refused`` with a Warning and a metric.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from imagerefresh.models import PendingPurpose, SeenDigest
from imagerefresh.offline import NodeInventory
from imagerefresh.planner.actions import HelperPodCreate, ImageChange, ImagePatch
from imagerefresh.planner.cooldown import cooled_at
from imagerefresh.planner.evidence import Account, TargetEvidence, TargetKey
from imagerefresh.planner.proof import normalised, runs_everywhere
from imagerefresh.planner.pulls import helper_pulls, patch_pulls
from imagerefresh.ratelimit import BudgetSnapshot
from imagerefresh.reference import InvalidReference, parse

__all__ = [
    "Cleared",
    "ContainerRules",
    "Guarded",
    "Permits",
    "Refusal",
    "TargetRules",
    "Write",
    "clear_writes",
    "unsafe_changes",
]

Write = ImagePatch | HelperPodCreate
W = TypeVar("W", ImagePatch, HelperPodCreate)
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ContainerRules:
    """What the spec and live evidence say of one declared container."""

    repository: str  # the tracked repository: the only one an image may name
    tracked: str  # the tracked reference, whose clock the cooldown reads
    pin: str | None = None  # the spec's digest pin: it waits for no cooldown
    ran: frozenset[str] = frozenset()  # images (fully qualified) the workload ran: rollbacks


@dataclass(frozen=True, slots=True)
class TargetRules:
    """What may be written to one target."""

    containers: Mapping[str, ContainerRules]
    failed: frozenset[str] = frozenset()  # builds that failed here (until a reset)
    evidence: TargetEvidence = field(default_factory=TargetEvidence)  # what the pulls rule reads


@dataclass(frozen=True, slots=True)
class Permits:
    """The snapshot every write of one tick is checked against."""

    targets: Mapping[TargetKey, TargetRules]
    now: datetime
    verify: bool = False
    verified: frozenset[tuple[str, str]] = frozenset()  # (repository, digest) in memory
    minimum_age: timedelta = timedelta(0)
    seen: Mapping[str, SeenDigest] = field(default_factory=lambda: _EMPTY)  # the clock
    budgets: Mapping[Account, BudgetSnapshot] = field(default_factory=lambda: _EMPTY)
    reserve: int = 0
    nodes: NodeInventory | None = None  # what a pre-pull's proof reads


_TOKEN = object()


@dataclass(frozen=True, slots=True, eq=False)
class Cleared(Generic[W]):
    """A write :func:`clear_writes` let through; only it makes one, and only these are sent."""

    write: W
    token: object = field(repr=False)

    def __post_init__(self) -> None:
        if self.token is not _TOKEN:
            raise TypeError("only the write guard clears a write")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A write the guard refused, and every reason."""

    write: Write
    reasons: tuple[str, ...]

    @property
    def message(self) -> str:
        what = (
            f"the {self.write.purpose} of"
            if isinstance(self.write, ImagePatch)
            else f"the pre-pull pod on node {self.write.node} for"
        )
        return (
            f"the write guard refused {what} {self.write.target}: {'; '.join(self.reasons)}. "
            "Nothing was sent. The decision that planned it is a bug in imagerefresh: report it "
            "with the operator's log; if the policy's status was edited by hand, reset it"
        )


@dataclass(frozen=True, slots=True)
class Guarded:
    """What the guard made of a tick's writes: those cleared to be sent, and those refused."""

    patches: tuple[Cleared[ImagePatch], ...] = ()
    creates: tuple[Cleared[HelperPodCreate], ...] = ()
    refused: tuple[Refusal, ...] = ()


def clear_writes(writes: Sequence[Write], permits: Permits) -> Guarded:
    """The writes that may be sent, and those refused. Rollbacks are charged first (they are
    never deferred); the others, in order, spend what the reserve leaves."""
    spent: Counter[Account] = Counter()
    patches: list[Cleared[ImagePatch]] = []
    creates: list[Cleared[HelperPodCreate]] = []
    refused: list[Refusal] = []
    ordered = sorted(writes, key=lambda w: not _rollback(w))
    for write in ordered:
        reasons = _refusals(write, permits)
        pulls = _owed(write, permits)
        carried = dict(write.pulls)
        for account, owed in sorted(pulls.items()):
            if carried.get(account, 0) < owed:
                reasons.append(
                    f"it causes {owed} pull(s) from {account[0]} for {account[1]} but is charged "
                    f"{carried.get(account, 0)}"
                )
        if not _rollback(write):
            reasons += _over_budget(carried, spent, permits)
        if reasons:
            refused.append(Refusal(write, tuple(reasons)))
            continue
        spent.update(carried)
        if isinstance(write, ImagePatch):
            patches.append(Cleared(write, _TOKEN))
        else:
            creates.append(Cleared(write, _TOKEN))
    return Guarded(tuple(patches), tuple(creates), tuple(refused))


def _rollback(write: Write) -> bool:
    return isinstance(write, ImagePatch) and write.purpose is PendingPurpose.ROLLBACK


def _owed(write: Write, permits: Permits) -> dict[Account, int]:
    rules = permits.targets.get(write.target)
    if rules is None:
        return {}
    if isinstance(write, HelperPodCreate):
        return helper_pulls(_pod_images(write), rules.evidence.identities)
    changed = [(c.container, c.image) for c in write.changes if c.image != c.expected]
    return patch_pulls(changed, rules.evidence, permits.nodes)


def _over_budget(
    carried: Mapping[Account, int], spent: Counter[Account], permits: Permits
) -> list[str]:
    reasons = []
    for account, pulls in sorted(carried.items()):
        budget = permits.budgets.get(account) or BudgetSnapshot(*account)
        answer = budget.can_afford(pulls, permits.reserve, spent[account], needs="it needs")
        if pulls and not answer.allowed:
            reasons.append(f"the pull budget does not cover it: {answer.reason}")
    return reasons


def _refusals(write: Write, permits: Permits) -> list[str]:
    rules = permits.targets.get(write.target)
    if rules is None:
        return [f"{write.target} is not a target of the policy"]
    if isinstance(write, HelperPodCreate):
        return [
            problem
            for image in _pod_images(write)
            if (problem := _pod_image(image, rules, permits)) is not None
        ]
    if rules.evidence.workload is None:
        # Unread (or absent): what the patch moves, and the pulls it causes, are unknown.
        why = rules.evidence.error or "the workload was not found"
        return [f"{why}: nothing is written without its evidence"]
    rollback = _rollback(write)
    reasons = []
    for change in write.changes:
        if change.image == change.expected:
            continue  # writes nothing new
        container = rules.containers.get(change.container)
        if container is None:
            reasons.append(f"{change.container}: not a container the policy declares")
            continue
        problem = _image(change.image, change.container, rules, permits, rollback=rollback)
        if problem is not None:
            reasons.append(f"{change.container}: {problem}")
    return reasons


def _pod_images(create: HelperPodCreate) -> list[str]:
    spec = create.manifest.get("spec") or {}
    return [str(c.get("image") or "") for c in spec.get("containers") or () if isinstance(c, dict)]


def _pod_image(image: str, rules: TargetRules, permits: Permits) -> str | None:
    """A helper pulls a build a refresh of one of the target's containers would write."""
    try:
        repository = parse(image).repository
    except InvalidReference as error:
        return f"{image!r} is not an image reference ({error})"
    problems = [
        _image(image, name, rules, permits, helper=True)
        for name, c in rules.containers.items()
        if c.repository == repository
    ]
    if not problems:
        return f"{image}: not a repository the target tracks"
    if None in problems:
        return None
    return f"{image}: {problems[0]}"


def _image(
    image: str,
    name: str,
    rules: TargetRules,
    permits: Permits,
    *,
    rollback: bool = False,
    helper: bool = False,
) -> str | None:
    """Why ``image`` must not be written to container ``name``; None when it may. ``rollback``:
    it restores what ran (no cooldown, proven to have run); ``helper``: a pre-pull's pull (a
    digest, never a tag)."""
    container = rules.containers[name]
    try:
        ref = parse(image)
    except InvalidReference as error:
        return f"{image!r} is not an image reference ({error})"
    if ref.repository != container.repository:
        return f"{ref.repository} is not the tracked repository {container.repository}"
    digest = ref.digest
    if digest is None and (ref.tag is None or helper):
        return f"{image!r} names no digest"
    if permits.verify and digest is None:
        return f"{image} is a tag, and spec.verify pins only verified digests"
    if permits.verify and (container.repository, digest) not in permits.verified:
        return f"{image} has no Verified signature by a key of spec.verify in memory"
    if digest is not None and digest in rules.failed:
        return f"{digest} failed its rollout here (until a reset)"
    if rollback:
        if normalised(image) not in container.ran:
            return f"{image} is not an image the workload is proven to have run"
        return None
    return _cooling(image, name, digest, rules, permits)


def _cooling(
    image: str, name: str, digest: str | None, rules: TargetRules, permits: Permits
) -> str | None:
    container = rules.containers[name]
    age = permits.minimum_age
    if age and digest is None:
        # A tag makes the pods pull whatever it answers when they start: no clock holds that.
        return f"{image} is a tag, and minimumAge writes only digests that cooled down"
    if not age or digest is None or digest == container.pin:
        return None
    if runs_everywhere(rules.evidence, name, digest):
        return None  # what the pods run already: pinning it moves nothing
    ready = cooled_at(permits.seen, container.tracked, digest, age, permits.now)
    if ready > permits.now:
        return f"{digest} is cooling down until {ready.isoformat()}"
    return None


def _foreign(change: ImageChange) -> str | None:
    try:
        written = parse(change.image)
    except InvalidReference as error:
        return f"{change.container}: {change.image!r} is not an image reference ({error})"
    if written.repository != change.repository:
        return (
            f"{change.container}: {written.repository} is not the tracked repository "
            f"{change.repository}"
        )
    if written.tag is None and written.digest is None:
        return f"{change.container}: {change.image!r} names neither a tag nor a digest"
    return None


def unsafe_changes(patch: ImagePatch) -> tuple[str, ...]:
    """The repository rule alone, on a patch's own fields: why ``patch`` names images outside
    its tracked repositories (for judging a pending patch read back from status)."""
    return tuple(problem for change in patch.changes if (problem := _foreign(change)))
