"""What a helper pod's kubelet report proves: a pull failure, or a container the kubelet would
not create after pulling (a helper with no user of its own on an image that runs as root),
holds the pre-pull with the kubelet's words; a report with the image's ID proves the pull
whatever the container did next."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.planner.helperpod import HelperPod

D = "sha256:" + "c" * 64
IMAGE = f"registry.example/agent@{D}"
ROOT = (
    'container has runAsNonRoot and image will run as root (pod: "imagerefresh-prepull-x_ns'
    '(uid)", container: pull-0)'
)


def pod(waiting: dict[str, str] | None, image_id: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"name": "pull-0", "imageID": image_id, "state": {}}
    if waiting is not None:
        status["state"] = {"waiting": waiting}
    return {
        "metadata": {"name": "imagerefresh-prepull-x", "uid": "u"},
        "spec": {"nodeName": "n1", "containers": [{"name": "pull-0", "image": IMAGE}]},
        "status": {"phase": "Pending", "containerStatuses": [status]},
    }


@pytest.mark.parametrize(
    ("waiting", "said"),
    [
        ({"reason": "ErrImagePull", "message": "not found"}, "ErrImagePull: not found"),
        (
            {"reason": "CreateContainerConfigError", "message": ROOT},
            f"CreateContainerConfigError: {ROOT} (the helper pod names no user",
        ),
    ],
)
def test_a_helper_its_kubelet_could_not_pull_or_create_fails_with_the_kubelets_words(
    waiting: dict[str, str], said: str
) -> None:
    helper = HelperPod.from_api(pod(waiting))
    assert helper.failure is not None
    assert helper.failure.startswith(said)
    assert helper.pulled == {}


def test_the_advice_names_the_value_that_gives_helpers_a_user() -> None:
    helper = HelperPod.from_api(pod({"reason": "CreateContainerConfigError", "message": ROOT}))
    assert helper.failure is not None
    assert "prePull.runAsUser" in helper.failure
    assert "--pre-pull-user UID:GID" in helper.failure


def test_a_container_the_kubelet_created_proves_the_pull_whatever_it_did_next() -> None:
    created = pod(
        {"reason": "CreateContainerConfigError", "message": "x"},
        image_id=f"registry.example/agent@{D}",
    )
    helper = HelperPod.from_api(created)
    assert helper.failure is None
    assert helper.holds(IMAGE, frozenset({D}))


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing", "RunContainerError"])
def test_other_waiting_reasons_are_neither_proof_nor_failure(reason: str) -> None:
    helper = HelperPod.from_api(pod({"reason": reason}))
    assert helper.failure is None
    assert helper.pulled == {}
