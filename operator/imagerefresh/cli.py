"""The ``imagerefresh`` command line.

``resolve`` asks a registry for a tag's digest exactly as the operator does, so an SRE can see
what a tick would pin and what the registry says about the pull budget, without a cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import click

from imagerefresh.credentials import (
    Credentials,
    InvalidDockerConfig,
    credentials_for,
    parse_docker_config,
)
from imagerefresh.logs import LogFormat, configure_logging
from imagerefresh.reference import InvalidReference, parse
from imagerefresh.registry import RegistryClient, RegistryError, Resolution

__all__ = ["main"]

INSECURE_ENV = "IMAGEREFRESH_INSECURE_REGISTRIES"


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
        config = parse_docker_config(docker_config.read_bytes())
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


@click.group()
@click.option(
    "--log-level", default="WARNING", show_default=True, help="DEBUG, INFO, WARNING or ERROR."
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    show_default=True,
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
@click.option("--timeout", default=10.0, show_default=True, help="Seconds per request.")
def resolve(
    reference: str,
    as_json: bool,
    insecure_registries: list[str],
    docker_config: Path | None,
    timeout: float,
) -> None:
    """Print the digest REFERENCE's tag points at, and the registry's rate-limit report."""
    try:
        ref = parse(reference)
    except InvalidReference as error:
        raise click.UsageError(str(error)) from error
    credentials = _load_credentials(docker_config, ref.domain)

    async def run() -> Resolution:
        async with RegistryClient(
            insecure_registries=insecure_registries, timeout=timeout
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
