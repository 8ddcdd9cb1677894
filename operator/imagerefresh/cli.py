"""The ``imagerefresh`` command line.

``run`` starts the operator; ``plan`` shows what its next tick would do, changing nothing;
``reset`` clears a lock; ``refresh-now`` ticks a policy at once (``--outside-window``: a refresh
outside its windows, once); ``audit`` lists what no policy covers; ``migrate-cronjob`` replaces an
edge's image-refresh CronJob with a policy; ``resolve`` asks a registry for a tag's digest
exactly as the operator does, so an SRE can see what a tick would pin and what the registry
says about the pull budget.

Every command fails the same way: one line, ``Error: …``, saying what went wrong and what to
do, and an exit status listed in its ``--help`` (``Exit status``). 0 is success, 1 a failure,
2 a usage error (click's own) for every command; ``audit`` (1: findings, 3: could not audit)
and ``run`` (4: leadership lost) add their own, and no status means two things within one
command. The one-shot commands (all but ``run``) were run by a person with their own
kubeconfig: their Kubernetes errors are worded for that (:meth:`KubeError.for_one_shot`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import kopf
import structlog

from imagerefresh.allocator import tune_allocator
from imagerefresh.audit import audit as find_gaps
from imagerefresh.audit import audit_offline
from imagerefresh.credentials import (
    Credentials,
    InvalidDockerConfig,
    credentials_for,
    parse_docker_config,
)
from imagerefresh.handlers import REFRESH_NOW_ANNOTATION, Runtime, build_registry
from imagerefresh.health import serve_health
from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.edge import EdgeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.kube.namespaces import NamespaceScope, is_pattern
from imagerefresh.logs import LogFormat, configure_logging
from imagerefresh.metrics import Metrics
from imagerefresh.migration import MigrationRefused
from imagerefresh.models import parse_duration
from imagerefresh.offline import KUBELET_IMAGE_CAP
from imagerefresh.planner import NamespacePolicy, Plan
from imagerefresh.planner.helperpod import DEFAULT_RUN_AS, RunAs
from imagerefresh.planner.windows import WINDOW_OVERRIDE_ANNOTATION
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.reference import InvalidReference, parse
from imagerefresh.registry import DEFAULT_DEADLINE, RegistryClient, RegistryError, Resolution
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig, parse_namespace_pairs
from imagerefresh.runtime.coverage import AuditUnreadable, read_coverage
from imagerefresh.runtime.election import ElectionTimings, Elector, default_identity
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.gather import Gathered
from imagerefresh.runtime.migrate import Migrator
from imagerefresh.runtime.reads import RESET_ANNOTATION, PolicyUnreadable
from imagerefresh.runtime.render import render_findings, render_plan
from imagerefresh.runtime.ticker import PolicyTicker
from imagerefresh.verifier import SignatureVerifier, VerificationPool

__all__ = ["main"]

INSECURE_ENV = "IMAGEREFRESH_INSECURE_REGISTRIES"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
LOG_LEVEL_ENV = "IMAGEREFRESH_LOG_LEVEL"
LOG_FORMAT_ENV = "IMAGEREFRESH_LOG_FORMAT"

# Exit statuses (each command's --help lists its own; so does docs/cli.md).
FAILED_EXIT = 1  # click.ClickException's own
USAGE_EXIT = 2  # click.UsageError's own
AUDIT_FINDINGS_EXIT = 1  # for CI, as `kubectl diff` does: 1 means "found something"
# audit could not read what it needs: never "clean" on what it missed.
AUDIT_UNREADABLE_EXIT = 3
# A deposed leader's exit status: the Deployment restarts it, as a candidate.
LEADERSHIP_LOST_EXIT = 4

Exits = tuple[tuple[int, str], ...]
_USAGE = (USAGE_EXIT, "usage: the command line is wrong (the message says which part)")
RESOLVE_EXITS: Exits = (
    (0, "the digest is printed (stdout), and the registry's rate-limit report (stderr)"),
    (FAILED_EXIT, "the registry did not tell the digest, or --docker-config cannot be read"),
    _USAGE,
)
RUN_EXITS: Exits = (
    (0, "stopped (SIGTERM or SIGINT)"),
    (FAILED_EXIT, "could not start (no usable kubeconfig, no API server, a port in use)"),
    _USAGE,
    (
        LEADERSHIP_LOST_EXIT,
        "leadership lost (--leader-elect): it stopped writing at once; its Deployment "
        "restarts it as a candidate",
    ),
)
PLAN_EXITS: Exits = (
    (0, "the plan is printed; nothing was changed"),
    (
        FAILED_EXIT,
        "no plan: no such policy, its spec or status cannot be read, or the API "
        "server refused or did not answer",
    ),
    _USAGE,
)
ANNOTATE_EXITS: Exits = (
    (0, "asked: the annotation is set, and the operator ticks the policy at once"),
    (FAILED_EXIT, "not asked: no such policy, not allowed to patch it, or no API server"),
    _USAGE,
)
AUDIT_EXITS: Exits = (
    (
        0,
        "clean: every container a policy declares, or running a tracked repository, is "
        "covered (with --offline: and every workload would restart offline)",
    ),
    (AUDIT_FINDINGS_EXIT, "findings: each is listed with why and what to do"),
    _USAGE,
    (
        AUDIT_UNREADABLE_EXIT,
        "could not audit: no such namespace (or not allowed to tell), not allowed to list "
        "what it needs, or no API server (with --offline: pods, or nodes answering other "
        "than forbidden); nothing it could not read is called clean",
    ),
)
MIGRATE_EXITS: Exits = (
    (0, "printed (without --apply or --revert), applied, reverted, or nothing to change"),
    (
        FAILED_EXIT,
        "refused or failed: the message names what it cannot read or change, and "
        "nothing after that step was written (run it again once that is fixed)",
    ),
    _USAGE,
)


class CommandFailed(click.ClickException):
    """A command could not do its job: one line, ``Error: …``, saying what to do."""

    exit_code = FAILED_EXIT

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class CouldNotAudit(CommandFailed):
    """``audit`` could not read what it needs: never "clean" (0) nor "findings" (1)."""

    exit_code = AUDIT_UNREADABLE_EXIT


class _Command(click.Command):
    """A command whose --help ends with its exit statuses."""

    def __init__(self, *args: Any, exits: Exits = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exits = exits

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.exits:
            with formatter.section("Exit status"):
                formatter.write_dl([(str(code), meaning) for code, meaning in self.exits])
        super().format_epilog(ctx, formatter)


class _Group(click.Group):
    command_class = _Command


F = TypeVar("F", bound=Callable[..., Any])


def one_shot(failure: type[CommandFailed] = CommandFailed) -> Callable[[F], F]:
    """The command's failures as one line saying what to do, with ``failure``'s exit status:
    every Kubernetes error worded for a person who ran a command (not for the operator's log)."""

    def wrap(command: F) -> F:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            # The client's retry warnings end in the one error line below, which says it all;
            # asked for (--log-level INFO or DEBUG), they are still logged.
            if logging.getLogger().level >= logging.WARNING:
                logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
            try:
                return command(*args, **kwargs)
            except KubeError as error:
                raise failure(error.for_one_shot()) from error
            except (RegistryError, MigrationRefused, PolicyUnreadable, AuditUnreadable) as error:
                raise failure(str(error)) from error
            except click.ClickException as error:
                if isinstance(error, click.UsageError | failure):
                    raise
                raise failure(error.message) from error

        return run  # type: ignore[return-value]

    return wrap


def _with_environment(
    _ctx: click.Context, _param: click.Parameter, given: tuple[str, ...]
) -> list[str]:
    """The --insecure-registry values plus the comma-separated environment variable."""
    from_env = os.environ.get(INSECURE_ENV, "").split(",")
    return [host.strip() for host in (*given, *from_env) if host.strip()]


# Shared by resolve, run and plan: plain HTTP only where the operator's configuration says so.
insecure_registry_option = click.option(
    "--insecure-registry",
    "insecure_registries",
    multiple=True,
    metavar="HOST[:PORT]",
    callback=_with_environment,
    help=f"A registry spoken to over plain HTTP (repeatable; also ${INSECURE_ENV}).",
)


def _namespace_pairs(
    _ctx: click.Context, _param: click.Parameter, given: tuple[str, ...]
) -> frozenset[tuple[str, str]]:
    try:
        return parse_namespace_pairs(given)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


# Shared by run, plan and audit: what a policy may reach is the operator's configuration.
allow_option = click.option(
    "--allow-namespace-pair",
    "namespace_pairs",
    multiple=True,
    metavar="POLICY_NS=TARGET_NS",
    callback=_namespace_pairs,
    help="Let policies in POLICY_NS target workloads in TARGET_NS ('*' for any). Repeatable; "
    "give plan and audit the operator's own pairs.",
)


def cluster_options(command: F) -> F:
    """--kubeconfig and --context, for every command that talks to the API server."""
    command = click.option(
        "--context",
        default=None,
        metavar="NAME",
        help="The kubeconfig context to use (default: its current context).",
    )(command)
    return click.option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        metavar="FILE",
        help="Kubeconfig (default: in a pod its ServiceAccount, else $KUBECONFIG, else "
        "~/.kube/config).",
    )(command)


