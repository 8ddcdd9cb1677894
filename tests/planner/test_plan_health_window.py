"""A refresh's health window (``healthyFor``): settled is necessary, not sufficient.

The tables walk one refresh of jobs-manager's ``api`` from D1 to D2, patched at T0, settled at
T0+10s, with the default window of 60 s (so it ends at T0+70s), and put crash evidence in its
pods as the kubelet reports it: every boundary of the rule in
:mod:`imagerefresh.planner.target.health` — the refresh's start, the window's end (a second
before, at, after), a pod replaced during the window, containers the refresh did not change,
pods not on the new build, a window of 0 — and the same for a DaemonSet (per node) and a
StatefulSet.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from imagerefresh.models import Phase, PolicyStatus
from imagerefresh.models.base import format_timestamp
from imagerefresh.planner import ObservedPod, PatchPurpose, Plan, Resolved, Unresolved, Workload
from imagerefresh.planner.follow import in_flight
from imagerefresh.planner.podhealth import container_health
from imagerefresh.planner.target.health import Crash, HealthWindow, crashes

from support.ticks import (
    JM,
    NS,
    PM,
    RM,
    T0,
    Tick,
    digest,
    evidence,
    key,
    spec,
    target,
    without_offline,
)
from support.workloads import daemonset, deployment, statefulset

D1, D2, D3 = digest(1), digest(2), digest(3)
JM_REPO, PM_REPO, RM_REPO = (
    "tracebloc/jobs-manager",
    "tracebloc/pods-monitor",
    "tracebloc/resource-monitor",
)
JOBS = key("jobs-manager")
SECOND = timedelta(seconds=1)
SETTLED = T0 + 10 * SECOND
END = SETTLED + 60 * SECOND  # the default healthyFor
Json = dict[str, Any]


class HealthTick(Tick):
    last_plan: Plan  # what the last :func:`at` planned


def ran(value: str, repo: str = JM_REPO) -> str:
    return f"docker.io/{repo}@{value}"


def ended(code: int, at: datetime, reason: str = "Error", started: datetime | None = None) -> Json:
    terminated: Json = {"exitCode": code, "reason": reason, "finishedAt": format_timestamp(at)}
    if started is not None:
        terminated["startedAt"] = format_timestamp(started)
    return {"terminated": terminated}


def container(
    name: str,
    image_id: str,
    *,
    restarts: int = 0,
    last: Json | None = None,
    state: Json | None = None,
    since: datetime | None = None,
) -> Json:
    """A containerStatuses entry as a kubelet writes it; running since ``since`` by default."""
    running = {"running": {"startedAt": format_timestamp(since or SETTLED - 2 * SECOND)}}
    entry: Json = {
        "name": name,
        "imageID": image_id,
        "image": "x",
        "ready": state is None,
        "restartCount": restarts,
        "state": state or running,
        "lastState": last or {},
    }
    return entry


def a_pod(
    name: str,
    *containers: Json,
    created: datetime = T0 + 2 * SECOND,
    node: str = "node-a",
    init: tuple[Json, ...] = (),
    deleting: bool = False,
    phase: str = "Running",
) -> Json:
    metadata: Json = {"name": name, "creationTimestamp": format_timestamp(created)}
    if deleting:
        metadata["deletionTimestamp"] = format_timestamp(created + 600 * SECOND)
    return {
        "metadata": metadata,
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "containerStatuses": list(containers),
            "initContainerStatuses": list(init),
        },
    }


def healthy(name: str = "jm-new") -> Json:
    return a_pod(name, container("api", ran(D2)))


def crashed(at: datetime, *, name: str = "jm-new", code: int = 1, reason: str = "Error") -> Json:
    """A pod of the new build whose ``api`` ended at ``at`` and was restarted."""
    last = ended(code, at, reason, started=at - 5 * SECOND)
    return a_pod(name, container("api", ran(D2), restarts=1, last=last, since=at + SECOND))


def jobs(image: str, generation: int = 2, **fields: Any) -> Json:
    return deployment(
        "jobs-manager", {"api": f"{JM_REPO}@{image}"}, generation=generation, **fields
    )


def refreshed(**fields: Any) -> HealthTick:
    """jobs-manager patched from D1 to D2 at T0, then settled (and its window started) at
    T0+10s."""
    tick = HealthTick(spec(target("jobs-manager", api=JM), **fields))
    first = tick.run({JOBS: evidence(jobs(D1, 1), digests={"api": D2})}, advance=timedelta(0))
    assert [p.purpose for p in first.patches] == [PatchPurpose.REFRESH]
    assert at(tick, SETTLED, jobs(D2), [healthy()]).phase is Phase.REFRESHING
    return tick


def at(tick: HealthTick, when: datetime, workload: Json, pods: list[Json], **kw: Any) -> Any:
    """A follow-up tick at ``when``; the target's status after it."""
    tick.last_plan = judge(tick, when, workload, pods, **kw)
    return tick.target("jobs-manager")


def judge(
    tick: Tick,
    when: datetime,
    workload: Json,
    pods: list[Json],
    digests: dict[str, str | Resolved | Unresolved] | None = None,
    **kw: Any,
) -> Plan:
    """A tick at ``when``; the registry answers ``digests`` (by default, ``api``'s tag D2)."""
    tick.now = when
    kw.setdefault("follow_up", True)
    answers = {"api": D2} if digests is None else digests
    return tick.run({JOBS: evidence(workload, pods, digests=answers)}, advance=timedelta(0), **kw)


def reasons(plan: Plan) -> list[str]:
    return [e.reason for e in plan.events if e.reason in ("Refreshed", "RefreshFailed")]


def rolled_back(status: Any, attempts: int = 1) -> bool:
    return (
        status.phase is Phase.ROLLING_BACK
        and status.refresh_attempts == attempts
        and status.pending.purpose is PatchPurpose.ROLLBACK
    )


def watching() -> str:
    """The Refreshing message while jobs-manager's window runs."""
    return (
        f"our refresh rolled out; watching its pods until {format_timestamp(END)} (healthyFor "
        "1m0s): a container of the new build that restarts or crash-loops by then fails the "
        "refresh"
    )


def crash_message(what: str, when: datetime, where: str = "pod jm-new on node node-a") -> str:
    """jobs-manager's status message once a crash of ``api`` inside its window failed it."""
    return (
        "refresh failed (attempt 1 of 3): the new build crashed within its health window "
        f"(healthyFor 1m0s, until {format_timestamp(END)}): container api ({D2[:19]}…) in "
        f"{where} {what} at {format_timestamp(when)}; rolling back"
    )


def assert_healthy(status: Any, judged: datetime) -> None:
    """Not failed: still watched inside the window, a success from its end on."""
    assert (status.refresh_attempts, status.failed) == (0, ()), status.message
    if judged >= END:
        assert (status.phase, status.pending) == (Phase.CURRENT, None), status.message
        assert status.message == "running the desired digests"
    else:
        assert (status.phase, status.message) == (Phase.REFRESHING, watching())


