"""`imagerefresh audit --offline`'s findings, as a pure function of what it read: which
workloads would not restart with the registry unreachable, in a policy or not."""

from __future__ import annotations

from typing import Any

from imagerefresh.audit import (
    AuditedPolicy,
    Finding,
    FindingKind,
    OfflineWorkload,
    audit,
    audit_offline,
)
from imagerefresh.models import PolicySpec
from imagerefresh.offline import NodeInventory, PodImages, TemplateImage

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
JM = "tracebloc/jobs-manager:prod"
PINNED = f"docker.io/tracebloc/jobs-manager@{D1}"
PROXY = f"docker.io/tracebloc/proxy@{D2}"
NO_NODES = NodeInventory.from_api([], complete=True)


def policy(name: str, *targets: dict[str, Any], namespace: str = "tracebloc") -> AuditedPolicy:
    return AuditedPolicy(namespace, name, PolicySpec.model_validate({"targets": list(targets)}))


def target(name: str, kind: str = "Deployment", **images: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "name": name,
        "containers": [{"name": n, "image": i} for n, i in images.items()],
    }


CONTROL_PLANE = policy("control-plane", target("jobs-manager", api=JM))


def container(
    name: str, image: str, pull: str = "IfNotPresent", *, init: bool = False
) -> TemplateImage:
    return TemplateImage(name, image, pull, init)


def pod(node: str, *containers: TemplateImage) -> PodImages:
    """A pod on ``node`` that pulled each container's image (its status reports an image ID)."""
    return PodImages(node, {c.name: c.image for c in containers})


def workload(
    name: str,
    *template: TemplateImage,
    nodes: tuple[str, ...] = ("node-a",),
    kind: str = "Deployment",
    namespace: str = "tracebloc",
    scheduled: int | None = None,
) -> OfflineWorkload:
    """A workload with one pod on each of ``nodes``, each proving every container's image."""
    pods = tuple(pod(node, *template) for node in nodes)
    return OfflineWorkload(kind, namespace, name, template, pods, scheduled)


def rows(findings: list[Finding]) -> list[tuple[str, str, str]]:
    assert {f.kind for f in findings} <= {FindingKind.NOT_OFFLINE_READY}
    return [(f.workload, f.container, f.image) for f in findings]


# --- who must be pinned ------------------------------------------------------------------------


def test_a_pinned_workload_whose_pod_proves_its_node_is_clean() -> None:
    live = workload("jobs-manager", container("api", PINNED), nodes=("node-a", "node-b"))
    assert audit_offline([CONTROL_PLANE], [live], NO_NODES) == []


def test_a_pinned_workload_in_no_policy_is_clean_too() -> None:
    live = workload("proxy", container("proxy", PROXY))
    assert audit_offline([], [live], NO_NODES) == []


def test_a_tag_in_a_workload_no_policy_covers_is_a_finding_though_its_nodes_hold_it() -> None:
    live = workload("web", container("nginx", "nginx:1.27"))
    (found,) = audit_offline([CONTROL_PLANE], [live], NO_NODES)
    assert rows([found]) == [("Deployment tracebloc/web", "-", "-")]
    assert found.detail.startswith("template on a tag: container 'nginx' runs nginx:1.27")
    assert "no policy pins it" in found.detail


def test_a_declaration_beyond_the_policys_reach_covers_nothing() -> None:
    elsewhere = policy("control-plane", target("jobs-manager", api=JM), namespace="other")
    live = workload("jobs-manager", container("api", JM), container("sidecar", "busybox:1.36"))
    (found,) = audit_offline([elsewhere], [live], NO_NODES)
    # Judged as a workload in no policy: every container must be pinned, the first one named.
    assert rows([found]) == [("Deployment tracebloc/jobs-manager", "-", "-")]
    assert "container 'api' runs tracebloc/jobs-manager:prod, and no policy pins it" in (
        found.detail
    )


def test_a_declared_container_on_a_tag_is_a_finding_of_its_own() -> None:
    live = workload("jobs-manager", container("api", JM), container("sidecar", "busybox:1.36"))
    (found,) = audit_offline([CONTROL_PLANE], [live], NO_NODES)
    # The tag of the undeclared sidecar is fine: its node holds it, and a policy covers the pod.
    assert rows([found]) == [("Deployment tracebloc/jobs-manager", "api", JM)]
    assert found.detail.startswith(f"template on a tag: {JM} restarts offline with whichever")


def test_a_container_only_an_unreadable_policy_claims_is_held_to_the_declared_rule() -> None:
    # The operator's claim index keeps what can be read of a broken policy's targets.
    broken = AuditedPolicy(
        "tracebloc", "broken", None, "bad", (("Deployment", "tracebloc", "jobs-manager", "api"),)
    )
    live = workload("jobs-manager", container("api", JM), container("sidecar", "busybox:1.36"))
    (found,) = audit_offline([broken], [live], NO_NODES)
    assert rows([found]) == [("Deployment tracebloc/jobs-manager", "api", JM)]
    assert found.detail.startswith(f"template on a tag: {JM} restarts offline with whichever")


