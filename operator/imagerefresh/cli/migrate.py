"""``imagerefresh migrate-cronjob``: replace an edge's image-refresh CronJob with a policy."""

from __future__ import annotations

from datetime import timedelta

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
from imagerefresh.kube.edge import EdgeApi
from imagerefresh.models import parse_duration
from imagerefresh.runtime.migrate import Migrator

MIGRATE_EXITS: Exits = (
    (0, "printed (without --apply or --revert), applied, reverted, or nothing to change"),
    (
        FAILED_EXIT,
        "refused or failed: the message names what it cannot read or change, and "
        "nothing after that step was written (run it again once that is fixed)",
    ),
    USAGE,
)


def _interval(_ctx: click.Context, _param: click.Parameter, value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


@main.command("migrate-cronjob", exits=MIGRATE_EXITS)
@namespaced_argument("cronjob")
@click.option("--apply", is_flag=True, help="Create the policy, suspend the CronJob.")
@click.option("--revert", is_flag=True, help="Undo --apply.")
@click.option(
    "--interval",
    callback=_interval,
    metavar="D",
    help="The policy's tick period, for a schedule without a fixed one (Go duration: 15m).",
)
@click.option("--policy-name", default=None, help="The policy's name (default: the CronJob's).")
@click.option(
    "--job-wait",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds --apply waits for a refresh Job still running before it stops.",
)
@click.option(
    "--helm-release",
    default="imagerefresh",
    show_default=True,
    help="The operator chart's release (in the CronJob's namespace) that adopts the policy.",
)
@cluster_options
@log_options
@one_shot()
def migrate_cronjob(
    cronjob: tuple[str, str],
    apply: bool,
    revert: bool,
    interval: timedelta | None,
    policy_name: str | None,
    job_wait: float,
    helm_release: str,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Replace an edge's image-refresh CronJob with an ImageRefreshPolicy.

    Dry by default: prints the policy, the chart values that install it, and the state carried
    over. Runs with your kubeconfig (it reads and suspends the CronJob, creates the policy).
    """
    if apply and revert:
        raise click.UsageError(
            "--apply and --revert undo each other: give one of them (or neither, to look first)"
        )
    namespace, name = cronjob
    migrator = Migrator(
        EdgeApi(kube_api(kubeconfig, context).connection),
        namespace,
        name,
        policy_name=policy_name,
        interval=interval,
        job_wait=job_wait,
        helm_release=helm_release,
        say=click.echo,
    )
    if apply:
        migrator.apply()
    elif revert:
        migrator.revert()
    else:
        migrator.dry_run()