# --- the window ------------------------------------------------------------------------------


def test_settled_starts_the_window_and_the_target_stays_refreshing_saying_until_when() -> None:
    tick = refreshed()
    status = tick.target("jobs-manager")
    assert status.pending.settled_at == SETTLED
    assert status.message == (
        f"our refresh rolled out; watching its pods until {format_timestamp(END)} (healthyFor "
        "1m0s): a container of the new build that restarts or crash-loops by then fails the "
        "refresh"
    )
    assert (status.last_good, status.last_refresh, status.refresh_attempts) == ({}, None, 0)
    before = tick.status
    # A follow-up inside the window, nothing new: the status is the same (nothing is written).
    assert at(tick, END - SECOND, jobs(D2), [healthy()]).phase is Phase.REFRESHING
    assert tick.status == before
    assert tick.condition("Ready").status == "False"
    assert tick.condition("Refreshing").status == "True"


def test_a_refresh_healthy_through_its_window_succeeds_at_its_end_not_a_second_before() -> None:
    tick = refreshed()
    assert at(tick, END - SECOND, jobs(D2), [healthy()]).phase is Phase.REFRESHING
    status = at(tick, END, jobs(D2), [healthy()])
    assert (status.phase, status.pending, status.refresh_attempts) == (Phase.CURRENT, None, 0)
    assert status.last_refresh == END
    assert status.last_good == {"api": f"docker.io/{JM_REPO}@{D2}"}
    assert reasons(tick.last_plan) == ["Refreshed"]


@pytest.mark.parametrize(
    ("crash", "judged", "verdict"),
    [
        (T0, SETTLED + SECOND, "failed"),  # the instant of the patch: the window's first
        (T0 + SECOND, SETTLED, "failed"),  # while it rolled out: counted from the patch
        (SETTLED, SETTLED + SECOND, "failed"),  # the instant the rollout settled
        (END - SECOND, END - SECOND, "failed"),  # a second before its end
        (END - SECOND, END, "failed"),  # seen only at the end
        (END - SECOND, END + 5 * SECOND, "failed"),  # seen only after the end: still inside
        (END, END, "failed"),  # at its end: the end is inside
        (END + SECOND, END + SECOND, "healthy"),  # a second after: not the refresh's
        (T0 - SECOND, SETTLED + SECOND, "healthy"),  # a second before the refresh started
    ],
    ids=[
        "at-the-patch",
        "while-rolling-out",
        "at-settling",
        "a-second-before-the-end",
        "seen-at-the-end",
        "seen-after-the-end",
        "at-the-end",
        "a-second-after-the-end",
        "a-second-before-the-patch",
    ],
)
def test_a_restart_of_the_new_build_fails_the_refresh_only_inside_the_window(
    crash: datetime, judged: datetime, verdict: str
) -> None:
    tick = refreshed()
    pod = crashed(crash)
    if crash <= T0:  # a pod that restarted at (or before) the patch was created before it
        pod["metadata"]["creationTimestamp"] = format_timestamp(crash - 60 * SECOND)
    status = at(tick, judged, jobs(D2), [pod])
    if verdict == "failed":
        assert rolled_back(status), status.message
        assert status.message == crash_message("restarted after exit code 1 (Error)", crash)
        assert [b.digest for b in status.failed] == [D2]
        assert reasons(tick.last_plan) == ["RefreshFailed"]
    else:
        assert_healthy(status, judged)
        assert reasons(tick.last_plan) == (["Refreshed"] if judged >= END else [])


def test_the_failure_names_the_container_the_pod_the_node_what_the_kubelet_said_and_when() -> None:
    tick = refreshed()
    status = at(
        tick, END - SECOND, jobs(D2), [crashed(END - 2 * SECOND, code=137, reason="OOMKilled")]
    )
    why = (
        f"the new build crashed within its health window (healthyFor 1m0s, until "
        f"{format_timestamp(END)}): container api ({D2[:19]}…) in pod jm-new on node node-a "
        f"restarted after exit code 137 (OOMKilled) at {format_timestamp(END - 2 * SECOND)}"
    )
    assert status.message == f"refresh failed (attempt 1 of 3): {why}; rolling back"
    (failed,) = [e for e in tick.last_plan.events if e.reason == "RefreshFailed"]
    assert failed.message == (
        f"refresh of Deployment {NS}/jobs-manager failed (attempt 1 of 3): {why}; {D2[:19]}… is "
        "not tried on this target again until a reset (imagerefresh reset tracebloc/control-plane)"
    )
    (patch,) = tick.last_plan.patches
    assert (patch.purpose, patch.changes[0].image) == (PatchPurpose.ROLLBACK, f"{JM_REPO}@{D1}")


def test_a_crash_during_the_rollout_fails_it_at_once_not_at_its_progress_deadline() -> None:
    tick = HealthTick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(jobs(D1, 1), digests={"api": D2})}, advance=timedelta(0))
    rolling = jobs(D2, available=0)
    status = at(tick, T0 + 20 * SECOND, rolling, [crashed(T0 + 15 * SECOND)])
    assert rolled_back(status)
    assert "the new build crashed while it rolled out: container api" in status.message


def test_a_crash_loop_back_off_or_an_ended_instance_is_a_crash_too() -> None:
    backing_off = a_pod(
        "jm-new",
        container(
            "api",
            ran(D2),
            restarts=3,
            last=ended(1, SETTLED + 20 * SECOND),
            state={"waiting": {"reason": "CrashLoopBackOff"}},
        ),
    )
    assert rolled_back(at(refreshed(), SETTLED + 25 * SECOND, jobs(D2), [backing_off]))
    just_ended = a_pod(
        "jm-new", container("api", ran(D2), state=ended(0, SETTLED + 5 * SECOND, "Completed"))
    )
    status = at(refreshed(), SETTLED + 6 * SECOND, jobs(D2), [just_ended])
    assert rolled_back(status)  # a long-running container that exits, even 0, restarts
    assert "ended with exit code 0 (Completed)" in status.message


# --- what the kubelet reported, and when it can have been ------------------------------------

CREATED = T0 + 2 * SECOND  # when a_pod's pods were created


def terminated(**fields: Any) -> Json:
    """A ``terminated`` state as given: a kubelet may leave out its code, reason or times."""
    times = {k: format_timestamp(v) for k, v in fields.items() if isinstance(v, datetime)}
    return {"terminated": {**fields, **times}}


BACKING_OFF: Json = {"waiting": {"reason": "CrashLoopBackOff"}}
LONG_REASON = "ContainerTerminatedByTheRuntimeAfterItsHealthProbeTimedOutTwiceInARow"


def zoneless(at: datetime) -> str:
    """``at`` as ISO 8601 without its zone, which no API server writes."""
    return at.replace(tzinfo=None).isoformat()


