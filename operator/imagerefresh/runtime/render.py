"""Plain-text rendering: a plan (``imagerefresh plan``), findings (``imagerefresh audit``)."""

from __future__ import annotations

from imagerefresh.audit import Finding
from imagerefresh.models import OfflineStatus, Phase
from imagerefresh.planner import Plan
from imagerefresh.planner.evidence import ALWAYS
from imagerefresh.runtime.gather import Gathered

__all__ = ["render_findings", "render_plan"]


def _short(value: str | None) -> str:
    if not value:
        return "-"
    name, at, digest = value.partition("@")
    return f"{name}@{digest[:19]}…" if at else value


def _offline(verdict: OfflineStatus | None) -> str:
    if verdict is None:
        return "-"
    return "yes" if verdict.ready else "no"


def render_plan(gathered: Gathered, plan: Plan) -> str:
    """A table of target, container, live, desired, action, pull policy and whether its pods
    would restart offline (and, with ``spec.verify``, the key that verified the desired digest,
    or "no"), then each target's message, why each container is not offline-ready, and a
    warning for each container pulled ``Always``."""
    changes = {
        (str(patch.target), change.container): f"{patch.purpose} → {_short(change.image)}"
        for patch in plan.patches
        for change in patch.changes
    }
    verify = gathered.tick.policy.spec.verify is not None
    rows: list[tuple[str, ...]] = [
        ("TARGET", "CONTAINER", "LIVE", "DESIRED", "ACTION", "PULL", "OFFLINE", "SIGNED BY")
    ]
    notes: list[str] = []
    offline_notes: list[str] = []
    for target in plan.status.targets:
        label = f"{target.kind} {target.namespace}/{target.name}"
        idle = "none" if target.phase is Phase.CURRENT else str(target.phase)
        for container in target.containers or ():
            action = changes.get((label, container.name), idle)
            desired = container.desired[:19] + "…" if container.desired else "unknown"
            pull = container.pull_policy or "-"
            signed = container.verified_by[:19] + "…" if container.verified_by else "no"
            live = _short(container.live)
            offline = _offline(container.offline)
            rows.append((label, container.name, live, desired, action, pull, offline, signed))
            if container.offline is not None and not container.offline.ready:
                offline_notes.append(
                    f"not offline-ready: {label} container {container.name!r}: "
                    f"{container.offline.reason}"
                )
        if not target.containers:
            rows.append((label, "-", "-", "-", str(target.phase), "-", "-", "-"))
        notes.append(f"{label}: {target.phase}: {target.message}")
    notes += offline_notes
    if not verify:
        rows = [row[:7] for row in rows]
    notes += [
        f"warning: {target.kind} {target.namespace}/{target.name} container {c.name!r} has "
        "imagePullPolicy Always: not offline-safe (a restart needs the registry); set "
        "IfNotPresent"
        for target in plan.status.targets
        for c in target.containers
        if c.pull_policy == ALWAYS
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
    policy = gathered.tick.policy
    header = f"ImageRefreshPolicy {policy.namespace}/{policy.name} (nothing was changed)"
    return "\n".join([header, "", table, "", *notes])


def render_findings(findings: list[Finding]) -> str:
    """A table of kind, workload, container and image, then each finding's detail."""
    rows = [("FINDING", "WORKLOAD", "CONTAINER", "IMAGE")]
    rows += [(str(f.kind), f.workload, f.container, f.image) for f in findings]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    table = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    details = [f"{f.workload} {f.container}: {f.detail}" for f in findings]
    return "\n".join([*table, "", *details])
