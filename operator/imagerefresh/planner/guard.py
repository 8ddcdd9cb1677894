"""The last guard before a write: every image a patch writes is the tracked repository.

The planner builds refresh patches from the live image and a resolved digest, and rollback
patches from ``pending.previous`` — which it reads back from status, where anyone with
``update`` on the status subresource can write anything. So the rule ("the operator
only rewrites tag/digest within the tracked repository") is not left to the paths that build
patches: :func:`check_patch` is called at the single place patches are sent
(:meth:`imagerefresh.kube.api.KubeApi.patch_images`), whatever built them, and a patch that
fails it is never sent.
"""

from __future__ import annotations

from imagerefresh.planner.actions import ImageChange, ImagePatch
from imagerefresh.reference import InvalidReference, parse

__all__ = ["UnsafePatch", "check_patch", "unsafe_changes"]


class UnsafePatch(ValueError):
    """A patch would write an image outside its tracked repository; it was not sent."""


def _problem(change: ImageChange) -> str | None:
    try:
        written = parse(change.image)
    except InvalidReference as error:
        return f"{change.container}: {change.image!r} is not an image reference ({error})"
    if written.repository != change.repository:
        return (
            f"{change.container}: {written.repository} is not the tracked repository "
            f"{change.repository}"
        )
    if written.tag is None and written.digest is None:
        return f"{change.container}: {change.image!r} names neither a tag nor a digest"
    return None


def unsafe_changes(patch: ImagePatch) -> tuple[str, ...]:
    """Why ``patch`` must not be sent; empty when every image it writes is allowed."""
    return tuple(problem for change in patch.changes if (problem := _problem(change)))


def check_patch(patch: ImagePatch) -> None:
    """Raise :class:`UnsafePatch` unless every image ``patch`` writes is allowed."""
    problems = unsafe_changes(patch)
    if problems:
        raise UnsafePatch(
            f"refused to {patch.purpose} {patch.target}: {'; '.join(problems)}. imagerefresh "
            "only changes tags and digests within a tracked repository; the images came from "
            "the policy's status, which someone other than the operator wrote — inspect who "
            "can update imagerefreshpolicies/status, then reset the policy"
        )
