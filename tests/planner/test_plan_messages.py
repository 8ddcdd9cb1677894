"""What an SRE reads, word for word: each target phase's message in `kubectl get`, and the
Warning event its transition posts on the workload.

Messages are the operator's interface when something is wrong: each names the workload, what
was seen, and what to do. The tables below pin them whole, so a message that loses its advice,
its container list or its digests reddens a test.
"""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.models import Phase
from imagerefresh.planner import Event, NamespacePolicy, TargetEvidence

from support.ticks import JM, PM, Tick, digest, evidence, key, spec, target, without_offline
from support.workloads import deployment, pod

D1, D2, D3 = digest(1), digest(2), digest(3)
JM_REPO = "tracebloc/jobs-manager"
JOBS = key("jobs-manager")
WORKLOAD = "Deployment tracebloc/jobs-manager"
UNSTEADY = "1 of 2 updated replicas are available"


def short(d: str) -> str:
    return d[:19] + "…"


def two(**fields: Any) -> dict[str, Any]:
    """Fields of a policy over jobs-manager's two containers (a fresh Tick is built per test)."""
    return fields


def work(api: str = JM, monitor: str = PM, **fields: Any) -> dict[str, Any]:
    return deployment("jobs-manager", {"api": api, "monitor": monitor}, **fields)


CASES: list[tuple[str, dict[str, Any], TargetEvidence, Phase, str]] = [
    (
        "suspended",
        two(suspend=True),
        evidence(work(), digests={"api": D1}),
        Phase.SUSPENDED,
        "the policy is suspended",
    ),
    (
        "missing",
        two(),
        evidence(None),
        Phase.MISSING,
        f"{WORKLOAD} does not exist; create it or remove it from the policy",
    ),
    (
        "container absent from the template",
        two(),
        evidence(deployment("jobs-manager", {"api": JM, "proxy": PM}), digests={"api": D1}),
        Phase.CONFLICT,
        f"container 'monitor' is not in the pod template of {WORKLOAD} (it has: api, proxy); "
        "fix the policy",
    ),
    (
        "a template without containers",
        two(),
        evidence(deployment("jobs-manager", {}), digests={"api": D1}),
        Phase.CONFLICT,
        f"container 'api' is not in the pod template of {WORKLOAD} (it has: none); fix the policy",
    ),
    (
        "another repository",
        two(),
        evidence(work(monitor="tracebloc/miner:prod"), digests={"api": D1}),
        Phase.CONFLICT,
        "container 'monitor' runs docker.io/tracebloc/miner, but the policy tracks "
        "docker.io/tracebloc/pods-monitor; imagerefresh never changes repositories — fix the "
        "policy or the workload",
    ),
    (
        "current",
        two(),
        evidence(
            work(f"{JM_REPO}@{D1}", f"tracebloc/pods-monitor@{D2}"),
            digests={"api": D1, "monitor": D2},
        ),
        Phase.CURRENT,
        "running the desired digests",
    ),
    (
        "skipping",
        two(maxSkipTicks=3),
        evidence(work(replicas=2, updated=2, available=1), digests={"api": D1}),
        Phase.SKIPPING,
        f"not settled (1 of 3 ticks before Frozen): {UNSTEADY}",
    ),
    (
        "frozen",
        two(maxSkipTicks=1),
        evidence(work(replicas=2, updated=2, available=1), digests={"api": D1}),
        Phase.FROZEN,
        f"{WORKLOAD} (containers api, monitor) has not settled for 1 consecutive ticks: "
        f"{UNSTEADY}. Likely cause: its pods never become Ready (check readiness probes and "
        "`kubectl rollout status`). Refreshes of this target wait; it resumes by itself once "
        "it settles",
    ),
    (
        "refreshing two pinned containers",
        two(),
        evidence(
            work(f"{JM_REPO}@{D1}", f"tracebloc/pods-monitor@{D1}"),
            digests={"api": D2, "monitor": D3},
        ),
        Phase.REFRESHING,
        f"refreshing api {short(D1)} → {short(D2)}, monitor {short(D1)} → {short(D3)}",
    ),
    (
        "refreshing a tag whose pods agree on a digest",
        two(),
        evidence(
            work(monitor=f"tracebloc/pods-monitor@{D3}"),
            [pod(p, {"api": f"{JM_REPO}@{D1}"}) for p in ("a", "b")],
            digests={"api": D2, "monitor": D3},
        ),
        Phase.REFRESHING,
        f"refreshing api {short(D1)} → {short(D2)}",
    ),
    (
        "refreshing a tag whose pods disagree",
        two(),
        evidence(
            work(monitor=f"tracebloc/pods-monitor@{D3}"),
            [pod("a", {"api": f"{JM_REPO}@{D1}"}), pod("b", {"api": f"{JM_REPO}@{D3}"})],
            digests={"api": D2, "monitor": D3},
        ),
        Phase.REFRESHING,
        f"refreshing api unknown → {short(D2)}",
    ),
]


