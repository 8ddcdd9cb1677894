"""The write guard, rule by rule: what it clears and what it refuses, whatever built the write.

Each row builds one write by hand — as a path that skipped a gate would — over a tick's
snapshot taken the way the shell takes it (:func:`imagerefresh.planner.permits`), and checks
the guard's answer: the image outside the tracked repository, the tag or the unverified digest
under ``verify``, the build that failed here, the new digest inside its cooldown, the rollback
to what the workload never ran, the write that carries fewer pulls than it causes or spends
the reserve. The planner never plans such a write (tests/planner/test_plan_properties.py, and
the adversary in test_adversary.py); these rows show the guard would stop it if it did.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.models import FailedBuild, PolicyStatus, SeenDigest, TargetStatus
from imagerefresh.offline import NodeInventory, node_images
from imagerefresh.planner import (
    Cleared,
    ImageChange,
    ImagePatch,
    PatchPurpose,
    Resolved,
    TickInput,
    clear_writes,
    permits,
)
from imagerefresh.planner.actions import HelperPodCreate
from imagerefresh.planner.evidence import TargetEvidence, Workload
from imagerefresh.planner.helperpod import Placement, helper_manifest
from imagerefresh.signatures import Verified

from support.signing import TestKey
from support.ticks import NS, T0, Tick, budget, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D_RUNS, D_NEW, D_OLD, D_NEVER = digest("runs"), digest("new"), digest("old"), digest("never")
D_ARM = digest("new, its linux/arm64 manifest")  # a platform manifest of the index D_NEW
REPO = "docker.io/tracebloc/jobs-manager"
JOBS = key("jobs-manager")
HUB = ("registry-1.docker.io", "anonymous")
KEY = TestKey.p256()


def tick_input(
    *,
    verify: bool = False,
    minimum_age: str | None = None,
    seen_since: Any = None,
    failed: tuple[str, ...] = (),
    remaining: int | None = 100,
    reserve: int = 2,
    previous: dict[str, str] | None = None,
    verified: tuple[str, ...] = (),
    live: str = f"{REPO}@{D_RUNS}",
    running: str | tuple[str, str] = D_RUNS,
) -> TickInput:
    """One Deployment of 2 replicas on ``live``, its pods running ``running``; its tag now
    answers ``D_NEW``."""
    fields: dict[str, Any] = {"pullBudget": {"reserve": reserve}}
    if verify:
        fields["verify"] = {"publicKeys": [KEY.pem]}
    if minimum_age:
        fields["minimumAge"] = minimum_age
    tick = Tick(spec(target("jobs-manager", api="tracebloc/jobs-manager:prod"), **fields))
    tick.status = PolicyStatus(
        targets=(
            TargetStatus(
                kind="Deployment",
                namespace=NS,
                name="jobs-manager",
                phase="Current",
                failed=tuple(FailedBuild(digest=d, at=T0) for d in failed),
            ),
        ),
        seen=(
            (SeenDigest(tracked=f"{REPO}:prod", digest=D_NEW, since=seen_since),)
            if seen_since is not None
            else ()
        ),
    )
    tick.verified = frozenset((REPO, d) for d in verified)
    work = deployment("jobs-manager", {"api": live}, replicas=2)
    runs = (running, running) if isinstance(running, str) else running
    pods = [pod(f"jm-{i}", {"api": f"{REPO}@{run}"}) for i, run in enumerate(runs)]
    found = evidence(work, pods, {"api": D_NEW})
    if previous is not None:
        found = replace(found, previous_template=previous)
    hub = {HUB: budget(HUB[0], remaining)} if remaining is not None else {}
    return tick.input({JOBS: found}, hub)


def patch(
    image: str,
    *,
    purpose: PatchPurpose = PatchPurpose.REFRESH,
    pulls: int | None = None,
    expected: str = f"{REPO}@{D_RUNS}",
    container: str = "api",
) -> ImagePatch:
    """A patch writing ``image``, carrying ``pulls`` (default: the 2 its pods pull)."""
    carried = 2 if pulls is None else pulls
    return ImagePatch(
        JOBS,
        purpose,
        (ImageChange(container, "/spec/template/spec/containers/0", expected, image, REPO),),
        pulls=((HUB, carried),) if carried else (),
    )


def verdict(write: ImagePatch | HelperPodCreate, tick: TickInput) -> tuple[str, ...]:
    """The guard's reasons for refusing ``write`` (empty: cleared)."""
    guarded = clear_writes([write], permits(tick))
    cleared = [c.write for c in (*guarded.patches, *guarded.creates)]
    refused = [r.reasons for r in guarded.refused]
    assert len(cleared) + len(refused) == 1
    return refused[0] if refused else ()


