"""The ``imagerefresh`` command line.

``run`` starts the operator; ``plan`` shows what its next tick would do, changing nothing;
``reset`` clears a lock; ``refresh-now`` ticks a policy at once (``--outside-window``: a refresh
outside its windows, once); ``audit`` lists what no policy covers; ``migrate-cronjob`` replaces an
edge's image-refresh CronJob with a policy; ``resolve`` asks a registry for a tag's digest
exactly as the operator does, so an SRE can see what a tick would pin and what the registry
says about the pull budget.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

import click
import kopf
import structlog

from imagerefresh.allocator import tune_allocator
from imagerefresh.audit import audit as find_gaps
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
from imagerefresh.planner import NamespacePolicy, Plan
from imagerefresh.planner.windows import WINDOW_OVERRIDE_ANNOTATION
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.reference import InvalidReference, parse
from imagerefresh.registry import DEFAULT_DEADLINE, RegistryClient, RegistryError, Resolution
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig, parse_namespace_pairs
from imagerefresh.runtime.coverage import AuditUnreadable, read_coverage
from imagerefresh.runtime.election import ElectionTimings, Elector, default_identity
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.gather import RESET_ANNOTATION, Gathered, PolicyUnreadable
from imagerefresh.runtime.migrate import Migrator
from imagerefresh.runtime.render import render_findings, render_plan
from imagerefresh.runtime.ticker import PolicyTicker

__all__ = ["main"]

INSECURE_ENV = "IMAGEREFRESH_INSECURE_REGISTRIES"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


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


def _load_credentials(docker_config: Path | None, domain: str) -> Credentials | None:
    if docker_config is None:
        return None
    try:
        config = parse_docker_config(docker_config.read_bytes(), source=str(docker_config))
    except (OSError, InvalidDockerConfig) as error:
        raise click.ClickException(f"cannot read {docker_config}: {error}") from error
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


LOG_LEVEL_ENV = "IMAGEREFRESH_LOG_LEVEL"
LOG_FORMAT_ENV = "IMAGEREFRESH_LOG_FORMAT"


# The log options are the group's (they precede the command), so an image whose entrypoint is
# `imagerefresh run` takes them from the environment (the chart sets both).
@click.group()
@click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    envvar=LOG_LEVEL_ENV,
    show_envvar=True,
    help="DEBUG, INFO, WARNING or ERROR.",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    show_default=True,
    envvar=LOG_FORMAT_ENV,
    show_envvar=True,
    help="auto: JSON unless stderr is a terminal.",
)
def main(log_level: str, log_format: LogFormat) -> None:
    """imagerefresh: keep workloads on the newest digest of their tracked tags."""
    configure_logging(log_level, log_format)


@main.command()
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

    try:
        resolution = asyncio.run(run())
    except RegistryError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    if as_json:
        click.echo(_as_json(resolution))
    else:
        click.echo(resolution.digest)
        click.echo(_ratelimit_line(resolution), err=True)


def _target(value: str) -> tuple[str, str]:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name:
        raise click.BadParameter(f"{value!r}: write NAMESPACE/NAME")
    return namespace, name


def _runtime_parts(
    kubeconfig: str | None,
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
        observer=metrics.registry_request,
    )
    resolver = SharedResolver(
        client,
        window=config.resolution_window,
        concurrency_per_registry=config.concurrency_per_registry,
    )
    api = KubeApi.from_environment(kubeconfig, connections=config.kube_concurrency)
    events = EventRecorder(api, on_dropped=metrics.events_dropped.inc)
    return PolicyTicker(
        api=api, resolver=resolver, ledger=ledger, config=config, metrics=metrics, events=events
    )


kubeconfig_option = click.option(
    "--kubeconfig", envvar="KUBECONFIG", help="Kubeconfig (default: in-cluster, or $KUBECONFIG)."
)
allow_option = click.option(
    "--allow-namespace-pair",
    "namespace_pairs",
    multiple=True,
    metavar="POLICY_NS=TARGET_NS",
    help="Let policies in POLICY_NS target workloads in TARGET_NS ('*' for any). Repeatable.",
)


@main.command()
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
    help="Seconds a registry answer is shared across policies.",
)
@click.option(
    "--registry-deadline",
    default=DEFAULT_DEADLINE,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds one registry resolution may take in all (token, manifest, retries).",
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
# kopf peering is gone (leader election replaces it; kopf always runs standalone). These are
# accepted, with a warning, for one release, so that an older manifest still starts.
@click.option("--peering", "peering_name", default=None, hidden=True)
@click.option("--standalone", is_flag=True, hidden=True)
@click.option("--priority", default=None, type=int, hidden=True)
# Where the interval grid lies (epoch seconds; random per process by default, so that many
# operators do not ask one registry at the same second). For tests that must know that no
# interval tick falls inside them: the first grid instant is then a whole interval away.
@click.option("--tick-grid-phase", default=None, type=float, hidden=True)
@click.option(
    "--scanning/--no-scanning",
    default=True,
    show_default=True,
    help="kopf lists and watches CRDs (and, for exact --namespace names, namespaces) "
    "cluster-wide to notice new ones. --no-scanning needs no cluster-wide RBAC for that: the "
    "CRD must exist at start-up, and exact names are served whether they exist yet or not "
    "(as the Helm chart runs it).",
)
@kubeconfig_option
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    liveness_port: int,
    metrics_port: int,
    bind_address: str,
    insecure_registries: list[str],
    namespace_pairs: tuple[str, ...],
    resolution_window: float,
    registry_deadline: float,
    leader_elect: bool,
    leader_election_namespace: str | None,
    leader_election_id: str,
    leader_election_identity: str | None,
    leader_election_lease_duration: float,
    leader_election_renew_deadline: float,
    leader_election_retry_period: float,
    peering_name: str | None,
    standalone: bool,
    priority: int | None,
    tick_grid_phase: float | None,
    scanning: bool,
    kubeconfig: str | None,
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
    if logging.getLogger().level > logging.INFO:
        configure_logging("INFO", "auto")
    # kopf reports every raw-event handler call at INFO; our own tick line says what matters.
    logging.getLogger("kopf.objects").setLevel(max(logging.WARNING, logging.getLogger().level))
    log = structlog.get_logger(__name__)
    log.info("allocator tuned", **tuned)
    deprecated = [
        flag
        for flag, given in (
            ("--peering", peering_name is not None),
            ("--standalone", standalone),
            ("--priority", priority is not None),
        )
        if given
    ]
    if deprecated:
        log.warning(
            "deprecated options ignored: kopf peering is replaced by --leader-elect, and the "
            "operator always runs kopf standalone; remove them (they go in the next release)",
            options=deprecated,
        )
    try:
        pairs = parse_namespace_pairs(namespace_pairs)
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    config = OperatorConfig(
        insecure_registries=tuple(insecure_registries),
        namespaces=NamespacePolicy(pairs),
        resolution_window=resolution_window,
        registry_deadline=registry_deadline,
    )
    metrics = Metrics()
    metrics.leader.set(0)
    metrics.serve(metrics_port, bind_address)
    try:
        ticker = _runtime_parts(kubeconfig, insecure_registries, config, metrics)
        elector = (
            Elector(
                # Its own client and thread: renewals never queue behind a tick's requests.
                # Each request must answer well within the renew deadline.
                KubeApi.from_environment(
                    kubeconfig,
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
        raise click.ClickException(str(error)) from error
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
        health = await serve_health(bind_address, liveness_port, lambda: role)
        try:
            if elector is not None:
                await elector.acquire()
            role = "leader"
            metrics.set_leader(True)  # the alert on imagerefresh_leader reads it
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


# A deposed leader's exit status: the Deployment restarts it, as a candidate.
LEADERSHIP_LOST_EXIT = 3


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


@main.command()
@click.argument("policy", metavar="NAMESPACE/NAME")
@insecure_registry_option
@allow_option
@kubeconfig_option
def plan(
    policy: str,
    insecure_registries: list[str],
    namespace_pairs: tuple[str, ...],
    kubeconfig: str | None,
) -> None:
    """Print what the next tick would do for each target and container. Changes nothing."""
    namespace, name = _target(policy)
    config = OperatorConfig(
        insecure_registries=tuple(insecure_registries),
        namespaces=NamespacePolicy(parse_namespace_pairs(namespace_pairs)),
        resolution_window=0,
    )
    ticker = _runtime_parts(kubeconfig, insecure_registries, config, Metrics())

    async def compute() -> tuple[Gathered, Plan] | None:
        try:
            return await ticker.plan(namespace, name)
        finally:
            await ticker.resolver.client.aclose()

    try:
        result = asyncio.run(compute())
    except (KubeError, PolicyUnreadable) as error:
        raise click.ClickException(str(error)) from error
    if result is None:
        raise click.ClickException(f"no ImageRefreshPolicy {namespace}/{name}")
    click.echo(render_plan(*result))


@main.command("refresh-now")
@click.argument("policy", metavar="NAMESPACE/NAME")
@click.option(
    "--outside-window",
    is_flag=True,
    help="Let this one tick start refreshes outside spec.windows (honoured once).",
)
@kubeconfig_option
def refresh_now(policy: str, outside_window: bool, kubeconfig: str | None) -> None:
    """Ask the operator for a tick at once (sets an annotation it watches)."""
    namespace, name = _target(policy)
    key = WINDOW_OVERRIDE_ANNOTATION if outside_window else REFRESH_NOW_ANNOTATION
    # Microseconds: two requests within one second are two new values, each honoured.
    value = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        KubeApi.from_environment(kubeconfig).annotate_policy(namespace, name, key, value)
    except KubeError as error:
        raise click.ClickException(str(error)) from error
    what = "a tick that may refresh outside its windows" if outside_window else "a tick"
    click.echo(
        f"{what} requested for {namespace}/{name} ({key}={value}); the operator starts it at once"
    )


@main.command()
@click.argument("policy", metavar="NAMESPACE/NAME")
@kubeconfig_option
def reset(policy: str, kubeconfig: str | None) -> None:
    """Clear every target's refresh attempts and Locked (sets the reset annotation)."""
    namespace, name = _target(policy)
    value = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        KubeApi.from_environment(kubeconfig).annotate_policy(
            namespace, name, RESET_ANNOTATION, value
        )
    except KubeError as error:
        raise click.ClickException(str(error)) from error
    click.echo(
        f"reset requested for {namespace}/{name} ({RESET_ANNOTATION}={value}); "
        "the operator honours it on its next tick, which it starts at once"
    )


