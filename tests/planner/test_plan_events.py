"""What the events of a refresh's life say, as `kubectl get events` shows them: type, reason,
and a message naming the workload, the containers and the images."""

from __future__ import annotations

from datetime import timedelta

from imagerefresh.models import PendingPurpose, PendingRefresh
from imagerefresh.planner import Event

from support.ticks import JM, PM, T0, Tick, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D1, D2, D3 = digest(1), digest(2), digest(3)
JM_REPO = "tracebloc/jobs-manager"
JOBS = key("jobs-manager")
WORKLOAD = "Deployment tracebloc/jobs-manager"


def settled(image: str, generation: int = 1) -> dict[str, object]:
    return deployment("jobs-manager", {"api": image}, generation=generation)


def unsettled(image: str, generation: int = 2) -> dict[str, object]:
    return deployment("jobs-manager", {"api": image}, generation=generation, available=0)


def events(plan_events: tuple[Event, ...], *reasons: str) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message) for e in plan_events if e.reason in reasons]


def test_a_refresh_that_stays_healthy_through_its_window_is_announced_with_the_new_digest() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))  # healthyFor: the default 60 s
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    plan = tick.run(
        {JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})},
        advance=timedelta(seconds=60),
    )
    assert events(plan.events, "Refreshed") == []  # settled: its window starts
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    assert events(plan.events, "Refreshed") == [
        (
            "Normal",
            "Refreshed",
            f"{WORKLOAD} rolled out api → {D2[:19]}… and its pods stayed up for 1m0s",
        )
    ]


def test_with_a_window_of_zero_the_settled_refresh_is_announced_at_once() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), healthyFor="0s"))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    assert events(plan.events, "Refreshed") == [
        ("Normal", "Refreshed", f"{WORKLOAD} rolled out api → {D2[:19]}…")
    ]


def test_a_failed_refresh_warns_with_the_attempt_count_then_rolls_back() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM), rolloutTimeout="1m"))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    running_it = [pod("jobs-manager-new", {"api": f"docker.io/{JM_REPO}@{D2}"})]
    plan = tick.run({JOBS: evidence(unsettled(f"{JM_REPO}@{D2}"), running_it, digests={"api": D2})})
    assert events(plan.events, "RefreshFailed", "RollingBack") == [
        (
            "Warning",
            "RefreshFailed",
            f"refresh of {WORKLOAD} failed (attempt 1 of 3): it made no progress for "
            f"rolloutTimeout 1m0s (since {T0.isoformat()}); it reached 1 updated and 0 available"
            f"; {D2[:19]}… is not tried on this target again until a reset (imagerefresh reset "
            "tracebloc/control-plane)",
        ),
        ("Warning", "RollingBack", f"rolling {WORKLOAD} back to api={JM_REPO}@{D1}"),
    ]
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}", 3), digests={"api": D2})})
    assert events(plan.events, "RolledBack") == [
        ("Normal", "RolledBack", f"{WORKLOAD} rolled back to api={JM_REPO}@{D1}")
    ]


def test_a_rollback_overtaken_by_another_writer_is_dropped_naming_it() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D1})})
    rollback = PendingRefresh(
        purpose=PendingPurpose.ROLLBACK,
        images={"api": f"{JM_REPO}@{D1}"},
        previous={"api": f"{JM_REPO}@{D2}"},
        started_at=T0,
    )
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": rollback}),)}
    )
    moved = settled(f"{JM_REPO}@{D3}", 4)
    moved["metadata"]["managedFields"] = [
        {
            "manager": "argocd-controller",
            "operation": "Update",
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:spec": {"f:containers": {'k:{"name":"api"}': {"f:image": {}}}}
                    }
                }
            },
        }
    ]
    plan = tick.run(
        {
            JOBS: evidence(moved, digests={"api": D3}),
        },
        advance=timedelta(minutes=1),
    )
    assert events(plan.events, "RollbackSuperseded") == [
        (
            "Normal",
            "RollbackSuperseded",
            f"the images of {WORKLOAD} were changed by field manager 'argocd-controller' during "
            "our rollback; it is dropped and the target is judged afresh",
        )
    ]


def test_a_contest_by_a_writer_that_left_no_managed_fields_names_an_unknown_writer() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D3}", 3), digests={"api": D2})})
    (contested,) = events(plan.events, "Contested")
    assert contested[0] == "Warning"
    assert contested[2].startswith(
        f"field manager 'an unknown writer' changed the images of {WORKLOAD} during our refresh: "
        "contested attempt 1 of 3. Two writers on one image end Locked"
    )


def test_the_life_of_a_two_container_refresh_names_every_container_and_image() -> None:
    pm_repo = "tracebloc/pods-monitor"
    tick = Tick(spec(target("jobs-manager", api=JM, monitor=PM), rolloutTimeout="10m"))

    def images(d: str) -> dict[str, str]:
        return {"api": f"{JM_REPO}@{d}", "monitor": f"{pm_repo}@{d}"}

    digests = {"api": D2, "monitor": D2}
    tick.run(
        {JOBS: evidence(deployment("jobs-manager", images(D1)), digests=digests)},
        advance=timedelta(0),
    )
    rolling = deployment("jobs-manager", images(D2), generation=2, available=0)
    tick.run({JOBS: evidence(rolling, digests=digests)}, advance=timedelta(minutes=11))
    status = tick.target("jobs-manager")
    assert status.message == ("rolling out our refresh: 0 of 1 updated replicas are available")
    plan = tick.run({JOBS: evidence(rolling, digests=digests)}, advance=timedelta(minutes=1))
    restored = f"api={JM_REPO}@{D1}, monitor={pm_repo}@{D1}"
    assert events(plan.events, "RollingBack") == [
        ("Warning", "RollingBack", f"rolling {WORKLOAD} back to {restored}")
    ]
    back = deployment("jobs-manager", images(D1), generation=3, available=0)
    tick.run({JOBS: evidence(back, digests=digests)}, advance=timedelta(minutes=1))
    assert tick.target("jobs-manager").message == (
        f"rolling back to {restored}: 0 of 1 updated replicas are available"
    )
    plan = tick.run({JOBS: evidence(deployment("jobs-manager", images(D1), generation=3))})
    assert events(plan.events, "RolledBack") == [
        ("Normal", "RolledBack", f"{WORKLOAD} rolled back to {restored}")
    ]
    tick = Tick(spec(target("jobs-manager", api=JM, monitor=PM), healthyFor="30s"))
    tick.run({JOBS: evidence(deployment("jobs-manager", images(D1)), digests=digests)})
    tick.run({JOBS: evidence(deployment("jobs-manager", images(D2), generation=2))})
    plan = tick.run({JOBS: evidence(deployment("jobs-manager", images(D2), generation=2))})
    assert events(plan.events, "Refreshed") == [
        (
            "Normal",
            "Refreshed",
            f"{WORKLOAD} rolled out api → {D2[:19]}…, monitor → {D2[:19]}… and its pods stayed "
            "up for 30s",
        )
    ]


def test_a_contest_during_our_refresh_says_how_to_end_it() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})})
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D3}", 3), digests={"api": D2})})
    assert events(plan.events, "Contested") == [
        (
            "Warning",
            "Contested",
            f"field manager 'an unknown writer' changed the images of {WORKLOAD} during our "
            "refresh: contested attempt 1 of 3. Two writers on one image end Locked: stop the "
            "other writer (a CronJob, GitOps self-heal, another policy) or remove the target "
            "from this policy",
        )
    ]
