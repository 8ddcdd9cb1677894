"""Rollbacks under ``spec.verify``: only a verified digest the workload is proven to have run.

A refresh from a tag to its new digest fails while the rollout is half-way: some pods still run
the old digest, some the new one. The rollback restores the tag the template named, pinned to
the digest its old pods run — never to the refresh's new digest, however many pods run it — and
only if that digest carries a Verified signature in the operator's memory; else the target is
Refused (``RollbackUnverified``) with one Warning telling the SRE what to do, and nothing is
sent or owed. The rollback is charged the pulls it causes, counted with the nodes' image
caches: a node that already holds the old digest pulls nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.models import PendingPurpose, Phase
from imagerefresh.offline import NodeInventory, node_images
from imagerefresh.planner import PatchPurpose, Plan
from imagerefresh.planner.evidence import TargetEvidence

from support.signing import TestKey
from support.ticks import JM, Tick, digest, evidence, key, spec, target
from support.workloads import deployment, pod

OLD, NEW = digest(1), digest(2)
REPO = "tracebloc/jobs-manager"
HUB = "registry-1.docker.io"
JOBS = key("jobs-manager")
NODES = ("n1", "n2", "n3")
FAILED = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
WHY = "the Deployment exceeded its progress deadline"


def pods(*running: str) -> list[dict[str, Any]]:
    """jobs-manager's pods, the ``i``-th on node ``n{i+1}`` running digest ``running[i]``."""
    return [
        pod(f"jm-{i}", {"api": f"docker.io/{REPO}@{d}"}, f"n{i + 1}", {"api": f"{REPO}@{d}"})
        for i, d in enumerate(running)
    ]


def on(image: str, running: list[dict[str, Any]], **fields: Any) -> dict[Any, TargetEvidence]:
    """jobs-manager (3 replicas) with ``api`` on ``image``, its tag answering NEW."""
    workload = deployment("jobs-manager", {"api": image}, replicas=3, **fields)
    return {JOBS: evidence(workload, running, {"api": NEW})}


def verify_on(*verified: str) -> Tick:
    """The tag refreshed to NEW without verify; then verify on, the operator holding a Verified
    signature for each of ``verified``."""
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run(on(JM, pods(OLD, OLD, OLD)))
    tick.spec = spec(target("jobs-manager", api=JM), verify={"publicKeys": [TestKey.p256().pem]})
    tick.verified = frozenset((f"docker.io/{REPO}", d) for d in verified)
    return tick


def failing(*running: str) -> dict[Any, TargetEvidence]:
    """The refresh to NEW past its progress deadline, its pods on ``running``."""
    return on(f"{REPO}@{NEW}", pods(*running), generation=2, available=0, conditions=FAILED)


def warnings(plan: Plan) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in plan.events if e.type == "Warning"]


UNVERIFIED = (
    f"Deployment tracebloc/jobs-manager is not rolled back: api would go back to {JM}, and no "
    "digest the workload is proven to have run there carries a verified signature by a key of "
    "spec.verify in the operator's memory (its registry may be unreachable). It stays on what "
    "it runs; roll it back by hand to a signed build, or push a signed fix"
)


@pytest.mark.parametrize(
    ("verified", "running"),
    [
        pytest.param((NEW,), (NEW, OLD), id="the-old-pods-digest-is-not-verified"),
        pytest.param((NEW, OLD), (NEW, NEW, NEW), id="no-pod-runs-the-old-digest-any-more"),
    ],
)
def test_a_rollback_to_no_verified_digest_it_ran_is_refused_as_unverified_and_not_sent(
    verified: tuple[str, ...], running: tuple[str, ...]
) -> None:
    tick = verify_on(*verified)
    plan = tick.run(failing(*running))
    assert plan.patches == ()
    refused = tick.target("jobs-manager")
    assert (refused.phase, refused.pending) == (Phase.REFUSED, None)
    assert refused.message == f"refresh failed (attempt 1 of 3): {WHY}; {UNVERIFIED}"
    assert [w for w in warnings(plan) if w[0] != "RefreshFailed"] == [
        ("RollbackUnverified", UNVERIFIED)
    ]


def test_a_rollback_restores_the_digest_the_old_pods_run_never_the_new_one_most_pods_run() -> None:
    tick = verify_on(NEW, OLD)
    plan = tick.run(failing(NEW, NEW, OLD))
    (patch,) = plan.patches
    assert patch.purpose is PatchPurpose.ROLLBACK
    assert [(c.container, c.expected, c.image) for c in patch.changes] == [
        ("api", f"{REPO}@{NEW}", f"{REPO}@{OLD}")
    ]
    assert patch.pulls == (((HUB, "anonymous"), 3),)  # no node list: every pod may pull it
    rolling = tick.target("jobs-manager")
    assert rolling.phase is Phase.ROLLING_BACK
    assert rolling.message == f"refresh failed (attempt 1 of 3): {WHY}; rolling back"
    assert rolling.pending.purpose is PendingPurpose.ROLLBACK
    assert rolling.pending.images == {"api": f"{REPO}@{OLD}"}
    assert warnings(plan)[-1] == (
        "RollingBack",
        f"rolling Deployment tracebloc/jobs-manager back to api={REPO}@{OLD}",
    )


@pytest.mark.parametrize(
    ("holding", "pulls"),
    [
        pytest.param(("n1", "n2"), 0, id="every-node-holds-the-old-digest"),
        pytest.param(("n1",), 3, id="n2-does-not-hold-it"),
    ],
)
def test_a_rollback_is_charged_the_pulls_the_nodes_image_caches_do_not_spare(
    holding: tuple[str, ...], pulls: int
) -> None:
    """n3 runs an old pod; n1 and n2 run new ones, and may still list the old digest."""
    tick = verify_on(NEW, OLD)
    held = [{"names": [f"docker.io/{REPO}@{OLD}"]}]
    tick.nodes = NodeInventory(
        dict(
            node_images(
                {"metadata": {"name": n}, "status": {"images": held if n in holding else []}}
            )
            for n in NODES
        )
    )
    (patch,) = tick.run(failing(NEW, NEW, OLD)).patches
    assert [c.image for c in patch.changes] == [f"{REPO}@{OLD}"]
    assert patch.pulls == ((((HUB, "anonymous"), pulls),) if pulls else ())
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK
