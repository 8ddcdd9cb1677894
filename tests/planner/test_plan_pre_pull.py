"""prePull in the planner: the digests go onto the nodes first, the patch follows, the helper
pods never outlive the pre-pull, and the pull budget is charged once."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.models import Phase, PolicyStatus, SeenDigest
from imagerefresh.offline import NodeInventory, node_images
from imagerefresh.planner import plan_tick
from imagerefresh.planner.actions import HelperPodDelete
from imagerefresh.planner.helperpod import LABEL, Placement, RunAs, helper_manifest
from imagerefresh.planner.podguard import unsafe_pod
from imagerefresh.planner.target.prepull import PRE_PULL_POLL

from support.ticks import NS, PM, RM, Tick, budget, digest, evidence, key, spec, target
from support.workloads import Json, daemonset, deployment, pod

D0, D1, D2 = digest(0), digest(1), digest(2)
AGENT_NS = NS
UID = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
HUB = "registry-1.docker.io"
NODES = ("n1", "n2", "n3")
PULLED = f"docker.io/tracebloc/resource-monitor@{D1}"
WANTED = f"tracebloc/resource-monitor@{D1}"


def agent(images: dict[str, str] | None = None, **fields: Any) -> Json:
    obj = daemonset(
        "agent", images or {"agent": f"{RM.split(':')[0]}@{D0}"}, namespace=NS, **fields
    )
    obj["apiVersion"] = "apps/v1"
    obj["metadata"]["uid"] = UID
    template = obj["spec"]["template"]["spec"]
    template["tolerations"] = [{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}]
    template["imagePullSecrets"] = [{"name": "regcred"}]
    template["hostNetwork"] = True
    return obj


def agent_pods(running: str = D0, nodes: tuple[str, ...] = NODES) -> list[Json]:
    return [
        pod(f"agent-{n}", {"agent": f"docker.io/tracebloc/resource-monitor@{running}"}, node=n)
        for n in nodes
    ]


def helper(
    node: str,
    image: str = WANTED,
    *,
    pulled: bool = False,
    waiting: str | None = None,
    phase: str = "Pending",
    name: str | None = None,
) -> Json:
    placement = Placement.from_api(agent())
    assert placement is not None
    obj = helper_manifest(AGENT_NS, placement, node, [image], timedelta(minutes=10))
    obj["metadata"]["uid"] = f"uid-{node}-{image[-4:]}"
    if name is not None:
        obj["metadata"]["name"] = name
    report: Json = {"name": "pull-0", "image": image, "imageID": ""}
    if pulled:
        digest_part = image.rsplit("@", 1)[1]
        report["imageID"] = f"docker.io/tracebloc/resource-monitor@{digest_part}"
        report["state"] = {"terminated": {"reason": "StartError", "exitCode": 128}}
        phase = "Failed"
    elif waiting is not None:
        report["state"] = {"waiting": {"reason": waiting, "message": f"{waiting} from the node"}}
    obj["status"] = {"phase": phase, "containerStatuses": [report]}
    return obj


def pre_pulling(**fields: Any) -> Tick:
    tick = Tick(
        spec(
            target("agent", kind="DaemonSet", namespace=AGENT_NS, agent=RM),
            prePull=True,
            pullBudget={"reserve": 0},
            **fields,
        )
    )
    tick.pre_pull_pods = True
    return tick


AGENT = key("agent", kind="DaemonSet", namespace=AGENT_NS)


def run(
    tick: Tick,
    helpers: list[Json] | None,
    *,
    running: str = D0,
    resolved: str = D1,
    advance: timedelta = timedelta(seconds=5),
    workload: Json | None = None,
    **kw: Any,
) -> Any:
    found = evidence(
        workload or agent(), agent_pods(running), digests={"agent": resolved}, helpers=helpers
    )
    return tick.run({AGENT: found}, kw.pop("budgets", None), advance=advance, **kw)


def status(tick: Tick) -> Any:
    return tick.target("agent", kind="DaemonSet", namespace=AGENT_NS)


def test_a_refresh_first_records_its_intent_and_creates_one_helper_per_node_never_the_patch() -> (
    None
):
    tick = pre_pulling()
    now = tick.now
    plan = run(tick, [])
    assert plan.patches == ()
    assert [c.node for c in plan.pod_creates] == list(NODES)
    target_status = status(tick)
    assert target_status.phase is Phase.REFRESHING
    assert "pre-pulling agent" in target_status.message
    assert "0/3 nodes hold it" in target_status.message
    assert target_status.pre_pull.images == {"agent": WANTED}
    assert target_status.pre_pull.started_at == now
    assert plan.wake_at == now + PRE_PULL_POLL
    assert [e.reason for e in plan.events if e.reason == "PrePulling"] == ["PrePulling"]


def test_each_helper_is_the_guarded_shape_with_the_workload_s_secrets_and_tolerations() -> None:
    tick = pre_pulling()
    plan = run(tick, [])
    for create in plan.pod_creates:
        manifest = create.manifest
        assert unsafe_pod(manifest, create.repositories) == ()
        assert create.repositories == frozenset({"docker.io/tracebloc/resource-monitor"})
        spec_ = manifest["spec"]
        assert spec_["nodeName"] == create.node
        assert spec_["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec_["tolerations"][0]["key"] == "edge"
        assert spec_["hostNetwork"] is True
        assert manifest["metadata"]["labels"][LABEL] == UID
        assert manifest["metadata"]["ownerReferences"][0]["uid"] == UID
        assert manifest["spec"]["containers"][0]["command"] == ["/imagerefresh-pre-pull"]


def test_each_helper_is_charged_the_pull_it_causes_as_it_is_created_and_never_again() -> None:
    tick = pre_pulling()
    first = run(tick, [])
    assert [c.pulls for c in first.pod_creates] == [(((HUB, "anonymous"), 1),)] * 3
    # Carried on with its helpers there, it creates and charges nothing.
    carried = run(tick, [helper(n) for n in NODES])
    assert carried.pod_creates == ()
    # n3's helper vanished (evicted, deleted by hand): created again, it pulls again, charged.
    again = run(tick, [helper("n1"), helper("n2")])
    assert [c.node for c in again.pod_creates] == ["n3"]
    assert again.pod_creates[0].pulls == (((HUB, "anonymous"), 1),)
    assert again.pod_deletes == ()


def test_a_restarted_operator_charges_the_helpers_it_creates_never_trusting_the_intent() -> None:
    """The intent in status is anyone's to write: it never stands for pulls already paid."""
    first = pre_pulling()
    run(first, [])
    successor = pre_pulling()
    successor.status, successor.now = first.status, first.now
    found = run(successor, [helper(n) for n in NODES])
    assert found.pod_creates == ()
    successor.status = first.status
    plan = run(successor, [])
    assert [c.pulls for c in plan.pod_creates] == [(((HUB, "anonymous"), 1),)] * 3
    assert [e for e in plan.events if e.reason == "PrePulling"] == []