@pytest.mark.parametrize(
    ("reported", "node", "judged", "verdict"),
    [
        (  # a pod the API gives no node: the message names none
            {"restarts": 1, "last": ended(1, SETTLED + 5 * SECOND), "since": SETTLED + 6 * SECOND},
            "",
            SETTLED + 7 * SECOND,
            ("restarted after exit code 1 (Error)", SETTLED + 5 * SECOND),
        ),
        (
            {
                "restarts": 1,
                "last": terminated(reason="Error", finishedAt=SETTLED + 5 * SECOND),
                "since": SETTLED + 6 * SECOND,
            },
            "node-a",
            SETTLED + 7 * SECOND,
            ("restarted after no exit code (Error)", SETTLED + 5 * SECOND),
        ),
        (
            {
                "restarts": 1,
                "last": terminated(exitCode=2, finishedAt=SETTLED + 5 * SECOND),
                "since": SETTLED + 6 * SECOND,
            },
            "node-a",
            SETTLED + 7 * SECOND,
            ("restarted after exit code 2", SETTLED + 5 * SECOND),
        ),
        (  # a long-running container that exits 0 was restarted all the same
            {
                "restarts": 1,
                "last": ended(0, SETTLED + 5 * SECOND, "Completed"),
                "since": SETTLED + 6 * SECOND,
            },
            "node-a",
            SETTLED + 7 * SECOND,
            ("restarted after exit code 0 (Completed)", SETTLED + 5 * SECOND),
        ),
        (  # no time: after the pod's creation, before the instance now running started
            {
                "restarts": 1,
                "last": terminated(exitCode=1, reason="Error"),
                "since": SETTLED + 20 * SECOND,
            },
            "node-a",
            END + 5 * SECOND,
            ("restarted after exit code 1 (Error)", CREATED),
        ),
        (  # known only by its count, bounded by the instance now running
            {"restarts": 1, "since": SETTLED + 30 * SECOND},
            "node-a",
            END + 5 * SECOND,
            ("restarted 1 time(s)", CREATED),
        ),
        (  # known only by its count, bounded by the start of the instance that ended since
            {
                "restarts": 1,
                "state": terminated(
                    exitCode=1,
                    reason="Error",
                    startedAt=SETTLED + 30 * SECOND,
                    finishedAt=END + SECOND,
                ),
            },
            "node-a",
            END + 2 * SECOND,
            ("restarted 1 time(s)", CREATED),
        ),
        (  # the latest restart came after the end, the one before it inside
            {
                "restarts": 2,
                "last": ended(1, END + SECOND, started=END - 10 * SECOND),
                "since": END + 2 * SECOND,
            },
            "node-a",
            END + 3 * SECOND,
            ("restarted 2 time(s)", CREATED),
        ),
        (  # its only restart came after the end: backing off since is not the refresh's
            {
                "restarts": 1,
                "last": ended(1, END + SECOND, started=SETTLED + 30 * SECOND),
                "state": BACKING_OFF,
            },
            "node-a",
            END + 3 * SECOND,
            None,
        ),
        (  # backing off before a restart was counted: it ended at least once
            {"restarts": 0, "state": BACKING_OFF},
            "node-a",
            SETTLED + 5 * SECOND,
            ("backs off (CrashLoopBackOff)", CREATED),
        ),
        (  # ended inside, seen only after the end
            {"state": ended(1, END - SECOND, started=SETTLED + SECOND)},
            "node-a",
            END + 5 * SECOND,
            ("ended with exit code 1 (Error)", END - SECOND),
        ),
        (  # ended, no time given: after the pod's creation, before now
            {"state": terminated(exitCode=1, reason="Error")},
            "node-a",
            SETTLED + 6 * SECOND,
            ("ended with exit code 1 (Error)", CREATED),
        ),
        (  # times without a zone are no RFC 3339: unknown, as if not given
            {
                "restarts": 1,
                "last": terminated(
                    exitCode=1,
                    reason="Error",
                    startedAt=zoneless(SETTLED + SECOND),
                    finishedAt=zoneless(SETTLED + 5 * SECOND),
                ),
                "since": SETTLED + 20 * SECOND,
            },
            "node-a",
            END + 5 * SECOND,
            ("restarted after exit code 1 (Error)", CREATED),
        ),
        (  # the kubelet's reason is shown up to 64 characters, however long it is
            {
                "restarts": 1,
                "last": ended(1, SETTLED + 5 * SECOND, LONG_REASON),
                "since": SETTLED + 6 * SECOND,
            },
            "node-a",
            SETTLED + 7 * SECOND,
            (f"restarted after exit code 1 ({LONG_REASON[:64]})", SETTLED + 5 * SECOND),
        ),
    ],
    ids=[
        "no-node",
        "no-exit-code",
        "no-reason",
        "exit-0-restarted",
        "last-without-times-seen-after-the-end",
        "count-only-seen-after-the-end",
        "count-only-while-ended-after-the-end",
        "two-restarts-the-latest-after-the-end",
        "backing-off-after-a-restart-after-the-end",
        "backing-off-before-a-restart-counted",
        "ended-inside-seen-after-the-end",
        "ended-without-times",
        "times-without-a-zone-are-unknown",
        "a-long-reason-cut-at-64-characters",
    ],
)
def test_the_failure_says_what_the_kubelet_reported_and_the_earliest_it_can_have_been(
    reported: Json, node: str, judged: datetime, verdict: tuple[str, datetime] | None
) -> None:
    tick = refreshed()
    pod = a_pod("jm-new", container("api", ran(D2), **reported), node=node)
    status = at(tick, judged, jobs(D2), [pod])
    if verdict is None:
        assert_healthy(status, judged)
        return
    what, when = verdict
    where = "pod jm-new on node node-a" if node else "pod jm-new"
    assert rolled_back(status), status.message
    assert status.message == crash_message(what, when, where)
    assert reasons(tick.last_plan) == ["RefreshFailed"]


# --- what is not the new build's crash -------------------------------------------------------


def test_restarts_of_a_container_the_refresh_did_not_change_are_not_blamed() -> None:
    tick = HealthTick(spec(target("jobs-manager", api=JM, sidecar=PM)))
    images = {"api": f"{JM_REPO}@{D1}", "sidecar": f"{PM_REPO}@{D3}"}
    start = deployment("jobs-manager", images)
    tick.run({JOBS: evidence(start, digests={"api": D2, "sidecar": D3})}, advance=timedelta(0))
    after = deployment("jobs-manager", {**images, "api": f"{JM_REPO}@{D2}"}, generation=2)
    flaky = a_pod(
        "jm-new",
        container("api", ran(D2)),
        container("sidecar", ran(D3, PM_REPO), restarts=4, last=ended(1, SETTLED + 30 * SECOND)),
    )
    for when in (SETTLED, END):
        tick.now = when
        tick.run(
            {JOBS: evidence(after, [flaky], digests={"api": D2, "sidecar": D3})},
            advance=timedelta(0),
            follow_up=True,
        )
    status = tick.target("jobs-manager")
    assert (status.phase, status.refresh_attempts, status.failed) == (Phase.CURRENT, 0, ())


