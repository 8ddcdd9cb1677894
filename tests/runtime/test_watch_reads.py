"""Which copies a tick may decide on: never one older than our own landed patch, never one
that could yield a verdict that writes, and a forged status costs at most a direct read.

The rules of ``runtime/reads`` and the operator's memory of its own writes
(``runtime/watches``), table-tested over API JSON; the same on the real API server is in
``test_watch_evidence.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from imagerefresh.kube.watch import SILENT_AFTER, WATCH_SECONDS
from imagerefresh.models import PendingRefresh, WorkloadKind
from imagerefresh.planner import TargetKey
from imagerefresh.runtime import reads
from imagerefresh.runtime.reads import OurWrite, WorkloadRead
from imagerefresh.runtime.watches import EvidenceWatches, KeptWorkload, WatchedPod

from support.workloads import deployment

KEY = TargetKey(WorkloadKind.DEPLOYMENT, "tracebloc", "app")
OLD, NEW = "reg.test/app@sha256:" + "a" * 64, "reg.test/app@sha256:" + "b" * 64
STARTED = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
TIMEOUT = timedelta(minutes=10)


def _pending(**changes: Any) -> PendingRefresh:
    fields: dict[str, Any] = {
        "images": {"app": NEW},
        "previous": {"app": OLD},
        "started_at": STARTED,
        "generation": 8,
    }
    return PendingRefresh.model_validate({**fields, **changes})


def _copy(image: str = NEW, generation: int = 8, **status: Any) -> dict[str, Any]:
    obj = deployment("app", {"app": image}, generation=generation, **status)
    obj["metadata"]["uid"] = "uid-1"
    return obj


NOW = STARTED + timedelta(seconds=20)
FAILED = [
    {
        "type": "Progressing",
        "reason": "ProgressDeadlineExceeded",
        "lastUpdateTime": "2026-12-05T12:00:30Z",
    }
]
FAILED_BEFORE = [{**FAILED[0], "lastUpdateTime": "2026-12-05T11:00:00Z"}]


@pytest.mark.parametrize(
    ("copy", "pending", "now", "stale"),
    [
        # Nothing of ours in flight: the planner draws no verdict that writes from it.
        (_copy(OLD, generation=3), None, NOW, None),
        # Our patch in it, rolling out, before its deadline: decided on the copy.
        (_copy(updated=0), _pending(), NOW, None),
        # Older than the generation status says our patch produced.
        (_copy(OLD, generation=7), _pending(), NOW, "below the 8 status says"),
        # Status records no generation (a crash before it was written): the images decide.
        (_copy(OLD, generation=7), _pending(generation=None), NOW, "images of our pending"),
        # Another writer's images, at a newer generation: a contest, judged on a direct read.
        (_copy(OLD, generation=9), _pending(), NOW, "images of our pending"),
        # The controller reports our rollout failed: a failure, judged on a direct read.
        (_copy(conditions=FAILED), _pending(), NOW, "controller reports"),
        # ... a failure of the rollout before ours is not ours.
        (_copy(conditions=FAILED_BEFORE), _pending(), NOW, None),
        # Past the progress deadline (from startedAt, or the last progress).
        (_copy(updated=0), _pending(), STARTED + TIMEOUT * 2, "progress deadline"),
        (_copy(updated=0), _pending(progressed_at=NOW), NOW + TIMEOUT / 2, None),
        # Settled and waiting for lockstep peers: no deadline left to run.
        (_copy(), _pending(settled_at=NOW), STARTED + TIMEOUT * 2, None),
        # Absent from the copy while our patch on it is pending: confirmed directly.
        (None, _pending(), NOW, "not in it"),
        (None, None, NOW, None),
    ],
    ids=[
        "nothing-in-flight",
        "rolling-out",
        "older-than-status-generation",
        "images-not-ours",
        "another-writer",
        "controller-failed",
        "old-failure",
        "deadline-passed",
        "deadline-from-progress",
        "settled-waiting",
        "absent-with-pending",
        "absent",
    ],
)
def test_a_copy_is_decided_on_unless_a_verdict_that_writes_could_come_of_it(
    copy: dict[str, Any] | None, pending: PendingRefresh | None, now: datetime, stale: str | None
) -> None:
    why = reads._stale_for_a_verdict(copy, OurWrite(pending, TIMEOUT), now)
    if stale is None:
        assert why is None
    else:
        assert why is not None
        assert stale in why


class _Api:
    """The API server as the tick's reads see it: one workload, and who asked."""

    def __init__(self, workload: dict[str, Any]) -> None:
        self.workload, self.gets = workload, 0
        self.observers: list[Callable[[Mapping[str, Any]], None]] = []

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        return self.workload

    def observe_patches(self, observer: Callable[[Mapping[str, Any]], None]) -> None:
        self.observers.append(observer)

    def patched(self, obj: Mapping[str, Any]) -> None:
        for observer in self.observers:
            observer(obj)


