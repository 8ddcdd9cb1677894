"""How every request of the operator reaches the API server: one connection, one error
hierarchy, one write gate.

A :class:`Connection` is a :class:`~imagerefresh.kube.login.Login` (the server and the
credentials to send now) and a urllib3 pool of TLS connections made from it.
:class:`Transport` sends a request by URL path on it (:func:`send` builds the request) and
hands back the raw JSON answer; every failure leaves as a
:class:`~imagerefresh.kube.errors.KubeError` made by
:func:`~imagerefresh.kube.errors.translate`, so nothing above it sees urllib3. With leader
election on, a write is refused before it is sent (:class:`~imagerefresh.kube.errors.NotLeader`)
unless the ``write_gate`` says this process still holds the Lease. The requests of each
resource are built on it, one module each, and :class:`~imagerefresh.kube.api.KubeApi` joins
them.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import ssl
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Self
from urllib.parse import quote, urlencode

import urllib3

from imagerefresh.kube.errors import ErrorAnswer, KubeError, NotLeader, UnusableConfig, translate
from imagerefresh.kube.kubeconfig import from_kubeconfig
from imagerefresh.kube.login import Login, in_cluster
from imagerefresh.planner import OPERATOR_FIELD_MANAGER

__all__ = [
    "DEFAULT_CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "FIELD_MANAGER",
    "JSON_PATCH",
    "MERGE_PATCH",
    "Connection",
    "Json",
    "Query",
    "Transport",
    "scope",
    "segment",
    "send",
]

FIELD_MANAGER = OPERATOR_FIELD_MANAGER
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds: a hung API server never hangs a tick
DEFAULT_CONNECTIONS = 16
Query = Sequence[tuple[str, Any]]
Json = dict[str, Any]


@functools.cache  # every connection sends it; the distribution's metadata is read once
def _user_agent() -> str:
    try:
        return f"imagerefresh/{version('imagerefresh')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "imagerefresh"


class Connection:
    """A login, and a pool of TLS connections to its server with room for ``connections``
    requests in flight at once (one per calling thread)."""

    def __init__(self, login: Login, connections: int = DEFAULT_CONNECTIONS) -> None:
        self.login = login
        # Sent with every request, before the credentials (e.g. Impersonate-User in tests).
        self.default_headers: dict[str, str] = {"User-Agent": _user_agent()}
        info = login.info()
        try:
            self._tls = info.as_ssl_context()
        except (OSError, ValueError, ssl.SSLError) as error:
            raise UnusableConfig(
                f"the CA or client certificate is unusable: {type(error).__name__}: {error}"
            ) from error
        self._insecure = bool(info.insecure)
        self.pool = self._pool(connections)

    def _pool(self, connections: int) -> urllib3.PoolManager:
        return urllib3.PoolManager(
            maxsize=connections,
            ssl_context=self._tls,
            cert_reqs="CERT_NONE" if self._insecure else "CERT_REQUIRED",
            assert_hostname=False if self._insecure else None,
        )

    def sibling(self, connections: int) -> Connection:
        """The same login and headers on a pool of its own."""
        other = copy.copy(self)
        other.pool = other._pool(connections)
        return other

    def close(self) -> None:
        """Close the pool's connections."""
        self.pool.clear()