def test_an_adopted_container_s_restart_is_not_blamed() -> None:
    """``api`` was on the tag and its pods already ran D2 (an adoption pinned in the same patch
    as ``sidecar``'s refresh): its build did not change, so its restarts are not the refresh's."""
    tick = HealthTick(spec(target("jobs-manager", api=JM, sidecar=PM)))
    on_tag = deployment("jobs-manager", {"api": JM, "sidecar": f"{PM_REPO}@{D1}"})
    running = [a_pod("jm-old", container("api", ran(D2)), container("sidecar", ran(D1, PM_REPO)))]
    digests = {"api": D2, "sidecar": D3}
    tick.run({JOBS: evidence(on_tag, running, digests=digests)}, advance=timedelta(0))
    assert tick.target("jobs-manager").pending.adopted == ("api",)
    pinned = deployment(
        "jobs-manager", {"api": f"{JM_REPO}@{D2}", "sidecar": f"{PM_REPO}@{D3}"}, generation=2
    )
    restarting = a_pod(
        "jm-new",
        container("api", ran(D2), restarts=2, last=ended(1, SETTLED + 5 * SECOND)),
        container("sidecar", ran(D3, PM_REPO)),
    )
    for when in (SETTLED, SETTLED + 6 * SECOND, END):
        tick.now = when
        tick.run({JOBS: evidence(pinned, [restarting], digests=digests)}, advance=timedelta(0))
    assert tick.target("jobs-manager").phase is Phase.CURRENT


def test_a_crash_of_the_container_refreshed_beside_an_adopted_one_fails_the_refresh() -> None:
    """The adopted ``api`` is the patch's first pin; ``sidecar``, pinned after it, is the new
    build, and its crash fails the refresh all the same (blaming only its build)."""
    tick = HealthTick(spec(target("jobs-manager", api=JM, sidecar=PM)))
    on_tag = deployment("jobs-manager", {"api": JM, "sidecar": f"{PM_REPO}@{D1}"})
    running = [a_pod("jm-old", container("api", ran(D2)), container("sidecar", ran(D1, PM_REPO)))]
    digests = {"api": D2, "sidecar": D3}
    tick.run({JOBS: evidence(on_tag, running, digests=digests)}, advance=timedelta(0))
    pending = tick.target("jobs-manager").pending
    assert (list(pending.images), pending.adopted) == (["api", "sidecar"], ("api",))
    pinned = deployment(
        "jobs-manager", {"api": f"{JM_REPO}@{D2}", "sidecar": f"{PM_REPO}@{D3}"}, generation=2
    )
    up = a_pod("jm-new", container("api", ran(D2)), container("sidecar", ran(D3, PM_REPO)))
    crash = SETTLED + 5 * SECOND
    restarting = a_pod(
        "jm-new",
        container("api", ran(D2)),
        container("sidecar", ran(D3, PM_REPO), restarts=1, last=ended(1, crash)),
    )
    for when, pod in ((SETTLED, up), (SETTLED + 6 * SECOND, restarting)):
        tick.now = when
        plan = tick.run({JOBS: evidence(pinned, [pod], digests=digests)}, follow_up=True)
    status = tick.target("jobs-manager")
    assert rolled_back(status), status.message
    assert [b.digest for b in status.failed] == [D3]
    assert status.message == (
        "refresh failed (attempt 1 of 3): the new build crashed within its health window "
        f"(healthyFor 1m0s, until {format_timestamp(END)}): container sidecar ({D3[:19]}…) in "
        f"pod jm-new on node node-a restarted after exit code 1 (Error) at "
        f"{format_timestamp(crash)}; rolling back"
    )
    assert reasons(plan) == ["RefreshFailed"]


def test_a_pending_pin_edited_to_a_tag_blames_nothing_for_it_and_the_others_are_still_judged() -> (
    None
):
    """Status is read back as a claim: a pending ``api`` edited by hand to its tag names no
    build, so its pods' restarts are no build's; ``sidecar``, listed after it, still is."""
    tick = HealthTick(spec(target("jobs-manager", api=JM, sidecar=PM)))
    start = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}", "sidecar": f"{PM_REPO}@{D1}"})
    digests = {"api": D2, "sidecar": D3}
    tick.run({JOBS: evidence(start, digests=digests)}, advance=timedelta(0))
    edited = tick.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    (entry,) = edited["targets"]
    assert list(entry["pending"]["images"]) == ["api", "sidecar"]
    entry["pending"]["images"]["api"] = JM
    tick.status = PolicyStatus.model_validate(edited)
    carried = deployment("jobs-manager", {"api": JM, "sidecar": f"{PM_REPO}@{D3}"}, generation=2)
    up = a_pod("jm-new", container("api", ran(D2)), container("sidecar", ran(D3, PM_REPO)))
    crash = SETTLED + 5 * SECOND
    both = a_pod(
        "jm-new",
        container("api", ran(D2), restarts=1, last=ended(1, crash - SECOND)),
        container("sidecar", ran(D3, PM_REPO), restarts=1, last=ended(1, crash)),
    )
    for when, pod in ((SETTLED, up), (SETTLED + 6 * SECOND, both)):
        tick.now = when
        plan = tick.run({JOBS: evidence(carried, [pod], digests=digests)}, follow_up=True)
    status = tick.target("jobs-manager")
    assert rolled_back(status), status.message
    assert [b.digest for b in status.failed] == [D3]
    assert status.message == (
        "refresh failed (attempt 1 of 3): the new build crashed within its health window "
        f"(healthyFor 1m0s, until {format_timestamp(END)}): container sidecar ({D3[:19]}…) in "
        f"pod jm-new on node node-a restarted after exit code 1 (Error) at "
        f"{format_timestamp(crash)}; rolling back"
    )
    assert reasons(plan) == ["RefreshFailed"]


ANSWERS = ("the-index-with-its-platform-manifests", "the-tag-moved-on", "unreadable", "none")


@pytest.mark.parametrize("answer", ANSWERS, ids=ANSWERS)
def test_the_new_build_is_the_refresh_s_pin_whatever_the_registry_answers_this_tick(
    answer: str,
) -> None:
    """The build judged is the digest the refresh pinned. The registry's answer this tick only
    adds that very digest's platform manifests (which containers/image runtimes report in its
    place); a tag that moved on since, an unreadable registry or no answer change nothing."""
    arm = digest("arm64")
    answers: dict[str, str | Resolved | Unresolved] = {
        "the-index-with-its-platform-manifests": {"api": Resolved(D2, frozenset({arm}))},
        "the-tag-moved-on": {"api": D3},
        "unreadable": {"api": Unresolved("Unreachable", "the registry did not answer")},
        "none": {},
    }[answer]
    tick = refreshed()
    crash = SETTLED + 20 * SECOND
    pod = crashed(crash)
    pod["status"]["containerStatuses"][0]["imageID"] = ran(arm if "index" in answer else D2)
    status = at(tick, crash + 2 * SECOND, jobs(D2), [pod], digests=answers)
    assert rolled_back(status), status.message
    assert status.message == crash_message("restarted after exit code 1 (Error)", crash)
    assert [b.digest for b in status.failed] == [D2]
    assert reasons(tick.last_plan) == ["RefreshFailed"]


