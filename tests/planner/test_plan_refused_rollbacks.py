"""Rollbacks the planner may not send, and an owed one re-pinned: what an SRE reads.

A rollback restores only what live evidence proves the workload ran (its previous revision's
template, what its pods run) and, under ``verify``, a verified digest. When that proof is gone
— a Deployment whose old ReplicaSet is deleted (``revisionHistoryLimit: 0``), say — the target
is Refused, left as it runs, with one Warning saying why and what to do, and nothing owed.
"""

from __future__ import annotations

from typing import Any

from imagerefresh.models import PendingPurpose, Phase
from imagerefresh.planner import PatchPurpose, Plan
from imagerefresh.planner.evidence import TargetEvidence

from support.signing import TestKey
from support.ticks import JM, Tick, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D1, D2 = digest(1), digest(2)
REPO = "tracebloc/jobs-manager"
JOBS = key("jobs-manager")
FAILED = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
WHY = "the Deployment exceeded its progress deadline"
UNPROVEN = (
    f"Deployment tracebloc/jobs-manager is not rolled back: api would go back to {REPO}@{D1}, "
    "which no live evidence shows the workload ran (not its previous revision's template, nor "
    "what its pods run). It stays on what it runs; roll it back by hand (kubectl rollout undo), "
    "then reset the policy if its status was edited: imagerefresh reset tracebloc/control-plane"
)


def on(image: str, pods: list[Any] | None = None, **fields: Any) -> dict[Any, TargetEvidence]:
    """jobs-manager's ``api`` on ``image``, its tag answering D2."""
    return {JOBS: evidence(deployment("jobs-manager", {"api": image}, **fields), pods, {"api": D2})}


def failing(pods: list[Any] | None = None) -> dict[Any, TargetEvidence]:
    """Our refresh to D2 past its progress deadline."""
    return on(f"{REPO}@{D2}", pods, generation=2, available=0, conditions=FAILED)


def history_lost(tick: Tick) -> None:
    """The previous revision is gone: only the current template is left to prove anything."""
    tick.revisions[JOBS] = []


def warnings(plan: Plan) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in plan.events if e.type == "Warning"]


def refreshed_then_failing(**fields: Any) -> tuple[Tick, Plan]:
    tick = Tick(spec(target("jobs-manager", api=JM), **fields))
    tick.run(on(f"{REPO}@{D1}"))
    history_lost(tick)
    return tick, tick.run(failing())


def test_a_failed_refresh_whose_rollback_is_unproven_is_refused_with_a_warning_owing_none() -> None:
    tick, plan = refreshed_then_failing()
    assert plan.patches == ()
    refused = tick.target("jobs-manager")
    assert (refused.phase, refused.pending) == (Phase.REFUSED, None)
    assert refused.message == f"refresh failed (attempt 1 of 3): {WHY}; {UNPROVEN}"
    assert warnings(plan)[-1] == ("RollbackNotAllowed", UNPROVEN)


def test_a_refused_rollback_that_locks_the_target_says_it_is_locked_around_the_refusal() -> None:
    tick, plan = refreshed_then_failing(maxRefreshAttempts=1)
    assert plan.patches == ()
    refused = tick.target("jobs-manager")
    assert refused.phase is Phase.REFUSED
    assert refused.message == (
        f"locked after 1 failed or contested refreshes (refresh failed (attempt 1 of 1): {WHY}; "
        f"{UNPROVEN}); no re-imaging until a reset: imagerefresh reset tracebloc/control-plane"
    )
    assert warnings(plan)[-1] == ("RollbackNotAllowed", UNPROVEN)


def test_an_owed_rollback_whose_proof_is_gone_is_refused_and_no_longer_owed() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run(on(f"{REPO}@{D1}"))
    sent = tick.run(failing())
    assert [p.purpose for p in sent.patches] == [PatchPurpose.ROLLBACK]
    history_lost(tick)  # the rollback did not land, and the old ReplicaSet went meanwhile
    plan = tick.run(failing())
    assert plan.patches == ()
    refused = tick.target("jobs-manager")
    assert (refused.phase, refused.message, refused.pending) == (Phase.REFUSED, UNPROVEN, None)
    assert warnings(plan) == [("RollbackNotAllowed", UNPROVEN)]


def test_an_owed_rollback_to_a_tag_is_sent_pinned_to_the_verified_digest_once_verify_is_on() -> (
    None
):
    pods = [pod("jm-0", {"api": f"docker.io/{REPO}@{D1}"})]
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run(on(f"{REPO}:prod", pods))
    tick.run(failing(pods))  # the rollback restores the tag the template named
    assert tick.target("jobs-manager").pending.images == {"api": f"{REPO}:prod"}
    tick.spec = spec(target("jobs-manager", api=JM), verify={"publicKeys": [TestKey.p256().pem]})
    tick.verified = frozenset({(f"docker.io/{REPO}", D1)})
    plan = tick.run(failing(pods))  # still owed: sent again, now as the verified digest
    ((change,),) = [p.changes for p in plan.patches]
    assert change.image == f"{REPO}@{D1}"
    owed = tick.target("jobs-manager")
    assert owed.pending.purpose is PendingPurpose.ROLLBACK
    assert owed.pending.images == {"api": f"{REPO}@{D1}"}
    assert owed.message == f"rollback to api={REPO}@{D1} owed: sending it again"