class Transport:
    """Requests by path for their raw JSON answers; lists read page by page."""

    # Objects one page of a list holds: a list's memory is a page's, whatever its length.
    page_size = 500

    def __init__(
        self,
        connection: Connection,
        *,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        write_gate: Callable[[], bool] | None = None,
    ) -> None:
        self.connection = connection
        self._timeout = timeout
        self._streams: Connection | None = None
        # None: every write may be sent (no leader election). Else asked before each write.
        self.write_gate = write_gate

    @classmethod
    def from_environment(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        connections: int = DEFAULT_CONNECTIONS,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    ) -> Self:
        """In a pod, its ServiceAccount; else ``kubeconfig``, ``$KUBECONFIG`` or ~/.kube/config.

        An explicit ``kubeconfig`` or ``context`` always wins (a context is a kubeconfig's:
        naming one reads the kubeconfig even in a pod; None is its current context).
        ``kubeconfig`` may list several files separated by ``os.pathsep``, as ``$KUBECONFIG``
        may. The kubeconfig is never written back. ``connections`` is how many requests may be
        in flight at once (one per calling thread): the client keeps that many connections
        open to the API server.
        """
        try:
            in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
            if kubeconfig is None and context is None and in_pod:
                login = in_cluster()
            else:
                login = from_kubeconfig(kubeconfig, context)
            connection = Connection(login, connections)
        except UnusableConfig as error:
            raise translate(error, what="configure the Kubernetes client") from error
        return cls(connection, timeout=timeout)

    def close(self) -> None:
        """Release the connection pools."""
        self.connection.close()
        if self._streams is not None:
            self._streams.close()

    @property
    def timeout(self) -> tuple[float, float]:
        """(connect, read) seconds of every request."""
        return self._timeout

    def streams(self, connections: int) -> Connection:
        """A client of its own for long-lived watch streams (:mod:`.watch`), with room for
        ``connections`` of them: each holds a connection while it lasts, and must never take
        one the requests of ticks need."""
        if self._streams is None:
            self._streams = self.connection.sibling(connections)
        return self._streams

    def _request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = "application/json",
        answer: bool = True,
        gated: bool = True,
    ) -> dict[str, Any]:
        """``method`` ``path`` for its raw JSON answer; every failure becomes a KubeError.

        With ``answer=False`` the (successful) answer is read but not parsed: ``{}``. A write
        (any method but GET) with ``gated`` is sent only while the write gate allows it.
        """
        if gated and method != "GET" and self.write_gate is not None and not self.write_gate():
            raise NotLeader(
                f"{what}: not sent — this process does not hold the leader-election Lease (any "
                "more); it writes nothing and exits, and its Deployment restarts it as a candidate"
            )
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            response = send(self.connection, method, path, query, headers, body, self._timeout)
            try:
                data = response.data
            finally:
                response.release_conn()
            if not answer:
                return {}
            parsed = json.loads(data)
        except Exception as error:
            raise translate(error, what=what) from error
        if not isinstance(parsed, dict):
            raise KubeError(f"{what}: the API server answered with a non-object; retried later")
        return parsed

    def _list(self, what: str, path: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", self.page_size)]
            if token is not None:
                query.append(("continue", token))
            page = self._request(what, "GET", path, query=query)
            items += page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items


def send(
    connection: Connection,
    method: str,
    path: str,
    query: Query,
    headers: dict[str, str],
    body: Any,
    timeout: tuple[float, float],
) -> Any:
    """One request on ``connection``; the unread urllib3 response of a 2xx answer.

    Anything else raises an :class:`~imagerefresh.kube.errors.ErrorAnswer` carrying the
    answer's status, reason, headers and body. The credentials are the login's now (a token
    read again as it rotates or expires). A JSON body is sent compact.
    """
    url = connection.login.server + path
    if query:
        url += "?" + urlencode([(k, _query_value(v)) for k, v in query], quote_via=quote)
    sent = {**connection.default_headers, **headers, **connection.login.headers()}
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    response = connection.pool.request(
        method,
        url,
        body=data,
        headers=sent,
        timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
        preload_content=False,
    )
    if not 200 <= response.status <= 299:
        try:
            answer = response.data
        finally:
            response.release_conn()
        raise ErrorAnswer(
            response.status,
            response.reason,
            answer.decode("utf-8", errors="replace"),
            response.headers,
        )
    return response


def _query_value(value: Any) -> str:
    """A query parameter as the API server reads it: booleans in lower case."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def segment(value: str) -> str:
    """A name as one URL path segment."""
    return quote(str(value), safe="")


def scope(namespace: str | None) -> str:
    """Where a list looked, in words."""
    return f"in namespace {namespace}" if namespace is not None else "in all namespaces"
