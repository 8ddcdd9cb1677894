"""What the planner reads from the API server's JSON (planner.evidence), seen through plan_tick:
a pod's digest the kubelet did not clearly report is unknown and never adopted; pulls are
counted per pod the controller runs; the namespace allow-list's wildcards."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.models import Phase
from imagerefresh.planner import NamespacePolicy

from support.ticks import JM, NS, Tick, budget, digest, evidence, key, spec, target
from support.workloads import daemonset, deployment, pod

D1 = digest(1)
JM_REPO = "tracebloc/jobs-manager"
HUB = "registry-1.docker.io"
NODE_AGENTS = "tracebloc-node-agents"


@pytest.mark.parametrize(
    ("image_id", "running"),
    [
        # containerd: the digest the tag resolved to.
        (f"docker.io/{JM_REPO}@{D1}", D1),
        # cri-dockerd.
        (f"docker-pullable://{JM_REPO}@{D1}", D1),
        # A name the reference grammar rejects still carries the kubelet's digest.
        (f"Docker.io/Tracebloc/Jobs-Manager@{D1}", D1),
        # Image (config) IDs, not manifest digests: unknown, never a match.
        (D1, None),
        (f"docker://{D1}", None),
        # Another scheme is no manifest digest either, whatever follows it.
        (f"docker://{JM_REPO}@{D1}", None),
        # Not what a kubelet writes: unreadable, so unknown rather than half-trusted.
        (f"{JM_REPO}@x@{D1}", None),
        (f"{JM_REPO}@sha256:abc", None),
        ("", None),
    ],
    ids=[
        "containerd",
        "docker-pullable",
        "unparseable-name",
        "bare-image-id",
        "docker-image-id",
        "other-scheme",
        "two-ats",
        "bad-digest",
        "empty",
    ],
)
def test_only_a_clearly_reported_digest_is_adopted(image_id: str, running: str | None) -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = tick.run(
        {
            key("jobs-manager"): evidence(
                deployment("jobs-manager", {"api": JM}), [pod("p", {"api": image_id})], {"api": D1}
            )
        }
    )
    status = tick.target("jobs-manager")
    assert status.containers[0].running == ((running,) if running else ())
    if running == D1:
        assert (plan.patches, status.phase) == ((), Phase.CURRENT)
    else:
        assert len(plan.patches) == 1
        assert status.phase is Phase.REFRESHING


def test_an_init_container_s_running_digest_is_read_too() -> None:
    work = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}, init_images={"migrate": JM})
    running = pod("p", {"api": f"docker.io/{JM_REPO}@{D1}"})
    running["status"]["initContainerStatuses"] = [
        {"name": "migrate", "imageID": f"docker.io/{JM_REPO}@{D1}", "image": "x", "ready": False}
    ]
    tick = Tick(spec(target("jobs-manager", api=JM, migrate=JM)))
    plan = tick.run({key("jobs-manager"): evidence(work, [running], {"api": D1, "migrate": D1})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.CURRENT
    assert [(c.name, c.running) for c in status.containers] == [("api", (D1,)), ("migrate", (D1,))]


@pytest.mark.parametrize("image", [None, "absent"])
def test_a_container_without_an_image_is_a_conflict_that_says_so(image: str | None) -> None:
    work = deployment("jobs-manager", {"api": JM})
    container: dict[str, Any] = work["spec"]["template"]["spec"]["containers"][0]
    if image == "absent":
        del container["image"]
    else:
        container["image"] = image
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = tick.run({key("jobs-manager"): evidence(work, digests={"api": D1})})
    assert plan.patches == ()
    status = tick.target("jobs-manager")
    assert status.phase is Phase.CONFLICT
    assert status.message == (
        "container 'api' runs an unparseable image: invalid reference: it is empty; "
        "write an image like nginx:1.27"
    )


def test_a_deployment_without_replicas_costs_one_pull_per_image_as_the_api_server_defaults() -> (
    None
):
    work = deployment("jobs-manager", {"api": JM})
    del work["spec"]["replicas"]
    tick = Tick(spec(target("jobs-manager", api=JM), pullBudget={"reserve": 0}))
    plan = tick.run(
        {key("jobs-manager"): evidence(work, digests={"api": D1})},
        {(HUB, "anonymous"): budget(HUB, remaining=1)},
    )
    assert len(plan.patches) == 1
    assert tick.target("jobs-manager").phase is Phase.REFRESHING


@pytest.mark.parametrize(("scheduled", "deferred"), [(0, False), (2, True)])
def test_a_daemonset_costs_a_pull_per_scheduled_node(scheduled: int, deferred: bool) -> None:
    work = daemonset("resource-monitor", {"agent": JM}, namespace=NS, desired=scheduled)
    tick = Tick(spec(target("resource-monitor", "DaemonSet", agent=JM), pullBudget={"reserve": 0}))
    plan = tick.run(
        {key("resource-monitor", "DaemonSet"): evidence(work, digests={"agent": D1})},
        {(HUB, "anonymous"): budget(HUB, remaining=1)},
    )
    status = tick.target("resource-monitor", "DaemonSet")
    if deferred:
        assert plan.patches == ()
        assert status.phase is Phase.DEFERRED
        assert "this refresh needs 2" in status.message
    else:
        assert len(plan.patches) == 1
        assert status.phase is Phase.REFRESHING


def test_a_daemonset_not_yet_scheduled_anywhere_costs_nothing() -> None:
    work = daemonset("resource-monitor", {"agent": JM}, namespace=NS)
    del work["status"]["desiredNumberScheduled"]
    tick = Tick(spec(target("resource-monitor", "DaemonSet", agent=JM), pullBudget={"reserve": 0}))
    plan = tick.run(
        {key("resource-monitor", "DaemonSet"): evidence(work, digests={"agent": D1})},
        {(HUB, "anonymous"): budget(HUB, remaining=0)},
    )
    assert len(plan.patches) == 1


@pytest.mark.parametrize(
    ("pair", "allowed"),
    [
        (("*", NODE_AGENTS), True),  # any policy namespace may reach the node agents
        ((NS, "*"), True),
        (("*", "other"), False),
        (("ops", "*"), False),
    ],
)
def test_the_allow_list_s_wildcards_reach_only_what_they_name(
    pair: tuple[str, str], allowed: bool
) -> None:
    work = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}, namespace=NODE_AGENTS)
    tick = Tick(
        spec(target("jobs-manager", namespace=NODE_AGENTS, api=JM)),
        namespaces=NamespacePolicy(frozenset({pair})),
    )
    tick.run({key("jobs-manager", namespace=NODE_AGENTS): evidence(work, digests={"api": D1})})
    phase = tick.target("jobs-manager", namespace=NODE_AGENTS).phase
    assert phase is (Phase.CURRENT if allowed else Phase.CONFLICT)