# --- the tracked repository ----------------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    ["evil.example/miner:latest", "ghcr.io/tracebloc/jobs-manager@" + D_NEW, "tracebloc/miner:1"],
)
def test_an_image_outside_the_tracked_repository_is_refused(image: str) -> None:
    reasons = verdict(patch(image), tick_input())
    assert "is not the tracked repository docker.io/tracebloc/jobs-manager" in reasons[0]


def test_a_refresh_to_the_tracked_repository_is_cleared() -> None:
    assert verdict(patch(f"tracebloc/jobs-manager@{D_NEW}"), tick_input()) == ()


def test_a_container_the_policy_does_not_declare_is_refused() -> None:
    (reason,) = verdict(patch(f"{REPO}@{D_NEW}", container="sidecar"), tick_input())
    assert reason == "sidecar: not a container the policy declares"


def test_a_change_that_writes_what_is_there_writes_nothing_and_is_cleared() -> None:
    same = patch(f"{REPO}:prod", expected=f"{REPO}:prod", pulls=0)
    assert verdict(same, tick_input(verify=True, live=f"{REPO}:prod")) == ()


# --- signatures ----------------------------------------------------------------------------


def test_under_verify_a_digest_with_no_verified_verdict_in_memory_is_refused() -> None:
    (reason,) = verdict(patch(f"{REPO}@{D_NEW}"), tick_input(verify=True))
    assert "has no Verified signature by a key of spec.verify in memory" in reason


def test_under_verify_a_verified_digest_is_cleared_and_a_tag_never_is() -> None:
    assert verdict(patch(f"{REPO}@{D_NEW}"), tick_input(verify=True, verified=(D_NEW,))) == ()
    (reason,) = verdict(
        patch(f"{REPO}:prod", purpose=PatchPurpose.ROLLBACK),
        tick_input(verify=True, verified=(D_NEW,), previous={"api": f"{REPO}:prod"}),
    )
    assert "is a tag, and spec.verify pins only verified digests" in reason


def test_a_verdict_of_the_targets_evidence_counts_as_one_in_memory() -> None:
    tick = tick_input(verify=True)
    found = tick.evidence[JOBS]
    signed = Verified(digest=D_NEW, key=KEY.fingerprint, format="bundle")
    tick = replace(tick, evidence={JOBS: replace(found, signatures={"api": signed})})
    assert verdict(patch(f"{REPO}@{D_NEW}"), tick) == ()


def test_a_verdict_of_a_target_s_evidence_counts_when_a_target_before_it_was_not_read() -> None:
    """``gone`` comes first in the spec and was not read this tick: ``jobs-manager``'s verdict
    after it still clears its write."""
    fields = {"verify": {"publicKeys": [KEY.pem]}}
    tick = Tick(
        spec(
            target("gone", api="tracebloc/jobs-manager:prod"),
            target("jobs-manager", api="tracebloc/jobs-manager:prod"),
            **fields,
        )
    )
    signed = Verified(digest=D_NEW, key=KEY.fingerprint, format="bundle")
    work = deployment("jobs-manager", {"api": f"{REPO}@{D_RUNS}"}, replicas=2)
    pods = [pod(f"jm-{i}", {"api": f"{REPO}@{D_RUNS}"}) for i in range(2)]
    found = evidence(work, pods, {"api": D_NEW}, signatures={"api": signed})
    read = tick.input({JOBS: found}, {HUB: budget(HUB[0], 100)})
    assert verdict(patch(f"{REPO}@{D_NEW}"), read) == ()


# --- failed builds -------------------------------------------------------------------------


