"""check_patch, the write guard at the one place patches are sent: what it lets through, and
what the operator reads when it refuses (the patch itself is never sent)."""

from __future__ import annotations

import pytest

from imagerefresh.planner import ImageChange, ImagePatch, PatchPurpose, UnsafePatch, check_patch

from support.ticks import digest, key

JM_REPO = "docker.io/tracebloc/jobs-manager"
JOBS = key("jobs-manager")


def change(container: str, image: str) -> ImageChange:
    return ImageChange(container, "/spec/template/spec/containers/0", "old", image, JM_REPO)


def test_a_patch_within_the_tracked_repository_passes() -> None:
    patch = ImagePatch(
        JOBS,
        PatchPurpose.REFRESH,
        (change("api", f"tracebloc/jobs-manager@{digest(1)}"), change("proxy", JM_REPO + ":v2")),
    )
    check_patch(patch)  # raises nothing


def test_a_refused_patch_names_every_bad_image_and_what_to_do() -> None:
    patch = ImagePatch(
        JOBS,
        PatchPurpose.ROLLBACK,
        (
            change("api", "evil.example/miner:latest"),
            change("ok", f"tracebloc/jobs-manager@{digest(1)}"),
            change("sidecar", "tracebloc/jobs-manager"),
        ),
    )
    with pytest.raises(UnsafePatch) as refused:
        check_patch(patch)
    assert str(refused.value) == (
        f"refused to rollback {JOBS}: "
        "api: evil.example/miner is not the tracked repository docker.io/tracebloc/jobs-manager; "
        "sidecar: 'tracebloc/jobs-manager' names neither a tag nor a digest. imagerefresh only "
        "changes tags and digests within a tracked repository; the images came from the "
        "policy's status, which someone other than the operator wrote — inspect who can update "
        "imagerefreshpolicies/status, then reset the policy"
    )