def test_helpers_still_pulling_are_kept_and_the_target_is_looked_at_again_within_seconds() -> None:
    tick = pre_pulling()
    run(tick, [])
    now = tick.now
    plan = run(tick, [helper("n1", pulled=True), helper("n2"), helper("n3")])
    assert plan.patches == ()
    assert plan.pod_creates == ()
    assert plan.pod_deletes == ()
    assert "1/3 nodes hold it, waiting for n2, n3" in status(tick).message
    assert plan.wake_at == now + PRE_PULL_POLL


def test_once_every_node_holds_the_digest_the_patch_is_sent_free_and_the_helpers_are_deleted() -> (
    None
):
    tick = pre_pulling()
    run(tick, [])
    helpers = [helper(n, pulled=True) for n in NODES]
    plan = run(tick, helpers)
    (patch,) = plan.patches
    assert patch.changes[0].image.endswith(f"@{D1}")
    assert patch.pulls == ()  # the pre-pull paid for them
    assert sorted(d.name for d in plan.pod_deletes) == sorted(
        h["metadata"]["name"] for h in helpers
    )
    assert all(d.uid.startswith("uid-") for d in plan.pod_deletes)
    assert status(tick).pre_pull is None
    assert status(tick).pending is not None


def test_a_node_whose_pull_fails_holds_the_refresh_with_the_kubelet_s_reason_and_no_helper() -> (
    None
):
    tick = pre_pulling()
    run(tick, [])
    failing = [helper("n1", pulled=True), helper("n2", waiting="ErrImagePull"), helper("n3")]
    plan = run(tick, failing)
    assert plan.patches == ()
    assert plan.pod_creates == ()
    assert len(plan.pod_deletes) == 3
    target_status = status(tick)
    assert target_status.phase is Phase.WAITING
    assert (
        "pre-pull failed on node n2: ErrImagePull: ErrImagePull from the node"
        in target_status.message
    )
    assert target_status.pre_pull.failure.node == "n2"
    assert [e.type for e in plan.events if e.reason == "PrePullFailed"] == ["Warning"]
    # It holds: no retry loop, no second event, no pod.
    later = run(tick, [], advance=timedelta(minutes=15))
    assert later.patches == ()
    assert later.pod_creates == ()
    assert [e for e in later.events if e.reason == "PrePullFailed"] == []
    assert status(tick).phase is Phase.WAITING


PLAN = f"agent {D0[:19]}… → {D1[:19]}…"
FAILED_ON_N2 = (
    f"drift: {PLAN}; the pre-pull failed on node n2: ErrImagePull: ErrImagePull from the node. "
    "Nothing was patched. Fix what it names (a pull secret, the registry, disk space, an "
    "admission rule), then reset to try again: imagerefresh reset tracebloc/control-plane; a new "
    "digest is pre-pulled afresh"
)
NOT_ALLOWED = (
    f"drift: {PLAN}; spec.prePull asks for helper pods, but this operator may not create pods: "
    "nothing is pulled or patched — install it with the chart value prePull.enabled=true "
    "(imagerefresh run --pre-pull-pods), or set prePull: false"
)