class _Copy:
    """A synced copy holding one object."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.kept = KeptWorkload.of(obj, "Deployment")
        self.refused = None

    def get(self, name: str) -> tuple[bool, KeptWorkload | None]:
        return True, self.kept

    def version_of(self, name: str) -> str:
        return "41"


def _watches(api: _Api, copy: dict[str, Any]) -> EvidenceWatches:
    watches = EvidenceWatches(api)  # type: ignore[arg-type]
    watches._named[KEY] = _Copy(copy)  # type: ignore[assignment]
    watches._workload_collection = lambda key: watches._named[key]  # type: ignore[method-assign]
    return watches


def _landed(api: _Api, generation: int, uid: str = "uid-1") -> None:
    obj = _copy(generation=generation)
    obj["metadata"]["uid"] = uid
    api.patched(obj)


def test_a_copy_older_than_our_landed_patch_is_not_reported_and_is_read_directly() -> None:
    api = _Api(_copy(generation=8))
    watches = _watches(api, _copy(OLD, generation=7))
    assert watches.workload(KEY)[0]  # nothing of ours landed yet: the copy may answer
    _landed(api, 8)
    assert watches.workload(KEY) == (False, None)
    assert watches.version(KEY) is None  # the scheduler polls it meanwhile
    read = reads._read_workload(api, KEY, watches, OurWrite(None, TIMEOUT))  # type: ignore[arg-type]
    assert api.gets == 1
    assert read.workload == api.workload
    assert read.direct_pods  # its pods are read with it, never from the copy


def test_a_copy_that_caught_up_with_our_patch_is_reported_again() -> None:
    api = _Api(_copy(generation=8))
    watches = _watches(api, _copy(generation=8))
    _landed(api, 8)
    assert watches.workload(KEY)[0]
    assert watches.version(KEY) == "41"


def test_a_recreated_workload_s_copy_is_not_held_to_the_old_one_s_generation() -> None:
    api = _Api(_copy(generation=1))
    watches = _watches(api, _copy(generation=1))  # uid-1, recreated: generation 1 again
    _landed(api, 8, uid="uid-0")  # our patch of the workload deleted since
    assert watches.workload(KEY)[0]


def test_the_memory_of_our_writes_keeps_the_highest_generation_of_one_uid() -> None:
    api = _Api(_copy())
    watches = _watches(api, _copy())
    _landed(api, 9)
    _landed(api, 8)  # an answer that arrived late
    assert watches.landed(KEY) == ("uid-1", 9)


def test_a_forged_status_generation_costs_a_direct_read_and_decides_nothing() -> None:
    """Status claims our patch produced generation 99: the copy (at 8) is not decided on, and
    the tick decides on what the API server holds — the same object, read directly."""
    live = _copy(generation=8)
    api = _Api(live)
    watches = _watches(api, live)
    forged = OurWrite(_pending(generation=99), TIMEOUT)
    read = reads._read_workload(api, KEY, watches, forged, NOW)  # type: ignore[arg-type]
    assert api.gets == 1
    assert read.workload == live
    assert not read.watched
    honest = OurWrite(_pending(generation=8), TIMEOUT)
    read = reads._read_workload(api, KEY, watches, honest, NOW)  # type: ignore[arg-type]
    assert api.gets == 1  # the copy answered
    assert read.watched


def _pod(name: str, *, deleting: bool = False) -> WatchedPod:
    metadata: dict[str, Any] = {"name": name, "labels": {"app": "app"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-05T12:00:00Z"
    return WatchedPod.from_api({"metadata": metadata, "status": {"phase": "Running"}}, {"app"})


@pytest.mark.parametrize(
    ("workload", "pods", "disagree"),
    [
        # Settled on 1 replica, 1 pod (an old one being deleted does not count).
        (deployment("app", {"app": NEW}), [_pod("a"), _pod("old", deleting=True)], False),
        # Settled, but the pods' copy has not seen the new pod yet (or still has the old).
        (deployment("app", {"app": NEW}), [], True),
        (deployment("app", {"app": NEW}), [_pod("a"), _pod("b")], True),
        # Not settled: no success verdict can come of it, the copies are used.
        (deployment("app", {"app": NEW}, updated=0, total=1), [], False),
    ],
    ids=["agree", "pod-not-seen", "extra-pod", "rolling-out"],
)
def test_the_pods_of_a_settled_rollout_in_flight_are_read_directly_when_counts_disagree(
    workload: dict[str, Any], pods: list[WatchedPod], disagree: bool
) -> None:
    read = WorkloadRead(workload, watched=True, in_flight=True)
    assert reads._counts_disagree(read, pods) is disagree


# kube-apiserver's watch cache sends a bookmark to each stream that allows them every minute
# (``defaultBookmarkFrequency`` in k8s.io/apiserver's cacher) and one 2 s before the stream's
# timeout: seen on the 1.37 test server at 59.6, 119.6, 180.5 and 238.5 s of a 240 s stream.
BOOKMARK_PERIOD = 60.0


def test_a_healthy_idle_stream_is_never_silent_for_long_enough_to_be_taken_for_dead() -> None:
    assert SILENT_AFTER >= 1.5 * BOOKMARK_PERIOD  # half a period to spare for a busy server
    assert SILENT_AFTER < WATCH_SECONDS  # a dead stream is found well before it would end
