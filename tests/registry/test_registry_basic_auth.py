"""Basic authentication against the real distribution registry: htpasswd with bcrypt entries,
over TLS (the registry refuses Basic credentials in the clear), as private registries run it.

The client meets the registry's challenge (401, ``WWW-Authenticate: Basic``) and sends the
pull secret's credentials on the request itself; from then on it sends them at once. What the
registry answered, and whose credentials it checked and refused, is read from its own log.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import httpx
import pytest

from imagerefresh.credentials import Credentials
from imagerefresh.reference import parse
from imagerefresh.registry import RegistryAuthError, RegistryClient

from support.certificates import loopback_certificate
from support.registry_env import (
    ImagePusher,
    LoggedRequest,
    PushedImage,
    RegistryServer,
    free_port,
)

pytestmark = pytest.mark.registry

USER, PASSWORD = "edge", "correct horse battery staple"
PATH = "team/app"


@dataclass(frozen=True)
class BasicRegistry:
    server: RegistryServer
    certificate: Path
    pushed: PushedImage

    def client(self) -> RegistryClient:
        """A client that trusts the registry's certificate (and no plain HTTP)."""
        trust = ssl.create_default_context(cafile=str(self.certificate))
        return RegistryClient(transport=httpx.AsyncHTTPTransport(verify=trust), backoff=0.01)

    def logged_since(self, mark: int) -> list[tuple[str, int]]:
        """(method, status) of the manifest requests answered after the first ``mark``."""
        return [
            (r.method, r.status)
            for r in self.server.requests()[mark:]
            if f"/v2/{PATH}/manifests/" in r.uri
        ]

    def requests(self) -> list[LoggedRequest]:
        return self.server.requests()


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BasicRegistry]:
    root = tmp_path_factory.mktemp("basic-registry")
    certs = root / "certs"
    certs.mkdir()
    _, certificate = loopback_certificate(certs)
    htpasswd = root / "htpasswd"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()
    htpasswd.write_text(f"{USER}:{hashed}\n")
    server = RegistryServer(root / "registry", free_port(), tls=certs, htpasswd=htpasswd)
    server.root.mkdir()
    server.start()
    pusher = ImagePusher(server.host, tls=certificate, auth=(USER, PASSWORD))
    try:
        pushed = pusher.push(PATH, "prod", seed="basic")
        yield BasicRegistry(server, certificate, pushed)
    finally:
        pusher.close()
        server.stop()


async def test_the_challenge_is_answered_with_the_pull_secret_and_then_met_up_front(
    basic: BasicRegistry,
) -> None:
    mark = len(basic.requests())
    reference = parse(basic.pushed.reference)
    async with basic.client() as client:
        first = await client.resolve(reference, Credentials(USER, PASSWORD))
        again = await client.resolve(reference, Credentials(USER, PASSWORD))
    assert first.digest == again.digest == basic.pushed.digest
    # The challenge once, then the credentials on the request itself, at once ever after.
    assert basic.logged_since(mark) == [("HEAD", 401), ("HEAD", 200), ("HEAD", 200)]


async def test_wrong_credentials_are_refused_once_retried_never_and_named_by_their_secret(
    basic: BasicRegistry,
) -> None:
    mark, failures = len(basic.requests()), len(basic.server.authentication_failures())
    wrong = Credentials(USER, "not the password", source="tracebloc/regcred")
    async with basic.client() as client:
        with pytest.raises(RegistryAuthError, match="refused our credentials") as refused:
            await client.resolve(parse(basic.pushed.reference), wrong)
    assert "tracebloc/regcred" in str(refused.value)
    assert "not the password" not in str(refused.value)
    # Checked against the bcrypt entry once, and refused: no second try with the same secret.
    assert basic.logged_since(mark) == [("HEAD", 401), ("HEAD", 401)]
    assert basic.server.authentication_failures()[failures:] == [USER]


async def test_without_credentials_the_challenge_says_which_secret_is_missing(
    basic: BasicRegistry,
) -> None:
    mark = len(basic.requests())
    async with basic.client() as client:
        with pytest.raises(RegistryAuthError, match="requires Basic credentials"):
            await client.resolve(parse(basic.pushed.reference))
    assert basic.logged_since(mark) == [("HEAD", 401)]
