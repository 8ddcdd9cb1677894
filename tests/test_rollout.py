"""imagerefresh.rollout mirrors `kubectl rollout status` (pkg/polymorphichelpers/rollout_status.go).

Each row names the kubectl branch it mirrors; the order of checks matters and is kubectl's.
"""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.rollout import RolloutProgress, RolloutState, rollout_progress, rollout_verdict

from support.workloads import daemonset, deployment, statefulset

IMG = {"api": "tracebloc/jobs-manager:prod"}
DEADLINE = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
COMPLETE, WAITING, FAILED, UNSUPPORTED = (
    RolloutState.COMPLETE,
    RolloutState.PROGRESSING,
    RolloutState.FAILED,
    RolloutState.UNSUPPORTED,
)

DEPLOYMENTS: list[tuple[str, dict[str, Any], RolloutState, str]] = [
    ("settled", {}, COMPLETE, "successfully rolled out"),
    ("generation not observed", {"generation": 2, "observed": 1}, WAITING, "observe"),
    # kubectl judges nothing, not even the deadline, before the generation is observed.
    (
        "deadline before observed",
        {"generation": 2, "observed": 1, "conditions": DEADLINE},
        WAITING,
        "observe",
    ),
    ("deadline exceeded", {"conditions": DEADLINE, "updated": 0}, FAILED, "progress deadline"),
    ("updated < replicas", {"replicas": 3, "updated": 2}, WAITING, "2 of 3 new replicas"),
    (
        "old replicas pending termination",
        {"replicas": 2, "updated": 2, "total": 3},
        WAITING,
        "1 old replicas",
    ),
    # Old pods Ready do not count: availability is of *updated* replicas.
    (
        "updated not available",
        {"replicas": 2, "updated": 2, "available": 1},
        WAITING,
        "1 of 2 updated replicas are available",
    ),
    ("scaled to zero", {"replicas": 0, "updated": 0}, COMPLETE, "successfully"),
]


@pytest.mark.parametrize(
    ("case", "fields", "state", "message"), DEPLOYMENTS, ids=[d[0] for d in DEPLOYMENTS]
)
def test_deployment_rollout_status(
    case: str, fields: dict[str, Any], state: RolloutState, message: str
) -> None:
    verdict = rollout_verdict(deployment("d", IMG, **fields))
    assert verdict.state is state
    assert message in verdict.message
    assert verdict.settled is (state is COMPLETE)


DAEMONSETS: list[tuple[str, dict[str, Any], RolloutState, str]] = [
    ("settled", {}, COMPLETE, "successfully"),
    ("OnDelete never rolls", {"strategy": "OnDelete"}, UNSUPPORTED, "OnDelete"),
    ("generation not observed", {"generation": 3, "observed": 2}, WAITING, "observe"),
    ("updated < scheduled", {"desired": 3, "updated": 2}, WAITING, "2 of 3 updated"),
    (
        "available < scheduled",
        {"desired": 3, "available": 2},
        WAITING,
        "2 of 3 updated pods are available",
    ),
    ("no nodes", {"desired": 0}, COMPLETE, "successfully"),
]


@pytest.mark.parametrize(
    ("case", "fields", "state", "message"), DAEMONSETS, ids=[d[0] for d in DAEMONSETS]
)
def test_daemonset_rollout_status(
    case: str, fields: dict[str, Any], state: RolloutState, message: str
) -> None:
    verdict = rollout_verdict(daemonset("ds", IMG, **fields))
    assert verdict.state is state
    assert message in verdict.message


STATEFULSETS: list[tuple[str, dict[str, Any], RolloutState, str]] = [
    ("settled with partition 0", {}, COMPLETE, "partitioned roll out complete"),
    ("OnDelete never rolls", {"strategy": "OnDelete"}, UNSUPPORTED, "OnDelete"),
    ("observedGeneration 0", {"observed": 0}, WAITING, "observe"),
    ("generation not observed", {"generation": 2, "observed": 1}, WAITING, "observe"),
    ("ready < replicas", {"replicas": 3, "ready": 2}, WAITING, "2 of 3 pods are ready"),
    ("partition 0, not all updated", {"replicas": 3, "updated": 2}, WAITING, "2 of 3 new pods"),
    # With a partition only replicas - partition pods must be updated.
    (
        "partition 2 of 3, one updated",
        {"replicas": 3, "updated": 1, "partition": 2},
        COMPLETE,
        "partitioned roll out complete",
    ),
    (
        "partition 1 of 3, one updated",
        {"replicas": 3, "updated": 1, "partition": 1},
        WAITING,
        "1 of 2 new pods",
    ),
    # With rollingUpdate present (the API server defaults it), revisions are not compared.
    ("rollingUpdate: revisions differ", {"update_revision": "r2"}, COMPLETE, "complete"),
    (
        "no rollingUpdate: revisions differ",
        {"rolling": False, "update_revision": "r2"},
        WAITING,
        "revision r2",
    ),
    ("no rollingUpdate: revisions equal", {"rolling": False}, COMPLETE, "rolling update complete"),
    ("rollingUpdate without partition", {"partition": None, "updated": 0}, COMPLETE, "complete"),
]


