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


OTHER = f"registry.example/sidecar@{D}"
DEADLINE = "Pod was active on the node longer than the specified deadline"


def failed_pod(
    reports: list[dict[str, Any]], reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    """A helper pod of two images whose phase is Failed, its kubelet's reports and why."""
    status: dict[str, Any] = {"phase": "Failed", "containerStatuses": reports}
    if reason is not None:
        status["reason"] = reason
    if message is not None:
        status["message"] = message
    return {
        "metadata": {"name": "imagerefresh-prepull-x", "uid": "u"},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "pull-0", "image": IMAGE},
                {"name": "pull-1", "image": OTHER},
            ],
        },
        "status": status,
    }


def report(name: str, image_id: str = "", waiting: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "imageID": image_id, "state": {"waiting": waiting} if waiting else {}}


@pytest.mark.parametrize(
    ("obj", "failure"),
    [
        pytest.param(
            failed_pod([report("pull-0"), report("pull-1")], "DeadlineExceeded", DEADLINE),
            f"DeadlineExceeded: {DEADLINE}",
            id="out-of-time-before-the-pulls",
        ),
        pytest.param(
            failed_pod([report("pull-0", image_id=IMAGE), report("pull-1")], "Evicted"),
            "Evicted",
            id="evicted-with-one-of-two-pulled",
        ),
        pytest.param(
            failed_pod([]),
            "the pod failed before its images were pulled",
            id="failed-saying-nothing",
        ),
        pytest.param(
            failed_pod(
                [report("pull-0", image_id=IMAGE), report("pull-1", image_id=OTHER)],
                "DeadlineExceeded",
                DEADLINE,
            ),
            None,
            id="out-of-time-after-every-pull",
        ),
        pytest.param(
            failed_pod(
                [report("pull-0", waiting={"reason": "ErrImagePull", "message": "not found"})],
                "DeadlineExceeded",
                DEADLINE,
            ),
            "ErrImagePull: not found",
            id="the-kubelets-pull-failure-over-the-pods",
        ),
        pytest.param(
            failed_pod(
                [
                    report("pull-0", waiting={"reason": "ErrImagePull", "message": "not found"}),
                    report("pull-1", waiting={"reason": "ImagePullBackOff", "message": "back-off"}),
                ]
            ),
            "ErrImagePull: not found; ImagePullBackOff: back-off",
            id="every-pull-failure-in-order",
        ),
    ],
)
def test_a_failed_helper_pod_says_why_in_the_kubelets_words_unless_it_pulled_every_image(
    obj: dict[str, Any], failure: str | None
) -> None:
    """A pod that failed (out of its deadline, evicted) before its images were all pulled is a
    failed pre-pull, in the pod's own words; one that pulled them all proved what it was for."""
    assert HelperPod.from_api(obj).failure == failure


def test_a_report_that_is_no_object_is_skipped_and_the_next_still_read() -> None:
    obj = failed_pod(["not a report", report("pull-0", image_id=IMAGE), report("pull-1")])
    helper = HelperPod.from_api(obj)
    assert dict(helper.pulled) == {IMAGE: D}


@pytest.mark.parametrize(
    ("obj", "read"),
    [
        pytest.param(
            {},
            HelperPod(name="", uid="", node=None, images=()),
            id="nothing",
        ),
        pytest.param(
            {"spec": {"nodeName": "", "containers": [{"name": "pull-0"}]}},
            HelperPod(name="", uid="", node=None, images=("",)),
            id="an-empty-node-and-a-container-without-image",
        ),
        pytest.param(
            {"spec": {"nodeName": 7, "containers": [{"name": "pull-0", "image": IMAGE}]}},
            HelperPod(name="", uid="", node=None, images=(IMAGE,)),
            id="a-node-that-is-no-name",
        ),
    ],
)
def test_a_helper_pod_missing_fields_reads_as_empty_never_as_some_invented_value(
    obj: dict[str, Any], read: HelperPod
) -> None:
    """No node means it is not placed (no proof for any node), no image proves no image."""
    assert HelperPod.from_api(obj) == read
