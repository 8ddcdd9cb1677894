"""The helper pod a pre-pull creates, field by field: what its node runs.

Its spec is what the kubelet acts on, so every field is read here: pinned to the node, the
workload's pull secrets, tolerations and host network, one fenced container per image (sorted),
a user of its own, and a deadline — the target's rollout timeout, at most an hour unless the
operator allows more (``--pre-pull-max-deadline``). Its placement is read from the workload as
it is, inventing nothing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from imagerefresh.planner.helperpod import Placement, helper_manifest

UID = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
AGENT = "registry.example/agent@sha256:" + "c" * 64
SIDECAR = "registry.example/sidecar@sha256:" + "d" * 64
EDGE = {"key": "edge", "operator": "Exists", "effect": "NoSchedule"}


def container(index: int, image: str) -> dict[str, Any]:
    return {
        "name": f"pull-{index}",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/imagerefresh-pre-pull"],
        "resources": {
            "requests": {"cpu": "1m", "memory": "4Mi"},
            "limits": {"cpu": "10m", "memory": "16Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def test_a_helper_pod_by_default_lives_at_most_an_hour_as_nobody_pinned_to_its_node() -> None:
    placement = Placement(
        "apps/v1", "DaemonSet", "agent", UID, ("regcred",), ({"key": "edge"},), True
    )
    manifest = helper_manifest(
        "edge-agents", placement, "edge-n1", [SIDECAR, AGENT], timedelta(hours=2)
    )
    assert manifest == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "imagerefresh-prepull-c59d313b7dc2d8d75bc3",
            "namespace": "edge-agents",
            "labels": {
                "images.tracebloc.io/pre-pull": UID,
                "app.kubernetes.io/managed-by": "imagerefresh",
            },
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": UID}
            ],
        },
        "spec": {
            "nodeName": "edge-n1",
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 3_600,  # the operator's default --pre-pull-max-deadline
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65_534,
                "runAsGroup": 65_534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container(0, AGENT), container(1, SIDECAR)],
            "hostNetwork": True,
            "imagePullSecrets": [{"name": "regcred"}],
            "tolerations": [{"key": "edge"}],
        },
    }


def workload(**template: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "edge-agents", "uid": UID},
        "spec": {"template": {"spec": template}},
    }


@pytest.mark.parametrize(
    ("obj", "placement"),
    [
        pytest.param(
            workload(
                imagePullSecrets=[{"name": "regcred"}, {"name": ""}, {}, "mirror"],
                tolerations=[EDGE, "no toleration"],
                hostNetwork=True,
            ),
            Placement("apps/v1", "DaemonSet", "agent", UID, ("regcred",), (EDGE,), True),
            id="its-pull-secrets-tolerations-and-host-network",
        ),
        pytest.param(
            workload(hostNetwork="true"),
            Placement("apps/v1", "DaemonSet", "agent", UID),
            id="host-network-only-when-true",
        ),
        pytest.param(
            {"metadata": {"uid": UID}},
            Placement("apps/v1", "", "", UID),
            id="only-a-uid",
        ),
        pytest.param(
            # The owner reference names its owner at the version the API server served it at
            # (apps/v1 for every kind today), never at a version assumed for it.
            {**workload(), "apiVersion": "apps/v2"},
            Placement("apps/v2", "DaemonSet", "agent", UID),
            id="the-api-version-the-workload-is-served-at",
        ),
        pytest.param({"metadata": {"name": "agent"}}, None, id="no-uid-nothing-could-own-it"),
        pytest.param({"metadata": {"uid": ""}}, None, id="an-empty-uid-nothing-could-own-it"),
        pytest.param({"metadata": {"uid": 7}}, None, id="a-uid-that-is-no-string"),
    ],
)
def test_a_placement_is_read_from_the_workload_as_it_is_inventing_nothing(
    obj: dict[str, Any], placement: Placement | None
) -> None:
    assert Placement.from_api(obj) == placement