@pytest.mark.parametrize(
    ("case", "fields", "state", "message"), STATEFULSETS, ids=[s[0] for s in STATEFULSETS]
)
def test_statefulset_rollout_status(
    case: str, fields: dict[str, Any], state: RolloutState, message: str
) -> None:
    verdict = rollout_verdict(statefulset("sts", IMG, **fields))
    assert verdict.state is state
    assert message in verdict.message


# --- fields the API server leaves out ---------------------------------------------------------


@pytest.mark.parametrize("make", [deployment, daemonset, statefulset])
def test_a_workload_without_status_yet_is_waiting_to_be_observed(make: Any) -> None:
    workload = make("app", IMG)
    del workload["status"]
    verdict = rollout_verdict(workload)
    assert (verdict.state, verdict.message) == (
        WAITING,
        "waiting for the controller to observe the new spec",
    )


@pytest.mark.parametrize("make", [daemonset, statefulset])
def test_no_update_strategy_means_the_default_rolling_update(make: Any) -> None:
    workload = make("app", IMG)
    del workload["spec"]["updateStrategy"]
    assert rollout_verdict(workload).state is COMPLETE


def test_a_statefulset_without_replicas_has_one() -> None:
    workload = statefulset("db", IMG, replicas=1, ready=1)
    del workload["spec"]["replicas"]
    assert rollout_verdict(workload).state is COMPLETE
    workload["status"]["readyReplicas"] = 0
    assert rollout_verdict(workload).message == "0 of 1 pods are ready"


def test_a_progressing_condition_other_than_the_deadline_is_no_failure() -> None:
    progressing = [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]
    other = [{"type": "Available", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    for conditions in (progressing, other):
        verdict = rollout_verdict(deployment("app", IMG, conditions=conditions))
        assert verdict.state is COMPLETE


WITH_MESSAGE = [
    {
        "type": "Progressing",
        "status": "False",
        "reason": "ProgressDeadlineExceeded",
        "message": 'ReplicaSet "api-5d4" has timed out progressing.',
    }
]
VERDICTS: list[tuple[str, Any, tuple[RolloutState, str]]] = [
    ("deployment settled", deployment("d", IMG), (COMPLETE, "successfully rolled out")),
    ("daemonset settled", daemonset("ds", IMG), (COMPLETE, "successfully rolled out")),
    (
        "statefulset partitioned",
        statefulset("sts", IMG),
        (COMPLETE, "partitioned roll out complete"),
    ),
    (
        "statefulset without rollingUpdate",
        statefulset("sts", IMG, rolling=False),
        (COMPLETE, "rolling update complete"),
    ),
    # The controller's own words are what tell the SRE which ReplicaSet stalled.
    (
        "deadline with the controller's message",
        deployment("d", IMG, conditions=WITH_MESSAGE, updated=0),
        (
            FAILED,
            'the Deployment exceeded its progress deadline: ReplicaSet "api-5d4" has timed out '
            "progressing.",
        ),
    ),
    (
        "deadline without a message",
        deployment("d", IMG, conditions=DEADLINE, updated=0),
        (FAILED, "the Deployment exceeded its progress deadline"),
    ),
]


@pytest.mark.parametrize(("case", "workload", "verdict"), VERDICTS, ids=[v[0] for v in VERDICTS])
def test_verdicts_read_as_kubectl_prints_them(
    case: str, workload: Any, verdict: tuple[RolloutState, str]
) -> None:
    judged = rollout_verdict(workload)
    assert (judged.state, judged.message) == verdict


def test_a_deployment_without_replicas_has_one_as_the_api_server_defaults() -> None:
    workload = deployment("d", IMG, replicas=1)
    del workload["spec"]["replicas"]
    assert rollout_verdict(workload).state is COMPLETE
    workload["status"].update(updatedReplicas=0, replicas=0, availableReplicas=0)
    assert rollout_verdict(workload).message == "0 of 1 new replicas have been updated"


@pytest.mark.parametrize(
    ("workload", "progress"),
    [
        (deployment("d", IMG, observed=1, updated=2, available=1), RolloutProgress(2, 1)),
        (deployment("d", IMG, generation=3, observed=2), None),  # the spec is not observed yet
        (deployment("d", IMG, generation=0, observed=0), None),  # never observed at all
        (daemonset("ds", IMG, generation=4, updated=1, available=3), RolloutProgress(1, 3)),
        (statefulset("s", IMG, updated=1), RolloutProgress(1, 0)),  # no availableReplicas: 0
    ],
)
def test_progress_counts_updated_and_available_replicas_of_the_observed_spec_only(
    workload: dict[str, Any], progress: RolloutProgress | None
) -> None:
    assert rollout_progress(workload) == progress


def test_progress_is_a_new_high_in_either_count_and_the_mark_keeps_each_highest() -> None:
    mark = RolloutProgress(3, 5)
    assert RolloutProgress(4, 0).beyond(mark)
    assert RolloutProgress(0, 6).beyond(mark)
    assert not RolloutProgress(3, 5).beyond(mark)
    assert RolloutProgress(4, 2).highest(mark) == RolloutProgress(4, 5)
    assert RolloutProgress(4, 2).highest(None) == RolloutProgress(4, 2)