@pytest.mark.parametrize("purpose", list(PatchPurpose))
def test_a_build_that_failed_here_is_refused_to_a_refresh_and_a_rollback_alike(
    purpose: PatchPurpose,
) -> None:
    tick = tick_input(failed=(D_OLD,), previous={"api": f"{REPO}@{D_OLD}"})
    (reason,) = verdict(patch(f"{REPO}@{D_OLD}", purpose=purpose), tick)
    assert f"{D_OLD} failed its rollout here (until a reset)" in reason


def test_a_reset_this_tick_honours_lifts_the_failed_list() -> None:
    tick = tick_input(failed=(D_NEW,))
    tick = replace(tick, policy=replace(tick.policy, reset_request="now"))
    assert verdict(patch(f"{REPO}@{D_NEW}"), tick) == ()


# --- the cooldown --------------------------------------------------------------------------


def test_a_new_digest_inside_its_cooldown_is_refused_and_cleared_once_cooled() -> None:
    (reason,) = verdict(
        patch(f"{REPO}@{D_NEW}"),
        tick_input(minimum_age="1h", seen_since=T0 - timedelta(minutes=59)),
    )
    assert f"{D_NEW} is cooling down until" in reason
    cooled = tick_input(minimum_age="1h", seen_since=T0 - timedelta(hours=1))
    assert verdict(patch(f"{REPO}@{D_NEW}"), cooled) == ()


def test_pinning_what_every_pod_already_runs_waits_for_no_cooldown_and_costs_no_pull() -> None:
    tick = tick_input(minimum_age="1h", live=f"{REPO}:prod", running=D_NEW)
    adopt = patch(f"{REPO}@{D_NEW}", expected=f"{REPO}:prod", pulls=0)
    assert verdict(adopt, tick) == ()


def test_pinning_what_only_some_pods_run_still_waits_for_its_cooldown() -> None:
    # One pod already runs the new build, the other would pull it: not "moves nothing".
    tick = tick_input(minimum_age="1h", seen_since=T0, live=f"{REPO}:prod", running=(D_NEW, D_RUNS))
    reasons = verdict(patch(f"{REPO}@{D_NEW}", expected=f"{REPO}:prod", pulls=1), tick)
    assert [r for r in reasons if "is cooling down until" in r], reasons


def test_a_digest_pin_waits_for_no_cooldown() -> None:
    tick = Tick(
        spec(
            {
                "kind": "Deployment",
                "name": "jobs-manager",
                "containers": [
                    {"name": "api", "image": "tracebloc/jobs-manager:prod", "digest": D_NEW}
                ],
            },
            minimumAge="1h",
        )
    )
    work = deployment("jobs-manager", {"api": f"{REPO}@{D_RUNS}"}, replicas=2)
    found = evidence(work, [pod(f"jm-{i}", {"api": f"{REPO}@{D_RUNS}"}) for i in range(2)])
    assert verdict(patch(f"{REPO}@{D_NEW}"), tick.input({JOBS: found})) == ()


# --- rollbacks restore what ran ----------------------------------------------------------


def test_a_rollback_to_an_image_the_workload_never_ran_is_refused() -> None:
    rollback = patch(f"{REPO}@{D_NEVER}", purpose=PatchPurpose.ROLLBACK)
    (reason,) = verdict(rollback, tick_input(previous={"api": f"{REPO}@{D_OLD}"}))
    assert "is not an image the workload is proven to have run" in reason


@pytest.mark.parametrize(
    ("restored", "previous", "running"),
    [
        (f"{REPO}@{D_OLD}", f"{REPO}@{D_OLD}", D_RUNS),  # its previous revision's template
        (f"{REPO}:prod", f"{REPO}:prod", D_RUNS),  # a tag, without verify
        (f"{REPO}@{D_OLD}", None, D_OLD),  # what its pods still run
    ],
)
def test_a_rollback_to_what_live_evidence_proves_ran_is_cleared(
    restored: str, previous: str | None, running: str
) -> None:
    tick = tick_input(
        previous={"api": previous} if previous else None, live=f"{REPO}@{D_NEW}", running=running
    )
    rollback = patch(restored, purpose=PatchPurpose.ROLLBACK, expected=f"{REPO}@{D_NEW}")
    assert verdict(rollback, tick) == ()


# --- pulls ---------------------------------------------------------------------------------