@pytest.mark.parametrize(
    ("fields", "seen", "phase", "message"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_phase_says_what_was_seen_and_what_to_do(
    fields: dict[str, Any], seen: TargetEvidence, phase: Phase, message: str
) -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, monitor=PM), **fields))
    plan = tick.run({JOBS: seen})
    status = tick.target("jobs-manager")
    assert (status.phase, status.message) == (phase, message)
    warnings = [e for e in plan.events if e.type == "Warning" and e.target is not None]
    if phase in (Phase.MISSING, Phase.CONFLICT, Phase.FROZEN):
        # The transition is announced on the workload, with the message the status shows.
        reason = {Phase.MISSING: "WorkloadMissing"}.get(phase, str(phase))
        assert warnings == [Event("Warning", reason, message, JOBS)]
    else:
        assert warnings == []


def test_a_target_outside_the_allow_list_says_how_to_allow_it() -> None:
    tick = Tick(spec(target("jobs-manager", namespace="elsewhere", api=JM)))
    plan = tick.run({key("jobs-manager", namespace="elsewhere"): evidence(work())})
    status = tick.target("jobs-manager", namespace="elsewhere")
    message = (
        "Deployment elsewhere/jobs-manager is outside the policy's namespace and the operator's "
        "allow-list does not permit it; allow the namespace pair in the operator configuration "
        "or move the policy"
    )
    assert (status.phase, status.message) == (Phase.CONFLICT, message)
    assert [e.message for e in plan.events if e.reason == "Conflict"] == [message]
    allowed = Tick(
        spec(target("jobs-manager", namespace="elsewhere", api=JM)),
        namespaces=NamespacePolicy(frozenset({("tracebloc", "elsewhere")})),
    )
    allowed.run({key("jobs-manager", namespace="elsewhere"): evidence(work(), digests={})})
    assert allowed.target("jobs-manager", namespace="elsewhere").phase is Phase.ERROR


def test_a_refresh_is_announced_on_the_workload_with_old_and_new_digests() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, monitor=PM)))
    seen = work(f"{JM_REPO}@{D1}", f"tracebloc/pods-monitor@{D1}")
    plan = tick.run({JOBS: evidence(seen, digests={"api": D2, "monitor": D3})})
    assert without_offline(plan.events) == [
        Event(
            "Normal",
            "Refreshing",
            f"patching {WORKLOAD}: api {short(D1)} → {short(D2)}, monitor {short(D1)} → "
            f"{short(D3)}",
            JOBS,
        )
    ]
    status = tick.target("jobs-manager")
    assert [(c.name, c.tracked) for c in status.containers] == [
        ("api", "docker.io/tracebloc/jobs-manager:prod"),
        ("monitor", "docker.io/tracebloc/pods-monitor:prod"),
    ]