def pre_pull_events(plan: Any) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message) for e in plan.events if e.reason.startswith("PrePull")]


def test_a_failed_pre_pull_says_word_for_word_what_to_fix_and_how_to_retry_in_one_warning() -> None:
    tick = pre_pulling()
    run(tick, [])
    plan = run(tick, [helper("n2", waiting="ErrImagePull")])
    assert status(tick).message == FAILED_ON_N2
    assert pre_pull_events(plan) == [("Warning", "PrePullFailed", FAILED_ON_N2)]


def test_a_reset_answered_at_once_by_a_failed_pull_warns_again_though_the_words_are_the_same() -> (
    None
):
    tick = pre_pulling()
    run(tick, [])
    run(tick, [helper("n2", waiting="ErrImagePull")])
    assert (status(tick).phase, status(tick).message) == (Phase.WAITING, FAILED_ON_N2)
    tick.reset = "once"
    # The failed helper is still there when the reset is honoured: the retry fails at once.
    again = run(tick, [helper("n2", waiting="ErrImagePull")])
    assert again.pod_creates == ()
    assert (status(tick).phase, status(tick).message) == (Phase.WAITING, FAILED_ON_N2)
    assert pre_pull_events(again) == [("Warning", "PrePullFailed", FAILED_ON_N2)]


def test_an_operator_without_pod_rights_warns_once_when_it_starts_holding_and_not_every_tick() -> (
    None
):
    tick = pre_pulling()
    tick.pre_pull_pods = False
    first = run(tick, None)
    assert status(tick).message == NOT_ALLOWED
    assert pre_pull_events(first) == [("Warning", "PrePullNotAllowed", NOT_ALLOWED)]
    assert pre_pull_events(run(tick, None)) == []  # still held, same words: no second event


def test_a_failed_pre_pull_then_an_operator_without_pod_rights_warns_of_the_new_hold() -> None:
    tick = pre_pulling()
    run(tick, [])
    run(tick, [helper("n2", waiting="ErrImagePull")])
    tick.pre_pull_pods = False  # reinstalled without prePull.enabled: still Waiting, new words
    plan = run(tick, None)
    assert (status(tick).phase, status(tick).message) == (Phase.WAITING, NOT_ALLOWED)
    assert pre_pull_events(plan) == [("Warning", "PrePullNotAllowed", NOT_ALLOWED)]


def test_a_failed_pre_pull_starts_afresh_after_a_reset_or_for_a_new_digest() -> None:
    tick = pre_pulling()
    run(tick, [])
    run(tick, [helper("n1", waiting="ImagePullBackOff")])
    tick.reset = "once"
    again = run(tick, [])
    assert len(again.pod_creates) == 3
    assert [c.pulls for c in again.pod_creates] == [(((HUB, "anonymous"), 1),)] * 3
    other = pre_pulling()
    run(other, [])
    run(other, [helper("n1", waiting="ImagePullBackOff")])
    moved = run(other, [], resolved=D2)
    assert len(moved.pod_creates) == 3
    assert status(other).pre_pull.images == {"agent": f"tracebloc/resource-monitor@{D2}"}


def test_a_pre_pull_past_the_rollout_timeout_fails_naming_the_nodes_still_missing() -> None:
    tick = pre_pulling(rolloutTimeout="1m")
    run(tick, [], advance=timedelta(minutes=2))
    plan = run(tick, [helper("n1", pulled=True), helper("n2"), helper("n3")])
    assert plan.patches == ()
    message = status(tick).message
    assert "not pulled within the rollout timeout (1m0s); still missing on n2, n3" in message


def test_nodes_already_holding_the_digest_need_no_helper() -> None:
    tick = pre_pulling()
    tick.nodes = NodeInventory(
        dict(
            [node_images({"metadata": {"name": "n1"}, "status": {"images": [{"names": [PULLED]}]}})]
        )
    )
    plan = run(tick, [])
    assert [c.node for c in plan.pod_creates] == ["n2", "n3"]
    assert [c.pulls for c in plan.pod_creates] == [(((HUB, "anonymous"), 1),)] * 2


def test_a_workload_already_running_the_digest_everywhere_refreshes_without_a_pre_pull() -> None:
    tick = pre_pulling()
    tick.nodes = NodeInventory(
        dict(
            node_images({"metadata": {"name": n}, "status": {"images": [{"names": [PULLED]}]}})
            for n in NODES
        )
    )
    plan = run(tick, [])
    assert plan.pod_creates == ()
    (patch,) = plan.patches
    assert patch.pulls == ()  # every node is proven to hold it: the pods pull nothing