def test_a_write_carrying_fewer_pulls_than_it_causes_is_refused() -> None:
    (reason,) = verdict(patch(f"{REPO}@{D_NEW}", pulls=1), tick_input())
    assert reason == "it causes 2 pull(s) from registry-1.docker.io for anonymous but is charged 1"


def test_a_refresh_the_budget_cannot_cover_above_the_reserve_is_refused() -> None:
    (reason,) = verdict(patch(f"{REPO}@{D_NEW}"), tick_input(remaining=3, reserve=2))
    assert reason.startswith("the pull budget does not cover it:")


def test_a_rollback_is_charged_but_never_held_to_the_reserve() -> None:
    tick = tick_input(remaining=1, reserve=2, previous={"api": f"{REPO}@{D_OLD}"})
    rollback = patch(f"{REPO}@{D_OLD}", purpose=PatchPurpose.ROLLBACK)
    assert verdict(rollback, tick) == ()
    uncharged = patch(f"{REPO}@{D_OLD}", purpose=PatchPurpose.ROLLBACK, pulls=0)
    assert verdict(uncharged, tick) != ()


def test_rollbacks_spend_first_and_what_they_spend_the_refreshes_cannot() -> None:
    tick = tick_input(remaining=5, reserve=2, previous={"api": f"{REPO}@{D_OLD}"})
    rollback = patch(f"{REPO}@{D_OLD}", purpose=PatchPurpose.ROLLBACK)
    refresh = patch(f"{REPO}@{D_NEW}")
    guarded = clear_writes([refresh, rollback], permits(tick))
    assert [c.write for c in guarded.patches] == [rollback]
    assert [r.write for r in guarded.refused] == [refresh]


def helper(image: str, pulls: int) -> HelperPodCreate:
    obj = deployment("jobs-manager", {"api": f"{REPO}@{D_RUNS}"})
    obj["apiVersion"], obj["metadata"]["uid"] = "apps/v1", "uid-jobs-manager"
    placement = Placement.from_api(obj)
    assert placement is not None
    manifest = helper_manifest(NS, placement, "n1", [image], timedelta(minutes=10))
    return HelperPodCreate(
        JOBS, "n1", manifest, frozenset({REPO}), ((HUB, pulls),) if pulls else ()
    )


def test_a_helper_pod_pulls_only_what_a_refresh_may_write_and_is_charged_its_pull() -> None:
    assert verdict(helper(f"{REPO}@{D_NEW}", 1), tick_input()) == ()
    (uncharged,) = verdict(helper(f"{REPO}@{D_NEW}", 0), tick_input())
    assert "is charged 0" in uncharged
    (unsigned,) = verdict(helper(f"{REPO}@{D_NEW}", 1), tick_input(verify=True))
    assert "no Verified signature" in unsigned
    (failed,) = verdict(helper(f"{REPO}@{D_NEW}", 1), tick_input(failed=(D_NEW,)))
    assert "failed its rollout here" in failed
    cooling = tick_input(minimum_age="1h", seen_since=T0)
    (early,) = verdict(helper(f"{REPO}@{D_NEW}", 1), cooling)
    assert "is cooling down" in early


def test_a_helper_pod_pulling_a_tag_is_refused_it_pulls_only_digests() -> None:
    reasons = verdict(helper(f"{REPO}:prod", 1), tick_input())
    assert reasons == (f"{REPO}:prod: '{REPO}:prod' names no digest",)


def test_a_helper_pod_pulling_a_repository_the_target_does_not_track_is_refused() -> None:
    miner = f"docker.io/evil/miner@{D_NEW}"
    reasons = verdict(helper(miner, 1), tick_input())
    assert f"{miner}: not a repository the target tracks" in reasons


def test_a_write_for_a_workload_that_is_not_a_target_of_the_policy_is_refused() -> None:
    stray = replace(patch(f"{REPO}@{D_NEW}"), target=key("payments"))
    assert verdict(stray, tick_input()) == (f"{key('payments')} is not a target of the policy",)


def test_a_helper_pod_container_without_an_image_is_refused_as_no_reference() -> None:
    create = helper(f"{REPO}@{D_NEW}", 1)
    (container,) = create.manifest["spec"]["containers"]
    del container["image"]
    (reason,) = verdict(create, tick_input())
    assert reason.startswith("'' is not an image reference (")


