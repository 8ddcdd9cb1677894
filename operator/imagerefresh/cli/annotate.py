"""``imagerefresh refresh-now`` and ``reset``: ask the running operator for something by
annotating the policy, which it watches."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from imagerefresh.cli.group import (
    FAILED_EXIT,
    USAGE,
    Exits,
    cluster_options,
    kube_api,
    log_options,
    main,
    namespaced_argument,
    one_shot,
)
from imagerefresh.handlers import REFRESH_NOW_ANNOTATION
from imagerefresh.planner.windows import WINDOW_OVERRIDE_ANNOTATION
from imagerefresh.runtime.policyview import RESET_ANNOTATION

ANNOTATE_EXITS: Exits = (
    (0, "asked: the annotation is set, and the operator ticks the policy at once"),
    (FAILED_EXIT, "not asked: no such policy, not allowed to patch it, or no API server"),
    USAGE,
)


@main.command("refresh-now", exits=ANNOTATE_EXITS)
@namespaced_argument("policy")
@click.option(
    "--outside-window",
    is_flag=True,
    help="Let this one tick start refreshes outside spec.windows (honoured once).",
)
@cluster_options
@log_options
@one_shot()
def refresh_now(
    policy: tuple[str, str], outside_window: bool, kubeconfig: str | None, context: str | None
) -> None:
    """Ask the operator for a tick at once (sets an annotation it watches)."""
    namespace, name = policy
    key = WINDOW_OVERRIDE_ANNOTATION if outside_window else REFRESH_NOW_ANNOTATION
    # Microseconds: two requests within one second are two new values, each honoured.
    value = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    kube_api(kubeconfig, context).annotate_policy(namespace, name, key, value)
    what = "a tick that may refresh outside its windows" if outside_window else "a tick"
    click.echo(
        f"{what} requested for {namespace}/{name} ({key}={value}); the operator starts it at once"
    )


@main.command(exits=ANNOTATE_EXITS)
@namespaced_argument("policy")
@cluster_options
@log_options
@one_shot()
def reset(policy: tuple[str, str], kubeconfig: str | None, context: str | None) -> None:
    """Clear every target's refresh attempts and Locked (sets the reset annotation)."""
    namespace, name = policy
    value = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube_api(kubeconfig, context).annotate_policy(namespace, name, RESET_ANNOTATION, value)
    click.echo(
        f"reset requested for {namespace}/{name} ({RESET_ANNOTATION}={value}); "
        "the operator honours it on its next tick, which it starts at once"
    )
