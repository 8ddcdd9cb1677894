"""What a workload ran before: the images of its previous revision, as its controller keeps it.

A rollback read back from status is sent only to images live evidence proves the workload ran
(status is anyone's to write). The controllers keep that evidence: a Deployment's ReplicaSets
carry each revision's pod template (annotation ``deployment.kubernetes.io/revision``), a
DaemonSet's and a StatefulSet's ControllerRevisions carry theirs (``revision``, and the
template in ``data.spec.template``). Only objects the workload owns (an owner reference with
its uid) count: anyone may create a ReplicaSet with matching labels, only the controller and
the garbage collector set resolving owner references.

The previous revision is the newest one whose images differ from the workload's template now:
what the workload ran before its images last changed, whether the controller has caught up
with the change yet or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.kube.selectors import InvalidSelector, label_selector
from imagerefresh.kube.transport import segment

__all__ = ["previous_template", "template_images"]

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
_MAX_REVISIONS = 256  # a controller keeps revisionHistoryLimit (10 by default) of them


def template_images(template: object) -> dict[str, str]:
    """Container (and init container) → image of a pod template; empty when unreadable."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    images: dict[str, str] = {}
    if not isinstance(spec, Mapping):
        return images
    for section in ("initContainers", "containers"):
        for container in spec.get(section) or ():
            if isinstance(container, Mapping):
                name, image = container.get("name"), container.get("image")
                if isinstance(name, str) and isinstance(image, str):
                    images[name] = image
    return images


def previous_template(api: KubeApi, workload: Mapping[str, Any]) -> dict[str, str] | None:
    """The images of ``workload``'s previous revision; None when it has none kept. Raises
    :class:`KubeError` when its revisions cannot be read (RBAC, the API)."""
    metadata, spec = workload.get("metadata") or {}, workload.get("spec") or {}
    namespace, uid = metadata.get("namespace"), metadata.get("uid")
    if not isinstance(namespace, str) or not isinstance(uid, str) or not uid:
        return None
    try:
        query = label_selector(spec.get("selector") or {})
    except InvalidSelector as error:
        raise KubeError(f"the workload's spec.selector cannot be used ({error})") from error
    current = template_images(spec.get("template"))
    revisions = _revisions(api, str(workload.get("kind")), namespace, query, uid)
    older = [(number, images) for number, images in revisions if images != current]
    return max(older, key=lambda found: found[0])[1] if older else None


def _revisions(
    api: KubeApi, kind: str, namespace: str, query: str, uid: str
) -> list[tuple[int, dict[str, str]]]:
    """(revision number, images) of every revision the workload owns."""
    resource = "replicasets" if kind == "Deployment" else "controllerrevisions"
    answer = api._request(
        f"list {resource} of {kind} {namespace}/{uid}",
        "GET",
        f"/apis/apps/v1/namespaces/{segment(namespace)}/{resource}",
        query=[("labelSelector", query), ("limit", _MAX_REVISIONS)],
    )
    found = []
    for item in answer.get("items") or ():
        if not isinstance(item, Mapping) or not _owned(item, uid):
            continue
        if kind == "Deployment":
            annotations = (item.get("metadata") or {}).get("annotations") or {}
            number = _number(annotations.get(REVISION_ANNOTATION))
            template = (item.get("spec") or {}).get("template")
        else:
            number = _number(item.get("revision"))
            template = ((item.get("data") or {}).get("spec") or {}).get("template")
        images = template_images(template)
        if number is not None and images:
            found.append((number, images))
    return found


def _owned(item: Mapping[str, Any], uid: str) -> bool:
    owners = (item.get("metadata") or {}).get("ownerReferences") or ()
    return any(isinstance(o, Mapping) and o.get("uid") == uid for o in owners)


def _number(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None