def _run_as(value: str) -> RunAs:
    try:
        return RunAs.parse(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


def _namespaced(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, str]:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise click.BadParameter(f"{value!r}: write NAMESPACE/NAME")
    return namespace, name


def namespaced_argument(name: str) -> Callable[[F], F]:
    return click.argument(name, metavar="NAMESPACE/NAME", callback=_namespaced)


# The log options are the group's (before the command: an image whose entrypoint is
# `imagerefresh run` takes them from the environment, which the chart sets) and every
# command's (after it, where a person types them); the last one given wins.
_LOGGING = "imagerefresh.logging"  # ctx.meta (shared by the group's and the command's context)
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)
LOG_FORMATS = click.Choice(["auto", "json", "console"])


def _relog(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    level, log_format = ctx.meta.get(_LOGGING, ("WARNING", "auto"))
    chosen = (value, log_format) if param.name == "log_level" else (level, value)
    ctx.meta[_LOGGING] = chosen
    configure_logging(*chosen)


def log_options(command: F) -> F:
    """--log-level and --log-format after the command, as before it."""
    command = click.option(
        "--log-format",
        type=LOG_FORMATS,
        expose_value=False,
        callback=_relog,
        help="auto: JSON unless stderr is a terminal (as before the command).",
    )(command)
    return click.option(
        "--log-level",
        type=LOG_LEVELS,
        expose_value=False,
        callback=_relog,
        help="Log level (as before the command).",
    )(command)


@click.group(cls=_Group)
# The installed distribution's version: pyproject.toml's, the one version the chart, the image
# tag and the release artifacts carry too.
@click.version_option(
    package_name="imagerefresh", prog_name="imagerefresh", message="%(prog)s %(version)s"
)
@click.option(
    "--log-level",
    type=LOG_LEVELS,
    default="WARNING",
    show_default=True,
    envvar=LOG_LEVEL_ENV,
    show_envvar=True,
    help="Log level (also after the command).",
)
@click.option(
    "--log-format",
    type=LOG_FORMATS,
    default="auto",
    show_default=True,
    envvar=LOG_FORMAT_ENV,
    show_envvar=True,
    help="auto: JSON unless stderr is a terminal (also after the command).",
)
@click.pass_context
def main(ctx: click.Context, log_level: str, log_format: LogFormat) -> None:
    """imagerefresh: keep workloads on the newest digest of their tracked tags.

    Each command's --help ends with its exit statuses.
    """
    ctx.meta[_LOGGING] = (log_level, log_format)
    configure_logging(log_level, log_format)


def kubectl_plugin() -> None:
    """``kubectl imagerefresh …``: kubectl runs ``kubectl-imagerefresh`` from $PATH with the
    rest of the command line (its plugin mechanism); the commands are ``imagerefresh``'s."""
    main(prog_name="kubectl imagerefresh")


def _load_credentials(docker_config: Path | None, domain: str) -> Credentials | None:
    if docker_config is None:
        return None
    try:
        config = parse_docker_config(docker_config.read_bytes(), source=str(docker_config))
    except (OSError, InvalidDockerConfig) as error:
        raise CommandFailed(
            f"cannot read {docker_config}: {error}; give a .dockerconfigjson file"
        ) from error
    return credentials_for(domain, [config])


def _as_json(resolution: Resolution) -> str:
    report = resolution.ratelimit
    return json.dumps(
        {
            "reference": str(resolution.reference),
            "digest": resolution.digest,
            "registry": resolution.registry,
            "ratelimit": {
                "limit": report.limit,
                "remaining": report.remaining,
                "window_seconds": report.window_seconds,
                "source": report.source,
            },
        }
    )


def _ratelimit_line(resolution: Resolution) -> str:
    report = resolution.ratelimit
    if not report.reported:
        return f"{resolution.registry}: not limited (no rate-limit headers for this identity)"
    window = f" per {report.window_seconds}s" if report.window_seconds else ""
    source = f", source {report.source}" if report.source else ""
    return f"{resolution.registry}: {report.remaining} of {report.limit} pulls left{window}{source}"


@main.command(exits=RESOLVE_EXITS)
@click.argument("reference")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@insecure_registry_option
@click.option(
    "--docker-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A .dockerconfigjson file with credentials for the registry.",
)
@click.option("--timeout", default=10.0, show_default=True, help="Seconds per read.")
@click.option(
    "--deadline",
    default=DEFAULT_DEADLINE,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds the whole resolution may take, retries included.",
)
@log_options
@one_shot()
def resolve(
    reference: str,
    as_json: bool,
    insecure_registries: list[str],
    docker_config: Path | None,
    timeout: float,
    deadline: float,
) -> None:
    """Print the digest REFERENCE's tag points at, and the registry's rate-limit report."""
    try:
        ref = parse(reference)
    except InvalidReference as error:
        raise click.UsageError(str(error)) from error
    credentials = _load_credentials(docker_config, ref.domain)

    async def run() -> Resolution:
        async with RegistryClient(
            insecure_registries=insecure_registries, timeout=timeout, deadline=deadline
        ) as client:
            return await client.resolve(ref, credentials)

    resolution = asyncio.run(run())
    if as_json:
        click.echo(_as_json(resolution))
    else:
        click.echo(resolution.digest)
        click.echo(_ratelimit_line(resolution), err=True)


def _kube(kubeconfig: str | None, context: str | None, **options: Any) -> KubeApi:
    return KubeApi.from_environment(kubeconfig, context=context, **options)


def _runtime_parts(
    api: KubeApi,
    insecure_registries: list[str],
    config: OperatorConfig,
    metrics: Metrics,
) -> PolicyTicker:
    ledger = RateLimitLedger()
    client = RegistryClient(
        insecure_registries=insecure_registries,
        ledger=ledger,
        timeout=config.registry_timeout,
        deadline=config.registry_deadline,
        concurrency_per_registry=config.concurrency_per_registry,
        observer=metrics.registry_request,
    )
    resolver = SharedResolver(client, window=config.resolution_window)
    verifier = SignatureVerifier(
        client, observer=metrics.signature_lookup, pool=VerificationPool(observer=metrics)
    )
    events = EventRecorder(api, on_dropped=metrics.events_dropped.inc)
    return PolicyTicker(
        api=api,
        resolver=resolver,
        ledger=ledger,
        config=config,
        metrics=metrics,
        events=events,
        verifier=verifier,
    )


@main.command(exits=RUN_EXITS)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch this namespace (repeat). A pattern (`irp-*`, `*, !kube-*`) watches policies "
    "cluster-wide and serves those whose namespace matches.",
)
@click.option("--all-namespaces", is_flag=True, help="Watch every namespace.")
@click.option("--liveness-port", default=8080, show_default=True, help="Serves /healthz.")
@click.option("--metrics-port", default=9090, show_default=True, help="Serves /metrics.")
@click.option("--bind-address", default="0.0.0.0", show_default=True)
@insecure_registry_option
@allow_option
@click.option(
    "--resolution-window",
    default=10.0,
    show_default=True,
    help="Seconds a registry answer is shared across policies (from the round's grid instant, "
    "for interval ticks).",
)
@click.option(
    "--registry-deadline",
    default=DEFAULT_DEADLINE,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds one registry resolution may take in all (token, manifest, retries), the "
    "wait for its turn at a busy registry included.",
)
@click.option(
    "--registry-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds one read from a registry may take (each try of a resolution).",
)
@click.option(
    "--read-nodes/--no-read-nodes",
    default=False,
    show_default=True,
    help="Read the nodes' image lists (status.images) as evidence that a workload's pods would "
    "restart with the registry unreachable (offline readiness). Needs get and list on nodes "
    "cluster-wide (the chart grants it with offline.readNodes: true); off, only pods prove "
    "what a node holds.",
)
@click.option(
    "--node-status-max-images",
    default=KUBELET_IMAGE_CAP,
    show_default=True,
    type=click.IntRange(min=-1),
    help="The kubelets' nodeStatusMaxImages: a node listing this many images may hold more, so "
    "an image missing from its list is unknown, not missing. 0 or -1: the kubelets list all.",
)
@click.option(
    "--node-list-lifetime",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds one list of the nodes is shared by the policies ticking together (with "
    "--read-nodes).",
)
@click.option(
    "--pre-pull-pods/--no-pre-pull-pods",
    default=False,
    show_default=True,
    help="Let policies with prePull: true pull a new digest onto a workload's nodes before "
    "switching it, with one short-lived helper pod per node. Needs pods create and delete in "
    "the target namespaces (the chart grants them, and an admission policy that lets this "
    "ServiceAccount create no other pod, with prePull.enabled: true); off, such policies hold "
    "their refreshes (PrePullNotAllowed).",
)
@click.option(
    "--pre-pull-max-deadline",
    default=3600,
    show_default=True,
    type=click.IntRange(min=60, max=86_400),
    help="The longest a pre-pull helper pod may live, in seconds: each gets its target's "
    "rolloutTimeout up to this (its activeDeadlineSeconds). The chart sets it from "
    "prePull.maxDeadlineSeconds, the limit its admission policy enforces.",
)
@click.option(
    "--pre-pull-user",
    "pre_pull_run_as",
    default=str(DEFAULT_RUN_AS),
    show_default=True,
    metavar="UID[:GID]|platform",
    callback=lambda _ctx, _param, value: _run_as(value),
    help="The numeric user (and group) pre-pull helper pods run as, never root. `platform`: "
    "they name none, and the platform assigns one (OpenShift's restricted-v2 gives each "
    "namespace its own range and refuses any other user); elsewhere they then run as the "
    "pulled image's own user, which must be numeric and non-root. The chart sets it from "
    "prePull.runAsUser and prePull.runAsGroup.",
)
@click.option(
    "--watch-evidence/--no-watch-evidence",
    default=True,
    show_default=True,
    help="Keep watch-fed copies of the targets' workloads and their pods, and decide on them "
    "wherever they are synced (the API server is read directly wherever they are not); a "
    "rollout's verdict follows its workload's watch event. Needs list and watch on the "
    "workloads (per namespace, or by name where access is scoped to the declared names) and "
    "watch on pods; off, every tick reads its workloads and pods and rollouts are polled.",
)
@click.option(
    "--leader-elect",
    is_flag=True,
    help="Run as one candidate of several: act only while holding a coordination.k8s.io/v1 "
    "Lease; stand by (serving /healthz and /metrics, writing nothing) otherwise.",
)
@click.option(
    "--leader-election-namespace",
    default=None,
    help="Namespace of the Lease (default: the pod's namespace, else the first --namespace).",
)
@click.option(
    "--leader-election-id", default="imagerefresh", show_default=True, help="The Lease's name."
)
@click.option(
    "--leader-election-identity",
    default=None,
    help="This candidate's identity (default: $POD_NAME or the hostname, and a random suffix).",
)
@click.option(
    "--leader-election-lease-duration",
    default=15.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds a standby waits, after the Lease last changed, before taking it over: a "
    "whole number (the Lease stores whole seconds), longer than the renew deadline.",
)
@click.option(
    "--leader-election-renew-deadline",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a leader may go without a renewal before it stops writing and exits.",
)
@click.option(
    "--leader-election-retry-period",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds between attempts to take or renew the Lease.",
)
# Where the interval grid lies (epoch seconds; random per process by default, so that many
# operators do not ask one registry at the same second). For tests that must know that no
# interval tick falls inside them: the first grid instant is then a whole interval away.
@click.option("--tick-grid-phase", default=None, type=float, hidden=True)
# For tests only: every plan spins the CPU this many seconds more (a policy that is slow to
# plan), so that a test can watch the Lease and /healthz go on meanwhile.
@click.option("--planning-delay", default=0.0, type=click.FloatRange(min=0), hidden=True)
@click.option(
    "--scanning/--no-scanning",
    default=True,
    show_default=True,
    help="kopf lists and watches CRDs (and, for exact --namespace names, namespaces) "
    "cluster-wide to notice new ones. --no-scanning needs no cluster-wide RBAC for that: the "
    "CRD must exist at start-up, and exact names are served whether they exist yet or not "
    "(as the Helm chart runs it).",
)
@cluster_options
@log_options
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    liveness_port: int,
    metrics_port: int,
    bind_address: str,
    insecure_registries: list[str],
    namespace_pairs: frozenset[tuple[str, str]],
    resolution_window: float,
    registry_deadline: float,
    registry_timeout: float,
    read_nodes: bool,
    node_status_max_images: int,
    node_list_lifetime: float,
    pre_pull_pods: bool,
    pre_pull_max_deadline: int,
    pre_pull_run_as: RunAs,
    watch_evidence: bool,
    leader_elect: bool,
    leader_election_namespace: str | None,
    leader_election_id: str,
    leader_election_identity: str | None,
    leader_election_lease_duration: float,
    leader_election_renew_deadline: float,
    leader_election_retry_period: float,
    tick_grid_phase: float | None,
    planning_delay: float,
    scanning: bool,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Run the operator."""
    if not namespaces and not all_namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces")
    if namespaces and all_namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces, not both")
    try:
        timings = ElectionTimings(
            leader_election_lease_duration,
            leader_election_renew_deadline,
            leader_election_retry_period,
        )
    except ValueError as error:
        raise click.UsageError(f"leader election timings: {error}") from error
    lease_home = lease_namespace(leader_election_namespace, namespaces) if leader_elect else None
    scope = NamespaceScope.of(namespaces)
    tuned = tune_allocator()  # before any thread exists: the arena limit binds new threads
    if logging.getLogger().level > logging.INFO:  # the operator logs at INFO at least
        configure_logging("INFO", click.get_current_context().meta[_LOGGING][1])
    # kopf reports every raw-event handler call at INFO; our own tick line says what matters.
    logging.getLogger("kopf.objects").setLevel(max(logging.WARNING, logging.getLogger().level))
    log = structlog.get_logger(__name__)
    log.info("allocator tuned", **tuned)
    config = OperatorConfig(
        insecure_registries=tuple(insecure_registries),
        namespaces=NamespacePolicy(namespace_pairs),
        resolution_window=resolution_window,
        registry_deadline=registry_deadline,
        registry_timeout=registry_timeout,
        read_nodes=read_nodes,
        node_status_max_images=node_status_max_images,
        node_list_lifetime=node_list_lifetime,
        pre_pull_pods=pre_pull_pods,
        pre_pull_max_deadline=pre_pull_max_deadline,
        pre_pull_run_as=pre_pull_run_as,
        watch_evidence=watch_evidence,
        planning_delay=planning_delay,
    )
    metrics = Metrics()
    metrics.leader.set(0)
    _serve("/metrics", "--metrics-port", bind_address, metrics_port, metrics.serve)
    try:
        api = _kube(kubeconfig, context, connections=config.kube_concurrency)
        ticker = _runtime_parts(api, insecure_registries, config, metrics)
        elector = (
            Elector(
                # Its own client and thread: renewals never queue behind a tick's requests.
                # Each request must answer well within the renew deadline.
                _kube(
                    kubeconfig,
                    context,
                    connections=1,
                    timeout=(timings.retry_period, timings.renew_deadline / 2),
                ),
                lease_home,
                leader_election_id,
                leader_election_identity or default_identity(),
                timings,
            )
            if lease_home is not None
            else None
        )
    except KubeError as error:
        raise CommandFailed(str(error)) from error
    if elector is not None:
        # Every write of the operator's own client asks the gate first.
        ticker.api.write_gate = elector.gate
    runtime = (
        Runtime(ticker=ticker, phase=tick_grid_phase)
        if tick_grid_phase is not None
        else Runtime(ticker=ticker)
    )
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = not scanning

    async def operate() -> None:
        # Every Kubernetes request is a blocking call on the loop's default executor, whose
        # size would otherwise follow the CPU count (6 threads on 2 cores): with many policies
        # ticking together the requests, not the API server, would queue.
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(config.kube_concurrency, thread_name_prefix="imagerefresh-io")
        )
        role = "standby" if elector is not None else "leader"
        try:
            health = await serve_health(bind_address, liveness_port, lambda: role)
        except OSError as error:
            raise _unservable(
                "/healthz", "--liveness-port", bind_address, liveness_port, error
            ) from error
        try:
            if elector is not None:
                await elector.acquire()
            role = "leader"
            metrics.set_leader(True)  # the alert on imagerefresh_leader reads it
            # Said at start (the log, imagerefresh_crd_outdated); each tick asks again.
            await ticker.crd.problem()
            # Only now do kopf and the handlers start: a standby has read the Lease, nothing else.
            operator = asyncio.create_task(
                kopf.operator(
                    registry=build_registry(scope),
                    settings=settings,
                    memo=runtime,
                    # Patterns are matched by the handlers, never by kopf (see kube.namespaces).
                    clusterwide=scope.clusterwide,
                    namespaces=() if scope.clusterwide else namespaces,
                    standalone=True,
                )
            )
            if elector is None:
                await operator
                return
            lost = asyncio.create_task(elector.hold())
            await asyncio.wait({operator, lost}, return_when=asyncio.FIRST_COMPLETED)
            if lost.done():
                metrics.set_leader(False)
                failure = None if lost.cancelled() else lost.exception()
                _exit_deposed(elector, f"renewal failed: {failure!r}" if failure else lost.result())
            lost.cancel()
            await elector.release()  # kopf has stopped: no write of ours follows
            await operator
        finally:
            health.close()

    asyncio.run(operate())


def _unservable(what: str, option: str, address: str, port: int, error: OSError) -> CommandFailed:
    # asyncio words a failed bind its own way; the errno says it as the OS does.
    reason = os.strerror(error.errno) if error.errno else str(error)
    return CommandFailed(
        f"cannot serve {what} on {address}:{port} ({reason}); give another {option}, or stop "
        "what listens there"
    )


def _serve(what: str, option: str, address: str, port: int, serve: Callable[..., None]) -> None:
    try:
        serve(port, address)
    except OSError as error:
        raise _unservable(what, option, address, port, error) from error


def _exit_deposed(elector: Elector, why: str) -> NoReturn:
    """Leave at once: kopf's tasks, the ticks, the event threads — nothing of this process may
    write after it lost the Lease, and unwinding them could take seconds (as client-go's
    controllers do, it exits rather than shuts down)."""
    elector.gate.close()
    structlog.get_logger(__name__).error(
        "exiting: this process no longer leads; its Deployment restarts it as a candidate",
        lease=elector.lease,
        identity=elector.identity,
        reason=why,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(LEADERSHIP_LOST_EXIT)


def lease_namespace(given: str | None, namespaces: tuple[str, ...]) -> str:
    """The Lease's namespace: as given, else the pod's own, else the first watched one."""
    if given:
        return given
    try:
        own = Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip()
    except OSError:
        own = ""
    own = os.environ.get("POD_NAMESPACE") or own
    if own:
        return own
    exact = [ns for ns in namespaces if not is_pattern(ns)]
    if exact:
        return exact[0]
    raise click.UsageError(
        "--leader-elect needs a namespace for its Lease: give --leader-election-namespace "
        "(outside a pod, with --all-namespaces or only namespace globs, there is no default)"
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
    api = _kube(kubeconfig, context)
    ticker = _runtime_parts(api, insecure_registries, config, Metrics())

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
    _kube(kubeconfig, context).annotate_policy(namespace, name, key, value)
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
    _kube(kubeconfig, context).annotate_policy(namespace, name, RESET_ANNOTATION, value)
    click.echo(
        f"reset requested for {namespace}/{name} ({RESET_ANNOTATION}={value}); "
        "the operator honours it on its next tick, which it starts at once"
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
        _kube(kubeconfig, context), tuple(dict.fromkeys(namespaces)), offline=offline
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
        EdgeApi(_kube(kubeconfig, context).api_client),
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