# --- only the guard clears ----------------------------------------------------------------


def test_no_code_but_the_guard_makes_a_cleared_write() -> None:
    with pytest.raises(TypeError) as raised:
        Cleared(patch(f"{REPO}@{D_NEW}"), object())
    assert str(raised.value) == "only the write guard clears a write"


def test_a_refusal_names_the_target_every_reason_and_what_to_do() -> None:
    tick = tick_input(verify=True, failed=(D_NEW,))
    (refusal,) = clear_writes([patch(f"{REPO}@{D_NEW}", pulls=0)], permits(tick)).refused
    assert refusal.message.startswith(f"the write guard refused the refresh of {JOBS}: api: ")
    assert "report it with the operator's log" in refusal.message
    assert len(refusal.reasons) == 2  # unverified, and uncharged


# --- every write is judged, every change of it ---------------------------------------------


def test_a_refused_write_does_not_stop_the_writes_after_it_from_being_judged() -> None:
    tick = tick_input(failed=(D_OLD,))
    refused, cleared = patch(f"{REPO}@{D_OLD}"), patch(f"{REPO}@{D_NEW}")
    guarded = clear_writes([refused, cleared], permits(tick))
    assert [(r.write, r.reasons) for r in guarded.refused] == [
        (refused, (f"api: {D_OLD} failed its rollout here (until a reset)",))
    ]
    assert [c.write for c in guarded.patches] == [cleared]


def changes(*changed: tuple[str, str, str], pulls: int = 2) -> ImagePatch:
    """A refresh of (container, expected, image) changes, carrying ``pulls``."""
    return ImagePatch(
        JOBS,
        PatchPurpose.REFRESH,
        tuple(
            ImageChange(name, f"/spec/template/spec/containers/{i}", expected, image, REPO)
            for i, (name, expected, image) in enumerate(changed)
        ),
        pulls=((HUB, pulls),),
    )


def test_a_change_that_writes_nothing_new_does_not_excuse_the_changes_after_it() -> None:
    tick = tick_input(failed=(D_NEW,))
    write = changes(
        ("sidecar", f"{REPO}@{D_RUNS}", f"{REPO}@{D_RUNS}"),  # the same: nothing is checked
        ("api", f"{REPO}@{D_RUNS}", f"{REPO}@{D_NEW}"),
    )
    assert verdict(write, tick) == (f"api: {D_NEW} failed its rollout here (until a reset)",)


def test_an_undeclared_container_does_not_excuse_the_changes_after_it() -> None:
    tick = tick_input(failed=(D_NEW,))
    write = changes(
        ("sidecar", f"{REPO}@{D_RUNS}", f"{REPO}@{D_OLD}"),
        ("api", f"{REPO}@{D_RUNS}", f"{REPO}@{D_NEW}"),
        pulls=4,  # two new images, on each of its 2 pods
    )
    assert verdict(write, tick) == (
        "sidecar: not a container the policy declares",
        f"api: {D_NEW} failed its rollout here (until a reset)",
    )


# --- the cooldown reads digests --------------------------------------------------------------


@pytest.mark.parametrize("pin", [None, D_OLD], ids=["on-its-tag", "pinned-by-the-spec"])
def test_a_tag_written_under_minimum_age_is_refused_no_clock_holds_what_it_answers(
    pin: str | None,
) -> None:
    # A tag names no digest for the clock to read (verify, which bars tags, is off here): its
    # pods would pull whatever it answers when they start, cooled down or not.
    declared: dict[str, str] = {"name": "api", "image": "tracebloc/jobs-manager:prod"}
    if pin is not None:
        declared["digest"] = pin
    tick = Tick(
        spec(
            {"kind": "Deployment", "name": "jobs-manager", "containers": [declared]},
            minimumAge="1h",
        )
    )
    work = deployment("jobs-manager", {"api": f"{REPO}@{D_RUNS}"}, replicas=2)
    found = evidence(work, [pod(f"jm-{i}", {"api": f"{REPO}@{D_RUNS}"}) for i in range(2)])
    assert verdict(patch(f"{REPO}:prod"), tick.input({JOBS: found})) == (
        f"api: {REPO}:prod is a tag, and minimumAge writes only digests that cooled down",
    )


