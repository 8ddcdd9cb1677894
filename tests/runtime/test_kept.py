"""What a watch-fed copy keeps decides exactly what the whole object decides.

Every object is parsed twice — whole, as the API server returns it, and as the copy keeps it —
and the two must agree on everything a tick reads: the planner's ``Workload`` (containers, the
rollout's verdict and progress, who set each image, the helper pods' placement), the pod
selector, the pull secrets' inputs, the names events carry, and the planner's ``ObservedPod``.
Objects with every field the API server fills in, and the same objects with hostile values
dropped anywhere into them (Hypothesis), so that a field a decision reads and the copy drops
reddens here — and a shape the parser refuses is refused from the copy too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from imagerefresh.planner import ObservedPod, Workload
from imagerefresh.runtime.kept import kept_pod, kept_workload, label_keys
from imagerefresh.runtime.watches import KeptWorkload, WatchedPod

Json = dict[str, Any]

_TEMPLATE_SPEC: Json = {
    "serviceAccountName": "jobs",
    "serviceAccount": "jobs",
    "imagePullSecrets": [{"name": "regcred"}],
    "tolerations": [{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}],
    "hostNetwork": True,
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
    "initContainers": [
        {
            "name": "migrate",
            "image": "tracebloc/jobs-manager@sha256:" + "a" * 64,
            "imagePullPolicy": "IfNotPresent",
            "command": ["migrate"],
        }
    ],
    "containers": [
        {
            "name": "api",
            "image": "tracebloc/jobs-manager:prod",
            "imagePullPolicy": "Always",
            "env": [{"name": "X" * 40, "value": "y" * 400}] * 20,
            "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
        },
        {"name": "sidecar", "image": "tracebloc/pods-monitor:prod"},
    ],
    "volumes": [{"name": "data", "emptyDir": {}}],
}

_MANAGED: list[Json] = [
    {
        "manager": "helm",
        "operation": "Update",
        "apiVersion": "apps/v1",
        "time": "2026-11-29T11:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {
                    "f:spec": {
                        "f:containers": {
                            'k:{"name":"api"}': {".": {}, "f:image": {}, "f:name": {}, "f:env": {}},
                            'k:{"name":"sidecar"}': {".": {}, "f:image": {}, "f:name": {}},
                        },
                        "f:initContainers": {'k:{"name":"migrate"}': {"f:image": {}}},
                    }
                },
            },
        },
    },
    {
        "manager": "imagerefresh",
        "operation": "Update",
        "time": "2026-11-29T12:00:00Z",
        "fieldsV1": {
            "f:spec": {
                "f:template": {"f:spec": {"f:containers": {'k:{"name":"api"}': {"f:image": {}}}}}
            }
        },
    },
    {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "subresource": "status",
        "time": "2026-11-29T12:00:05Z",
        "fieldsV1": {"f:status": {"f:replicas": {}, "f:conditions": {}}},
    },
]


def _workload(kind: str) -> Json:
    status: Json = {
        "Deployment": {
            "observedGeneration": 7,
            "replicas": 3,
            "updatedReplicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "unavailableReplicas": 1,
            "conditions": [
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": 'ReplicaSet "jobs-manager-5d" has timed out progressing.',
                    "lastUpdateTime": "2026-11-29T12:10:00Z",
                    "lastTransitionTime": "2026-11-29T12:10:00Z",
                },
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            ],
        },
        "DaemonSet": {
            "observedGeneration": 7,
            "desiredNumberScheduled": 4,
            "currentNumberScheduled": 4,
            "updatedNumberScheduled": 3,
            "numberAvailable": 3,
            "numberReady": 3,
            "numberMisscheduled": 0,
        },
        "StatefulSet": {
            "observedGeneration": 7,
            "replicas": 2,
            "readyReplicas": 2,
            "currentReplicas": 1,
            "updatedReplicas": 1,
            "availableReplicas": 2,
            "currentRevision": "db-1",
            "updateRevision": "db-2",
            "collisionCount": 0,
        },
    }[kind]
    spec: Json = {
        "replicas": 3,
        "selector": {
            "matchLabels": {"app": "jobs"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}],
        },
        "template": {
            "metadata": {"labels": {"app": "jobs", "tier": "a"}, "annotations": {"x": "y"}},
            "spec": copy.deepcopy(_TEMPLATE_SPEC),
        },
        "revisionHistoryLimit": 10,
    }
    if kind == "Deployment":
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}
        spec["progressDeadlineSeconds"] = 600
    else:
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": "jobs-manager",
            "namespace": "tracebloc",
            "uid": "0d7c3a9e-4b1f-4a0e-9a57-3c1f0e2b9d11",
            "resourceVersion": "48213",
            "generation": 7,
            "creationTimestamp": "2026-11-28T09:00:00Z",
            "labels": {"app": "jobs", "big": "v" * 63},
            "annotations": {"deployment.kubernetes.io/revision": "4", "note": "n" * 4000},
            "managedFields": copy.deepcopy(_MANAGED),
        },
        "spec": spec,
        "status": status,
    }


def _pod() -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "jobs-manager-5d-x2x9q",
            "namespace": "tracebloc",
            "uid": "5c2f",
            "creationTimestamp": "2026-11-29T12:00:01Z",
            "resourceVersion": "48300",
            "labels": {"app": "jobs", "tier": "a", **{f"noise-{i}": "v" * 60 for i in range(500)}},
            "annotations": {"a": "b" * 10_000},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "jobs-manager-5d", "uid": "1"}],
            "managedFields": copy.deepcopy(_MANAGED),
        },
        "spec": {**copy.deepcopy(_TEMPLATE_SPEC), "nodeName": "edge-1"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "podIP": "10.0.0.7",
            "initContainerStatuses": [
                {
                    "name": "migrate",
                    "image": "tracebloc/jobs-manager@sha256:" + "a" * 64,
                    "imageID": "docker.io/tracebloc/jobs-manager@sha256:" + "a" * 64,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                    "ready": True,
                    "restartCount": 0,
                }
            ],
            "containerStatuses": [
                {
                    "name": "api",
                    "image": "tracebloc/jobs-manager:prod",
                    "imageID": "docker.io/tracebloc/jobs-manager@sha256:" + "b" * 64,
                    "containerID": "containerd://abc",
                    "state": {"running": {"startedAt": "2026-11-29T12:00:09Z"}},
                    "lastState": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "message": "m" * 4000,
                            "startedAt": "2026-11-29T12:00:03Z",
                            "finishedAt": "2026-11-29T12:00:08Z",
                            "containerID": "containerd://abb",
                        }
                    },
                    "ready": True,
                    "restartCount": 2,
                    "started": True,
                },
                {
                    "name": "sidecar",
                    "image": "tracebloc/pods-monitor:prod",
                    "imageID": "",
                    "restartCount": 7,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "w" * 500}},
                },
            ],
        },
    }


def _outcome(parse: Callable[[Any], Any], obj: Any) -> Any:
    """What parsing gives: the value, or the kind of error (the parser refuses both alike)."""
    try:
        return ("parsed", parse(obj))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        return ("refused", type(error).__name__)


def _read_besides(obj: Any) -> Any:
    """What the tick reads of a workload besides the planner's parse: the pod selector, the
    pull secrets' inputs, and the names events carry."""
    spec = obj["spec"]
    pod_spec = spec["template"]["spec"]
    metadata = obj["metadata"]
    return (
        spec.get("selector"),
        [pod_spec.get(k) for k in ("imagePullSecrets", "serviceAccountName", "serviceAccount")],
        [metadata.get(k) for k in ("name", "namespace", "uid", "resourceVersion")],
    )


