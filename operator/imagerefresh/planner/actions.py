"""What a tick decides to do, as data: guarded image patches and events, plus the new status.

A patch is never a blind write. :meth:`ImagePatch.json_patch` renders it as a JSON Patch whose
``test`` operations pin each container's name and current image at its index before the
``replace``: if anyone changed the workload between our read and our write, the API server
rejects the whole patch (422) and nothing is clobbered; the next tick reads again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from imagerefresh.models import PendingPurpose, PolicyStatus
from imagerefresh.planner.evidence import Account, TargetKey

__all__ = [
    "Event",
    "HelperPodCreate",
    "HelperPodDelete",
    "ImageChange",
    "ImagePatch",
    "PatchPurpose",
    "Plan",
]


PatchPurpose = PendingPurpose  # a patch is sent for the purpose its pending intent records


@dataclass(frozen=True, slots=True)
class ImageChange:
    container: str
    json_path: str  # /spec/template/spec/containers/<index>
    expected: str  # the image the container must still have (precondition)
    image: str  # the image to write
    repository: str  # the tracked repository, from the spec: the only one ``image`` may name


@dataclass(frozen=True, slots=True)
class ImagePatch:
    """One patch per workload: every changed container of its pod template at once."""

    target: TargetKey
    purpose: PatchPurpose
    changes: tuple[ImageChange, ...]
    # The registry pulls a refresh costs, per account: the shell reserves them in the shared
    # ledger before another tick reads the budget, and releases them if it does not land.
    pulls: tuple[tuple[Account, int], ...] = ()

    def json_patch(self) -> list[dict[str, str]]:
        operations: list[dict[str, str]] = []
        for change in self.changes:
            operations += [
                {"op": "test", "path": f"{change.json_path}/name", "value": change.container},
                {"op": "test", "path": f"{change.json_path}/image", "value": change.expected},
                {"op": "replace", "path": f"{change.json_path}/image", "value": change.image},
            ]
        return operations


@dataclass(frozen=True, slots=True, eq=False)  # a manifest is a dict: one create is itself
class HelperPodCreate:
    """A pre-pull helper pod to create (planner.helperpod), once the status recording its
    intent landed. ``repositories``: the target's tracked repositories, the only ones the pod
    guard lets it pull; ``pulls``: what the pre-pull costs per account, charged once, with
    the first of its pods."""

    target: TargetKey
    node: str
    manifest: Mapping[str, Any]
    repositories: frozenset[str]
    pulls: tuple[tuple[Account, int], ...] = ()


@dataclass(frozen=True, slots=True)
class HelperPodDelete:
    """A helper pod no pre-pull needs any more: deleted with its uid as a precondition, so a
    pod of the same name created since is never touched."""

    target: TargetKey
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes event about the policy (``target`` None) or about a target's workload."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    target: TargetKey | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of a tick: patches to apply, events to post, the status to write."""

    patches: tuple[ImagePatch, ...]
    events: tuple[Event, ...]
    status: PolicyStatus
    # Pre-pull helper pods: created after the status write, like patches; deleted after it.
    pod_creates: tuple[HelperPodCreate, ...] = ()
    pod_deletes: tuple[HelperPodDelete, ...] = ()
    degraded: bool = False
    rate_limited: bool = False
    # The earliest instant a drifted target waits for (UTC): a refresh window opening or a
    # cooldown ending. The shell ticks the policy then.
    wake_at: datetime | None = None
    # How many target decisions the tick made, those lockstep's rounds made again included:
    # what planning cost (about one per target, plus one per lockstep order given).
    decisions: int = 0