def test_not_ready_and_cordoned_nodes_are_skipped_and_named() -> None:
    tick = pre_pulling()
    not_ready = {
        "metadata": {"name": "n2"},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    cordoned = {"metadata": {"name": "n3"}, "spec": {"unschedulable": True}, "status": {}}
    tick.nodes = NodeInventory(
        dict(
            node_images(n)
            for n in (not_ready, cordoned, {"metadata": {"name": "n1"}, "status": {}})
        )
    )
    plan = run(tick, [])
    assert [c.node for c in plan.pod_creates] == ["n1"]
    assert "skipped (not Ready, or cordoned): n2, n3" in status(tick).message


def test_nodes_as_the_api_reports_them_are_skipped_only_when_not_ready_or_cordoned() -> None:
    tick = pre_pulling()
    healthy = [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "DiskPressure", "status": "False"},
        {"type": "Ready", "status": "True"},
    ]
    lost = [*healthy[:2], {"type": "Ready", "status": "Unknown"}]
    other = [{"names": ["docker.io/library/busybox:1.36"]}]
    reported = {
        "n1": {"status": {"conditions": healthy, "images": other}},
        "n2": {"status": {"conditions": lost, "images": other}},
        "n3": {"spec": {"unschedulable": True}, "status": {"conditions": healthy, "images": other}},
    }
    tick.nodes = NodeInventory(
        dict(node_images({"metadata": {"name": n}, **obj}) for n, obj in reported.items())
    )
    plan = run(tick, [])
    assert [c.node for c in plan.pod_creates] == ["n1"]
    assert "skipped (not Ready, or cordoned): n2, n3" in status(tick).message


def closed(tick: Tick) -> None:
    """Only Saturdays 02:00-03:00 UTC: the test clock (a Sunday noon) is outside."""
    windows = [{"days": ["Sat"], "start": "02:00", "end": "03:00", "timeZone": "UTC"}]
    tick.spec = tick.spec.model_copy(
        update={"windows": spec(target("x", a=RM), windows=windows).windows}
    )


def test_a_closed_window_starts_no_pre_pull() -> None:
    tick = pre_pulling()
    closed(tick)
    plan = run(tick, [])
    assert plan.pod_creates == ()
    assert status(tick).phase is Phase.WAITING
    assert status(tick).pre_pull is None


def test_a_pre_pull_in_flight_when_its_window_closes_is_carried_to_its_patch() -> None:
    tick = pre_pulling()
    run(tick, [])
    closed(tick)
    going = run(tick, [helper("n1", pulled=True), helper("n2"), helper("n3")])
    assert going.pod_deletes == ()
    assert status(tick).phase is Phase.REFRESHING
    done = run(tick, [helper(n, pulled=True) for n in NODES])
    assert len(done.patches) == 1
    assert len(done.pod_deletes) == 3


def test_a_pre_pull_started_by_a_one_off_override_finishes_outside_the_window() -> None:
    tick = pre_pulling()
    closed(tick)
    tick.window_override = "now"
    assert len(run(tick, []).pod_creates) == 3
    plan = run(tick, [helper(n, pulled=True) for n in NODES])
    assert len(plan.patches) == 1


def test_a_failed_pre_pull_stays_failed_across_a_closed_window_and_charges_nothing() -> None:
    tick = pre_pulling()
    run(tick, [])
    run(tick, [helper("n1", waiting="ErrImagePull")])
    closed(tick)
    run(tick, [])
    assert status(tick).pre_pull.failure.node == "n1"
    tick.spec = tick.spec.model_copy(update={"windows": None})  # the window opens again
    plan = run(tick, [])
    assert plan.pod_creates == ()
    assert status(tick).phase is Phase.WAITING
    assert "pre-pull failed on node n1" in status(tick).message


def test_an_operator_that_may_not_create_pods_holds_the_refresh_and_says_how_to_allow_it() -> None:
    tick = pre_pulling()
    tick.pre_pull_pods = False
    plan = run(tick, None)
    assert plan.patches == ()
    assert plan.pod_creates == ()
    target_status = status(tick)
    assert target_status.phase is Phase.WAITING
    assert "prePull.enabled=true" in target_status.message
    assert [e.reason for e in plan.events if e.reason.startswith("PrePull")] == [
        "PrePullNotAllowed"
    ]


def test_helper_pods_that_could_not_be_read_fail_closed_and_keep_the_intent() -> None:
    tick = pre_pulling()
    run(tick, [])
    intent = status(tick).pre_pull
    plan = run(tick, None)
    assert plan.patches == ()
    assert plan.pod_creates == ()
    assert plan.pod_deletes == ()
    assert status(tick).phase is Phase.ERROR
    assert status(tick).pre_pull == intent
    assert plan.degraded


