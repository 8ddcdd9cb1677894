"""The pod guard names exactly what is wrong with a pod, in the words an SRE reads in the
refusal: one problem per forbidden shape, nothing else reported, and each bound (containers,
deadline, pull secrets, tolerations, the helper's user and group) let through at its edge and
refused one step beyond it. Every pod is built and judged inside its test."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.planner.helperpod import Placement, RunAs, helper_manifest
from imagerefresh.planner.podguard import UnsafePod, check_helper_pod, unsafe_pod

D = "sha256:" + "a" * 64
IMAGE = f"tracebloc/resource-monitor@{D}"
REPO = "docker.io/tracebloc/resource-monitor"
# The name helper_manifest gives the helper of IMAGE on n1 for the workload uid-1.
NAME = "imagerefresh-prepull-eee4bcf863d0162c9e66"
MAX_ID = 2_147_483_647
ADVICE = (
    ". imagerefresh creates only helper pods that pull a tracked repository's digest and run "
    "nothing; its images came from the policy's status, which someone other than the operator "
    "wrote — inspect who can update imagerefreshpolicies/status, then reset the policy"
)
OWNER = ("it is not owned by exactly one workload",)
DEADLINE = ("its activeDeadlineSeconds is not 1 to 86400",)
CONTAINERS = ("it needs 1 to 16 containers",)
SECRETS = ("its imagePullSecrets are malformed",)
TOLERATIONS = ("its tolerations are malformed",)
TOLERATION = ("a toleration carries more than key, operator, value, effect, seconds",)
NOT_A_HELPER_CONTAINER = (
    "container None: it is not named pull-0",
    "container None: None is not an image by digest alone",
    "container None: its command is not /imagerefresh-pre-pull",
    "container None: its imagePullPolicy is not IfNotPresent",
    "container None: its security context is not the restricted one",
    "container None: its resources are not requests cpu 1m, memory 4Mi and "
    "limits cpu 10m, memory 16Mi",
)
Pod = dict[str, Any]


def helper(images: Sequence[str] = (IMAGE,), host_network: bool = True) -> Pod:
    placement = Placement("apps/v1", "DaemonSet", "agent", "uid-1", ("regcred",), (), host_network)
    return helper_manifest("ns", placement, "n1", images, timedelta(minutes=10))


def spec(pod: Pod) -> Pod:
    return pod["spec"]


def metadata(pod: Pod) -> Pod:
    return pod["metadata"]


def owner(pod: Pod) -> Pod:
    return pod["metadata"]["ownerReferences"][0]


def container(pod: Pod) -> Pod:
    return pod["spec"]["containers"][0]


def image(value: object) -> Callable[[Pod], None]:
    return lambda p: container(p).update(image=value)


def not_by_digest(value: object) -> tuple[str, ...]:
    return (f"container pull-0: {value!r} is not an image by digest alone",)


def digests(count: int) -> list[str]:
    return [f"tracebloc/resource-monitor@sha256:{index:064x}" for index in range(count)]


REFUSED: dict[str, tuple[Callable[[Pod], None], tuple[str, ...]]] = {
    # The pod itself.
    "a key beside the pod's four": (lambda p: p.update(status={}), ("the pod carries status",)),
    "another apiVersion, the kind right": (
        lambda p: p.update(apiVersion="v1beta1"),
        ("it is not a v1 Pod",),
    ),
    "another kind, the apiVersion right": (lambda p: p.update(kind="Job"), ("it is not a v1 Pod",)),
    "metadata that is not a mapping": (
        lambda p: p.update(metadata=["imagerefresh-prepull-x"]),
        (
            "its name does not start with imagerefresh-prepull-",
            "it names no namespace",
            "its labels are not exactly images.tracebloc.io/pre-pull=<the workload's uid> and "
            "app.kubernetes.io/managed-by=imagerefresh",
            *OWNER,
        ),
    ),
    # Its metadata.
    "an empty namespace": (lambda p: metadata(p).update(namespace=""), ("it names no namespace",)),
    "a namespace that is not a string": (
        lambda p: metadata(p).update(namespace=7),
        ("it names no namespace",),
    ),
    "another managed-by": (
        lambda p: metadata(p)["labels"].update({"app.kubernetes.io/managed-by": "Helm"}),
        (
            "its labels are not exactly images.tracebloc.io/pre-pull=<the workload's uid> and "
            "app.kubernetes.io/managed-by=imagerefresh",
        ),
    ),
    "a label naming another workload": (
        lambda p: metadata(p)["labels"].update({"images.tracebloc.io/pre-pull": "uid-2"}),
        ("its images.tracebloc.io/pre-pull label does not name its owner",),
    ),
    "an owner of another apiVersion alone": (
        lambda p: owner(p).update(apiVersion="apps/v1beta2"),
        OWNER,
    ),
    "an owner of another kind alone": (lambda p: owner(p).update(kind="ReplicaSet"), OWNER),
    "an owner without a uid alone": (lambda p: owner(p).pop("uid"), OWNER),
    "an owner with an empty uid alone": (lambda p: owner(p).update(uid=""), OWNER),
    "a controller owner": (lambda p: owner(p).update(controller=True), OWNER),
    "an owner carrying another key alone": (
        lambda p: owner(p).update(blockOwnerDeletion=True),
        OWNER,
    ),
    "two owners": (
        lambda p: metadata(p)["ownerReferences"].append(dict(owner(p))),
        OWNER,
    ),
    # Its spec.
    "two keys beside the spec's, named in order": (
        lambda p: spec(p).update(volumes=[], hostPID=True),
        ("spec carries hostPID, volumes",),
    ),
    "an empty node name": (lambda p: spec(p).update(nodeName=""), ("it names no node",)),
    "a node name that is not a string": (
        lambda p: spec(p).update(nodeName=["n1"]),
        ("it names no node",),
    ),
    "restarts": (
        lambda p: spec(p).update(restartPolicy="Always"),
        ("its restartPolicy is not Never",),
    ),
    "a deadline of 0": (lambda p: spec(p).update(activeDeadlineSeconds=0), DEADLINE),
    "a deadline one past the longest": (
        lambda p: spec(p).update(activeDeadlineSeconds=86_401),
        DEADLINE,
    ),
    "a deadline that is a boolean": (
        lambda p: spec(p).update(activeDeadlineSeconds=True),
        DEADLINE,
    ),
    "a deadline that is text": (lambda p: spec(p).update(activeDeadlineSeconds="600"), DEADLINE),
    "a token": (
        lambda p: spec(p).update(automountServiceAccountToken=True),
        ("it would mount a service account token",),
    ),
    "service links left on": (
        lambda p: spec(p).pop("enableServiceLinks"),
        ("its service links are on",),
    ),
    "a hostNetwork that is text": (
        lambda p: spec(p).update(hostNetwork="true"),
        ("its hostNetwork is not a boolean",),
    ),
    "a hostNetwork of 1": (
        lambda p: spec(p).update(hostNetwork=1),
        ("its hostNetwork is not a boolean",),
    ),
    "a hostNetwork of 0": (
        lambda p: spec(p).update(hostNetwork=0),
        ("its hostNetwork is not a boolean",),
    ),
    "an fsGroup": (
        lambda p: spec(p)["securityContext"].update(fsGroup=0),
        ("its pod security context is not the restricted one",),
    ),
    "the root user": (
        lambda p: spec(p)["securityContext"].update(runAsUser=0),
        ("its runAsUser is not a number from 1 to 2147483647",),
    ),
    "a group one past the largest": (
        lambda p: spec(p)["securityContext"].update(runAsGroup=MAX_ID + 1),
        ("its runAsGroup is not a number from 1 to 2147483647",),
    ),
    "pull secrets that are one text": (
        lambda p: spec(p).update(imagePullSecrets="regcred"),
        SECRETS,
    ),
    "pull secrets that are one mapping": (
        lambda p: spec(p).update(imagePullSecrets={"name": "regcred"}),
        SECRETS,
    ),
    "17 pull secrets": (
        lambda p: spec(p).update(imagePullSecrets=[{"name": f"s{i}"} for i in range(17)]),
        SECRETS,
    ),
    "a pull secret with more than a name": (
        lambda p: spec(p).update(imagePullSecrets=[{"name": "a", "namespace": "b"}]),
        ("an imagePullSecret carries more than a name",),
    ),
    "tolerations that are one mapping": (
        lambda p: spec(p).update(tolerations={"key": "k"}),
        TOLERATIONS,
    ),
    "65 tolerations": (
        lambda p: spec(p).update(tolerations=[{"operator": "Exists"}] * 65),
        TOLERATIONS,
    ),
    "a toleration with another key": (
        lambda p: spec(p).update(tolerations=[{"operator": "Exists", "x": 1}]),
        TOLERATION,
    ),
    "an empty toleration": (lambda p: spec(p).update(tolerations=[{}]), TOLERATION),
    "a toleration that is a list of its keys": (
        lambda p: spec(p).update(tolerations=[["key", "operator"]]),
        TOLERATION,
    ),
    "no containers": (lambda p: spec(p).pop("containers"), CONTAINERS),
    "containers that are one mapping": (
        lambda p: spec(p).update(containers={"name": "pull-0"}),
        CONTAINERS,
    ),
    "an empty list of containers": (lambda p: spec(p).update(containers=[]), CONTAINERS),
    "a container that is not a mapping": (
        lambda p: spec(p).update(containers=["pull-0"]),
        NOT_A_HELPER_CONTAINER,
    ),
    # Its container.
    "an env var": (
        lambda p: container(p).update(env=[{"name": "X", "value": "y"}]),
        ("container pull-0 carries env",),
    ),
    "another container name": (
        lambda p: container(p).update(name="agent"),
        ("container agent: it is not named pull-0",),
    ),
    "an image by tag": (
        image("tracebloc/resource-monitor:prod"),
        not_by_digest("tracebloc/resource-monitor:prod"),
    ),
    "an image by neither tag nor digest": (
        image("tracebloc/resource-monitor"),
        not_by_digest("tracebloc/resource-monitor"),
    ),
    "a tag beside the digest": (
        image(f"tracebloc/resource-monitor:prod@{D}"),
        not_by_digest(f"tracebloc/resource-monitor:prod@{D}"),
    ),
    "an image that is no reference": (
        image("Tracebloc/Monitor@x"),
        not_by_digest("Tracebloc/Monitor@x"),
    ),
    "an image that is a number": (image(5), not_by_digest(5)),
    "no image": (lambda p: container(p).pop("image"), not_by_digest(None)),
    "another repository": (
        image(f"evil/miner@{D}"),
        ("container pull-0: docker.io/evil/miner is not a tracked repository of the target",),
    ),
    "another command": (
        lambda p: container(p).update(command=["/bin/sh"]),
        ("container pull-0: its command is not /imagerefresh-pre-pull",),
    ),
    "pulled Always": (
        lambda p: container(p).update(imagePullPolicy="Always"),
        ("container pull-0: its imagePullPolicy is not IfNotPresent",),
    ),
    "a privileged container": (
        lambda p: container(p)["securityContext"].update(privileged=True),
        ("container pull-0: its security context is not the restricted one",),
    ),
    "more memory": (
        lambda p: container(p)["resources"]["limits"].update(memory="8Gi"),
        (
            "container pull-0: its resources are not requests cpu 1m, memory 4Mi and "
            "limits cpu 10m, memory 16Mi",
        ),
    ),
}


@pytest.mark.parametrize("shape", sorted(REFUSED))
def test_each_forbidden_shape_is_refused_with_exactly_its_own_problem(shape: str) -> None:
    mutate, expected = REFUSED[shape]
    pod = helper()
    mutate(pod)
    assert unsafe_pod(pod, {REPO}) == expected


def test_seventeen_containers_are_refused_as_too_many_alone() -> None:
    assert unsafe_pod(helper(digests(17)), {REPO}) == CONTAINERS


ALLOWED: dict[str, Callable[[Pod], None]] = {
    "the helper as built": lambda p: None,
    "a deadline of 1 second": lambda p: spec(p).update(activeDeadlineSeconds=1),
    "the longest deadline": lambda p: spec(p).update(activeDeadlineSeconds=86_400),
    "the lowest user and group": lambda p: spec(p)["securityContext"].update(
        runAsUser=1, runAsGroup=1
    ),
    "the highest user and group": lambda p: spec(p)["securityContext"].update(
        runAsUser=MAX_ID, runAsGroup=MAX_ID
    ),
    "no pull secrets": lambda p: spec(p).pop("imagePullSecrets"),
    "16 pull secrets": lambda p: spec(p).update(
        imagePullSecrets=[{"name": f"s{i}"} for i in range(16)]
    ),
    "64 tolerations": lambda p: spec(p).update(
        tolerations=[{"key": f"k{i}", "operator": "Exists"} for i in range(64)]
    ),
    "hostNetwork written false": lambda p: spec(p).update(hostNetwork=False),
    "no hostNetwork": lambda p: spec(p).pop("hostNetwork"),
}


@pytest.mark.parametrize("shape", sorted(ALLOWED))
def test_a_helper_at_the_edge_of_each_bound_is_let_through(shape: str) -> None:
    pod = helper()
    ALLOWED[shape](pod)
    assert unsafe_pod(pod, {REPO}) == ()
    check_helper_pod(pod, {REPO})


def test_sixteen_containers_are_let_through() -> None:
    pod = helper(digests(16))
    assert [c["name"] for c in pod["spec"]["containers"]] == [f"pull-{i}" for i in range(16)]
    assert unsafe_pod(pod, {REPO}) == ()


def test_a_helper_on_a_workload_without_host_network_is_let_through_as_built() -> None:
    pod = helper(host_network=False)
    assert "hostNetwork" not in pod["spec"]
    assert unsafe_pod(pod, {REPO}) == ()


def test_the_refusal_names_the_pod_every_problem_and_the_advice() -> None:
    pod = helper()
    spec(pod).update(restartPolicy="Always", automountServiceAccountToken=True)
    with pytest.raises(UnsafePod) as refused:
        check_helper_pod(pod, {REPO})
    assert str(refused.value) == (
        f"refused to create pre-pull pod {NAME!r}: its restartPolicy is not Never; "
        f"it would mount a service account token{ADVICE}"
    )


def test_the_refusal_of_a_pod_without_a_name_says_so() -> None:
    pod = helper()
    metadata(pod).pop("name")
    with pytest.raises(UnsafePod) as refused:
        check_helper_pod(pod, {REPO})
    assert str(refused.value) == (
        "refused to create pre-pull pod None: its name does not start with "
        f"imagerefresh-prepull-{ADVICE}"
    )


def test_a_helper_user_and_group_may_be_1_or_the_largest_id() -> None:
    assert (RunAs(1, 1).user, RunAs(1, 1).group) == (1, 1)
    assert (RunAs(MAX_ID, MAX_ID).user, RunAs(MAX_ID, MAX_ID).group) == (MAX_ID, MAX_ID)


@pytest.mark.parametrize(
    ("user", "group", "value"),
    [(0, 1, 0), (1, 0, 0), (MAX_ID + 1, None, MAX_ID + 1), (None, -1, -1)],
    ids=["root user", "root group", "a user past the largest", "a negative group"],
)
def test_a_helper_user_or_group_out_of_bounds_is_refused_naming_the_value(
    user: int | None, group: int | None, value: int
) -> None:
    said = f"a helper's user and group are 1 to {MAX_ID}, not {value}"
    with pytest.raises(ValueError, match=f"^{re.escape(said)}$"):
        RunAs(user, group)
