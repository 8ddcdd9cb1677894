"""Who the operator is to the API server: the server's address, its CA, and the credential
each request carries — asked for again as it changes.

A login is kopf's own :class:`kopf.ConnectionInfo` (so kopf's watch and the operator's requests
act as one identity), kept current by a :class:`Login`: a ServiceAccount token is read again
from its file at most a minute after the last read, as client-go does, because the kubelet
rotates it on disk; a kubeconfig's exec plugin (:mod:`.kubeconfig`) is run again once the
token it printed has expired. Everything else in a login is fixed when it is loaded.

It is loaded from a pod's ServiceAccount here (:func:`in_cluster`) or from a kubeconfig
(:func:`~imagerefresh.kube.kubeconfig.from_kubeconfig`) — not by the official client, which
weighs about 125 MiB installed and which kopf imports on start whenever it is installed.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import kopf

from imagerefresh.kube.errors import UnusableConfig

__all__ = ["SERVICE_ACCOUNT", "TOKEN_REREAD_SECONDS", "Login", "TokenSource", "in_cluster"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
# A token that expires within this much is asked for again before it is sent.
EXPIRY_MARGIN = datetime.timedelta(seconds=10)

# A fresh token and when it expires (None: it does not say).
TokenSource = Callable[[], tuple[str, datetime.datetime | None]]


class Login:
    """A :class:`kopf.ConnectionInfo` whose token comes from ``token_source`` when there is one,
    asked for again ``reread_seconds`` after it was last asked (a rotated file) or as it
    expires (an exec plugin's token). Safe to share between threads."""

    def __init__(
        self,
        base: kopf.ConnectionInfo,
        token_source: TokenSource | None = None,
        *,
        reread_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base = base
        self._source = token_source
        self._reread = reread_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._current = base
        self._asked: float | None = None

    @property
    def server(self) -> str:
        """The API server's base URL, without a trailing slash."""
        return self._base.server.rstrip("/")

    def info(self) -> kopf.ConnectionInfo:
        """The server and the credentials to send now."""
        if self._source is None:
            return self._base
        with self._lock:
            if self._stale():
                try:
                    token, expiration = self._source()
                except UnusableConfig:
                    if self._asked is None or self._expired():
                        raise
                    return self._current  # a rotation under way: the last token still works
                self._current = dataclasses.replace(self._base, token=token, expiration=expiration)
                self._asked = self._clock()
            return self._current

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header to send now; none with a client certificate alone."""
        return self.info().as_http_headers()

    def _stale(self) -> bool:
        if self._asked is None:
            return True
        if self._reread is not None and self._clock() - self._asked >= self._reread:
            return True
        return self._expired()

    def _expired(self) -> bool:
        expiration = self._current.expiration
        if expiration is None:
            return False
        return expiration - EXPIRY_MARGIN <= datetime.datetime.now(datetime.UTC)


def in_cluster(account: Path = SERVICE_ACCOUNT) -> Login:
    """The pod's ServiceAccount: the server the kubelet names in the environment, the
    cluster's CA and the projected token, read again as the kubelet rotates it."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise UnusableConfig(
            "KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set: not in a pod"
        )
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    token_file = account / "token"
    ca_file = account / "ca.crt"
    try:
        ca = ca_file.read_bytes()
        namespace = _optional_text(account / "namespace")
    except OSError as error:
        raise UnusableConfig(f"the ServiceAccount's CA {ca_file} is unreadable: {error}") from error
    base = kopf.ConnectionInfo(
        server=f"https://{host}:{port}", ca_data=ca, default_namespace=namespace
    )
    login = Login(base, lambda: (read_token(token_file), None), reread_seconds=TOKEN_REREAD_SECONDS)
    login.info()  # fail now, not at the first request, when the token is not there
    return login


def read_token(path: Path) -> str:
    """A token file's token (surrounding whitespace dropped); UnusableConfig when it has none."""
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise UnusableConfig(f"the token file {path} is unreadable: {error}") from error
    if not token:
        raise UnusableConfig(f"the token file {path} is empty")
    return token


def _optional_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None