def test_a_pre_pull_the_budget_cannot_cover_is_deferred_with_no_intent_and_no_pod() -> None:
    tick = pre_pulling()
    plan = run(tick, [], budgets={(HUB, "anonymous"): budget(HUB, remaining=2)})
    assert plan.pod_creates == ()
    assert status(tick).phase is Phase.DEFERRED
    assert status(tick).pre_pull is None


def test_a_dry_run_pre_pulls_nothing() -> None:
    tick = pre_pulling(dryRun=True)
    plan = run(tick, [])
    assert plan.pod_creates == ()
    assert plan.patches == ()
    assert status(tick).phase is Phase.DRIFTED


def test_helpers_of_an_earlier_digest_or_of_a_target_no_longer_pre_pulling_are_deleted() -> None:
    tick = pre_pulling()
    stale = helper("n1", image=f"tracebloc/resource-monitor@{D2}")
    plan = run(tick, [stale])
    assert [d.name for d in plan.pod_deletes] == [stale["metadata"]["name"]]
    assert len(plan.pod_creates) == 3
    off = Tick(spec(target("agent", kind="DaemonSet", namespace=AGENT_NS, agent=RM)))
    off.pre_pull_pods = True
    plan = run(off, [helper("n1"), helper("n2")])
    assert len(plan.pod_deletes) == 2
    assert len(plan.patches) == 1


def test_a_deployment_pre_pulls_onto_the_nodes_its_pods_run_on_once_each() -> None:
    work = deployment("api", {"api": f"tracebloc/resource-monitor@{D0}"}, replicas=3)
    work["metadata"]["uid"] = UID
    pods = [
        pod(f"api-{i}", {"api": f"docker.io/tracebloc/resource-monitor@{D0}"}, node=n)
        for i, n in enumerate(("n1", "n1", "n2"))
    ]
    tick = Tick(spec(target("api", api=RM), prePull=True))
    tick.pre_pull_pods = True
    plan = tick.run({key("api"): evidence(work, pods, digests={"api": D1}, helpers=[])})
    assert [c.node for c in plan.pod_creates] == ["n1", "n2"]


def test_a_target_may_turn_pre_pull_off_for_itself() -> None:
    tick = Tick(
        spec(
            {**target("agent", kind="DaemonSet", namespace=AGENT_NS, agent=RM), "prePull": False},
            prePull=True,
        )
    )
    tick.pre_pull_pods = True
    plan = run(tick, [])
    assert plan.pod_creates == ()
    assert len(plan.patches) == 1


def test_lockstep_members_switch_together_only_once_every_member_s_nodes_hold_the_digest() -> None:
    members = [
        target("agent", kind="DaemonSet", namespace=AGENT_NS, agent=RM),
        target("agent2", kind="DaemonSet", namespace=AGENT_NS, agent=RM),
    ]
    tick = Tick(spec(*members, prePull=True, lockstep=True, pullBudget={"reserve": 0}))
    tick.pre_pull_pods = True
    second = key("agent2", kind="DaemonSet", namespace=AGENT_NS)
    other = agent()
    other["metadata"] = {**other["metadata"], "name": "agent2", "uid": UID + "2"}

    def tick_with(first_helpers: list[Json], second_helpers: list[Json]) -> Any:
        return tick.run(
            {
                AGENT: evidence(
                    agent(), agent_pods(), digests={"agent": D1}, helpers=first_helpers
                ),
                second: evidence(
                    other, agent_pods(), digests={"agent": D1}, helpers=second_helpers
                ),
            },
            advance=timedelta(seconds=5),
        )

    tick_with([], [])
    done = [helper(n, pulled=True) for n in NODES]
    plan = tick_with(done, [])  # agent2's helpers are not even there yet
    assert plan.patches == ()
    assert status(tick).phase is Phase.WAITING
    assert status(tick).pre_pull is not None  # its pre-pull holds, its helpers are kept
    assert plan.pod_deletes == ()
    placement = Placement.from_api(other)
    assert placement is not None
    second_done = []
    for n in NODES:
        h = helper(n, pulled=True)
        h["metadata"]["name"] = helper_manifest(
            AGENT_NS, placement, n, [WANTED], timedelta(minutes=10)
        )["metadata"]["name"]
        h["metadata"]["ownerReferences"][0]["uid"] = UID + "2"
        second_done.append(h)
    plan = tick_with(done, second_done)
    assert sorted(p.target.name for p in plan.patches) == ["agent", "agent2"]


def test_a_status_intent_naming_an_image_by_tag_is_not_read_as_ours() -> None:
    written = {
        "targets": [
            {
                "kind": "DaemonSet",
                "namespace": AGENT_NS,
                "name": "agent",
                "phase": "Refreshing",
                "prePull": {
                    "images": {"agent": "evil/miner:latest"},
                    "startedAt": "2026-11-29T12:00:00Z",
                },
            }
        ]
    }
    with pytest.raises(ValueError, match="by digest"):
        PolicyStatus.model_validate(written)


