"""What every command shares: the ``imagerefresh`` group and its log options, the exit
statuses and the one error every command fails with, the options several commands take, and the
clients they build.

Each command lives in a module of its own and registers itself on :func:`main` when the package
is imported.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.logs import LogFormat, configure_logging
from imagerefresh.metrics import Metrics
from imagerefresh.migration import MigrationRefused
from imagerefresh.ratelimit import RateLimitLedger
from imagerefresh.registry import RegistryClient, RegistryError
from imagerefresh.resolver import SharedResolver
from imagerefresh.runtime.config import OperatorConfig, parse_namespace_pairs
from imagerefresh.runtime.coverage import AuditUnreadable
from imagerefresh.runtime.events import EventRecorder
from imagerefresh.runtime.policyview import PolicyUnreadable
from imagerefresh.runtime.ticker import PolicyTicker
from imagerefresh.verifier import SignatureVerifier, VerificationPool

INSECURE_ENV = "IMAGEREFRESH_INSECURE_REGISTRIES"
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
USAGE = (USAGE_EXIT, "usage: the command line is wrong (the message says which part)")


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
LOGGING_META = "imagerefresh.logging"  # ctx.meta (shared by the group's and the command's context)
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)
LOG_FORMATS = click.Choice(["auto", "json", "console"])


def _relog(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    level, log_format = ctx.meta.get(LOGGING_META, ("WARNING", "auto"))
    chosen = (value, log_format) if param.name == "log_level" else (level, value)
    ctx.meta[LOGGING_META] = chosen
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
    ctx.meta[LOGGING_META] = (log_level, log_format)
    configure_logging(log_level, log_format)


def kubectl_plugin() -> None:
    """``kubectl imagerefresh …``: kubectl runs ``kubectl-imagerefresh`` from $PATH with the
    rest of the command line (its plugin mechanism); the commands are ``imagerefresh``'s."""
    main(prog_name="kubectl imagerefresh")


def kube_api(kubeconfig: str | None, context: str | None, **options: Any) -> KubeApi:
    """The API client a command talks through, from --kubeconfig and --context."""
    return KubeApi.from_environment(kubeconfig, context=context, **options)


def policy_ticker(
    api: KubeApi,
    insecure_registries: list[str],
    config: OperatorConfig,
    metrics: Metrics,
) -> PolicyTicker:
    """What ticks a policy, with its registry client, resolver, verifier and events: ``run``'s
    for every policy, ``plan``'s for one."""
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
