"""status.targets[].containers[].offline as the planner records it: whether each declared
container's pods would restart with the registry unreachable, the reason and the nodes not
proven, read from the pods, the nodes' image lists and (for a DaemonSet) its scheduled count."""

from __future__ import annotations

from imagerefresh.models import OfflineStatus, Phase
from imagerefresh.offline import NodeImages, NodeInventory

from support.ticks import NS, RM, Tick, digest, evidence, key, spec, target
from support.workloads import Json, daemonset, deployment, pod

D0 = digest(0)
PINNED = f"tracebloc/resource-monitor@{D0}"
PULLED = f"docker.io/tracebloc/resource-monitor@{D0}"
READY = OfflineStatus(ready=True, reason="every pod would restart from its node's cache")


def proving(name: str, node: str) -> Json:
    """A pod on ``node`` that pulled the template's image: it proves the node holds it."""
    return pod(name, {"app": PULLED}, node=node, images={"app": PINNED})


def placed(name: str, node: str) -> Json:
    """A pod on ``node`` whose status reports no image pulled: it proves nothing."""
    return pod(name, {"app": None}, node=node, images={"app": PINNED})


def offline_of(tick: Tick, name: str, kind: str = "Deployment") -> list[OfflineStatus | None]:
    return [c.offline for c in tick.target(name, kind=kind).containers]


def test_a_daemonset_scheduled_on_more_nodes_than_its_pods_prove_is_not_ready_offline() -> None:
    tick = Tick(spec(target("agent", kind="DaemonSet", namespace=NS, app=RM)))
    agent = daemonset("agent", {"app": PINNED}, namespace=NS, desired=3)
    found = evidence(agent, [proving("a1", "n1"), proving("a2", "n2")], digests={"app": D0})
    tick.run({key("agent", kind="DaemonSet"): found})
    assert offline_of(tick, "agent", kind="DaemonSet") == [
        OfflineStatus(ready=False, reason="1 scheduled node(s) have no pod of it to prove it")
    ]


def test_a_deployment_s_replicas_sharing_a_node_are_ready_offline_where_their_pods_prove_it() -> (
    None
):
    # Replicas are not nodes: three pods on two nodes prove both nodes, and nothing is missing.
    tick = Tick(spec(target("api", app=RM)))
    api = deployment("api", {"app": PINNED}, replicas=3)
    pods = [proving("api-0", "n1"), proving("api-1", "n1"), proving("api-2", "n2")]
    tick.run({key("api"): evidence(api, pods, digests={"app": D0})})
    assert offline_of(tick, "api") == [READY]


def test_a_node_neither_a_pod_nor_its_image_list_proves_is_named_with_the_reason() -> None:
    tick = Tick(spec(target("api", app=RM)))
    tick.nodes = NodeInventory({"n1": NodeImages(frozenset()), "n2": NodeImages(frozenset())})
    api = deployment("api", {"app": PINNED}, replicas=2)
    tick.run(
        {
            key("api"): evidence(
                api, [proving("api-0", "n1"), placed("api-1", "n2")], digests={"app": D0}
            )
        }
    )
    assert offline_of(tick, "api") == [
        OfflineStatus(
            ready=False,
            reason="not proven on node n2: the node does not hold the template's images; a "
            "restart there needs the registry",
            nodes=("n2",),
        )
    ]


def test_a_node_s_image_list_proves_what_no_pod_there_does() -> None:
    tick = Tick(spec(target("api", app=RM)))
    tick.nodes = NodeInventory({"n1": NodeImages(frozenset({PULLED}))})
    api = deployment("api", {"app": PINNED})
    tick.run({key("api"): evidence(api, [placed("api-0", "n1")], digests={"app": D0})})
    assert offline_of(tick, "api") == [READY]


def test_a_suspended_policy_drops_the_offline_verdicts_of_an_earlier_tick() -> None:
    tick = Tick(spec(target("api", app=RM)))
    found = {
        key("api"): evidence(
            deployment("api", {"app": PINNED}), [proving("api-0", "n1")], digests={"app": D0}
        )
    }
    tick.run(found)
    assert offline_of(tick, "api") == [READY]
    before = tick.target("api").containers
    tick.spec = tick.spec.model_copy(update={"suspend": True})
    tick.run(found)
    # Not assessed while suspended: an earlier verdict would report another time as now.
    assert tick.target("api").phase is Phase.SUSPENDED
    assert offline_of(tick, "api") == [None]
    assert [c.model_copy(update={"offline": None}) for c in before] == list(
        tick.target("api").containers
    )
