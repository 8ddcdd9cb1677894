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

__all__ = ["cooled_at", "observe"]


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
