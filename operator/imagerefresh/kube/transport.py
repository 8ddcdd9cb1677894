"""How every request of the operator reaches the API server: one client, one error hierarchy,
one write gate.

:class:`Transport` sends a request by URL path with the official client's
:class:`~kubernetes.client.ApiClient` (its configuration, authentication, TLS, default headers
and connection pool; :func:`send` builds the request) and hands back the raw JSON answer;
every failure leaves as a :class:`~imagerefresh.kube.errors.KubeError` made by
:func:`~imagerefresh.kube.errors.translate`, so nothing above it sees ``ApiException`` or
urllib3. With leader election on, a write is refused before it is sent
(:class:`~imagerefresh.kube.errors.NotLeader`) unless the ``write_gate`` says this process
still holds the Lease. The requests of each resource are built on it, one module each, and
:class:`~imagerefresh.kube.api.KubeApi` joins them.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, Self
from urllib.parse import quote, urlencode

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException

from imagerefresh.kube.errors import KubeError, NotLeader, translate
from imagerefresh.planner import OPERATOR_FIELD_MANAGER

__all__ = [
    "DEFAULT_CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "FIELD_MANAGER",
    "JSON_PATCH",
    "MERGE_PATCH",
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


class Transport:
    """Requests by path for their raw JSON answers; lists read page by page."""

    # Objects one page of a list holds: a list's memory is a page's, whatever its length.
    page_size = 500

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        write_gate: Callable[[], bool] | None = None,
    ) -> None:
        self.api_client = api_client
        self._timeout = timeout
        self._streams: kubernetes.client.ApiClient | None = None
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
        configuration = kubernetes.client.Configuration()
        configuration.connection_pool_maxsize = connections
        try:
            in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
            if kubeconfig is None and context is None and in_pod:
                kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
            else:
                path = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=path,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except kubernetes.config.ConfigException as error:
            raise translate(error, what="configure the Kubernetes client") from error
        except (OSError, ValueError) as error:  # an unreadable or malformed kubeconfig
            unusable = kubernetes.config.ConfigException(f"{type(error).__name__}: {error}")
            raise translate(unusable, what="configure the Kubernetes client") from error
        return cls(kubernetes.client.ApiClient(configuration), timeout=timeout)

    def close(self) -> None:
        """Release the client's connection pools."""
        self.api_client.close()  # type: ignore[no-untyped-call]
        if self._streams is not None:
            self._streams.close()  # type: ignore[no-untyped-call]

    @property
    def timeout(self) -> tuple[float, float]:
        """(connect, read) seconds of every request."""
        return self._timeout

    def streams(self, connections: int) -> kubernetes.client.ApiClient:
        """A client of its own for long-lived watch streams (:mod:`.watch`), with room for
        ``connections`` of them: each holds a connection while it lasts, and must never take
        one the requests of ticks need."""
        if self._streams is None:
            configuration = copy.copy(self.api_client.configuration)
            configuration.connection_pool_maxsize = connections
            self._streams = kubernetes.client.ApiClient(configuration)
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
            response = send(self.api_client, method, path, query, headers, body, self._timeout)
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
    client: kubernetes.client.ApiClient,
    method: str,
    path: str,
    query: Query,
    headers: dict[str, str],
    body: Any,
    timeout: tuple[float, float],
) -> Any:
    """One request on ``client``'s connections; the unread urllib3 response of a 2xx answer.

    Anything else raises an ``ApiException`` carrying the answer's status, reason, headers and
    body, as the generated API methods raise it. The client lends its configuration (server,
    credentials: a token refreshed as it expires), its default headers and its connection
    pool (TLS); the request itself is built here, because the client's generic path walks
    every body to copy it and serializes it once more, a cost paid on every write of every
    tick. A JSON body is sent compact.
    """
    configuration = client.configuration
    url = configuration.host + path
    if query:
        url += "?" + urlencode([(k, _query_value(v)) for k, v in query], quote_via=quote)
    sent = {**client.default_headers, **headers, **_credentials(configuration)}
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    response = client.rest_client.pool_manager.request(
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
        error = ApiException(status=response.status, reason=response.reason)
        error.body = answer.decode("utf-8", errors="replace")
        error.headers = response.headers
        raise error
    return response


def _credentials(configuration: kubernetes.client.Configuration) -> dict[str, str]:
    """The header that authenticates a request: the bearer token the configuration holds now
    (it asks its refresh hook first, so an expiring token is renewed); none with a client
    certificate, which the connection pool presents."""
    bearer = configuration.auth_settings().get("BearerToken")
    if not bearer or not bearer.get("value"):
        return {}
    if bearer.get("in") != "header":
        raise kubernetes.config.ConfigException(
            f"the client's bearer token goes in the {bearer.get('in')!r}, not a header: this "
            "version of the kubernetes client is not supported; install another"
        )
    return {str(bearer["key"]): str(bearer["value"])}


def _query_value(value: Any) -> str:
    """A query parameter as the API server reads it: booleans in lower case."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def segment(value: str) -> str:
    """A name as one URL path segment."""
    return quote(str(value), safe="")


def scope(namespace: str | None) -> str:
    """Where a list looked, in words."""
    return f"in namespace {namespace}" if namespace is not None else "in all namespaces"
