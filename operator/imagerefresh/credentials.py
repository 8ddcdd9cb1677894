"""Registry credentials from ``kubernetes.io/dockerconfigjson`` pull secrets.

A workload's pull secrets are keyed by whatever its author typed: ``docker.io``,
``https://index.docker.io/v1/``, ``registry-1.docker.io``, ``ghcr.io``, ``127.0.0.1:5000``.
The kubelet matches them to an image's registry by host, treating Docker Hub's names as one;
:func:`credentials_for` does the same, so the operator asks the registry as the identity that
will later pull.

Two names, never the username: :attr:`Credentials.account` keys everything the registry grants
to a credential (tokens, pull budgets) and is derived from the *whole* credential — a pull
secret with the right username and a wrong password is another account, and never reuses what
was granted to the right one. :attr:`Credentials.identity` is what status, events, logs and
metric labels show: the pull secret (``namespace/name``) the credential came from.
:class:`Credentials` never prints its username or secret, so a stray log line or exception
cannot leak them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ANONYMOUS",
    "Credentials",
    "InvalidDockerConfig",
    "credentials_for",
    "parse_docker_config",
    "registry_key",
]

ANONYMOUS = "anonymous"
DOCKER_HUB_ALIASES = frozenset(
    {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
)


# Account keys are keyed hashes with a key of this process: stable for its lifetime, and even a
# key that leaked into a log could not be tried against a list of likely passwords.
_ACCOUNT_KEY = secrets.token_bytes(32)


class InvalidDockerConfig(ValueError):
    """A pull secret whose ``.dockerconfigjson`` cannot be read."""


def _account(username: str, password: str) -> str:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") are different accounts.
    material = f"{len(username)}:{username}:{password}".encode()
    return "account-" + hmac.new(_ACCOUNT_KEY, material, hashlib.sha256).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Credentials:
    """A username and password (or token) for one registry, and the pull secret it came from."""

    username: str = field(repr=False)
    password: str = field(repr=False)
    # "namespace/name" of the pull secret (or the file) it was read from; None when unnamed.
    source: str | None = None
    account: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "account", _account(self.username, self.password))

    @property
    def identity(self) -> str:
        """How status, events, logs and metrics name this account: its pull secret."""
        return self.source or "an unnamed pull secret"

    def __str__(self) -> str:
        return f"Credentials(pull secret {self.identity})"


def registry_key(server: str) -> str:
    """The host[:port] a dockerconfig key or image domain names, Docker Hub folded to docker.io."""
    host = server.strip()
    for scheme in ("https://", "http://"):
        host = host.removeprefix(scheme)
    host = host.split("/", 1)[0].lower()
    return "docker.io" if host in DOCKER_HUB_ALIASES else host


def _decode_entry(
    server: str, entry: Mapping[str, object], source: str | None
) -> Credentials | None:
    username, password = entry.get("username"), entry.get("password")
    if isinstance(username, str) and isinstance(password, str) and username:
        return Credentials(username, password, source)
    auth = entry.get("auth")
    if not isinstance(auth, str) or not auth:
        return None  # e.g. an identitytoken-only entry: nothing we can send
    try:
        decoded = base64.b64decode(auth, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as error:
        raise InvalidDockerConfig(
            f"the 'auth' of {server!r} is not base64 of user:password; recreate the secret"
        ) from error
    user, sep, secret = decoded.partition(":")
    if not sep or not user:
        raise InvalidDockerConfig(
            f"the 'auth' of {server!r} does not decode to user:password; recreate the secret"
        )
    return Credentials(user, secret, source)


def parse_docker_config(raw: str | bytes, source: str | None = None) -> dict[str, Credentials]:
    """Read a ``.dockerconfigjson`` (or legacy ``.dockercfg``) into {registry key: credentials}.

    ``source`` names where it came from (the pull secret's ``namespace/name``); every
    credential carries it, so a tick can name the account without naming its user.
    """
    try:
        document = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidDockerConfig("the pull secret is not valid JSON; recreate it") from error
    if not isinstance(document, dict):
        raise InvalidDockerConfig("the pull secret is not a JSON object; recreate it")
    auths = document.get("auths", document)
    if not isinstance(auths, dict):
        raise InvalidDockerConfig("the pull secret's 'auths' is not an object; recreate it")
    found: dict[str, Credentials] = {}
    for server, entry in auths.items():
        if not isinstance(entry, dict):
            continue
        credentials = _decode_entry(server, entry, source)
        if credentials is not None:
            found.setdefault(registry_key(server), credentials)
    return found


def credentials_for(
    domain: str, configs: Iterable[Mapping[str, Credentials]]
) -> Credentials | None:
    """The first credentials (in pull-secret order, as the kubelet tries them) for ``domain``."""
    key = registry_key(domain)
    for config in configs:
        if key in config:
            return config[key]
    return None