def _assert_workload_kept(obj: Json) -> None:
    kept = kept_workload(obj)
    assert _outcome(Workload.from_api, kept) == _outcome(Workload.from_api, obj)
    assert _outcome(_read_besides, kept) == _outcome(_read_besides, obj)
    json.dumps(kept)  # a copy is kept as JSON


def _assert_pod_kept(obj: Json, keys: frozenset[str]) -> None:
    kept = kept_pod(obj, keys)
    assert _outcome(ObservedPod.from_api, kept) == _outcome(ObservedPod.from_api, obj)
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if isinstance(labels, dict):
        assert kept["metadata"]["labels"] == {k: v for k, v in labels.items() if k in keys}


def test_each_kind_of_workload_decides_the_same_from_the_copy_as_from_the_object() -> None:
    for kind in ("Deployment", "DaemonSet", "StatefulSet"):
        whole = _workload(kind)
        parsed = Workload.from_api(whole)
        assert parsed.image_managers == {
            "api": "imagerefresh",
            "sidecar": "helm",
            "migrate": "helm",
        }
        assert parsed.placement is not None
        _assert_workload_kept(whole)


def test_the_copy_of_a_workload_keeps_a_fraction_of_it() -> None:
    whole = _workload("Deployment")
    kept = kept_workload(whole)
    assert "annotations" not in kept["metadata"]
    assert "env" not in kept["spec"]["template"]["spec"]["containers"][0]
    assert len(json.dumps(kept)) * 5 < len(json.dumps(whole))
    # of managedFields, one entry per container whose image someone set: who, and when
    assert [(e["manager"], e.get("time")) for e in kept["metadata"]["managedFields"]] == [
        ("imagerefresh", "2026-11-29T12:00:00Z"),
        ("helm", "2026-11-29T11:00:00Z"),
        ("helm", "2026-11-29T11:00:00Z"),
    ]