# `imagerefresh audit` exits 0 when clean, 1 with findings (for CI), and this when it could not
# read what it needs (RBAC, no such namespace, no API server) — never "clean" on what it missed.
AUDIT_UNREADABLE_EXIT = 3


@main.command()
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
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@kubeconfig_option
def audit(
    namespaces: tuple[str, ...], all_mutable: bool, output: str, kubeconfig: str | None
) -> None:
    """List workloads running a tracked repository in no policy, and policy targets that run
    another repository or do not exist. Exit 1 when it finds any, 0 when clean, 3 when it
    could not read what it needs."""
    try:
        coverage = read_coverage(
            KubeApi.from_environment(kubeconfig), tuple(dict.fromkeys(namespaces))
        )
    except (AuditUnreadable, KubeError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(AUDIT_UNREADABLE_EXIT)
    findings = find_gaps(
        coverage.policies,
        coverage.workloads,
        namespaces=frozenset(namespaces) or None,
        all_mutable=all_mutable,
    )
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
    sys.exit(1 if findings else 0)


def _interval(_ctx: click.Context, _param: click.Parameter, value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


@main.command("migrate-cronjob")
@click.argument("cronjob", metavar="NAMESPACE/NAME")
@click.option("--apply", "mode", flag_value="apply", help="Create the policy, suspend the CronJob.")
@click.option("--revert", "mode", flag_value="revert", help="Undo --apply.")
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
@kubeconfig_option
def migrate_cronjob(
    cronjob: str,
    mode: str | None,
    interval: timedelta | None,
    policy_name: str | None,
    job_wait: float,
    helm_release: str,
    kubeconfig: str | None,
) -> None:
    """Replace an edge's image-refresh CronJob with an ImageRefreshPolicy (SPEC §10).

    Dry by default: prints the policy, the chart values that install it, and the state carried
    over. Runs with your kubeconfig (it reads and suspends the CronJob, creates the policy).
    """
    namespace, name = _target(cronjob)
    try:
        migrator = Migrator(
            EdgeApi(KubeApi.from_environment(kubeconfig).api_client),
            namespace,
            name,
            policy_name=policy_name,
            interval=interval,
            job_wait=job_wait,
            helm_release=helm_release,
            say=click.echo,
        )
        if mode == "apply":
            migrator.apply()
        elif mode == "revert":
            migrator.revert()
        else:
            migrator.dry_run()
    except (KubeError, MigrationRefused) as error:
        raise click.ClickException(str(error)) from error
