"""What may be pinned: the stage between the comparison and the refresh where gates stand.

The spec's step j lists the conditions a digest must meet before a container is refreshed to
it (a valid signature with ``verify``, a tag that has answered it for ``minimumAge``, a digest
not on the target's failed list). Each is a gate of this stage: it sees the whole comparison —
the drift it may hold, and the current containers, since pods already running a digest that
fails a gate must not make the target Current — and returns it with the containers it holds
taken out of the drift. A held container is left as it is, as one whose digest could not be
resolved is, while the target's other containers still refresh.

The stage runs after the pending patch was judged and after the skip step, so verdicts and
rollbacks never pass through it: a rollback restores what ran, whatever a gate says.

No gate is defined: every container passes as compared.
"""

from __future__ import annotations

from imagerefresh.planner.evidence import Workload
from imagerefresh.planner.target.compare import Comparison
from imagerefresh.planner.target.decision import Decision

__all__ = ["screen"]


def screen(decision: Decision, workload: Workload, comparison: Comparison) -> Comparison:
    """The comparison as the gates let it through to the refresh."""
    return comparison
