"""A registry with the OCI referrers API: the ``referrers_registry`` fixture.

distribution 2.8 (the ``registry`` fixture) has no referrers API, so cosign stores bundles there
under the fallback tag; this registry has it, so cosign 3 attaches them through it and no
fallback tag exists. It is go-containerregistry's ``pkg/registry`` (in memory, referrers on)
behind our own few lines, ``e2e/referrers-registry/main.go``, pinned in ``e2e/versions.env``
and built by `make binaries` before the tests (never by a test: a missing build fails, naming
`make binaries`). One process per session, on a free loopback port it picks itself.

Its access log — one line per request — is what tests read to assert what the registry
received (:meth:`ReferrersRegistry.requests`).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.cosign_env import pinned_build

__all__ = ["LoggedRequest", "ReferrersRegistry", "built", "referrers_registry"]

# "2026/12/04 00:08:31.422671 GET /v2/app/referrers/sha256:… [404 CODE message]": the registry
# logs a status only for the errors it answers.
_ACCESS_LINE = re.compile(
    r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+ (?P<method>[A-Z]+) (?P<target>\S+)"
    r"(?: (?P<status>\d{3}) .*)?$"
)


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the registry logged it."""

    method: str
    target: str  # path and query
    status: int  # 200 for one answered without an error (the registry logs no status then)


@dataclass
class ReferrersRegistry:
    """The registry process, its address and its access log."""

    binary: Path
    directory: Path
    host: str = ""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log(self) -> Path:
        return self.directory / "access.log"

    def start(self) -> ReferrersRegistry:
        listening = self.directory / "listening"
        with self.log.open("wb") as log, listening.open("wb") as out:
            self.process = subprocess.Popen(
                [str(self.binary), "-addr", "127.0.0.1:0"], stdout=out, stderr=log
            )
        try:
            self.host = self._address(listening)
        except BaseException:
            self.stop()
            raise
        return self

    def _address(self, listening: Path) -> str:
        assert self.process is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            said = listening.read_text()
            if said.endswith("\n"):
                return said.removeprefix("listening on ").strip()
            if self.process.poll() is not None:
                raise RuntimeError(f"referrers-registry exited:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("referrers-registry did not say where it listens within 20 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def requests(self) -> list[LoggedRequest]:
        """Every request the registry logged, in order."""
        found = []
        for line in self.log.read_text().splitlines():
            match = _ACCESS_LINE.match(line)
            if match is not None:
                status = int(match["status"]) if match["status"] else 200
                found.append(LoggedRequest(match["method"], match["target"], status))
        return found


def built() -> Path:
    """The registry's pinned build (RuntimeError when `make binaries` has not built it)."""
    return pinned_build("referrers-registry")


@pytest.fixture(scope="session")
def referrers_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferrersRegistry]:
    """A registry with the OCI referrers API on loopback (plain HTTP)."""
    try:
        binary = built()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    server = ReferrersRegistry(binary, tmp_path_factory.mktemp("referrers-registry")).start()
    try:
        yield server
    finally:
        server.stop()
