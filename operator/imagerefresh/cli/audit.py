"""``imagerefresh audit``: what no policy covers (and, with ``--offline``, what would not
restart with the registry unreachable)."""

from __future__ import annotations

import json

import click

from imagerefresh.audit import audit as find_gaps
from imagerefresh.audit import audit_offline
from imagerefresh.cli.group import (
    AUDIT_FINDINGS_EXIT,
    AUDIT_UNREADABLE_EXIT,
    USAGE,
    CouldNotAudit,
    Exits,
    allow_option,
    cluster_options,
    kube_api,
    log_options,
    main,
    one_shot,
)
from imagerefresh.planner import NamespacePolicy
from imagerefresh.runtime.coverage import read_coverage
from imagerefresh.runtime.render import render_findings

AUDIT_EXITS: Exits = (
    (
        0,
        "clean: every container a policy declares, or running a tracked repository, is "
        "covered (with --offline: and every workload would restart offline)",
    ),
    (AUDIT_FINDINGS_EXIT, "findings: each is listed with why and what to do"),
    USAGE,
    (
        AUDIT_UNREADABLE_EXIT,
        "could not audit: no such namespace (or not allowed to tell), not allowed to list "
        "what it needs, or no API server (with --offline: pods, or nodes answering other "
        "than forbidden); nothing it could not read is called clean",
    ),
)


@main.command(exits=AUDIT_EXITS)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Audit the workloads of this namespace only (repeatable; default: all namespaces). "
    "Policies are read in every namespace.",
)
@click.option(
    "--all-mutable",
    is_flag=True,
    help="Also list every container on a tag without a digest that no policy declares.",
)
@click.option(
    "--offline",
    is_flag=True,
    help="Also list every workload whose pods would not restart with the registry "
    "unreachable, and why, in a policy or not; the coverage findings are still listed, so "
    "clean means both. Ready: no container or init container pulled Always, each image proven "
    "on every node its pods run on (by a pod there or the node's image list), and pinned by "
    "digest where a policy declares it (everywhere, in a workload no policy covers). Lists "
    "pods, and nodes when allowed (if not, it says so and judges on pods alone).",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@allow_option
@cluster_options
@log_options
@click.pass_context
@one_shot(CouldNotAudit)
def audit(
    ctx: click.Context,
    namespaces: tuple[str, ...],
    all_mutable: bool,
    offline: bool,
    output: str,
    namespace_pairs: frozenset[tuple[str, str]],
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """List containers the operator will never refresh: those running a tracked repository
    that no policy covers, and policy targets that are in conflict, suspended, dry-run,
    beyond the policy's reach (give the operator's --allow-namespace-pair), running another
    repository, or missing. A Locked target is covered: it waits for a reset. With --offline,
    also every workload that would not restart with the registry unreachable."""
    coverage = read_coverage(
        kube_api(kubeconfig, context), tuple(dict.fromkeys(namespaces)), offline=offline
    )
    reachable = NamespacePolicy(namespace_pairs).allows
    findings = find_gaps(
        coverage.policies,
        coverage.workloads,
        namespaces=frozenset(namespaces) or None,
        all_mutable=all_mutable,
        reachable=reachable,
    )
    if coverage.offline is not None:
        findings = sorted(
            findings
            + audit_offline(
                coverage.policies,
                coverage.offline.workloads,
                coverage.offline.nodes,
                namespaces=frozenset(namespaces) or None,
                reachable=reachable,
            )
        )
        if coverage.offline.note is not None:
            click.echo(f"Note: {coverage.offline.note}", err=True)
    if output == "json":
        click.echo(json.dumps([finding.as_json() for finding in findings], indent=2))
    elif findings:
        click.echo(render_findings(findings))
    containers = sum(len(w.containers) for w in coverage.workloads)
    click.echo(
        f"{len(findings)} finding(s) in {len(coverage.workloads)} workloads ({containers} "
        f"containers), against {len(coverage.policies)} policies",
        err=True,
    )
    ctx.exit(AUDIT_FINDINGS_EXIT if findings else 0)