def test_a_pod_not_on_the_new_build_is_not_blamed() -> None:
    old = a_pod(
        "jm-old", container("api", ran(D1), restarts=1, last=ended(1, SETTLED + 3 * SECOND))
    )
    unknown = a_pod(
        "jm-odd", container("api", "sha256:" + "0" * 64, restarts=1, last=ended(1, SETTLED))
    )
    tick = refreshed()
    at(tick, SETTLED + 5 * SECOND, jobs(D2), [old, unknown, healthy()])
    assert at(tick, END, jobs(D2), [healthy()]).phase is Phase.CURRENT


def test_a_pod_being_deleted_or_over_is_not_a_crash_but_its_restarts_before_are() -> None:
    told = ended(143, SETTLED + 20 * SECOND, "Error")
    deleted = a_pod("jm-new", container("api", ran(D2), state=told), deleting=True)
    evicted = a_pod("jm-b", container("api", ran(D2), state=told), phase="Failed")
    tick = refreshed()
    at(tick, SETTLED + 21 * SECOND, jobs(D2), [deleted, evicted, healthy("jm-c")])
    assert at(tick, END, jobs(D2), [healthy("jm-c")]).phase is Phase.CURRENT
    restarted = a_pod(
        "jm-new",
        container("api", ran(D2), restarts=1, last=ended(1, SETTLED + 5 * SECOND), state=told),
        deleting=True,
    )
    assert rolled_back(at(refreshed(), SETTLED + 21 * SECOND, jobs(D2), [restarted]))


def test_a_pod_replaced_during_the_window_is_judged_by_its_replacement() -> None:
    later = T0 + 40 * SECOND
    tick = refreshed()
    replacement = a_pod("jm-replacement", container("api", ran(D2)), created=later)
    status = at(tick, later + SECOND, jobs(D2, available=0), [replacement])  # not settled: fine
    assert status.phase is Phase.REFRESHING
    assert at(tick, END, jobs(D2), [replacement]).phase is Phase.CURRENT
    # A replacement that crashes inside the window fails it, whatever the first pod did.
    tick = refreshed()
    crashing = a_pod(
        "jm-replacement",
        container("api", ran(D2), restarts=1, last=ended(1, later + 5 * SECOND)),
        created=later,
    )
    assert rolled_back(at(tick, later + 6 * SECOND, jobs(D2), [crashing]))


@pytest.mark.parametrize(
    ("created", "since", "judged", "verdict"),
    [
        (T0 + 2 * SECOND, SETTLED + 30 * SECOND, END, "failed"),  # after the patch, in the window
        (T0 - SECOND, SETTLED + 30 * SECOND, END, "healthy"),  # the pod predates the refresh
        (T0 + 2 * SECOND, END + SECOND, END + SECOND, "healthy"),  # may have been after the end
    ],
)
def test_a_restart_known_only_by_its_count_counts_only_when_it_cannot_lie_outside_the_window(
    created: datetime, since: datetime, judged: datetime, verdict: str
) -> None:
    """The kubelet lost the ended instance (restartCount 1, no lastState): it ended after the pod
    was created and before the instance running now started."""
    pod = a_pod("jm-new", container("api", ran(D2), restarts=1, since=since), created=created)
    status = at(refreshed(), judged, jobs(D2), [pod])
    assert rolled_back(status) if verdict == "failed" else status.phase is Phase.CURRENT


_INIT_DIGESTS = {"migrate": D2, "api": D3}


def _init_refresh_sent() -> tuple[HealthTick, Json]:
    """A refresh of the init container migrate (D1 → D2) sent; the workload once it landed."""
    tick = HealthTick(spec(target("jobs-manager", migrate=JM, api=PM)))
    images = {"api": f"{PM_REPO}@{D3}"}
    start = deployment("jobs-manager", images, init_images={"migrate": f"{JM_REPO}@{D1}"})
    tick.run({JOBS: evidence(start, digests=_INIT_DIGESTS)}, advance=timedelta(0))
    after = deployment(
        "jobs-manager", images, init_images={"migrate": f"{JM_REPO}@{D2}"}, generation=2
    )
    return tick, after


def test_init_containers_completing_are_healthy_and_failing_ones_crash() -> None:
    tick, after = _init_refresh_sent()
    digests = _INIT_DIGESTS

    def world(migrate: Json) -> dict[Any, Any]:
        pod = a_pod("jm-new", container("api", ran(D3, PM_REPO)), init=(migrate,))
        return {JOBS: evidence(after, [pod], digests=digests)}

    done = container("migrate", ran(D2), state=ended(0, T0 + 4 * SECOND, "Completed"))
    for when in (SETTLED, END):
        tick.now = when
        tick.run(world(done), advance=timedelta(0))
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    tick, _ = _init_refresh_sent()
    retried = container(
        "migrate", ran(D2), restarts=1, last=ended(2, T0 + 3 * SECOND), state=done["state"]
    )
    tick.now = SETTLED
    tick.run(world(retried), advance=timedelta(0))
    assert rolled_back(tick.target("jobs-manager"))


def test_an_init_container_run_again_that_completes_again_is_healthy() -> None:
    """A pod whose sandbox was recreated runs its init containers again (its restart count
    grows): an init container that completed each time did what it is for, and the refresh
    succeeds at the window's end; only a failed run of one is a crash."""
    tick, after = _init_refresh_sent()
    digests = _INIT_DIGESTS
    again = container(
        "migrate",
        ran(D2),
        restarts=1,
        last=ended(0, T0 + 4 * SECOND, "Completed", started=T0 + 3 * SECOND),
        state=ended(0, T0 + 8 * SECOND, "Completed", started=T0 + 7 * SECOND),
    )
    pod = a_pod("jm-new", container("api", ran(D3, PM_REPO)), init=(again,))
    for when in (SETTLED, SETTLED + 6 * SECOND, END):
        tick.now = when
        tick.run({JOBS: evidence(after, [pod], digests=digests)}, advance=timedelta(0))
    status = tick.target("jobs-manager")
    assert (status.phase, status.refresh_attempts, status.failed) == (Phase.CURRENT, 0, ())
    assert status.message == "running the desired digests"


# --- a window of 0, an override, what follows the window ------------------------------------


