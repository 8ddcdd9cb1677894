"""Rollbacks the planner may not send, and an owed one re-pinned: what an SRE reads.

A rollback restores only what live evidence proves the workload ran (its previous revision's
template, what its pods run) and, under ``verify``, a verified digest. When that proof is gone
— a Deployment whose old ReplicaSet is deleted (``revisionHistoryLimit: 0``), say — the target
is Refused, left as it runs, with one Warning saying why and what to do, and nothing owed.
"""

from __future__ import annotations

from dataclasses import replace
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


def owed_then_verify(
    template: str,
    pods: list[Any],
    verified: set[str],
    children: dict[str, frozenset[str]] | None = None,
) -> tuple[Tick, Plan]:
    """jobs-manager refreshed from ``template`` to D2, which fails; its rollback is recorded
    but not landed, and then ``spec.verify`` is turned on with ``verified`` digests in memory:
    the tick that sends the owed rollback again (``children``: index → platform manifests)."""
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run(on(template, pods))
    tick.run(failing(pods))
    assert tick.target("jobs-manager").pending.images == {"api": template}
    tick.spec = spec(target("jobs-manager", api=JM), verify={"publicKeys": [TestKey.p256().pem]})
    tick.verified = frozenset((f"docker.io/{REPO}", d) for d in verified)
    found = failing(pods)
    if children is not None:
        found[JOBS] = replace(found[JOBS], children=children)
    return tick, tick.run(found)


def sent_again(tick: Tick, plan: Plan) -> str:
    """The image the owed rollback is sent to again, as its patch and its status both say."""
    ((change,),) = [p.changes for p in plan.patches]
    owed = tick.target("jobs-manager")
    assert owed.pending.purpose is PendingPurpose.ROLLBACK
    assert owed.pending.images == {"api": change.image}
    assert owed.message == f"rollback to api={change.image} owed: sending it again"
    return change.image


def ran_on(*digests: str) -> list[Any]:
    """One pod per digest, in this order, its ``api`` running that digest of jobs-manager."""
    return [pod(f"jm-{i}", {"api": f"docker.io/{REPO}@{d}"}) for i, d in enumerate(digests)]


def test_an_owed_rollback_to_a_verified_digest_pin_is_sent_to_that_digest() -> None:
    tick, plan = owed_then_verify(f"{REPO}@{D1}", ran_on(D1), {D1})
    assert sent_again(tick, plan) == f"{REPO}@{D1}"


def test_an_owed_rollback_with_no_verified_digest_is_refused_as_unverified_owing_none() -> None:
    tick, plan = owed_then_verify(f"{REPO}@{D1}", ran_on(D1), set())
    unverified = (
        f"Deployment tracebloc/jobs-manager is not rolled back: api would go back to "
        f"{REPO}@{D1}, and no digest the workload is proven to have run there carries a "
        "verified signature by a key of spec.verify in the operator's memory (its registry "
        "may be unreachable). It stays on what it runs; roll it back by hand to a signed "
        "build, or push a signed fix"
    )
    assert plan.patches == ()
    refused = tick.target("jobs-manager")
    assert (refused.phase, refused.message, refused.pending) == (Phase.REFUSED, unverified, None)
    assert warnings(plan) == [("RollbackUnverified", unverified)]


def test_a_tag_is_rolled_back_to_the_verified_digest_most_of_its_pods_run_never_the_new_one() -> (
    None
):
    low, high = sorted((digest(3), digest(4)))
    # The failed refresh's own D2 runs on the most pods, and is verified too: never a candidate.
    pods = ran_on(low, high, high, D2, D2, D2)
    tick, plan = owed_then_verify(f"{REPO}:prod", pods, {low, high, D2})
    assert sent_again(tick, plan) == f"{REPO}@{high}"


def test_a_tag_whose_old_digests_run_on_as_many_pods_each_is_rolled_back_to_the_first_by_name() -> (
    None
):
    low, high = sorted((digest(3), digest(4)))
    tick, plan = owed_then_verify(f"{REPO}:prod", ran_on(high, low), {low, high})
    assert sent_again(tick, plan) == f"{REPO}@{low}"


def test_a_tag_whose_pods_run_a_platform_manifest_is_rolled_back_to_its_verified_index() -> None:
    index, other, platform = digest("index"), digest("other-index"), digest("linux/amd64")
    children = {index: frozenset({platform}), other: frozenset({digest("linux/arm64")})}
    tick, plan = owed_then_verify(f"{REPO}:prod", ran_on(platform), {index, other}, children)
    assert sent_again(tick, plan) == f"{REPO}@{index}"


def test_a_rollback_to_a_build_that_failed_here_is_refused_leaving_the_target_as_it_runs() -> None:
    d3 = digest(3)

    def runs(image_digest: str, tag_answers: str, **fields: Any) -> dict[Any, TargetEvidence]:
        """jobs-manager's ``api`` pinned to ``image_digest``, its pods running it."""
        template = deployment("jobs-manager", {"api": f"{REPO}@{image_digest}"}, **fields)
        return {JOBS: evidence(template, ran_on(image_digest), {"api": tag_answers})}

    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run(runs(D1, D2))
    tick.run(runs(D2, D2, generation=2, available=0, conditions=FAILED))  # D2 fails, rolled back
    tick.run(runs(D1, D2, generation=3))
    assert [b.digest for b in tick.target("jobs-manager").failed] == [D2]
    # Someone sets the failed D2 by hand; the tag then moves on to D3, which fails too.
    tick.run(runs(D2, D2, generation=4))
    assert [p.changes[0].image for p in tick.run(runs(D2, d3, generation=4)).patches] == [
        f"{REPO}@{d3}"
    ]
    plan = tick.run(runs(d3, d3, generation=5, available=0, conditions=FAILED))
    failed_here = (
        f"Deployment tracebloc/jobs-manager is not rolled back: api would go back to "
        f"{REPO}@{D2}, a build that failed here. It stays on what it runs; roll it back by hand, "
        "or push a fixed build"
    )
    assert plan.patches == ()  # never back to a build that failed here
    refused = tick.target("jobs-manager")
    assert (refused.phase, refused.pending) == (Phase.REFUSED, None)
    assert refused.message == f"refresh failed (attempt 2 of 3): {WHY}; {failed_here}"
    assert warnings(plan)[-1] == ("RollbackNotAllowed", failed_here)
