"""cosign, the signing tool the release signs its checksums with: the ``cosign`` fixture.

It is the build pinned in `e2e/versions.env` (COSIGN_VERSION), in the same bin dir as helm.
Unlike the control plane's binaries it is built on demand — `make binaries` leaves it out — so
the fixture builds it when it is missing (`e2e/build-binaries cosign`: a few minutes of CPU
the first time on 2 cores, then cached by version). :func:`key_pair` makes a password-protected
key pair the way a user would (``cosign generate-key-pair``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.helm_env import BUILD_BINARIES

__all__ = ["KeyPair", "built_cosign", "cosign", "key_pair"]

# A cold build of cosign's module and its dependencies (about 6 CPU minutes, 1.8 GB of
# modules); the build's own timeout, so that a test using the fixture needs a longer one too.
BUILD_TIMEOUT = 1200


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    password: str

    @property
    def env(self) -> dict[str, str]:
        """The environment cosign reads the private key's password from."""
        return {**os.environ, "COSIGN_PASSWORD": self.password}


def key_pair(cosign: Path, directory: Path, password: str = "release-test") -> KeyPair:
    directory.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(cosign), "generate-key-pair"], cwd=directory, capture_output=True, text=True,
        env={**os.environ, "COSIGN_PASSWORD": password}, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return KeyPair(directory / "cosign.key", directory / "cosign.pub", password)


def built_cosign() -> Path:
    """The pinned cosign, built first when it is not cached yet (RuntimeError if the build
    fails)."""
    done = subprocess.run(
        [str(BUILD_BINARIES), "cosign"], capture_output=True, text=True,
        timeout=BUILD_TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"e2e/build-binaries cosign failed:\n{done.stderr[-3000:]}")
    bin_dir = subprocess.run(
        [str(BUILD_BINARIES), "--print-bin-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Path(bin_dir) / "cosign"


@pytest.fixture(scope="session")
def cosign() -> Path:
    """The pinned cosign, built first when it is not cached yet."""
    try:
        return built_cosign()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