def test_a_window_of_zero_keeps_the_settled_verdict_whatever_the_pods_do() -> None:
    tick = HealthTick(spec(target("jobs-manager", api=JM), healthyFor="0s"))
    tick.run({JOBS: evidence(jobs(D1, 1), digests={"api": D2})}, advance=timedelta(0))
    status = at(tick, SETTLED, jobs(D2), [crashed(SETTLED - SECOND)])
    assert (status.phase, status.pending, status.last_refresh) == (Phase.CURRENT, None, SETTLED)
    assert in_flight(tick.spec, tick.status, NS, SETTLED).pods == frozenset()


def test_a_target_overrides_the_policy_s_window() -> None:
    short = target("jobs-manager", api=JM)
    short["healthyFor"] = "5s"
    tick = HealthTick(spec(short, healthyFor="1h"))
    tick.run({JOBS: evidence(jobs(D1, 1), digests={"api": D2})}, advance=timedelta(0))
    assert at(tick, SETTLED, jobs(D2), [healthy()]).phase is Phase.REFRESHING
    assert at(tick, SETTLED + 5 * SECOND, jobs(D2), [healthy()]).phase is Phase.CURRENT


def test_the_progress_deadline_no_longer_applies_once_the_window_runs() -> None:
    tick = refreshed(rolloutTimeout="30s", healthyFor="5m")
    # Unsettled again (a node drained), far past rolloutTimeout: still watching, not failed.
    status = at(tick, SETTLED + 3 * 60 * SECOND, jobs(D2, available=0), [])
    assert status.phase is Phase.REFRESHING
    assert status.message.startswith("our refresh rolled out; watching its pods until")


def test_a_crash_after_the_window_is_skipped_and_says_which_build_and_since_when_healthy() -> None:
    tick = refreshed(maxSkipTicks=2)
    assert at(tick, END, jobs(D2), [healthy()]).phase is Phase.CURRENT
    late = jobs(D2, available=0)
    pods = [crashed(END + 30 * SECOND)]
    tick.now = END + 60 * SECOND
    tick.run({JOBS: evidence(late, pods, digests={"api": D2})}, advance=timedelta(0))
    skipping = tick.target("jobs-manager")
    assert (skipping.phase, skipping.refresh_attempts, skipping.failed) == (Phase.SKIPPING, 0, ())
    note = (
        f". Its pods run api@{D2[:19]}…, judged healthy at {format_timestamp(END)} when its "
        "refresh's health window ended: a crash since is not that refresh's, so it is not rolled "
        "back (roll it back by hand, or push a fixed build)"
    )
    assert skipping.message.endswith(note)
    tick.now = END + 2 * 60 * SECOND
    plan = tick.run({JOBS: evidence(late, pods, digests={"api": D2})}, advance=timedelta(0))
    frozen = tick.target("jobs-manager")
    assert frozen.phase is Phase.FROZEN
    assert frozen.message.endswith(note)
    (event,) = [e for e in plan.events if e.reason == "Frozen"]
    assert event.message.endswith(note)
    assert plan.patches == ()


def test_a_workload_unsettled_after_the_window_with_no_crash_is_skipped_with_no_such_note() -> None:
    tick = refreshed()
    assert at(tick, END, jobs(D2), [healthy()]).phase is Phase.CURRENT
    tick.now = END + 60 * SECOND  # a node drained: the pod is gone, its replacement pending
    world = {JOBS: evidence(jobs(D2, available=0), [], digests={"api": D2})}
    tick.run(world, advance=timedelta(0))
    skipping = tick.target("jobs-manager")
    assert skipping.phase is Phase.SKIPPING
    assert "judged healthy" not in skipping.message


def test_the_after_window_note_names_each_container_on_our_build_and_frozen_writes_nothing() -> (
    None
):
    tick = HealthTick(spec(target("jobs-manager", api=JM, sidecar=PM), maxSkipTicks=2))
    digests = {"api": D2, "sidecar": D3}
    start = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}", "sidecar": f"{PM_REPO}@{D1}"})
    tick.run({JOBS: evidence(start, digests=digests)}, advance=timedelta(0))
    images = {"api": f"{JM_REPO}@{D2}", "sidecar": f"{PM_REPO}@{D3}"}
    up = [a_pod("jm-new", container("api", ran(D2)), container("sidecar", ran(D3, PM_REPO)))]
    for when in (SETTLED, END):
        tick.now = when
        world = {JOBS: evidence(deployment("jobs-manager", images, generation=2), up, digests)}
        tick.run(world, advance=timedelta(0), follow_up=True)
    assert (tick.target("jobs-manager").phase, tick.target("jobs-manager").last_refresh) == (
        Phase.CURRENT,
        END,
    )
    late = deployment("jobs-manager", images, generation=2, available=0)
    crash = END + 30 * SECOND
    down = [
        a_pod(
            "jm-new",
            container("api", ran(D2), restarts=1, last=ended(1, crash), since=crash + SECOND),
            container("sidecar", ran(D3, PM_REPO)),
        )
    ]
    note = (
        f". Its pods run api@{D2[:19]}…, sidecar@{D3[:19]}…, judged healthy at "
        f"{format_timestamp(END)} when its refresh's health window ended: a crash since is not "
        "that refresh's, so it is not rolled back (roll it back by hand, or push a fixed build)"
    )
    verdict = Workload.from_api(late).verdict.message
    tick.now = END + 60 * SECOND
    tick.run({JOBS: evidence(late, down, digests=digests)}, advance=timedelta(0))
    skipping = tick.target("jobs-manager")
    assert skipping.phase is Phase.SKIPPING
    assert skipping.message == f"not settled (1 of 2 ticks before Frozen): {verdict}{note}"
    tick.now = END + 2 * 60 * SECOND
    plan = tick.run({JOBS: evidence(late, down, digests=digests)}, advance=timedelta(0))
    assert tick.target("jobs-manager").phase is Phase.FROZEN
    (event,) = [e for e in plan.events if e.reason == "Frozen"]
    assert event.message.endswith(note)
    # Frozen and still crashing: the note is the same every tick, so nothing is written.
    frozen = tick.status
    tick.now = END + 3 * 60 * SECOND
    plan = tick.run({JOBS: evidence(late, down, digests=digests)}, advance=timedelta(0))
    assert (tick.status, without_offline(plan.events), plan.patches) == (frozen, [], ())


def test_someone_else_s_rollout_after_the_window_gets_no_note_as_our_old_pods_crash() -> None:
    """Our refresh to D2 was judged healthy; someone else then rolls out D3. A pod still on D2
    crashing meanwhile is no reason to name our build: the workload runs theirs."""
    tick = refreshed()
    assert at(tick, END, jobs(D2), [healthy()]).phase is Phase.CURRENT
    theirs = jobs(D3, generation=3, available=0)
    pods = [
        crashed(END + 30 * SECOND, name="jm-ours"),
        a_pod("jm-theirs", container("api", ran(D3))),
    ]
    status = at(tick, END + 60 * SECOND, theirs, pods, follow_up=False)
    verdict = Workload.from_api(theirs).verdict.message
    assert (status.phase, status.refresh_attempts, status.failed) == (Phase.SKIPPING, 0, ())
    assert status.message == f"not settled (1 of 8 ticks before Frozen): {verdict}"


