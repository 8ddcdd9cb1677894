"""The last guard before a pod is created lets through the pre-pull helper and nothing else:
every shape a status writer or a bug could smuggle in is refused, naming what is wrong."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.planner.helperpod import LABEL, Placement, helper_manifest
from imagerefresh.planner.podguard import UnsafePod, check_helper_pod, unsafe_pod

D = "sha256:" + "a" * 64
REPO = "docker.io/tracebloc/resource-monitor"
PLACEMENT = Placement("apps/v1", "DaemonSet", "agent", "uid-1", ("regcred",), (), True)
Pod = dict[str, Any]


def helper() -> Pod:
    return helper_manifest(
        "ns", PLACEMENT, "n1", [f"tracebloc/resource-monitor@{D}"], timedelta(minutes=10)
    )


def container(pod: Pod) -> Pod:
    return pod["spec"]["containers"][0]


def test_the_helper_the_planner_builds_passes() -> None:
    check_helper_pod(helper(), {REPO})


MUTATIONS: dict[str, tuple[Callable[[Pod], None], str]] = {
    "an image by tag": (
        lambda p: container(p).update(image="tracebloc/resource-monitor:prod"),
        "not an image by digest",
    ),
    "a tag beside the digest": (
        lambda p: container(p).update(image=f"tracebloc/resource-monitor:prod@{D}"),
        "not an image by digest",
    ),
    "another repository": (
        lambda p: container(p).update(image=f"evil/miner@{D}"),
        "not a tracked repository",
    ),
    "a volume": (
        lambda p: p["spec"].update(volumes=[{"name": "x", "hostPath": {"path": "/"}}]),
        "spec carries volumes",
    ),
    "an env var": (
        lambda p: container(p).update(
            env=[{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
        ),
        "carries env",
    ),
    "another command": (
        lambda p: container(p).update(command=["/bin/sh", "-c", "curl evil"]),
        "its command is not",
    ),
    "args": (lambda p: container(p).update(args=["x"]), "carries args"),
    "a token": (
        lambda p: p["spec"].update(automountServiceAccountToken=True),
        "service account token",
    ),
    "privileged": (
        lambda p: container(p)["securityContext"].update(privileged=True),
        "security context",
    ),
    "root": (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "pod security context"),
    "an init container": (
        lambda p: p["spec"].update(initContainers=[container(p)]),
        "spec carries initContainers",
    ),
    "hostPID": (lambda p: p["spec"].update(hostPID=True), "spec carries hostPID"),
    "no deadline": (lambda p: p["spec"].pop("activeDeadlineSeconds"), "activeDeadlineSeconds"),
    "a long deadline": (
        lambda p: p["spec"].update(activeDeadlineSeconds=86_401),
        "activeDeadlineSeconds",
    ),
    "restarts": (lambda p: p["spec"].update(restartPolicy="Always"), "restartPolicy"),
    "no node": (lambda p: p["spec"].pop("nodeName"), "names no node"),
    "a controller owner": (
        lambda p: p["metadata"]["ownerReferences"][0].update(controller=True),
        "owned by exactly one workload",
    ),
    "no owner": (lambda p: p["metadata"].pop("ownerReferences"), "owned by exactly one workload"),
    "a label naming another workload": (
        lambda p: p["metadata"]["labels"].update({LABEL: "uid-2"}),
        "label does not name",
    ),
    "another name": (lambda p: p["metadata"].update(name="agent-x"), "name does not start"),
    "a service account": (
        lambda p: p["spec"].update(serviceAccountName="admin"),
        "serviceAccountName",
    ),
    "pulled Always": (lambda p: container(p).update(imagePullPolicy="Always"), "imagePullPolicy"),
    "a secret with more than a name": (
        lambda p: p["spec"].update(imagePullSecrets=[{"name": "a", "x": 1}]),
        "more than a name",
    ),
}


@pytest.mark.parametrize("shape", sorted(MUTATIONS))
def test_a_pod_of_any_other_shape_is_refused_naming_what_is_wrong(shape: str) -> None:
    mutate, expected = MUTATIONS[shape]
    pod = copy.deepcopy(helper())
    mutate(pod)
    problems = unsafe_pod(pod, {REPO})
    assert any(expected in problem for problem in problems), problems
    with pytest.raises(UnsafePod, match="refused to create pre-pull pod"):
        check_helper_pod(pod, {REPO})
