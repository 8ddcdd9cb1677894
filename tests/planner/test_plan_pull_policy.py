"""Pull-policy awareness: a declared container pulled ``Always`` is reported per container in
status and warned about once per container and policy generation — never once per tick."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.models import Phase, PolicyStatus
from imagerefresh.planner import Event, Workload
from imagerefresh.planner.evidence import effective_pull_policy

from support.ticks import JM, PM, Tick, digest, evidence, key, spec, target
from support.workloads import deployment

D1 = digest(1)
JM_PINNED = f"tracebloc/jobs-manager@{D1}"
PM_PINNED = f"tracebloc/pods-monitor@{D1}"
JOBS = key("jobs-manager")
WORKLOAD = "Deployment tracebloc/jobs-manager"


def warning(container: str) -> tuple[str, str, str]:
    return (
        "Warning",
        "PullPolicyAlways",
        f"container {container!r} of {WORKLOAD} has imagePullPolicy Always: every pod start "
        "asks the registry first, so a restart while the registry is unreachable or "
        "rate-limited fails with ImagePullBackOff, pinned digest or not; set imagePullPolicy: "
        "IfNotPresent (the pinned digest keeps it exact)",
    )


def pulled(images: dict[str, str], **policies: str) -> dict[str, Any]:
    """A settled jobs-manager whose containers carry the given imagePullPolicy."""
    workload = deployment("jobs-manager", images)
    for container in workload["spec"]["template"]["spec"]["containers"]:
        if container["name"] in policies:
            container["imagePullPolicy"] = policies[container["name"]]
    return workload


def warnings(events: tuple[Event, ...]) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message) for e in events if e.reason == "PullPolicyAlways"]


def both() -> Tick:
    return Tick(spec(target("jobs-manager", api=JM, **{"pods-monitor": PM})))


def run(tick: Tick, *, follow_up: bool = False, **policies: str) -> tuple[Event, ...]:
    workload = pulled({"api": JM_PINNED, "pods-monitor": PM_PINNED}, **policies)
    digests = {"api": D1, "pods-monitor": D1}
    return tick.run({JOBS: evidence(workload, digests=digests)}, follow_up=follow_up).events


@pytest.mark.parametrize(
    ("image", "declared", "expected"),
    [
        ("nginx:1.27", "Always", "Always"),
        ("nginx", "Never", "Never"),
        ("nginx:latest", "IfNotPresent", "IfNotPresent"),
        # Absent (or empty): the API server's default, from the image.
        ("nginx", None, "Always"),
        ("nginx", "", "Always"),
        ("nginx:latest", None, "Always"),
        (f"nginx:latest@{D1}", None, "Always"),
        ("nginx:1.27", None, "IfNotPresent"),
        ("nginx:latest-1", None, "IfNotPresent"),
        (f"nginx@{D1}", None, "IfNotPresent"),
        ("Not A Reference", None, None),
        ("", None, None),
    ],
)
def test_the_effective_pull_policy_is_the_declared_one_else_the_api_servers_default(
    image: str, declared: str | None, expected: str | None
) -> None:
    assert effective_pull_policy(image, declared) == expected


def test_the_workload_reads_each_containers_pull_policy_init_containers_included() -> None:
    workload = deployment("jobs-manager", {"api": JM}, init_images={"migrate": "tracebloc/m"})
    workload["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    containers = Workload.from_api(workload).containers
    assert containers["api"].pull_policy == "Never"
    assert containers["migrate"].pull_policy == "Always"  # untagged: defaulted to Always


def test_status_records_each_declared_containers_pull_policy_and_the_phase_is_unchanged() -> None:
    tick = both()
    run(tick, api="Always", **{"pods-monitor": "IfNotPresent"})
    (status,) = tick.status.targets
    assert status.phase is Phase.CURRENT
    assert status.message == "running the desired digests"
    assert {c.name: c.pull_policy for c in status.containers} == {
        "api": "Always",
        "pods-monitor": "IfNotPresent",
    }
    assert tick.status.model_dump(by_alias=True, mode="json")["targets"][0]["containers"][0][
        "pullPolicy"
    ] == ("Always")


def test_a_container_pulled_always_is_warned_about_once_not_every_tick() -> None:
    tick = both()
    assert warnings(run(tick, api="Always")) == [warning("api")]
    assert warnings(run(tick, api="Always")) == []
    assert warnings(run(tick, api="Always", follow_up=True)) == []
    assert warnings(run(tick, api="Always")) == []


def test_every_container_pulled_always_gets_its_own_warning() -> None:
    tick = both()
    assert warnings(run(tick, api="Always", **{"pods-monitor": "Always"})) == [
        warning("api"),
        warning("pods-monitor"),
    ]


def test_containers_not_pulled_always_are_never_warned_about() -> None:
    tick = both()
    assert warnings(run(tick, api="IfNotPresent", **{"pods-monitor": "Never"})) == []
    tick.generation += 1
    assert warnings(run(tick)) == []


def test_a_new_policy_generation_warns_once_more() -> None:
    tick = both()
    run(tick, api="Always")
    tick.generation += 1
    assert warnings(run(tick, api="Always")) == [warning("api")]
    assert warnings(run(tick, api="Always")) == []


def test_a_new_generation_seen_first_by_a_follow_up_still_warns_for_targets_it_does_not_judge() -> (
    None
):
    tick = both()
    run(tick, api="Always")
    tick.generation += 1
    assert warnings(run(tick, api="Always", follow_up=True)) == [warning("api")]
    assert warnings(run(tick, api="Always")) == []


def test_a_container_that_leaves_always_and_returns_is_warned_about_again() -> None:
    tick = both()
    run(tick, api="Always")
    assert warnings(run(tick, api="IfNotPresent")) == []
    assert warnings(run(tick, api="Always")) == [warning("api")]


def test_an_operator_restarted_on_the_written_status_does_not_warn_again() -> None:
    tick = both()
    run(tick, api="Always")
    written = tick.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    restarted = both()
    restarted.status = PolicyStatus.model_validate(written)
    assert warnings(run(restarted, api="Always")) == []


def test_a_status_written_before_pull_policies_were_recorded_warns_once() -> None:
    tick = both()
    run(tick, api="Always")
    (status,) = tick.status.targets
    older = tuple(c.model_copy(update={"pull_policy": None}) for c in status.containers)
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"containers": older}),)}
    )
    assert warnings(run(tick, api="Always")) == [warning("api")]


def test_the_warning_is_about_the_workload() -> None:
    tick = both()
    (event,) = [e for e in run(tick, api="Always") if e.reason == "PullPolicyAlways"]
    assert event.target == JOBS


def test_a_container_after_one_not_pulled_always_is_still_warned_about() -> None:
    tick = both()
    assert warnings(run(tick, api="IfNotPresent", **{"pods-monitor": "Always"})) == [
        warning("pods-monitor")
    ]


def test_a_container_after_one_already_warned_about_is_still_warned_about() -> None:
    tick = both()
    run(tick, api="Always")
    assert warnings(run(tick, api="Always", **{"pods-monitor": "Always"})) == [
        warning("pods-monitor")
    ]