def test_a_target_current_at_first_sight_that_stops_settling_claims_no_judged_healthy() -> None:
    """An adoption records lastGood but no lastRefresh: no refresh of ours was judged healthy,
    so a crash of the build it runs is skipped with no such note."""
    tick = HealthTick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(jobs(D2), [healthy()], digests={"api": D2})}, advance=timedelta(0))
    status = tick.target("jobs-manager")
    assert (status.phase, status.last_refresh) == (Phase.CURRENT, None)
    assert status.last_good == {"api": f"docker.io/{JM_REPO}@{D2}"}
    late = jobs(D2, available=0)
    status = at(tick, T0 + 60 * SECOND, late, [crashed(T0 + 30 * SECOND)], follow_up=False)
    verdict = Workload.from_api(late).verdict.message
    assert status.phase is Phase.SKIPPING
    assert status.message == f"not settled (1 of 8 ticks before Frozen): {verdict}"


def test_the_window_s_end_is_the_follow_up_deadline_and_its_pods_are_followed() -> None:
    tick = refreshed()
    flying = in_flight(tick.spec, tick.status, NS, SETTLED)
    assert flying.pods == {JOBS}
    assert flying.deadline == END + timedelta(milliseconds=100)
    # While it rolls out, its pods are followed too (a crash fails it), at the progress deadline.
    rolling = HealthTick(spec(target("jobs-manager", api=JM)))
    rolling.run({JOBS: evidence(jobs(D1, 1), digests={"api": D2})}, advance=timedelta(0))
    flying = in_flight(rolling.spec, rolling.status, NS, T0)
    assert (flying.pods, flying.deadline) == ({JOBS}, T0 + timedelta(minutes=10, seconds=1))


def test_a_rollback_has_no_window_of_its_own() -> None:
    tick = refreshed()
    at(tick, SETTLED + 5 * SECOND, jobs(D2), [crashed(SETTLED + 4 * SECOND)])
    assert in_flight(tick.spec, tick.status, NS, SETTLED + 5 * SECOND).pods == frozenset()
    back = jobs(D1, 3)
    status = at(tick, SETTLED + 8 * SECOND, back, [a_pod("jm-old", container("api", ran(D1)))])
    assert (status.phase, status.pending) == (Phase.WAITING, None)
    assert "RolledBack" in [e.reason for e in tick.last_plan.events]


def test_two_containers_changed_and_one_crashing_bars_only_the_one_that_crashed() -> None:
    tick = HealthTick(spec(target("jobs-manager", api=JM, sidecar=PM)))
    digests = {"api": D2, "sidecar": D3}
    start = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}", "sidecar": f"{PM_REPO}@{D1}"})
    tick.run({JOBS: evidence(start, digests=digests)}, advance=timedelta(0))
    after = deployment(
        "jobs-manager", {"api": f"{JM_REPO}@{D2}", "sidecar": f"{PM_REPO}@{D3}"}, generation=2
    )
    pod = a_pod(
        "jm-new",
        container("api", ran(D2)),
        container("sidecar", ran(D3, PM_REPO), restarts=1, last=ended(1, SETTLED + SECOND)),
    )
    tick.now = SETTLED + 2 * SECOND
    tick.run({JOBS: evidence(after, [pod], digests=digests)}, advance=timedelta(0))
    status = tick.target("jobs-manager")
    assert rolled_back(status)
    assert [b.digest for b in status.failed] == [D3]


# --- DaemonSets (per node) and StatefulSets ---------------------------------------------------

AGENTS = NS  # in the policy's own namespace
MONITOR = key("resource-monitor", "DaemonSet", AGENTS)


def agents(image: str, generation: int) -> Json:
    return daemonset(
        "resource-monitor", {"monitor": f"{RM_REPO}@{image}"}, namespace=AGENTS,
        generation=generation, desired=3,
    )  # fmt: skip


def agent(node: str, **reported: Any) -> Json:
    return a_pod(f"agent-{node}", container("monitor", ran(D2, RM_REPO), **reported), node=node)


def test_a_daemonset_agent_crash_looping_on_any_one_node_fails_the_refresh_naming_it() -> None:
    tick = HealthTick(spec(target("resource-monitor", "DaemonSet", AGENTS, monitor=RM)))
    tick.run({MONITOR: evidence(agents(D1, 1), digests={"monitor": D2})}, advance=timedelta(0))
    nodes = ["node-a", "node-b", "node-c"]
    pods = [agent(n) for n in nodes]
    tick.now = SETTLED
    tick.run(
        {MONITOR: evidence(agents(D2, 2), pods, digests={"monitor": D2})}, advance=timedelta(0)
    )
    assert tick.target("resource-monitor", "DaemonSet", AGENTS).phase is Phase.REFRESHING
    pods[1] = agent(
        "node-b",
        restarts=2,
        last=ended(1, SETTLED + 12 * SECOND),
        state={"waiting": {"reason": "CrashLoopBackOff"}},
    )
    tick.now = SETTLED + 13 * SECOND
    tick.run(
        {MONITOR: evidence(agents(D2, 2), pods, digests={"monitor": D2})}, advance=timedelta(0)
    )
    status = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert rolled_back(status)
    assert [b.digest for b in status.failed] == [D2]
    assert status.message.endswith("; crashing on node(s) node-b; rolling back")
    assert "in pod agent-node-b on node node-b" in status.message


def _settled_agents(*nodes: str) -> tuple[HealthTick, list[Json]]:
    """A DaemonSet refreshed D1 -> D2 whose agents on ``nodes`` run D2, settled: its window open."""
    tick = HealthTick(spec(target("resource-monitor", "DaemonSet", AGENTS, monitor=RM)))
    tick.run({MONITOR: evidence(agents(D1, 1), digests={"monitor": D2})}, advance=timedelta(0))
    tick.now = SETTLED
    pods = [agent(n) for n in nodes]
    tick.run(
        {MONITOR: evidence(agents(D2, 2), pods, digests={"monitor": D2})}, advance=timedelta(0)
    )
    return tick, pods


def test_a_daemonset_crashing_on_two_nodes_names_the_first_crash_and_both_nodes() -> None:
    tick, pods = _settled_agents("node-a", "node-b", "node-c")
    first, second = SETTLED + 12 * SECOND, SETTLED + 20 * SECOND
    pods[0] = agent("node-a", restarts=1, last=ended(1, second), since=second + SECOND)
    pods[2] = agent("node-c", restarts=1, last=ended(1, first), since=first + SECOND)
    tick.now = SETTLED + 21 * SECOND
    tick.run(
        {MONITOR: evidence(agents(D2, 2), pods, digests={"monitor": D2})}, advance=timedelta(0)
    )
    status = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert rolled_back(status)
    assert status.message == (
        "refresh failed (attempt 1 of 3): the new build crashed within its health window "
        f"(healthyFor 1m0s, until {format_timestamp(END)}): container monitor ({D2[:19]}…) in "
        "pod agent-node-c on node node-c restarted after exit code 1 (Error) at "
        f"{format_timestamp(first)} (and 1 more); crashing on node(s) node-a, node-c; rolling back"
    )


