"""`imagerefresh resolve`, run as the installed console script against the real registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.hostile_registry import HostileRegistry
from support.registry_env import ImagePusher, free_port

pytestmark = pytest.mark.registry

SCRIPT = Path(sys.executable).with_name("imagerefresh")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {})}
    environment.pop("IMAGEREFRESH_INSECURE_REGISTRIES", None) if env is None else None
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=environment
    )


def test_resolve_json_prints_the_fixed_interface(registry: str, pusher: ImagePusher) -> None:
    pushed = pusher.push("cli/app", "prod", seed="cli", kind="oci-index")
    result = run("resolve", "--json", "--insecure-registry", registry, pushed.reference)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "reference": pushed.reference,
        "digest": pushed.digest,
        "registry": registry,
        "ratelimit": {"limit": None, "remaining": None, "window_seconds": None, "source": None},
    }


def test_resolve_prints_the_digest_and_says_not_limited(registry: str, pusher: ImagePusher) -> None:
    pushed = pusher.push("cli/human", "v1", seed="h")
    result = run("resolve", pushed.reference, env={"IMAGEREFRESH_INSECURE_REGISTRIES": registry})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == pushed.digest
    assert "not limited" in result.stderr


def test_resolve_failure_exits_nonzero_with_one_line(registry: str) -> None:
    host = f"127.0.0.1:{free_port()}"
    result = run("resolve", "--insecure-registry", host, f"{host}/x/y:z", "--timeout", "1")
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"Error: cannot reach {host}")


def test_resolve_gives_up_at_its_deadline_on_a_registry_dripping_its_answer(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour = "drip-head"
    pusher.push("cli/drip", "prod", seed="drip")
    reference = f"{hostile.host}/cli/drip:prod"
    result = run(
        "resolve", "--insecure-registry", hostile.host, "--deadline", "1", "--timeout", "30",
        reference,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: {hostile.host} did not finish resolving {reference}")
    assert "within the 1s deadline" in line


def test_resolve_rejects_an_invalid_reference_with_the_reason() -> None:
    result = run("resolve", "Docker/Docker")
    assert result.returncode == 2
    assert "must be lowercase" in result.stderr


def test_python_dash_m_is_the_same_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "imagerefresh", "--help"], capture_output=True, text=True, check=True
    )
    assert "resolve" in result.stdout