def test_a_helper_lives_the_target_s_rollout_timeout_up_to_the_operator_s_limit() -> None:
    long = pre_pulling(rolloutTimeout="3h")
    long.pre_pull_max_deadline = 900
    (first, *_) = run(long, []).pod_creates
    assert first.manifest["spec"]["activeDeadlineSeconds"] == 900
    short = pre_pulling(rolloutTimeout="2m")
    (first, *_) = run(short, []).pod_creates
    assert first.manifest["spec"]["activeDeadlineSeconds"] == 120


# --- what an SRE reads while a pre-pull runs, word for word ----------------------------------

PULLING = f"pre-pulling {PLAN}: 0/3 nodes hold it, waiting for n1, n2, n3"


def test_a_pre_pull_that_starts_says_so_in_one_normal_event_and_its_status_names_no_skipped() -> (
    None
):
    tick = pre_pulling()
    plan = run(tick, [])
    assert status(tick).message == PULLING
    assert pre_pull_events(plan) == [
        (
            "Normal",
            "PrePulling",
            f"pre-pulling {PLAN} onto 3 node(s) before the patch: n1, n2, n3",
        )
    ]


def nodes_named(count: int) -> tuple[str, ...]:
    return tuple(f"n{i:02}" for i in range(1, count + 1))


@pytest.mark.parametrize(
    ("count", "waiting_for"),
    [
        (8, "n01, n02, n03, n04, n05, n06, n07, n08"),
        (10, "n01, n02, n03, n04, n05, n06, n07, n08 and 2 more"),
    ],
    ids=["eight-named-all", "ten-named-eight-and-counted"],
)
def test_a_message_names_eight_nodes_and_counts_the_rest(count: int, waiting_for: str) -> None:
    tick = pre_pulling()
    nodes = nodes_named(count)
    found = evidence(agent(), agent_pods(nodes=nodes), digests={"agent": D1}, helpers=[])
    plan = tick.run({AGENT: found})
    assert len(plan.pod_creates) == count
    assert status(tick).message == (
        f"pre-pulling {PLAN}: 0/{count} nodes hold it, waiting for {waiting_for}"
    )
    (event,) = [e.message for e in plan.events if e.reason == "PrePulling"]
    assert event == f"pre-pulling {PLAN} onto {count} node(s) before the patch: {waiting_for}"


@pytest.mark.parametrize(
    ("error", "why"),
    [
        ('pods is forbidden: User "imagerefresh" cannot list pods', None),
        (None, "they were not read this tick"),
    ],
    ids=["the-api-s-words", "not-read"],
)
def test_unreadable_helper_pods_say_why_and_that_nothing_is_pulled_or_patched(
    error: str | None, why: str | None
) -> None:
    tick = pre_pulling()
    found = evidence(agent(), agent_pods(), digests={"agent": D1}, helpers=None)
    tick.run({AGENT: replace(found, helpers_error=error)})
    assert status(tick).phase is Phase.ERROR
    assert status(tick).message == (
        f"drift: {PLAN}; the pre-pull helper pods could not be read ({why or error}); nothing "
        "is pulled or patched on it"
    )


def test_a_failed_pre_pull_carried_by_a_later_tick_keeps_its_failure_and_creates_nothing() -> None:
    tick = pre_pulling()
    run(tick, [])
    run(tick, [helper("n2", waiting="ErrImagePull")])
    failed = status(tick).pre_pull
    assert failed.failure.node == "n2"
    for _ in range(2):  # the helper is gone: still held, never retried
        plan = run(tick, [])
        assert plan.pod_creates == ()
        assert status(tick).pre_pull == failed
        assert (status(tick).phase, status(tick).message) == (Phase.WAITING, FAILED_ON_N2)


def test_a_pre_pull_is_failed_only_once_past_the_rollout_timeout_naming_the_first_node() -> None:
    tick = pre_pulling(rolloutTimeout="1m")
    waiting = [helper("n1", pulled=True), helper("n2"), helper("n3")]
    run(tick, [], advance=timedelta(minutes=1))
    plan = run(tick, waiting, advance=timedelta(seconds=1))  # exactly the timeout: still going
    assert status(tick).phase is Phase.REFRESHING
    assert pre_pull_events(plan) == []
    plan = run(tick, waiting)
    timed_out = (
        f"drift: {PLAN}; the pre-pull failed on node n2: not pulled within the rollout timeout "
        "(1m0s); still missing on n2, n3. Nothing was patched. Fix what it names (a pull "
        "secret, the registry, disk space, an admission rule), then reset to try again: "
        "imagerefresh reset tracebloc/control-plane; a new digest is pre-pulled afresh"
    )
    assert (status(tick).phase, status(tick).message) == (Phase.WAITING, timed_out)
    assert status(tick).pre_pull.failure.node == "n2"
    assert pre_pull_events(plan) == [("Warning", "PrePullFailed", timed_out)]


