"""What of a plan the write guard lets through: the writes that would be sent."""

from __future__ import annotations

from imagerefresh.planner import Cleared, ImagePatch, Plan, TickInput, clear_writes, permits
from imagerefresh.planner import guard as guard_module  # the module: its token
from imagerefresh.planner.actions import HelperPodCreate

Write = ImagePatch | HelperPodCreate


def sent_writes(plan: Plan, tick: TickInput) -> tuple[list[Write], list[tuple[Write, str]]]:
    """The plan's writes the guard sends, and those it refuses with why."""
    guarded = clear_writes([*plan.patches, *plan.pod_creates], permits(tick))
    sent: list[Write] = [c.write for c in guarded.patches]
    sent += [c.write for c in guarded.creates]
    return sent, [(r.write, r.message) for r in guarded.refused]


def unguarded(write: ImagePatch) -> Cleared[ImagePatch]:
    """``write`` as if the guard had cleared it: for tests of the Kubernetes adapter's send
    path alone (what the API server does with a patch), never of what may be written."""
    return Cleared(write, guard_module._TOKEN)


def unguarded_pod(write: HelperPodCreate) -> Cleared[HelperPodCreate]:
    """A helper pod as if the guard had cleared it (see :func:`unguarded`): for tests of the
    pod guard and the admission policy behind the send path."""
    return Cleared(write, guard_module._TOKEN)
