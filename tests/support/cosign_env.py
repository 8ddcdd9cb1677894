"""cosign, the signing tool the release signs its checksums with: the ``cosign`` fixture.

It is the build pinned in `e2e/versions.env` (COSIGN_VERSION), made by `make binaries`
(`e2e/build-binaries`, cached by version) before the tests, never by a test: the fixture only
locates it (`e2e/build-binaries --path cosign`) and fails, naming `make binaries`, when it is
missing. Tests that use it are marked ``binaries`` (tests/conftest.py), so `make unit` leaves
them out. :func:`key_pair` makes a password-protected key pair the way a user would
(``cosign generate-key-pair``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.helm_env import BUILD_BINARIES

__all__ = ["KeyPair", "built_cosign", "cosign", "key_pair", "pinned_build"]


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


def pinned_build(name: str) -> Path:
    """Where the pinned build of ``name`` is (RuntimeError, saying what to run, when it is
    not built)."""
    found = subprocess.run(
        [str(BUILD_BINARIES), "--path", name], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise RuntimeError(found.stderr.strip() or f"e2e/build-binaries --path {name} failed")
    return Path(found.stdout.strip())


def built_cosign() -> Path:
    """The pinned cosign (RuntimeError when `make binaries` has not built it)."""
    return pinned_build("cosign")


@pytest.fixture(scope="session")
def cosign() -> Path:
    """The pinned cosign, as `make binaries` built it."""
    try:
        return built_cosign()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
