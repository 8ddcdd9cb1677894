"""podman, the container runtime the tests run real images with (Debian's package).

podman builds on containers/image, the library CRI-O uses, so what it records for an image it
pulled — ``podman image inspect``'s ``Digest`` and ``RepoDigests`` — is what such a runtime
knows. It runs as root here with runc (crun refuses this machine's hybrid cgroups), with
ulimits below the machine's hard limits (FACTS.md). A missing podman fails the test: `make
system-deps` installs it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from support.helm_env import REPO

__all__ = ["BUILD_IMAGE", "PODMAN_RUN", "PulledImage", "podman", "pull"]

BUILD_IMAGE = REPO / "e2e" / "build-image"
# `podman run`'s options every container here needs.
PODMAN_RUN = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=8192:8192")


@cache
def podman_binary() -> str:
    found = shutil.which("podman")
    if found is None or shutil.which("runc") is None:
        pytest.fail("podman or runc is not installed: run `make system-deps`", pytrace=False)
    return found


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run podman with runc; with ``check`` a failure fails the test with podman's stderr."""
    argv = [podman_binary(), "--runtime", "runc", *args]
    # conmon leaves an `oom` file in its working directory when a container is OOM-killed.
    workdir = Path(tempfile.gettempdir()) / "imagerefresh-podman"
    workdir.mkdir(exist_ok=True)
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=workdir
    )
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


@dataclass(frozen=True)
class PulledImage:
    """What podman recorded for an image it pulled."""

    digest: str  # `Digest`
    repo_digests: tuple[str, ...]  # `RepoDigests`, as podman lists them

    @property
    def recorded_digests(self) -> frozenset[str]:
        return frozenset(r.rpartition("@")[2] for r in self.repo_digests)


def pull(reference: str) -> PulledImage:
    """`podman pull` over plain HTTP (the test registry), then what podman recorded."""
    podman("pull", "--quiet", "--tls-verify=false", reference)
    (record,) = json.loads(podman("image", "inspect", reference).stdout)
    return PulledImage(record["Digest"], tuple(record["RepoDigests"]))


@pytest.fixture(scope="session")
def operator_image() -> str:
    """The operator's image as `make image` builds it. `make test` builds it first; here it
    is warm (podman's layer cache), a cold build does not fit in a test's time."""
    podman_binary()
    proc = subprocess.run(
        [str(BUILD_IMAGE)], capture_output=True, text=True, timeout=240, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"e2e/build-image failed:\n{proc.stderr[-3000:]}", pytrace=False)
    print(proc.stderr.strip().splitlines()[-1])  # its ID and size
    return proc.stdout.strip().splitlines()[-1]