# --- the pull budget's answer, word for word ------------------------------------------------


def test_a_refresh_over_the_reserve_is_refused_with_the_budget_s_own_words() -> None:
    (reason,) = verdict(patch(f"{REPO}@{D_NEW}"), tick_input(remaining=3, reserve=2))
    assert reason == (
        "the pull budget does not cover it: registry-1.docker.io for anonymous has 3 pulls "
        "left of 100 per 21600s; it needs 2 and 2 stay reserved for the kubelet"
    )


def test_a_write_to_a_target_whose_evidence_was_not_read_is_refused() -> None:
    # Unread, nothing is proven to have run, and the pulls a write causes are unknown.
    tick = tick_input()
    unread = replace(tick, evidence={})
    rollback = patch(f"{REPO}@{D_RUNS}", purpose=PatchPurpose.ROLLBACK, expected=f"{REPO}@{D_NEW}")
    refresh = patch(f"{REPO}@{D_NEW}", pulls=0)
    assert verdict(rollback, tick) == ()  # its pods run it
    why = "the workload was not read this tick: nothing is written without its evidence"
    assert verdict(rollback, unread) == (why,)
    assert verdict(refresh, unread) == (why,)


def test_a_write_to_a_workload_found_absent_is_refused() -> None:
    tick = tick_input()
    absent = replace(tick, evidence={JOBS: TargetEvidence()})
    assert verdict(patch(f"{REPO}@{D_NEW}"), absent) == (
        "the workload was not found: nothing is written without its evidence",
    )


# --- pulls a pre-pull already paid: what the nodes are proven to hold ------------------------


def on_nodes(running: dict[str, str], listed: tuple[str, ...]) -> TickInput:
    """jobs-manager's 2 pods, one per node (node -> the digest its pod runs), the nodes in
    ``listed`` listing the new build in ``status.images``; its tag answers the index D_NEW,
    whose linux/arm64 manifest is D_ARM."""
    tick = Tick(spec(target("jobs-manager", api="tracebloc/jobs-manager:prod"), pullBudget={}))
    tick.nodes = NodeInventory(
        dict(
            found
            for n in running
            if (
                found := node_images(
                    {
                        "metadata": {"name": n},
                        "status": {
                            "images": [{"names": [f"{REPO}@{D_NEW}"]}] if n in listed else []
                        },
                    }
                )
            )
            is not None
        )
    )
    work = deployment("jobs-manager", {"api": f"{REPO}@{D_RUNS}"}, replicas=2)
    pods = [pod(f"jm-{n}", {"api": f"{REPO}@{d}"}, node=n) for n, d in running.items()]
    found = evidence(work, pods, {"api": Resolved(D_NEW, frozenset({D_ARM}))})
    return tick.input({JOBS: found}, {HUB: budget(HUB[0], 100)})


UNCHARGED = "it causes 2 pull(s) from registry-1.docker.io for anonymous but is charged 0"


@pytest.mark.parametrize(
    ("running", "listed", "reasons"),
    [
        pytest.param(
            {"n1": D_NEW, "n2": D_RUNS}, ("n2",), (), id="a-pod-runs-it-the-other-lists-it"
        ),
        pytest.param(
            {"n1": D_ARM, "n2": D_RUNS}, ("n2",), (), id="a-pod-runs-its-platform-manifest"
        ),
        pytest.param({"n1": D_RUNS, "n2": D_RUNS}, ("n1", "n2"), (), id="every-node-lists-it"),
        pytest.param(
            {"n1": D_NEW, "n2": D_RUNS}, ("n1",), (UNCHARGED,), id="n2-neither-runs-nor-lists-it"
        ),
        pytest.param({"n1": D_RUNS, "n2": D_RUNS}, ("n2",), (UNCHARGED,), id="only-n2-lists-it"),
    ],
)
def test_a_refresh_charges_nothing_only_for_a_build_every_node_is_proven_to_hold(
    running: dict[str, str], listed: tuple[str, ...], reasons: tuple[str, ...]
) -> None:
    assert verdict(patch(f"{REPO}@{D_NEW}", pulls=0), on_nodes(running, listed)) == reasons