def test_the_budget_covering_exactly_the_helpers_pulls_creates_them_all() -> None:
    tick = pre_pulling()
    plan = run(tick, [], budgets={(HUB, "anonymous"): budget(HUB, remaining=3)})
    assert len(plan.pod_creates) == 3
    assert status(tick).phase is Phase.REFRESHING
    assert not plan.rate_limited


def test_a_helper_the_budget_cannot_cover_mid_pre_pull_is_deferred_keeping_the_intent() -> None:
    tick = pre_pulling()
    run(tick, [])
    intent = status(tick).pre_pull
    # n3's helper vanished: the one to create again costs a pull the budget no longer has.
    plan = run(
        tick, [helper("n1"), helper("n2")], budgets={(HUB, "anonymous"): budget(HUB, remaining=0)}
    )
    assert plan.pod_creates == ()
    assert status(tick).pre_pull == intent  # started when it started: its deadline holds
    assert (status(tick).phase, status(tick).message) == (
        Phase.DEFERRED,
        "deferred: registry-1.docker.io for anonymous has 0 pulls left of 100 per 21600s; this "
        "refresh needs 1 and 0 stay reserved for the kubelet",
    )
    assert plan.rate_limited
    assert tick.condition("RateLimited").message == (
        "deferred for the pull budget: DaemonSet tracebloc/agent"
    )


SIDE = f"{PM.split(':')[0]}@{digest('p0')}"


def cooling_side(ends_in: timedelta) -> Tick:
    """agent pre-pulls D1 while its side container's new digest cools down ``ends_in``."""
    tick = Tick(
        spec(
            target("agent", kind="DaemonSet", namespace=AGENT_NS, agent=RM, side=PM),
            prePull=True,
            pullBudget={"reserve": 0},
            minimumAge="1h",
        )
    )
    tick.pre_pull_pods = True
    since = tick.now - timedelta(hours=1) + ends_in
    seen = [
        SeenDigest(tracked=f"docker.io/{RM}", digest=D1, since=since - timedelta(hours=1)),
        SeenDigest(tracked=f"docker.io/{PM}", digest=digest("p1"), since=since),
    ]
    tick.status = PolicyStatus(seen=seen)
    return tick


@pytest.mark.parametrize(
    ("ends_in", "wakes_in"),
    [(timedelta(seconds=2), timedelta(seconds=2)), (timedelta(hours=1), PRE_PULL_POLL)],
    ids=["cooldown-ends-first", "pre-pull-poll-first"],
)
def test_a_pre_pull_beside_a_cooldown_is_looked_at_again_when_the_first_of_them_is_due(
    ends_in: timedelta, wakes_in: timedelta
) -> None:
    tick = cooling_side(ends_in)
    now = tick.now
    workload = agent({"agent": f"{RM.split(':')[0]}@{D0}", "side": SIDE})
    pods = [
        pod(
            f"agent-{n}",
            {"agent": f"docker.io/tracebloc/resource-monitor@{D0}", "side": f"docker.io/{SIDE}"},
            node=n,
        )
        for n in NODES
    ]
    found = evidence(workload, pods, digests={"agent": D1, "side": digest("p1")}, helpers=[])
    plan = tick.run({AGENT: found})
    assert [c.node for c in plan.pod_creates] == list(NODES)
    assert [e.reason for e in plan.events if e.reason in ("PrePulling", "CoolingDown")] == [
        "CoolingDown",
        "PrePulling",
    ]
    assert plan.wake_at == now + wakes_in


def test_helpers_run_as_the_user_and_group_the_operator_was_given() -> None:
    tick = pre_pulling()
    found = evidence(agent(), agent_pods(), digests={"agent": D1}, helpers=[])
    given = replace(tick.input({AGENT: found}), pre_pull_run_as=RunAs(1_000, 2_000))
    (first, *_) = plan_tick(given).pod_creates
    security = first.manifest["spec"]["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (1_000, 2_000)


def test_a_node_holds_a_two_container_pre_pull_only_once_it_holds_both_images() -> None:
    # n1's helper reports resource-monitor pulled, pods-monitor not yet: n1 holds half of it.
    pm, rm = f"tracebloc/pods-monitor@{D2}", f"tracebloc/resource-monitor@{D1}"
    work = deployment(
        "api",
        {"api": f"tracebloc/resource-monitor@{D0}", "side": f"tracebloc/pods-monitor@{D0}"},
        replicas=1,
    )
    work["metadata"]["uid"], work["apiVersion"] = UID, "apps/v1"
    running = {
        "api": f"docker.io/tracebloc/resource-monitor@{D0}",
        "side": f"docker.io/tracebloc/pods-monitor@{D0}",
    }
    placement = Placement.from_api(work)
    assert placement is not None
    half = helper_manifest(NS, placement, "n1", [rm, pm], timedelta(minutes=10))
    half["metadata"]["uid"] = "uid-n1-half"
    half["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "pull-0", "image": pm, "imageID": "", "state": {"waiting": {}}},
            {"name": "pull-1", "image": rm, "imageID": f"docker.io/{rm}"},
        ],
    }
    tick = Tick(spec(target("api", api=RM, side=PM), prePull=True, pullBudget={"reserve": 0}))
    tick.pre_pull_pods = True
    found = evidence(
        work, [pod("api-0", running, node="n1")], {"api": D1, "side": D2}, helpers=[half]
    )
    plan = tick.run({key("api"): found}, advance=timedelta(seconds=5))
    assert plan.patches == ()
    assert "0/1 nodes hold it, waiting for n1" in tick.target("api").message