def test_always_on_an_undeclared_sidecar_fails_the_whole_workload() -> None:
    live = workload("jobs-manager", container("api", PINNED), container("sidecar", PROXY, "Always"))
    (found,) = audit_offline([CONTROL_PLANE], [live], NO_NODES)
    assert rows([found]) == [("Deployment tracebloc/jobs-manager", "-", "-")]
    assert found.detail.startswith("imagePullPolicy: Always on container 'sidecar'")


def test_always_on_an_init_container_fails_the_whole_workload() -> None:
    live = workload(
        "jobs-manager", container("setup", PROXY, "Always", init=True), container("api", PINNED)
    )
    (found,) = audit_offline([CONTROL_PLANE], [live], NO_NODES)
    assert found.detail.startswith("imagePullPolicy: Always on init container 'setup'")


def test_a_declared_init_container_on_a_tag_is_labelled_as_one() -> None:
    spec = policy("control-plane", target("jobs-manager", setup=JM, api=JM))
    live = workload("jobs-manager", container("setup", JM, init=True), container("api", PINNED))
    assert rows(audit_offline([spec], [live], NO_NODES)) == [
        ("Deployment tracebloc/jobs-manager", "setup (init)", JM)
    ]


def test_an_unreadable_image_fails_the_workload() -> None:
    live = workload("web", TemplateImage("app", "Not An Image", None))
    (found,) = audit_offline([], [live], NO_NODES)
    assert "names an unreadable image" in found.detail


# --- what the pods and nodes prove -------------------------------------------------------------


def test_a_workload_scaled_to_zero_proves_nothing() -> None:
    live = workload("jobs-manager", container("api", PINNED), nodes=())
    (found,) = audit_offline([CONTROL_PLANE], [live], NO_NODES)
    assert rows([found]) == [("Deployment tracebloc/jobs-manager", "-", "-")]
    assert found.detail.startswith("no pods prove it")


def test_a_daemonset_with_fewer_pods_than_scheduled_nodes_is_not_proven() -> None:
    agent = container("agent", PROXY)
    live = workload("agent", agent, kind="DaemonSet", nodes=("node-a", "node-b"), scheduled=3)
    (found,) = audit_offline([], [live], NO_NODES)
    assert found.workload == "DaemonSet tracebloc/agent"
    assert "1 scheduled node(s) have no pod of it to prove it" in found.detail
    everywhere = workload("agent", agent, kind="DaemonSet", nodes=("a", "b", "c"), scheduled=3)
    assert audit_offline([], [everywhere], NO_NODES) == []


def _unpulled(node: str) -> OfflineWorkload:
    """A pinned workload whose one pod, on ``node``, reports no image ID: it proves nothing."""
    template = (container("api", PINNED),)
    return OfflineWorkload("Deployment", "tracebloc", "jobs-manager", template, (PodImages(node),))


def _node(name: str, *images: str, count: int | None = None) -> dict[str, Any]:
    listed = [{"names": [image]} for image in images]
    listed += [{"names": [f"filler/{i}:1"]} for i in range((count or 0) - len(listed))]
    return {"metadata": {"name": name}, "status": {"images": listed}}


def test_a_nodes_image_list_proves_what_its_pods_do_not() -> None:
    holding = NodeInventory.from_api([_node("node-b", PINNED)], complete=True)
    assert audit_offline([CONTROL_PLANE], [_unpulled("node-b")], holding) == []
    (found,) = audit_offline([CONTROL_PLANE], [_unpulled("node-b")], NO_NODES)
    assert found.nodes == ("node-b",)
    assert "the node does not hold the template's images" in found.detail


def test_without_node_lists_only_pods_prove_and_the_reason_says_why() -> None:
    refused = NodeInventory.failed("you may not list nodes")
    (found,) = audit_offline([CONTROL_PLANE], [_unpulled("node-b")], refused)
    assert found.nodes == ("node-b",)
    assert "the nodes could not be listed (you may not list nodes): unknown" in found.detail
    (unread,) = audit_offline([CONTROL_PLANE], [_unpulled("node-b")], None)
    assert unread.nodes == ("node-b",)


def test_a_node_list_at_its_cap_proves_nothing_it_does_not_name() -> None:
    stopped = NodeInventory.from_api([_node("node-a", PINNED)], complete=False)
    (found,) = audit_offline([CONTROL_PLANE], [_unpulled("node-b")], stopped)
    assert found.nodes == ("node-b",)
    assert "the node list stopped at its cap before these nodes" in found.detail
    # A node whose own image list is at the kubelet's cap is unknown, not missing, too.
    full = NodeInventory.from_api([_node("node-b", count=50)], complete=True)
    (capped,) = audit_offline([CONTROL_PLANE], [_unpulled("node-b")], full)
    assert "at the kubelet's cap" in capped.detail


# --- scope and shape ---------------------------------------------------------------------------


