"""When a policy ticks next: on a grid shared by every policy of the same interval.

Policies tick independently, but if each kept its own phase, the policies tracking one image
would ask the registry for it at scattered moments, each too far from the others to share an
answer — a fleet of 100 policies over 20 images would cost many requests per image and
interval instead of one. So every policy ticks at the instants ``phase + k·interval``: all
policies of one interval tick together and share each resolution (the resolver's window), and
a policy of 30m ticks on every other instant of a policy of 15m.

The phase is chosen once per operator process, so that many clusters' operators do not all
ask a shared registry at the same second.

A tick outside the grid (start-up, a spec change, ``refresh-now``) does not move the grid. The
next instant is never closer than :data:`MIN_GAP_SECONDS`: a tick that ran just before an
instant already saw what that instant would see, and a timer waking a hair early must not tick
twice.

The instants of the grid are also what the ticks of one round share: an interval tick carries
its grid instant (``round_at``) down to the resolver, which measures its window from it, so a
round that takes long to get through every policy still asks each registry once.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

__all__ = ["MIN_GAP_SECONDS", "on_clock", "random_phase", "seconds_until_next_tick"]

MIN_GAP_SECONDS = 1.0
_PHASE_RANGE_SECONDS = 24 * 3600.0


def random_phase() -> float:
    """A phase for this operator's grid (seconds)."""
    return random.uniform(0.0, _PHASE_RANGE_SECONDS)


def seconds_until_next_tick(interval: float, now: float, phase: float = 0.0) -> float:
    """Seconds from ``now`` (epoch seconds) to the next instant ``phase + k·interval``.

    The answer is in ``[MIN_GAP_SECONDS, interval + MIN_GAP_SECONDS)`` (for an interval longer
    than the gap; the CRD's minimum is 30 s).
    """
    if interval <= 0 or not math.isfinite(interval):
        raise ValueError(f"interval must be a positive number of seconds, not {interval!r}")
    elapsed = (now - phase) % interval
    delay = interval - elapsed
    if delay < MIN_GAP_SECONDS:
        delay += interval
    return delay


def on_clock(clock: Callable[[], float], at: float) -> float:
    """The instant ``at`` (epoch seconds, as the scheduler reads time) as ``clock`` read it.

    The resolver, the verifier and the shared reads keep monotonic clocks, which a change of
    the wall clock does not move; an instant is handed down as epoch seconds and converted
    here, by its age. One in the future (a clock that stepped back) counts as now.
    """
    return clock() - max(0.0, time.time() - at)