def test_a_pod_decides_the_same_from_the_copy_and_keeps_only_the_labels_selectors_read() -> None:
    whole = _pod()
    keys = label_keys(_workload("Deployment")["spec"]["selector"])
    assert keys == {"app", "tier"}
    _assert_pod_kept(whole, keys)
    watched = WatchedPod.from_api(whole, keys)
    assert watched.labels == {"app": "jobs", "tier": "a"}
    assert watched.pod == ObservedPod.from_api(whole)
    assert watched.counted
    assert watched.size * 20 < len(json.dumps(whole))


def test_a_pod_being_deleted_or_finished_is_not_counted_as_its_workload_s() -> None:
    deleting = _pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    finished = _pod()
    finished["status"]["phase"] = "Succeeded"
    assert not WatchedPod.from_api(deleting, {"app"}).counted
    assert not WatchedPod.from_api(finished, {"app"}).counted


def test_the_kept_workload_carries_its_uid_and_generation_for_the_read_your_writes_check() -> None:
    whole = _workload("Deployment")
    del whole["kind"]  # a LIST's items carry none
    kept = KeptWorkload.of(whole, "Deployment")
    assert (kept.uid, kept.generation) == (whole["metadata"]["uid"], 7)
    assert json.loads(kept.raw)["kind"] == "Deployment"


# --- hostile values anywhere ------------------------------------------------------------------

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``value`` a value sits (keys of mappings, indexes of lists)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replaced(obj: Json, path: tuple[Any, ...], value: Any) -> Json:
    changed = copy.deepcopy(obj)
    place: Any = changed
    for step in path[:-1]:
        place = place[step]
    place[path[-1]] = value
    return changed


_WORKLOADS = [_workload(kind) for kind in ("Deployment", "DaemonSet", "StatefulSet")]
_WORKLOAD_PATHS = [(i, p) for i, w in enumerate(_WORKLOADS) for p in _paths(w)]
_POD = _pod()
_POD_PATHS = _paths(_POD)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_WORKLOAD_PATHS), _values)
def test_a_hostile_value_anywhere_in_a_workload_decides_the_same_from_the_copy(
    where: tuple[int, tuple[Any, ...]], value: Any
) -> None:
    index, path = where
    _assert_workload_kept(_replaced(_WORKLOADS[index], path, value))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_POD_PATHS), _values)
def test_a_hostile_value_anywhere_in_a_pod_decides_the_same_from_the_copy(
    path: tuple[Any, ...], value: Any
) -> None:
    _assert_pod_kept(_replaced(_POD, path, value), frozenset({"app", "tier"}))