def test_every_target_s_leftover_helpers_are_deleted_in_its_own_namespace() -> None:
    # Three agents, none pre-pulling: the first's helpers were not read this tick, the others'
    # were and are left over. Each helper is deleted where its target runs, naming that
    # target; a target whose helpers are unknown neither deletes any nor stops the others.
    names = {"agent": AGENT_NS, "edge": "edge", "probe": "probes"}
    tick = Tick(
        spec(*(target(n, kind="DaemonSet", namespace=ns, agent=RM) for n, ns in names.items()))
    )
    tick.pre_pull_pods = True
    found = {}
    for name, namespace in names.items():
        leftovers = None if name == "agent" else [helper("n1", name=f"{name}-pull-n1")]
        found[key(name, "DaemonSet", namespace)] = evidence(
            daemonset(name, {"agent": f"tracebloc/resource-monitor@{D0}"}, namespace=namespace),
            digests={"agent": D0},
            helpers=leftovers,
        )
    plan = tick.run(found)
    uid = f"uid-n1-{WANTED[-4:]}"
    assert plan.pod_deletes == (
        HelperPodDelete(key("edge", "DaemonSet", "edge"), "edge", "edge-pull-n1", uid),
        HelperPodDelete(key("probe", "DaemonSet", "probes"), "probes", "probe-pull-n1", uid),
    )


def test_a_pre_pull_in_flight_is_dropped_when_the_policy_is_suspended_and_starts_afresh_after() -> (
    None
):
    tick = pre_pulling()
    run(tick, [])
    kept = [helper("n1", pulled=True), helper("n2"), helper("n3")]
    tick.spec = tick.spec.model_copy(update={"suspend": True})
    plan = run(tick, kept)
    # A decision that ends outside the pre-pull step drops its intent, and its helpers go.
    assert status(tick).phase is Phase.SUSPENDED
    assert status(tick).pre_pull is None
    assert sorted(d.name for d in plan.pod_deletes) == sorted(h["metadata"]["name"] for h in kept)
    tick.spec = tick.spec.model_copy(update={"suspend": False})
    resumed_at = tick.now
    plan = run(tick, [])
    # So a resumed policy starts the pre-pull anew: its own clock, and it says so again.
    assert status(tick).pre_pull.started_at == resumed_at
    assert pre_pull_events(plan) == [
        (
            "Normal",
            "PrePulling",
            f"pre-pulling {PLAN} onto 3 node(s) before the patch: n1, n2, n3",
        )
    ]


@pytest.mark.parametrize(
    ("runs", "listed"),
    [
        pytest.param(f"docker.io/tracebloc/resource-monitor@{D1}", (), id="a-pod-runs-the-first"),
        pytest.param(f"docker.io/tracebloc/resource-monitor@{D0}", (PULLED,), id="n1-lists-it"),
    ],
)
def test_one_image_proven_on_a_node_leaves_the_other_to_a_helper_there(
    runs: str, listed: tuple[str, ...]
) -> None:
    # n1 is proven to hold the new resource-monitor build (a pod there runs it, or the node
    # lists it), never the new pods-monitor one: it still needs a helper, and nothing is patched.
    work = deployment(
        "api",
        {"api": f"tracebloc/resource-monitor@{D0}", "side": f"tracebloc/pods-monitor@{D0}"},
        replicas=1,
    )
    work["metadata"]["uid"], work["apiVersion"] = UID, "apps/v1"
    running = {"api": runs, "side": f"docker.io/tracebloc/pods-monitor@{D0}"}
    tick = Tick(spec(target("api", api=RM, side=PM), prePull=True, pullBudget={"reserve": 0}))
    tick.pre_pull_pods = True
    tick.nodes = NodeInventory(
        dict(
            [
                node_images(
                    {"metadata": {"name": "n1"}, "status": {"images": [{"names": list(listed)}]}}
                )
            ]
        )
    )
    found = evidence(work, [pod("api-0", running, node="n1")], {"api": D1, "side": D2}, helpers=[])
    plan = tick.run({key("api"): found}, advance=timedelta(seconds=5))
    assert plan.patches == ()
    assert [(c.node, c.pulls) for c in plan.pod_creates] == [("n1", (((HUB, "anonymous"), 2),))]
