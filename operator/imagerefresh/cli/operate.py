"""``imagerefresh run``: the operator itself — kopf, the ticks, /healthz and /metrics, and,
with ``--leader-elect``, the Lease that decides which candidate acts."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

import click
import kopf
import structlog

from imagerefresh.allocator import tune_allocator
from imagerefresh.cli.group import (
    FAILED_EXIT,
    LEADERSHIP_LOST_EXIT,
    LOGGING_META,
    USAGE,
    CommandFailed,
    Exits,
    allow_option,
    cluster_options,
    insecure_registry_option,
    kube_api,
    log_options,
    main,
    policy_ticker,
)
from imagerefresh.collector import freeze_startup_heap
from imagerefresh.handlers import Runtime, build_registry
from imagerefresh.health import serve_health
from imagerefresh.kube.errors import KubeError
from imagerefresh.kube.namespaces import NamespaceScope, is_pattern
from imagerefresh.logs import configure_logging
from imagerefresh.metrics import Metrics
from imagerefresh.offline import KUBELET_IMAGE_CAP
from imagerefresh.planner import NamespacePolicy
from imagerefresh.planner.helperpod import DEFAULT_RUN_AS, RunAs
from imagerefresh.registry import DEFAULT_DEADLINE
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.election import ElectionTimings, Elector, default_identity

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

RUN_EXITS: Exits = (
    (0, "stopped (SIGTERM or SIGINT)"),
    (FAILED_EXIT, "could not start (no usable kubeconfig, no API server, a port in use)"),
    USAGE,
    (
        LEADERSHIP_LOST_EXIT,
        "leadership lost (--leader-elect): it stopped writing at once; its Deployment "
        "restarts it as a candidate",
    ),
)


def _run_as(value: str) -> RunAs:
    try:
        return RunAs.parse(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


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
        configure_logging("INFO", click.get_current_context().meta[LOGGING_META][1])
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
        api = kube_api(kubeconfig, context, connections=config.kube_concurrency)
        ticker = policy_ticker(api, insecure_registries, config, metrics)
        elector = (
            Elector(
                # Its own client and thread: renewals never queue behind a tick's requests.
                # Each request must answer well within the renew deadline.
                kube_api(
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
            # Start-up is over: no full collection walks its objects again (see collector).
            log.info("start-up heap frozen", objects=freeze_startup_heap())
            # Only now do kopf and the handlers start: a standby has read the Lease, nothing else.
            operator = asyncio.create_task(
                kopf.operator(
                    registry=build_registry(api.connection.login, scope),
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
            # Renewals have ended before the release: none may take the Lease back after it.
            await asyncio.gather(lost, return_exceptions=True)
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
