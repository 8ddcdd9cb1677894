"""Whether a patch of ours landed, told by the workload's generation.

The API server adds exactly one to a workload's ``metadata.generation`` for every write that
changes its spec, and never takes one away while the object lives. A patch sent against the
workload as read therefore produces its generation plus one, and that is what its intent
records in ``pending.generation`` before it is sent: a landing that produces it needs no second
status write to say so. Someone else's spec write in between (a scale, an edit) makes the
landing produce more; the answer to the patch then says what, and that is recorded instead.

A workload back at the images the patch replaced was reverted by someone only if its spec
changed after the recorded generation: the landing, then the revert, are two spec writes. At
or below it, the patch never landed (the operator stopped before sending it), even if one
other write (a scale) came meanwhile. Only when two others came in that gap does a patch never
sent pass for a reverted one, and that makes the operator stand back (a contested attempt),
never write again over someone.
"""

from __future__ import annotations

from imagerefresh.models import PendingRefresh
from imagerefresh.planner.evidence import Workload

__all__ = ["produced", "reverted"]


def produced(workload: Workload) -> int:
    """The generation a patch of ``workload`` as read produces when it lands."""
    return workload.generation + 1


def reverted(pending: PendingRefresh, workload: Workload) -> bool:
    """Whether ``workload``, back at the images ``pending`` replaced, changed after the
    generation its patch produced: a landing someone reverted, not a patch that never landed."""
    return pending.generation is not None and workload.generation > pending.generation
