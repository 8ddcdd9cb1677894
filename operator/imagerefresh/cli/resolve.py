"""``imagerefresh resolve``: ask a registry for a tag's digest exactly as the operator does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from imagerefresh.cli.group import (
    FAILED_EXIT,
    USAGE,
    CommandFailed,
    Exits,
    insecure_registry_option,
    log_options,
    main,
    one_shot,
)
from imagerefresh.credentials import (
    Credentials,
    InvalidDockerConfig,
    credentials_for,
    parse_docker_config,
)
from imagerefresh.reference import InvalidReference, parse
from imagerefresh.registry import DEFAULT_DEADLINE, RegistryClient, Resolution

RESOLVE_EXITS: Exits = (
    (0, "the digest is printed (stdout), and the registry's rate-limit report (stderr)"),
    (FAILED_EXIT, "the registry did not tell the digest, or --docker-config cannot be read"),
    USAGE,
)


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