def test_only_the_audited_namespaces_are_judged() -> None:
    web = workload("web", container("nginx", "nginx:1.27"), namespace="elsewhere")
    assert audit_offline([], [web], NO_NODES, namespaces=frozenset({"tracebloc"})) == []
    assert len(audit_offline([], [web], NO_NODES, namespaces=frozenset({"elsewhere"}))) == 1


def test_an_offline_finding_renders_as_json_with_its_nodes() -> None:
    (found,) = audit_offline([CONTROL_PLANE], [_unpulled("node-b")], NO_NODES)
    assert found.as_json() == {
        "kind": "not-offline-ready",
        "workload": "Deployment tracebloc/jobs-manager",
        "container": "-",
        "image": "-",
        "detail": found.detail,
        "nodes": ["node-b"],
    }
    # The coverage findings keep their shape: no nodes.
    (uncovered,) = audit([CONTROL_PLANE], [])
    assert "nodes" not in uncovered.as_json()


def test_a_workload_is_read_from_the_api_with_its_init_containers_and_scheduled_nodes() -> None:
    obj = {
        "kind": "DaemonSet",
        "metadata": {"namespace": "ns", "name": "agent"},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "setup", "image": "busybox:latest"}],
                    "containers": [
                        {"name": "agent", "image": PROXY, "imagePullPolicy": "IfNotPresent"}
                    ],
                }
            }
        },
        "status": {"desiredNumberScheduled": 3},
    }
    read = OfflineWorkload.from_api(obj, [PodImages("node-a")])
    assert read.template == (
        TemplateImage("setup", "busybox:latest", "Always", init=True),  # the API's default
        TemplateImage("agent", PROXY, "IfNotPresent"),
    )
    assert (str(read), read.scheduled, read.pods) == (
        "DaemonSet ns/agent",
        3,
        (PodImages("node-a"),),
    )
    unobserved = {**obj, "status": {}}
    assert OfflineWorkload.from_api(unobserved, []).scheduled == 0
    deployment = {**obj, "kind": "Deployment", "status": {"desiredNumberScheduled": 3}}
    assert OfflineWorkload.from_api(deployment, []).scheduled is None


def test_a_template_read_from_the_api_keeps_the_declared_pull_policy_and_fills_gaps() -> None:
    obj = {
        "kind": "Deployment",
        "metadata": {"namespace": "ns", "name": "web"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "web", "image": PROXY, "imagePullPolicy": "Always"},
                        {"image": PINNED},
                        {"name": "bare"},
                    ]
                }
            }
        },
    }
    assert OfflineWorkload.from_api(obj, []).template == (
        TemplateImage("web", PROXY, "Always"),
        TemplateImage("", PINNED, "IfNotPresent"),
        TemplateImage("bare", "", None),  # no image: unreadable, never ready
    )


def test_a_daemonsets_scheduled_count_is_read_only_when_it_is_a_positive_number() -> None:
    def scheduled(value: object) -> int | None:
        obj = {
            "kind": "DaemonSet",
            "metadata": {"namespace": "ns", "name": "agent"},
            "status": {"desiredNumberScheduled": value},
        }
        return OfflineWorkload.from_api(obj, []).scheduled

    assert [scheduled(v) for v in (1, 2, 0, -1, True, "3", None)] == [1, 2, 0, 0, 0, 0, 0]


def test_every_workload_judged_adds_its_findings() -> None:
    idle = [workload(n, container("api", PINNED), nodes=()) for n in ("a", "b")]
    assert [f.workload for f in audit_offline([], idle, NO_NODES)] == [
        "Deployment tracebloc/a",
        "Deployment tracebloc/b",
    ]


def test_a_claimed_daemonset_short_of_pods_is_one_finding_not_two() -> None:
    agent = workload("jobs-manager", container("api", PINNED), kind="DaemonSet", scheduled=3)
    claims = policy("control-plane", target("jobs-manager", kind="DaemonSet", api=JM))
    (found,) = audit_offline([claims], [agent], NO_NODES)
    assert (found.container, found.detail) == (
        "-",
        "2 scheduled node(s) have no pod of it to prove it",
    )


def test_a_claimed_container_on_a_tag_renders_with_no_nodes() -> None:
    tagged = workload("jobs-manager", container("api", JM))
    (found,) = audit_offline([CONTROL_PLANE], [tagged], NO_NODES)
    assert found.as_json()["nodes"] == []


def test_a_claimed_daemonset_short_of_pods_with_an_unproven_node_is_still_one_finding() -> None:
    api = container("api", PINNED)
    agent = OfflineWorkload(
        "DaemonSet",
        "tracebloc",
        "jobs-manager",
        (api,),
        (pod("node-a", api), PodImages("node-b")),
        3,
    )
    claims = policy("control-plane", target("jobs-manager", kind="DaemonSet", api=JM))
    (found,) = audit_offline([claims], [agent], NO_NODES)
    assert found.container == "-"
    assert found.nodes == ("node-b",)
    assert found.detail.endswith("; 1 scheduled node(s) have no pod of it to prove it")