def test_a_daemonset_crash_in_a_pod_with_an_empty_node_name_names_no_node() -> None:
    # An empty nodeName places the pod nowhere: the message names no node, and no empty one.
    tick, pods = _settled_agents("node-a", "node-b")
    at = SETTLED + 12 * SECOND
    pods.append(agent("", restarts=1, last=ended(1, at), since=at + SECOND))
    tick.now = SETTLED + 13 * SECOND
    tick.run(
        {MONITOR: evidence(agents(D2, 2), pods, digests={"monitor": D2})}, advance=timedelta(0)
    )
    status = tick.target("resource-monitor", "DaemonSet", AGENTS)
    assert rolled_back(status)
    assert status.message == (
        "refresh failed (attempt 1 of 3): the new build crashed within its health window "
        f"(healthyFor 1m0s, until {format_timestamp(END)}): container monitor ({D2[:19]}…) in "
        "pod agent- restarted after exit code 1 (Error) at "
        f"{format_timestamp(at)}; rolling back"
    )


def test_a_daemonset_whose_agents_stay_up_on_every_node_is_current_at_the_window_s_end() -> None:
    tick = HealthTick(spec(target("resource-monitor", "DaemonSet", AGENTS, monitor=RM)))
    tick.run({MONITOR: evidence(agents(D1, 1), digests={"monitor": D2})}, advance=timedelta(0))
    pods = [agent(n) for n in ("node-a", "node-b", "node-c")]
    for when in (SETTLED, END):
        tick.now = when
        world = {MONITOR: evidence(agents(D2, 2), pods, digests={"monitor": D2})}
        tick.run(world, advance=timedelta(0))
    assert tick.target("resource-monitor", "DaemonSet", AGENTS).phase is Phase.CURRENT


def test_a_statefulset_pod_crashing_inside_the_window_fails_the_refresh() -> None:
    db = key("db", "StatefulSet")
    tick = HealthTick(spec(target("db", "StatefulSet", api=JM)))

    def sts(image: str, generation: int) -> Json:
        return statefulset("db", {"api": f"{JM_REPO}@{image}"}, generation=generation)

    tick.run({db: evidence(sts(D1, 1), digests={"api": D2})}, advance=timedelta(0))
    pods = [healthy("db-0"), healthy("db-1")]
    tick.now = SETTLED
    tick.run({db: evidence(sts(D2, 2), pods, digests={"api": D2})}, advance=timedelta(0))
    assert tick.target("db", "StatefulSet").phase is Phase.REFRESHING
    pods[0] = crashed(SETTLED + 40 * SECOND, name="db-0")
    tick.now = SETTLED + 41 * SECOND
    tick.run({db: evidence(sts(D2, 2), pods, digests={"api": D2})}, advance=timedelta(0))
    assert rolled_back(tick.target("db", "StatefulSet"))


# --- lockstep: a member's window binds its group -----------------------------------------------


def test_a_lockstep_member_waits_for_its_window_and_a_crash_in_a_peer_s_rolls_both_back() -> None:
    proxy_key = key("requests-proxy")
    tick = HealthTick(
        spec(target("jobs-manager", api=JM), target("requests-proxy", proxy=JM), lockstep=True)
    )

    def proxy(image: str, generation: int) -> Json:
        return deployment("requests-proxy", {"proxy": f"{JM_REPO}@{image}"}, generation=generation)

    def world(proxy_pods: list[Json]) -> dict[Any, Any]:
        return {
            JOBS: evidence(jobs(D2), [healthy()], digests={"api": D2}),
            key("requests-proxy"): evidence(proxy(D2, 2), proxy_pods, digests={"proxy": D2}),
        }

    start = {
        JOBS: evidence(jobs(D1, 1), digests={"api": D2}),
        proxy_key: evidence(proxy(D1, 1), digests={"proxy": D2}),
    }
    assert len(tick.run(start, advance=timedelta(0)).patches) == 2
    tick.now = SETTLED
    tick.run(world([a_pod("rp", container("proxy", ran(D2)))]), advance=timedelta(0))
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    crashing = a_pod("rp", container("proxy", ran(D2), restarts=1, last=ended(1, END - SECOND)))
    tick.now = END
    plan = tick.run(world([crashing]), advance=timedelta(0))
    assert rolled_back(tick.target("requests-proxy"))
    # jobs-manager stayed healthy through its own window, but its peer did not: both go back,
    # and no attempt is counted against it.
    jobs_manager = tick.target("jobs-manager")
    assert (jobs_manager.phase, jobs_manager.refresh_attempts) == (Phase.ROLLING_BACK, 0)
    assert sorted(p.target.name for p in plan.patches) == ["jobs-manager", "requests-proxy"]


# --- the rule itself, pure -------------------------------------------------------------------


def test_the_rule_reads_the_kubelet_s_container_statuses_and_keeps_only_trouble() -> None:
    assert container_health(container("api", ran(D2)), init=False) is None
    done = container("migrate", ran(D2), state=ended(0, T0, "Completed"))
    assert container_health(done, init=True) is None
    found = container_health(
        container("api", ran(D2), restarts=2, last=ended(137, T0, "OOMKilled")), init=False
    )
    assert found is not None
    assert (found.restarts, found.last.code, found.last.reason, found.last.at) == (
        2,
        137,
        "OOMKilled",
        T0,
    )


def test_crashes_are_reported_earliest_first_one_per_container() -> None:
    window = HealthWindow(T0, SETTLED, 60 * SECOND)
    pods = [
        ObservedPod.from_api(crashed(SETTLED + 30 * SECOND, name="b")),
        ObservedPod.from_api(crashed(SETTLED + 20 * SECOND, name="a")),
    ]
    found = crashes(pods, {"api": Resolved(D2)}, window, END)
    assert [(c.pod, c.at) for c in found] == [
        ("a", SETTLED + 20 * SECOND),
        ("b", SETTLED + 30 * SECOND),
    ]
    assert all(isinstance(c, Crash) and c.node == "node-a" for c in found)
    # A runtime that reports the platform manifest of the index pinned runs the new build too.
    arm = digest("arm64")
    platform = crashed(SETTLED + 20 * SECOND)
    platform["status"]["containerStatuses"][0]["imageID"] = ran(arm)
    assert crashes(
        [ObservedPod.from_api(platform)], {"api": Resolved(D2, frozenset({arm}))}, window, END
    )
    assert not crashes([ObservedPod.from_api(platform)], {"api": Resolved(D2)}, window, END)
