"""Pull-policy awareness: a container pulled ``Always`` is not offline-safe, pinned or not.

The digest this operator pins only helps a restart on an offline (or rate-limited) edge when
the kubelet may use the image it already has: ``imagePullPolicy: Always`` makes every pod start
ask the registry first, so a restart fails with ``ImagePullBackOff`` while the registry cannot
be reached. Each declared container's live policy is recorded in status (``pullPolicy``); a
``PullPolicyAlways`` Warning event is derived by comparing the status before and after a tick,
as condition events are, so it is posted once per container and policy generation — when the
container first reads ``Always`` or the policy's spec changed — never once per tick, and never
again after a restart (the status it compares with is the one the last tick wrote).
"""

from __future__ import annotations

from collections.abc import Iterable

from imagerefresh.models import PolicyStatus, TargetStatus
from imagerefresh.planner import reasons
from imagerefresh.planner.actions import Event
from imagerefresh.planner.evidence import ALWAYS, TargetKey

__all__ = ["pull_policy_events"]


def pull_policy_events(
    before: PolicyStatus, targets: Iterable[TargetStatus], generation: int
) -> list[Event]:
    """A Warning per container of ``targets`` pulled ``Always`` that ``before`` did not already
    report so for this policy generation."""
    new_generation = before.observed_generation != generation
    seen = {
        (TargetKey(t.kind, t.namespace, t.name), c.name)
        for t in before.targets
        for c in t.containers
        if c.pull_policy == ALWAYS
    }
    events = []
    for target in targets:
        key = TargetKey(target.kind, target.namespace, target.name)
        for container in target.containers:
            if container.pull_policy != ALWAYS:
                continue
            if not new_generation and (key, container.name) in seen:
                continue
            events.append(
                Event(
                    "Warning",
                    reasons.PULL_POLICY_ALWAYS,
                    f"container {container.name!r} of {key} has imagePullPolicy Always: every "
                    "pod start asks the registry first, so a restart while the registry is "
                    "unreachable or rate-limited fails with ImagePullBackOff, pinned digest or "
                    "not; set imagePullPolicy: IfNotPresent (the pinned digest keeps it exact)",
                    key,
                )
            )
    return events
