"""``imagerefresh plan``: what the next tick would do for a policy, changing nothing."""

from __future__ import annotations

import asyncio

import click

from imagerefresh.cli.group import (
    FAILED_EXIT,
    USAGE,
    CommandFailed,
    Exits,
    allow_option,
    cluster_options,
    insecure_registry_option,
    kube_api,
    log_options,
    main,
    namespaced_argument,
    one_shot,
    policy_ticker,
)
from imagerefresh.metrics import Metrics
from imagerefresh.planner import NamespacePolicy, Plan
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.gather import Gathered
from imagerefresh.runtime.render import render_plan

PLAN_EXITS: Exits = (
    (0, "the plan is printed; nothing was changed"),
    (
        FAILED_EXIT,
        "no plan: no such policy, its spec or status cannot be read, or the API "
        "server refused or did not answer",
    ),
    USAGE,
)


@main.command(exits=PLAN_EXITS)
@namespaced_argument("policy")
@insecure_registry_option
@allow_option
@cluster_options
@log_options
@one_shot()
def plan(
    policy: tuple[str, str],
    insecure_registries: list[str],
    namespace_pairs: frozenset[tuple[str, str]],
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Print what the next tick would do for each target and container. Changes nothing."""
    namespace, name = policy
    config = OperatorConfig(
        insecure_registries=tuple(insecure_registries),
        namespaces=NamespacePolicy(namespace_pairs),
        resolution_window=0,
        watch_evidence=False,  # one plan: a watch would outlive it
    )
    api = kube_api(kubeconfig, context)
    ticker = policy_ticker(api, insecure_registries, config, Metrics())

    async def compute() -> tuple[Gathered, Plan] | None:
        try:
            return await ticker.plan(namespace, name)
        finally:
            await ticker.resolver.client.aclose()

    result = asyncio.run(compute())
    if result is None:
        raise CommandFailed(
            f"no ImageRefreshPolicy {namespace}/{name}; check the name "
            f"(kubectl get irp -n {namespace}) and the kubeconfig context"
        )
    click.echo(render_plan(*result))
