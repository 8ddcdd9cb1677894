"""The cooldown's clock: since when each tracked tag has answered the digest it answers now.

With ``spec.minimumAge``, a new digest of a tag is pinned only once the tag has answered it
continuously for that long, so a push reverted within the hour, or a multi-platform index still
being assembled platform by platform (its digest changes with each), never rolls out. The clock
is ``status.seen``, one entry per tracked reference, so it survives a restart and a new leader.

Each interval tick observes what the tags answered: the same digest keeps its ``since``, another
one restarts the clock at ``now``. A ``since`` in the future — no replica could have written it,
so someone else did — is read as a move now. A tag not answered this tick (its registry
unreadable) keeps its entry as it was; entries of references the policy no longer tracks go.
Status is anyone's to write, so a forged entry can at most make a digest look older than it is:
it shortens the wait to what a policy without ``minimumAge`` allows, never more. Signatures are
the security boundary; the cooldown is a safety delay.

Without ``minimumAge`` nothing is recorded: an idle policy writes no clock it does not use, and
enabling a cooldown later starts every clock then — it never passes a digest early.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from imagerefresh.models import SeenDigest
from imagerefresh.planner.evidence import NOT_READ, Resolved, TickInput

__all__ = ["cooled_at", "observe", "observed_clock"]


def observe(
    previous: Iterable[SeenDigest],
    tracked: Iterable[str],
    answers: Mapping[str, frozenset[str]],
    now: datetime,
) -> tuple[SeenDigest, ...]:
    """The clock after this tick: one entry per reference in ``tracked`` (sorted).

    ``answers`` holds, per tracked reference, the digests its tag answered this tick (the
    containers tracking it may have asked with different credentials; normally one digest).
    Two different answers in one tick are a tag in motion: the clock restarts on the lowest.
    """
    before = {entry.tracked: entry for entry in previous}
    seen = []
    for reference in sorted(set(tracked)):
        entry = before.get(reference)
        digests = answers.get(reference)
        if not digests:
            if entry is not None:
                seen.append(entry)  # not answered this tick: the clock stands as it was
            continue
        digest = min(digests)
        if entry is None or len(digests) > 1 or entry.digest != digest or entry.since > now:
            entry = SeenDigest(tracked=reference, digest=digest, since=now)
        seen.append(entry)
    return tuple(seen)


def cooled_at(
    seen: Mapping[str, SeenDigest],
    tracked: str,
    digest: str,
    minimum_age: timedelta,
    now: datetime,
) -> datetime:
    """When ``digest`` of ``tracked`` may be pinned: ``minimumAge`` after the tag began to
    answer it. A clock that does not show this digest (or shows a future start) starts now."""
    entry = seen.get(tracked)
    if entry is None or entry.digest != digest or entry.since > now:
        return now + minimum_age
    return entry.since + minimum_age


def observed_clock(tick: TickInput) -> tuple[SeenDigest, ...]:
    """The cooldown's clock after this tick's answers: kept only with
    ``minimumAge``, and moved only by a tick that asked the registries (not a follow-up)."""
    spec, before = tick.policy.spec, tick.policy.status.seen
    if not spec.minimum_age:
        return ()
    if tick.follow_up:
        return before
    tracked: list[str] = []
    answers: dict[str, set[str]] = {}
    for index, target in enumerate(spec.targets):
        evidence = tick.evidence.get(tick.policy.target_key(index), NOT_READ)
        for container in target.containers:
            if container.digest is not None:
                continue  # a pin never asks the registry, and never cools down
            reference = str(container.tracked)
            tracked.append(reference)
            outcome = evidence.digests.get(container.name)
            if isinstance(outcome, Resolved):
                answers.setdefault(reference, set()).add(outcome.digest)
    frozen = {reference: frozenset(digests) for reference, digests in answers.items()}
    return observe(before, tracked, frozen, tick.now)