# --- what live evidence proves: no pods, platform manifests, indexes read this tick ----------


def with_evidence(tick: TickInput, **changes: Any) -> TickInput:
    """``tick`` with jobs-manager's evidence changed."""
    return replace(tick, evidence={JOBS: replace(tick.evidence[JOBS], **changes)})


def test_pinning_a_workload_scaled_to_zero_still_waits_for_its_cooldown() -> None:
    # No pod runs anything: with none, "every pod runs it already" proves nothing.
    tick = tick_input(minimum_age="1h", seen_since=T0, live=f"{REPO}:prod", running=D_NEW)
    scaled = Workload.from_api(deployment("jobs-manager", {"api": f"{REPO}:prod"}, replicas=0))
    pin = patch(f"{REPO}@{D_NEW}", expected=f"{REPO}:prod", pulls=0)
    assert verdict(pin, with_evidence(tick, workload=scaled, pods=())) == (
        f"api: {D_NEW} is cooling down until 2026-11-29T13:00:00+00:00",
    )


def test_an_index_each_pod_runs_a_manifest_of_is_pinned_with_no_cooldown_or_pull() -> None:
    # The registry's answer for the tag names D_ARM a platform manifest of D_NEW.
    tick = tick_input(minimum_age="1h", seen_since=T0, live=f"{REPO}:prod", running=D_ARM)
    answered = with_evidence(tick, digests={"api": Resolved(D_NEW, frozenset({D_ARM}))})
    pin = patch(f"{REPO}@{D_NEW}", expected=f"{REPO}:prod", pulls=0)
    assert verdict(pin, answered) == ()


D_OLD_ARM = digest("old, its linux/arm64 manifest")  # a platform manifest of the index D_OLD


def test_a_rollback_to_an_index_read_this_tick_that_no_pod_runs_is_refused() -> None:
    # Reading an index's children proves nothing by itself: a pod must run one of them.
    tick = tick_input(live=f"{REPO}@{D_NEW}", running=D_RUNS)
    read = with_evidence(tick, children={D_OLD: frozenset({D_OLD_ARM})})
    rollback = patch(f"{REPO}@{D_OLD}", purpose=PatchPurpose.ROLLBACK, expected=f"{REPO}@{D_NEW}")
    assert verdict(rollback, read) == (
        f"api: {REPO}@{D_OLD} is not an image the workload is proven to have run",
    )


@pytest.mark.parametrize(
    "answered",
    [
        pytest.param(Resolved(D_NEW), id="the-tag-answers-another-digest"),
        # The tag moved back to D_OLD, its answer naming no platform manifest: the children
        # read this tick still count.
        pytest.param(Resolved(D_OLD), id="the-tag-answers-it-without-its-manifests"),
    ],
)
def test_a_rollback_to_an_index_whose_platform_manifest_every_pod_runs_costs_no_pull(
    answered: Resolved,
) -> None:
    tick = tick_input(live=f"{REPO}@{D_NEW}", running=D_OLD_ARM)
    read = with_evidence(tick, children={D_OLD: frozenset({D_OLD_ARM})}, digests={"api": answered})
    rollback = patch(
        f"{REPO}@{D_OLD}", purpose=PatchPurpose.ROLLBACK, expected=f"{REPO}@{D_NEW}", pulls=0
    )
    assert verdict(rollback, read) == ()


def test_a_cordoned_node_need_not_hold_a_build_for_the_refresh_to_cost_no_pull() -> None:
    # Its pod is rescheduled onto a node that holds the build: only the others must hold it.
    tick = on_nodes({"n1": D_RUNS, "n2": D_RUNS}, ("n1",))
    assert tick.nodes is not None
    cordoned = node_images({"metadata": {"name": "n2"}, "spec": {"unschedulable": True}})
    assert cordoned is not None
    nodes = NodeInventory({**tick.nodes.nodes, "n2": cordoned[1]})
    assert verdict(patch(f"{REPO}@{D_NEW}", pulls=0), replace(tick, nodes=nodes)) == ()
    assert verdict(patch(f"{REPO}@{D_NEW}", pulls=0), tick) == (UNCHARGED,)
