"""What the watch-fed copies keep of an object: the fields a decision reads, and nothing else.

The API server's objects are large and tenants make them larger: a Deployment carries
``managedFields`` (several KiB of JSON), a pod may carry 256 KiB of labels, and a namespace's
pod stream delivers every pod of the namespace, not only the targets'. A copy keeps of each
object only what the tick reads from it, listed here once per kind of object:

- :data:`WORKLOAD`: what :meth:`~imagerefresh.planner.Workload.from_api` reads (the
  containers' names, images and pull policies, init containers too; the rollout's verdict and
  progress: generation, replicas, update strategy, the status counts and conditions; the pod
  template's placement: pull secrets, service account, tolerations, host network), what the
  tick reads besides (the pod selector; name, namespace, uid and resourceVersion for events),
  and of ``managedFields`` only who last set each container's image, and when (a contest's
  message names that field manager) — one entry per container.
- :data:`POD`: what :class:`~imagerefresh.planner.ObservedPod` reads (each container's image
  and the digest it runs, its restart count and state — running since, waiting why, how its
  last instances ended —, the node, the phase, when the pod was created and whether it is being
  deleted); of its labels, only those a target's selector reads (``labels``).

A decision that starts reading another field adds it here; ``tests/runtime/test_kept.py``
parses real and hostile objects both whole and kept, and fails while the two differ. A shape
a parser would refuse (a list where an object belongs) is kept as it is, so that the parser
refuses the copy exactly as it would refuse the object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from imagerefresh.planner.evidence import image_owners

__all__ = ["KEEP", "POD", "WORKLOAD", "kept_pod", "kept_workload", "label_keys"]


class _Keep:
    """Keep the value as it is (a leaf, or a small structure kept whole)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = _Keep()
# A spec: KEEP; a mapping of the keys kept to their specs; or a one-item list, whose item is
# the spec of every element of a list.
Spec = _Keep | Mapping[str, Any] | list[Any]

_CONTAINER: Final = {"name": KEEP, "image": KEEP, "imagePullPolicy": KEEP}
_CONDITION: Final = {
    "type": KEEP,
    "status": KEEP,
    "reason": KEEP,
    "message": KEEP,
    "lastUpdateTime": KEEP,
}

WORKLOAD: Final[Mapping[str, Spec]] = {
    "apiVersion": KEEP,
    "kind": KEEP,
    "metadata": {
        "name": KEEP,
        "namespace": KEEP,
        "uid": KEEP,
        "resourceVersion": KEEP,
        "generation": KEEP,
        # managedFields: only who set each container's image (see _image_owners)
    },
    "spec": {
        "replicas": KEEP,
        "selector": KEEP,
        "updateStrategy": KEEP,  # DaemonSet, StatefulSet: type, rollingUpdate.partition
        "template": {
            "spec": {
                "containers": [_CONTAINER],
                "initContainers": [_CONTAINER],
                "imagePullSecrets": KEEP,
                "serviceAccountName": KEEP,
                "serviceAccount": KEEP,
                "tolerations": KEEP,
                "hostNetwork": KEEP,
            }
        },
    },
    "status": {
        "observedGeneration": KEEP,
        "conditions": [_CONDITION],
        "replicas": KEEP,
        "updatedReplicas": KEEP,
        "readyReplicas": KEEP,
        "availableReplicas": KEEP,
        "currentReplicas": KEEP,
        "updateRevision": KEEP,
        "currentRevision": KEEP,
        "desiredNumberScheduled": KEEP,
        "currentNumberScheduled": KEEP,
        "updatedNumberScheduled": KEEP,
        "numberAvailable": KEEP,
        "numberMisscheduled": KEEP,
        "numberReady": KEEP,
    },
}

_POD_CONTAINER: Final = {"name": KEEP, "image": KEEP}
_ENDED: Final = {"exitCode": KEEP, "reason": KEEP, "startedAt": KEEP, "finishedAt": KEEP}
_POD_STATUS: Final = {
    "name": KEEP,
    "imageID": KEEP,
    "restartCount": KEEP,
    "state": {
        "waiting": {"reason": KEEP},
        "running": {"startedAt": KEEP},
        "terminated": _ENDED,
    },
    "lastState": {"terminated": _ENDED},
}

POD: Final[Mapping[str, Spec]] = {
    "metadata": {
        "name": KEEP,
        "creationTimestamp": KEEP,
        "deletionTimestamp": KEEP,
        # labels: only those a selector reads (see kept_pod)
    },
    "spec": {
        "nodeName": KEEP,
        "containers": [_POD_CONTAINER],
        "initContainers": [_POD_CONTAINER],
    },
    "status": {
        "phase": KEEP,
        "containerStatuses": [_POD_STATUS],
        "initContainerStatuses": [_POD_STATUS],
    },
}


def trimmed(value: Any, spec: Spec) -> Any:
    """``value`` with only what ``spec`` keeps; a shape other than the spec's, as it is."""
    if isinstance(spec, _Keep):
        return value
    if isinstance(spec, list):
        if not isinstance(value, list):
            return value
        return [trimmed(item, spec[0]) for item in value]
    if not isinstance(value, dict):
        return value
    return {key: trimmed(value[key], sub) for key, sub in spec.items() if key in value}


def kept_workload(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a copy keeps of a Deployment, DaemonSet or StatefulSet (see the module docs)."""
    kept: dict[str, Any] = trimmed(obj, WORKLOAD)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        kept["metadata"]["managedFields"] = _image_owners(metadata["managedFields"])
    return kept


def kept_pod(obj: Mapping[str, Any], labels: Iterable[str]) -> dict[str, Any]:
    """What a copy keeps of a pod: :data:`POD`, and of its labels those named in ``labels``."""
    kept: dict[str, Any] = trimmed(obj, POD)
    metadata = obj.get("metadata")
    found = metadata.get("labels") if isinstance(metadata, dict) else None
    if isinstance(found, dict):
        wanted = set(labels)
        kept["metadata"]["labels"] = {k: v for k, v in found.items() if k in wanted}
    return kept


def label_keys(selector: Mapping[str, Any]) -> frozenset[str]:
    """The label keys a workload's ``spec.selector`` reads (matchLabels and matchExpressions)."""
    keys: set[str] = set()
    match = selector.get("matchLabels")
    if isinstance(match, dict):
        keys.update(str(key) for key in match)
    for expression in selector.get("matchExpressions") or ():
        if isinstance(expression, dict) and isinstance(expression.get("key"), str):
            keys.add(expression["key"])
    return frozenset(keys)


def _image_owners(entries: object) -> list[dict[str, Any]]:
    """Of ``managedFields``, one entry per container whose image some manager owns: the one
    the planner names (:func:`~imagerefresh.planner.evidence.image_owners`), trimmed to it."""
    kept = []
    for name, owner in sorted(image_owners(entries).items()):
        item = "k:" + json.dumps({"name": name}, separators=(",", ":"))
        kept_owner: dict[str, Any] = {
            "fieldsV1": {
                "f:spec": {"f:template": {"f:spec": {owner.section: {item: {"f:image": {}}}}}}
            }
        }
        if owner.time:
            kept_owner["time"] = owner.time
        if owner.manager is not None:
            kept_owner["manager"] = owner.manager
        kept.append(kept_owner)
    return kept
