"""The last guard before a pod is created lets through the pre-pull helper and nothing else:
every shape a status writer or a bug could smuggle in is refused, naming what is wrong."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.planner.helperpod import DEFAULT_RUN_AS, LABEL, Placement, RunAs, helper_manifest
from imagerefresh.planner.podguard import UnsafePod, check_helper_pod, unsafe_pod

D = "sha256:" + "a" * 64
REPO = "docker.io/tracebloc/resource-monitor"
PLACEMENT = Placement("apps/v1", "DaemonSet", "agent", "uid-1", ("regcred",), (), True)
Pod = dict[str, Any]


def helper(run_as: RunAs = DEFAULT_RUN_AS) -> Pod:
    return helper_manifest(
        "ns",
        PLACEMENT,
        "n1",
        [f"tracebloc/resource-monitor@{D}"],
        timedelta(minutes=10),
        run_as=run_as,
    )


def container(pod: Pod) -> Pod:
    return pod["spec"]["containers"][0]


def test_the_helper_the_planner_builds_passes() -> None:
    check_helper_pod(helper(), {REPO})


@pytest.mark.parametrize(
    "run_as", [RunAs(), RunAs(1_000_650_000, None), RunAs(1, 2_147_483_647), RunAs(None, None)]
)
def test_the_helper_passes_whatever_non_root_user_it_is_given_or_none(run_as: RunAs) -> None:
    """The user is the operator's configuration (--pre-pull-user): any non-root number, or
    none at all for a platform that assigns one (OpenShift's restricted-v2)."""
    pod = helper(run_as)
    security = pod["spec"]["securityContext"]
    assert security.get("runAsUser") == run_as.user
    assert security.get("runAsGroup") == run_as.group
    assert security["runAsNonRoot"] is True
    check_helper_pod(pod, {REPO})


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("65534:65534", RunAs(65534, 65534)),
        ("1000650000", RunAs(1_000_650_000, None)),
        ("platform", RunAs(None, None)),
    ],
)
def test_a_helper_user_is_uid_gid_uid_alone_or_platform(text: str, parsed: RunAs) -> None:
    assert RunAs.parse(text) == parsed
    assert RunAs.parse(str(parsed)) == parsed


@pytest.mark.parametrize("text", ["0", "0:0", "65534:0", "root", "-1", "1:x", "2147483648", ""])
def test_a_helper_user_of_root_or_not_a_number_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="UID:GID, UID or platform"):
        RunAs.parse(text)


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
    "root": (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "runAsUser is not"),
    "the root group": (
        lambda p: p["spec"]["securityContext"].update(runAsGroup=0),
        "runAsGroup is not",
    ),
    "a user that is not a number": (
        lambda p: p["spec"]["securityContext"].update(runAsUser="65534"),
        "runAsUser is not",
    ),
    "a user that is a boolean": (
        lambda p: p["spec"]["securityContext"].update(runAsUser=True),
        "runAsUser is not",
    ),
    "a negative user": (
        lambda p: p["spec"]["securityContext"].update(runAsUser=-5),
        "runAsUser is not",
    ),
    "an fsGroup": (
        lambda p: p["spec"]["securityContext"].update(fsGroup=0),
        "pod security context",
    ),
    "supplemental groups": (
        lambda p: p["spec"]["securityContext"].update(supplementalGroups=[0]),
        "pod security context",
    ),
    "SELinux options": (
        lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
        "pod security context",
    ),
    "not runAsNonRoot": (
        lambda p: p["spec"]["securityContext"].pop("runAsNonRoot"),
        "pod security context",
    ),
    "an unconfined seccomp profile": (
        lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "pod security context",
    ),
    "a localhost seccomp profile beside RuntimeDefault": (
        lambda p: p["spec"]["securityContext"].update(
            seccompProfile={"type": "RuntimeDefault", "localhostProfile": "x.json"}
        ),
        "pod security context",
    ),
    "a container user": (
        lambda p: container(p)["securityContext"].update(runAsUser=0),
        "security context",
    ),
    # The fields of a pod the helper never sets: refused by their absence from the allow-list.
    "a priority class": (
        lambda p: p["spec"].update(priorityClassName="system-node-critical"),
        "spec carries priorityClassName",
    ),
    "a priority": (lambda p: p["spec"].update(priority=2_000_001_000), "spec carries priority"),
    "a node selector": (
        lambda p: p["spec"].update(nodeSelector={"kubernetes.io/hostname": "n2"}),
        "spec carries nodeSelector",
    ),
    "an affinity": (
        lambda p: p["spec"].update(affinity={"nodeAffinity": {}}),
        "spec carries affinity",
    ),
    "pod-level resources": (
        lambda p: p["spec"].update(resources={"limits": {"memory": "64Gi"}}),
        "spec carries resources",
    ),
    "host users": (lambda p: p["spec"].update(hostUsers=True), "spec carries hostUsers"),
    "a DNS configuration": (
        lambda p: p["spec"].update(dnsConfig={"nameservers": ["203.0.113.9"]}),
        "spec carries dnsConfig",
    ),
    "a DNS policy": (lambda p: p["spec"].update(dnsPolicy="None"), "spec carries dnsPolicy"),
    "host aliases": (
        lambda p: p["spec"].update(hostAliases=[{"ip": "203.0.113.9", "hostnames": ["x"]}]),
        "spec carries hostAliases",
    ),
    "resource claims": (
        lambda p: p["spec"].update(resourceClaims=[{"name": "gpu"}]),
        "spec carries resourceClaims",
    ),
    "an annotation": (
        lambda p: p["metadata"].update(annotations={"x": "y"}),
        "metadata carries annotations",
    ),
    "another label": (
        lambda p: p["metadata"]["labels"].update({"app": "jobs-manager"}),
        "labels are not exactly",
    ),
    "another managed-by": (
        lambda p: p["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "Helm"}),
        "labels are not exactly",
    ),
    "no namespace": (lambda p: p["metadata"].pop("namespace"), "names no namespace"),
    "more memory": (
        lambda p: container(p)["resources"]["limits"].update(memory="8Gi"),
        "its resources are not",
    ),
    "no resources": (lambda p: container(p).pop("resources"), "its resources are not"),
    "a resource claim in a container": (
        lambda p: container(p)["resources"].update(claims=[{"name": "gpu"}]),
        "its resources are not",
    ),
    "another container name": (
        lambda p: container(p).update(name="agent"),
        "is not named pull-0",
    ),
    "a toleration carrying more": (
        lambda p: p["spec"].update(tolerations=[{"operator": "Exists", "x": 1}]),
        "a toleration carries more",
    ),
    "a working directory": (lambda p: container(p).update(workingDir="/"), "carries workingDir"),
    "a tty": (lambda p: container(p).update(tty=True), "carries tty"),
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
