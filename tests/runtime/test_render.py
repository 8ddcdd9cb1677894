"""What `imagerefresh plan` and `imagerefresh audit` print."""

from __future__ import annotations

from imagerefresh.audit import Finding, FindingKind
from imagerefresh.planner import plan_tick
from imagerefresh.runtime.gather import Gathered
from imagerefresh.runtime.render import render_findings, render_plan

from support.ticks import JM, Tick, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D1 = digest(1)


def test_plan_shows_each_containers_pull_policy_and_warns_about_always() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM, sidecar=JM)))
    workload = deployment(
        "jobs-manager",
        {"api": f"tracebloc/jobs-manager@{D1}", "sidecar": f"tracebloc/jobs-manager@{D1}"},
    )
    workload["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    tick_input = tick.input(
        {key("jobs-manager"): evidence(workload, digests={"api": D1, "sidecar": D1})}
    )
    text = render_plan(Gathered(tick_input, {}), plan_tick(tick_input))
    lines = text.splitlines()
    assert lines[2].split() == [
        "TARGET",
        "CONTAINER",
        "LIVE",
        "DESIRED",
        "ACTION",
        "PULL",
        "OFFLINE",
    ]
    assert lines[3].split()[-3:] == ["none", "Always", "no"]
    assert lines[4].split()[-3:] == ["none", "IfNotPresent", "no"]
    assert (
        "not offline-ready: Deployment tracebloc/jobs-manager container 'sidecar': "
        "imagePullPolicy: Always on container 'api': every start asks the registry; set "
        "IfNotPresent"
    ) in lines
    assert lines[-1] == (
        "warning: Deployment tracebloc/jobs-manager container 'api' has imagePullPolicy Always: "
        "not offline-safe (a restart needs the registry); set IfNotPresent"
    )


def test_findings_print_as_a_table_then_one_line_of_detail_each() -> None:
    findings = [
        Finding("Deployment ns/web", "nginx", FindingKind.MUTABLE, "nginx:1.27", "why; what"),
        Finding("Deployment ns/proxy", "p", FindingKind.UNCOVERED, "a/b:c", "because"),
    ]
    assert render_findings(findings).splitlines() == [
        "FINDING    WORKLOAD             CONTAINER  IMAGE",
        "mutable    Deployment ns/web    nginx      nginx:1.27",
        "uncovered  Deployment ns/proxy  p          a/b:c",
        "",
        "Deployment ns/web nginx: why; what",
        "Deployment ns/proxy p: because",
    ]


def test_plan_says_yes_for_a_container_its_node_proves_offline_ready() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    pinned = {"api": f"tracebloc/jobs-manager@{D1}"}
    on_node = pod("p", {"api": f"docker.io/tracebloc/jobs-manager@{D1}"}, "edge", pinned)
    workload = deployment("jobs-manager", pinned)
    tick_input = tick.input({key("jobs-manager"): evidence(workload, [on_node], {"api": D1})})
    lines = render_plan(Gathered(tick_input, {}), plan_tick(tick_input)).splitlines()
    assert lines[3].split()[-3:] == ["none", "IfNotPresent", "yes"]
    assert not any(line.startswith("not offline-ready") for line in lines)
