"""imagerefresh.offline: the evidence rules of offline readiness, table by table.

Each row is one workload: its template, its pods (which node, what each container pulled), the
nodes' image lists, and the verdict for its declared containers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pytest

from imagerefresh.offline import (
    MAX_NAMED_NODES,
    NodeImages,
    NodeInventory,
    PodImages,
    TemplateImage,
    held_name,
    offline_readiness,
    workload_readiness,
)

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
API = "docker.io/tracebloc/jobs-manager"
SIDECAR = "docker.io/library/busybox"
PINNED = f"{API}@{D1}"
SIDECAR_PINNED = f"{SIDECAR}@{D2}"


def tmpl(
    name: str, image: str, policy: str | None = "IfNotPresent", init: bool = False
) -> TemplateImage:
    return TemplateImage(name, image, policy, init)


def on(node: str, running: Mapping[str, str | None] | None = None, **pulled: str) -> PodImages:
    return PodImages(node, MappingProxyType(pulled), MappingProxyType(dict(running or {})))


def nodes(
    complete: bool = True, **held: Sequence[str] | tuple[Sequence[str], bool]
) -> NodeInventory:
    inventory = {}
    for name, images in held.items():
        full = False
        if isinstance(images, tuple):
            images, full = images
        inventory[name] = NodeImages(frozenset(held_name(i) or i for i in images), full)
    return NodeInventory(MappingProxyType(inventory), complete)


ALONE = [tmpl("api", PINNED)]
WITH_SIDECAR = [tmpl("api", PINNED), tmpl("sidecar", SIDECAR_PINNED)]


def verdict(
    template: Sequence[TemplateImage],
    pods: Sequence[PodImages],
    inventory: NodeInventory | None = None,
    scheduled: int | None = None,
    declared: Sequence[str] = ("api",),
    pinned_only: bool = False,
) -> tuple[bool, str, tuple[str, ...]]:
    result = offline_readiness(
        template, pods, declared, inventory, scheduled, pinned_only=pinned_only
    )["api"]
    return result.ready, result.reason, result.nodes


READY_ROWS: list[tuple[str, dict[str, Any]]] = [
    (
        "a pod on its node pulled the pinned image",
        {"template": ALONE, "pods": [on("a", api=PINNED)]},
    ),
    (
        "a pod started from a tag of the repository reports the pinned digest",
        {"template": ALONE, "pods": [on("a", {"api": D1}, api=f"{API}:prod")]},
    ),
    (
        "the node lists the image where no pod proves it",
        {
            "template": ALONE,
            "pods": [on("a", api=f"{API}@{D2}")],
            "inventory": nodes(a=[f"{API}@{D1}"]),
        },
    ),
    (
        "the node lists it in the familiar form",
        {
            "template": ALONE,
            "pods": [on("a")],
            "inventory": nodes(a=[f"tracebloc/jobs-manager@{D1}"]),
        },
    ),
    (
        "an undeclared sidecar on a tag the node holds restarts from the cache",
        {
            "template": [tmpl("api", PINNED), tmpl("sidecar", "busybox:1.36")],
            "pods": [on("a", api=PINNED, sidecar="busybox:1.36")],
        },
    ),
    (
        "every node proves every image, by pods or by lists",
        {
            "template": WITH_SIDECAR,
            "pods": [on("a", api=PINNED, sidecar=SIDECAR_PINNED), on("b", api=PINNED)],
            "inventory": nodes(b=[SIDECAR_PINNED]),
        },
    ),
    (
        "a DaemonSet with a pod on each scheduled node",
        {"template": ALONE, "pods": [on("a", api=PINNED), on("b", api=PINNED)], "scheduled": 2},
    ),
    (
        "Never is not Always",
        {"template": [tmpl("api", PINNED, "Never")], "pods": [on("a", api=PINNED)]},
    ),
    (
        "a pod that proves nothing about any node is not a node to prove",
        {"template": ALONE, "pods": [on("a", api=PINNED), PodImages(None)]},
    ),
]


@pytest.mark.parametrize(("row", "case"), READY_ROWS, ids=[r for r, _ in READY_ROWS])
def test_a_workload_every_node_of_which_proves_every_image_is_ready(
    row: str, case: dict[str, Any]
) -> None:
    ready, reason, named = verdict(**case)
    assert (ready, named) == (True, ()), reason
    assert reason == "every pod would restart from its node's cache"


ASKS = ": every start asks the registry; set IfNotPresent"
NO_PODS = "no pods prove it: no pod of the workload runs on any node (scaled to zero?)"
NO_NODE_READS = (
    "no pod there runs the template's images and the operator may not read nodes (enable node "
    "reads in the chart to use their image lists)"
)
LACKS = "the node does not hold the template's images; a restart there needs the registry"

NOT_READY_ROWS: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    (
        "the declared container on a tag",
        {"template": [tmpl("api", f"{API}:prod")], "pods": [on("a", api=f"{API}:prod")]},
        f"template on a tag: {API}:prod restarts offline with whichever build the node cached; "
        "pin it by digest (the policy pins it when it refreshes)",
        (),
    ),
    (
        "Always on the declared container",
        {"template": [tmpl("api", PINNED, "Always")], "pods": [on("a", api=PINNED)]},
        f"imagePullPolicy: Always on container 'api'{ASKS}",
        (),
    ),
    (
        "Always on an undeclared sidecar",
        {
            "template": [tmpl("api", PINNED), tmpl("sidecar", SIDECAR_PINNED, "Always")],
            "pods": [on("a", api=PINNED, sidecar=SIDECAR_PINNED)],
        },
        f"imagePullPolicy: Always on container 'sidecar'{ASKS}",
        (),
    ),
    (
        "Always on an init container",
        {
            "template": [tmpl("setup", SIDECAR_PINNED, "Always", init=True), *ALONE],
            "pods": [on("a", api=PINNED, setup=SIDECAR_PINNED)],
        },
        f"imagePullPolicy: Always on init container 'setup'{ASKS}",
        (),
    ),
    (
        "an image the kubelet's policy cannot be known for",
        {"template": [*ALONE, tmpl("sidecar", "Not A Reference", None)], "pods": [on("a")]},
        "container 'sidecar' names an unreadable image: fix the template",
        (),
    ),
    (
        "scaled to zero",
        {"template": ALONE, "pods": []},
        NO_PODS,
        (),
    ),
    (
        "only pods that prove nothing (finished, unscheduled, terminating)",
        {"template": ALONE, "pods": [PodImages(None), PodImages(None)]},
        NO_PODS,
        (),
    ),
    (
        "a node whose pod runs another build, with node reads off",
        {"template": ALONE, "pods": [on("a", api=PINNED), on("b", api=f"{API}@{D2}")]},
        f"not proven on node b: {NO_NODE_READS}",
        ("b",),
    ),
    (
        "a pod that never pulled (ErrImagePull: no imageID)",
        {"template": ALONE, "pods": [on("a")]},
        f"not proven on node a: {NO_NODE_READS}",
        ("a",),
    ),
    (
        "a pod of another repository reporting the same digest",
        {"template": ALONE, "pods": [on("a", {"api": D1}, api="docker.io/evil/miner:prod")]},
        f"not proven on node a: {NO_NODE_READS}",
        ("a",),
    ),
    (
        "the sidecar's image not proven where the declared one is",
        {"template": WITH_SIDECAR, "pods": [on("a", api=PINNED)], "inventory": nodes(a=[])},
        f"not proven on node a: {LACKS}",
        ("a",),
    ),
    (
        "a node list at the kubelet's cap without the image: unknown, not missing",
        {
            "template": ALONE,
            "pods": [on("a")],
            "inventory": nodes(a=([f"{API}@{D2}"], True)),
        },
        "not proven on node a: the node's image list is at the kubelet's cap "
        "(nodeStatusMaxImages) and does not name the image: unknown, not missing; a pod running "
        "there will prove it",
        ("a",),
    ),
    (
        "a node beyond the operator's node list cap: unknown",
        {"template": ALONE, "pods": [on("a")], "inventory": nodes(complete=False)},
        "not proven on node a: the node list stopped at its cap before these nodes; unknown, "
        "not missing",
        ("a",),
    ),
    (
        "the nodes could not be listed",
        {"template": ALONE, "pods": [on("a")], "inventory": NodeInventory.failed("403")},
        "not proven on node a: the nodes could not be listed (403): unknown, not missing",
        ("a",),
    ),
    (
        "a DaemonSet scheduled on more nodes than its pods run on",
        {"template": ALONE, "pods": [on("a", api=PINNED)], "scheduled": 3},
        "2 scheduled node(s) have no pod of it to prove it",
        (),
    ),
    (
        "a tag on an undeclared container of a workload no policy pins",
        {
            "template": [tmpl("api", PINNED), tmpl("sidecar", "busybox:1.36")],
            "pods": [on("a", api=PINNED, sidecar="busybox:1.36")],
            "pinned_only": True,
        },
        "template on a tag: container 'sidecar' runs busybox:1.36, and no policy pins it; "
        "offline, a restart runs whichever build the node cached",
        (),
    ),
    (
        "a declared container whose pull policy cannot be known",
        {"template": [tmpl("api", PINNED, None)], "pods": [on("a", api=PINNED)]},
        "container 'api' names an unreadable image: fix the template",
        (),
    ),
    (
        "a declared container with an unreadable image is unreadable, not on a tag",
        {"template": [tmpl("api", "Not A Ref", None)], "pods": [on("a")]},
        "container 'api' names an unreadable image: fix the template",
        (),
    ),
    (
        "the first image listed on the node, the second nowhere",
        {
            "template": WITH_SIDECAR,
            "pods": [on("a")],
            "inventory": nodes(a=[PINNED]),
        },
        f"not proven on node a: {LACKS}",
        ("a",),
    ),
    (
        "a listed node lacking the image, in a node list that stopped at its cap",
        {"template": ALONE, "pods": [on("a")], "inventory": nodes(False, a=[SIDECAR_PINNED])},
        f"not proven on node a: {LACKS}",
        ("a",),
    ),
    (
        "a pod that pulled an image that cannot be read proves nothing",
        {"template": ALONE, "pods": [on("a", {"api": D1}, api="Not A Ref")]},
        f"not proven on node a: {NO_NODE_READS}",
        ("a",),
    ),
    (
        "a DaemonSet short of pods, and a node of it lacking the image",
        {
            "template": ALONE,
            "pods": [on("a", api=PINNED), on("b")],
            "inventory": nodes(a=[], b=[]),
            "scheduled": 3,
        },
        f"not proven on node b: {LACKS}; 1 scheduled node(s) have no pod of it to prove it",
        ("b",),
    ),
]


@pytest.mark.parametrize(
    ("row", "case", "reason", "named"), NOT_READY_ROWS, ids=[r[0] for r in NOT_READY_ROWS]
)
def test_a_workload_that_would_need_the_registry_to_restart_says_why(
    row: str, case: dict[str, Any], reason: str, named: tuple[str, ...]
) -> None:
    ready, said, nodes_named = verdict(**case)
    assert (ready, said, nodes_named) == (False, reason, named)


def test_a_declared_container_on_a_tag_is_not_ready_while_its_pinned_peer_is() -> None:
    template = [tmpl("api", PINNED), tmpl("monitor", f"{SIDECAR}:1.36")]
    pods = [on("a", api=PINNED, monitor=f"{SIDECAR}:1.36")]
    verdicts = offline_readiness(template, pods, ("api", "monitor"), None)
    assert verdicts["api"].ready
    assert not verdicts["monitor"].ready
    assert "template on a tag" in verdicts["monitor"].reason


def test_a_verdict_names_at_most_sixteen_nodes_and_counts_the_rest() -> None:
    pods = [on(f"n{i:02}") for i in range(MAX_NAMED_NODES + 4)]
    ready, reason, named = verdict(ALONE, pods)
    assert not ready
    assert named == tuple(f"n{i:02}" for i in range(MAX_NAMED_NODES))
    assert f"n{MAX_NAMED_NODES - 1:02} and 4 more:" in reason


def node(name: str, *names: list[str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"images": [{"names": n} for n in names]}}


def test_a_node_list_reads_both_name_forms_and_marks_a_list_at_the_cap_full() -> None:
    listed = [[f"{API}@{D1}", f"{API}:prod"], ["busybox:1.36"]]
    inventory = NodeInventory.from_api([node("a", *listed), node("b", *listed[:1])], True, cap=2)
    assert inventory.nodes["a"] == NodeImages(
        frozenset({f"{API}@{D1}", f"{API}:prod", f"{SIDECAR}:1.36"}), full=True
    )
    assert not inventory.nodes["b"].full
    uncapped = NodeInventory.from_api([node("a", *listed)], True, cap=0)
    assert not uncapped.nodes["a"].full


def test_a_node_list_skips_what_it_cannot_read_and_never_reads_past_its_bound() -> None:
    hostile = [
        {"metadata": {}, "status": {"images": []}},  # no name
        {"metadata": {"name": "b"}, "status": {"images": "many"}},
        {"metadata": {"name": "c"}, "status": {"images": [{"names": ["Not A Ref", 7]}, "x"]}},
        node("d", *[[f"{API}:t{i}"] for i in range(2_000)]),
    ]
    inventory = NodeInventory.from_api(hostile, True, cap=0)
    assert set(inventory.nodes) == {"b", "c", "d"}
    assert inventory.nodes["b"] == NodeImages(frozenset(), full=True)  # unreadable: unknown
    assert inventory.nodes["c"] == NodeImages(frozenset(), full=False)
    assert len(inventory.nodes["d"].images) == 1_024
    assert inventory.nodes["d"].full  # the rest is unknown, never missing


POD_ROWS: list[tuple[str, dict[str, Any], str | None, dict[str, str]]] = [
    (
        "a running pod on its node, one container pulled",
        {
            "spec": {
                "nodeName": "a",
                "containers": [{"name": "api", "image": PINNED}, {"name": "s", "image": "x"}],
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "api", "imageID": f"{API}@{D1}"},
                    {"name": "s", "imageID": ""},
                ],
            },
        },
        "a",
        {"api": PINNED},
    ),
    (
        "an init container that pulled",
        {
            "spec": {"nodeName": "a", "initContainers": [{"name": "i", "image": "busybox"}]},
            "status": {
                "phase": "Pending",
                "initContainerStatuses": [{"name": "i", "imageID": "x"}],
            },
        },
        "a",
        {"i": "busybox"},
    ),
    (
        "a finished pod proves nothing about its node",
        {"spec": {"nodeName": "a"}, "status": {"phase": "Succeeded"}},
        None,
        {},
    ),
    (
        "a terminating pod proves nothing about its node",
        {
            "metadata": {"deletionTimestamp": "2026-12-04T00:00:00Z"},
            "spec": {"nodeName": "a"},
            "status": {"phase": "Running"},
        },
        None,
        {},
    ),
    ("an unscheduled pod", {"spec": {}, "status": {"phase": "Pending"}}, None, {}),
    (
        "a status for a container the spec does not have",
        {
            "spec": {"nodeName": "a", "containers": []},
            "status": {"phase": "Running", "containerStatuses": [{"name": "x", "imageID": "y"}]},
        },
        "a",
        {},
    ),
]


@pytest.mark.parametrize(
    ("row", "obj", "node_name", "pulled"), POD_ROWS, ids=[r[0] for r in POD_ROWS]
)
def test_a_pod_proves_the_images_its_containers_pulled_on_the_node_it_runs_on(
    row: str, obj: dict[str, Any], node_name: str | None, pulled: dict[str, str]
) -> None:
    proof = PodImages.from_api(obj, {})
    assert proof.node == node_name
    assert dict(proof.pulled) == pulled


@pytest.mark.parametrize(
    ("image", "held"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.25", "docker.io/library/nginx:1.25"),
        (f"nginx:1.25@{D1}", f"docker.io/library/nginx@{D1}"),
        (f"registry.local:5000/a/b@{D1}", f"registry.local:5000/a/b@{D1}"),
        ("Not A Ref", None),
    ],
)
def test_an_image_is_held_by_its_digest_when_pinned_and_by_its_tag_otherwise(
    image: str, held: str | None
) -> None:
    assert held_name(image) == held


def test_a_declared_container_missing_from_the_template_takes_the_workloads_verdict() -> None:
    verdicts = offline_readiness(ALONE, [on("a", api=PINNED)], ("api", "gone"), None)
    assert verdicts["gone"] == verdicts["api"]
    assert verdicts["gone"].ready


def test_a_failed_node_list_knows_no_node_and_says_why() -> None:
    failed = NodeInventory.failed("forbidden")
    assert (dict(failed.nodes), failed.complete, failed.unreadable) == ({}, False, "forbidden")
    ready, _, _ = verdict(ALONE, [on("a", api=PINNED)], failed)
    assert ready  # a pod still proves its node


def test_a_node_list_keeps_whether_it_is_complete_and_its_boundaries() -> None:
    assert not NodeInventory.from_api([], False).complete
    assert NodeInventory.from_api([], True).complete
    exactly = node("a", *[[f"{API}:t{i}"] for i in range(1_024)])
    assert NodeInventory.from_api([exactly], True, cap=0).nodes["a"].full
    one = node("a", [PINNED])
    assert NodeInventory.from_api([one], True, cap=1).nodes["a"].full
    assert not NodeInventory.from_api([one], True, cap=2).nodes["a"].full


def test_a_pod_keeps_the_digests_it_runs_and_names_no_node_it_cannot_read() -> None:
    obj = {"spec": {"nodeName": "a"}, "status": {"phase": "Running"}}
    assert dict(PodImages.from_api(obj, {"api": D1}).running) == {"api": D1}
    for bad in ("", 7):
        odd = {"spec": {"nodeName": bad}, "status": {"phase": "Running"}}
        assert PodImages.from_api(odd, {}).node is None
    no_image = {
        "spec": {"nodeName": "a", "containers": [{"name": "api"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "api", "imageID": "x"}]},
    }
    assert dict(PodImages.from_api(no_image, {}).pulled) == {}


def test_a_node_that_lists_no_images_holds_none() -> None:
    inventory = NodeInventory.from_api([{"metadata": {"name": "a"}, "status": {}}], True)
    assert inventory.nodes["a"] == NodeImages(frozenset(), full=False)
    ready, reason, named = verdict(ALONE, [on("a")], inventory)
    assert (ready, named) == (False, ("a",))
    assert LACKS in reason


def test_a_node_needs_a_name_and_one_whose_status_cannot_be_read_is_unknown() -> None:
    odd = [
        {"metadata": "a", "status": {"images": []}},
        {"metadata": {"name": ""}, "status": {"images": []}},
        {"metadata": {"name": "b"}, "status": "weird"},
    ]
    inventory = NodeInventory.from_api(odd, True)
    assert dict(inventory.nodes) == {"b": NodeImages(frozenset(), full=True)}  # unknown


def test_a_workloads_own_verdict_lets_undeclared_tags_be_unless_asked() -> None:
    template = [tmpl("api", PINNED), tmpl("sidecar", "busybox:1.36")]
    pods = [on("a", api=PINNED, sidecar="busybox:1.36")]
    assert workload_readiness(template, pods, None).ready
    assert not workload_readiness(template, pods, None, pinned_only=True).ready


def test_two_unproven_nodes_are_named_together() -> None:
    ready, reason, named = verdict(ALONE, [on("a"), on("b")], nodes(a=[], b=[]))
    assert (ready, reason, named) == (False, f"not proven on node a, b: {LACKS}", ("a", "b"))


# Whether pods can start on a node now: a pre-pull skips, and names, the nodes that cannot.
LISTED = [{"names": [PINNED]}]
HEALTHY = [
    {"type": "MemoryPressure", "status": "False"},
    {"type": "DiskPressure", "status": "False"},
    {"type": "Ready", "status": "True"},
]
NOT_READY = [{"type": "Ready", "status": "False"}]
CORDONED = {"unschedulable": True}
NODE_STATE_ROWS: list[tuple[str, dict[str, Any], bool, bool]] = [
    ("Ready after its other conditions", {"status": {"conditions": HEALTHY, "images": LISTED}},
     True, True),
    ("not Ready", {"status": {"conditions": NOT_READY, "images": LISTED}}, False, True),
    ("Ready Unknown: its kubelet stopped reporting",
     {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}], "images": LISTED}},
     False, True),
    ("cordoned", {"spec": CORDONED, "status": {"conditions": HEALTHY, "images": LISTED}},
     True, False),
    ("no Ready condition: says nothing, so tried", {"status": {"conditions": [], "images": []}},
     True, True),
    ("conditions that cannot be read", {"status": {"conditions": "Ready"}}, True, True),
    ("an unreadable condition before its Ready",
     {"status": {"conditions": ["Ready", 7, *NOT_READY]}}, False, True),
    ("not Ready, its image list unreadable",
     {"status": {"conditions": NOT_READY, "images": "many"}}, False, True),
    ("cordoned, its image list unreadable",
     {"spec": CORDONED, "status": {"conditions": HEALTHY, "images": "many"}}, True, False),
    ("not Ready, no image list", {"status": {"conditions": NOT_READY}}, False, True),
    ("cordoned, its status unreadable", {"spec": CORDONED, "status": "weird"}, True, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("row", "obj", "ready", "schedulable"), NODE_STATE_ROWS, ids=[r[0] for r in NODE_STATE_ROWS]
)
def test_a_node_is_ready_unless_its_ready_condition_says_not_and_schedulable_unless_cordoned(
    row: str, obj: dict[str, Any], ready: bool, schedulable: bool
) -> None:
    inventory = NodeInventory.from_api([{"metadata": {"name": "a"}, **obj}], True)
    state = inventory.nodes["a"]
    assert (state.ready, state.schedulable) == (ready, schedulable)
