"""The operator's only door to the Kubernetes API: a small facade over the official client.

:class:`KubeApi` reads and writes raw API JSON — camelCase, exactly as the API server sends it
(every call uses ``_preload_content=False`` and ``json.loads``, never the client's model
classes) — because the planner's ``from_api`` constructors and the policy models take that
shape. Every failure leaves here as a :class:`~imagerefresh.kube.errors.KubeError` made by
:func:`~imagerefresh.kube.errors.translate`; nothing above this module sees ``ApiException``
or urllib3.

Writes are few and guarded. With leader election on, every write but the Lease's own is
refused before it is sent (:class:`~imagerefresh.kube.errors.NotLeader`) unless the
``write_gate`` says this process still holds the Lease — so a deposed leader cannot write over
its successor, whatever part of it is still running. Image patches are JSON Patches whose
``test`` ops pin what we read (a concurrent change fails them as :class:`PreconditionFailed`),
status is replaced with the ``resourceVersion`` it was computed from (a concurrent write fails
it as :class:`ResourceConflict`), and events are best-effort — they never break a tick.

No API client exists until :meth:`KubeApi.from_environment` (or the caller) builds one.

Requests go through the official client's :class:`~kubernetes.client.ApiClient` (its
configuration, authentication, TLS, default headers and connection pool), by URL path, not
through the generated ``CoreV1Api``/``AppsV1Api`` classes: those modules hold thousands of
methods we never call, and loading them cost the operator about 26 MiB of resident memory
(measured for ``make bench``), and each generated method validates its arguments with pydantic.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote

import kubernetes.client
import kubernetes.config
import structlog
from kubernetes.client.exceptions import ApiException

from imagerefresh.credentials import Credentials, InvalidDockerConfig, parse_docker_config
from imagerefresh.kube.errors import Forbidden, KubeError, NotFound, NotLeader, translate
from imagerefresh.kube.readcache import ReadCache
from imagerefresh.kube.selectors import InvalidSelector, label_selector, matches
from imagerefresh.planner import OPERATOR_FIELD_MANAGER, Cleared, ImagePatch

__all__ = [
    "EVENT_COMPONENT",
    "MAX_NODES",
    "POLICY_GROUP",
    "POLICY_KIND",
    "POLICY_PLURAL",
    "POLICY_VERSION",
    "PULL_SECRETS_VALUE",
    "KubeApi",
]

log = structlog.get_logger(__name__)

POLICY_GROUP = "images.tracebloc.io"
POLICY_VERSION = "v1alpha1"
POLICY_PLURAL = "imagerefreshpolicies"
POLICY_KIND = "ImageRefreshPolicy"
EVENT_COMPONENT = "imagerefresh"
FIELD_MANAGER = OPERATOR_FIELD_MANAGER
MAX_EVENT_MESSAGE = 1024
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds: a hung API server never hangs a tick
# The chart value listing the only Secrets the operator may read (chart/values.yaml).
PULL_SECRETS_VALUE = "rbac.pullSecrets.names"
_PAGE = 500
DEFAULT_CONNECTIONS = 16
# Nodes one list reads at most: a cluster larger than this is listed in part (reported as
# such), so one list bounds the memory and time a tick spends on nodes.
MAX_NODES = 5_000

# kind → its resource under /apis/apps/v1
_WORKLOADS = {"Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}
_POLICIES = f"/apis/{POLICY_GROUP}/{POLICY_VERSION}/namespaces/{{namespace}}/{POLICY_PLURAL}"
_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
# The group version's OpenAPI v3 document: every authenticated client may read it (the
# ClusterRole system:discovery), so reading the installed schema needs no RBAC of our own.
_OPENAPI = f"/openapi/v3/apis/{POLICY_GROUP}/{POLICY_VERSION}"
Query = Sequence[tuple[str, Any]]
Json = dict[str, Any]
T = TypeVar("T")


# Pull-secret types the kubelet reads, and the data key each keeps its docker config under.
_PULL_SECRET_KEYS = {
    "kubernetes.io/dockerconfigjson": ".dockerconfigjson",
    "kubernetes.io/dockercfg": ".dockercfg",
}


class KubeApi:
    """Reads workloads, pods, pull secrets and policies; patches images; writes status, events."""

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
        # Told every workload a patch of ours landed on, as the API server answered it.
        self._patch_observers: list[Callable[[Mapping[str, Any]], None]] = []

    @classmethod
    def from_environment(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        connections: int = DEFAULT_CONNECTIONS,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    ) -> KubeApi:
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

    # -- workloads and pods ---------------------------------------------------------------

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment/DaemonSet/StatefulSet as raw API JSON, or None when it does not exist."""
        path = _workload_path(kind, namespace, name)
        try:
            obj = self._request(f"get {kind} {namespace}/{name}", "GET", path)
        except NotFound:
            return None
        obj.setdefault("apiVersion", "apps/v1")
        obj.setdefault("kind", str(kind))
        return obj

    def list_pods(self, namespace: str, selector: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pods ``selector`` (a workload's ``spec.selector``) matches, as raw API JSON."""
        return self._list_pods(namespace, _selector_query(namespace, selector))

    def list_pods_of(
        self, namespace: str, selectors: Sequence[Mapping[str, Any]]
    ) -> list[list[Json] | KubeError]:
        """For each selector, the pods it matches (or why they cannot be listed), in one LIST.

        The workloads of one namespace usually select their pods by one shared label (``app``):
        one LIST by the set-based query ``app in (a,b,…)`` returns every pod any of them may
        select, which is then split by matching each full selector locally, as the API server
        matches it. When the selectors share no ``matchLabels`` key, each is listed on its own.
        """
        answers: list[list[Json] | KubeError] = []
        valid: dict[int, Mapping[str, Any]] = {}
        for index, selector in enumerate(selectors):
            try:
                _selector_query(namespace, selector)
            except KubeError as error:
                answers.append(error)
                continue
            answers.append([])
            valid[index] = selector
        union = _union_query(list(valid.values()))
        if union is None:
            for index, selector in valid.items():
                try:
                    answers[index] = self.list_pods(namespace, selector)
                except KubeError as error:
                    answers[index] = error
            return answers
        try:
            pods = self._list_pods(namespace, union)
        except KubeError as error:
            for index in valid:
                answers[index] = error
            return answers
        for index, selector in valid.items():
            answers[index] = [pod for pod in pods if matches(selector, _labels(pod))]
        return answers

    def _list_pods(self, namespace: str, query: str) -> list[Json]:
        what = f"list pods in {namespace}"
        pods: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params: list[tuple[str, Any]] = [("labelSelector", query), ("limit", _PAGE)]
            if token is not None:
                params.append(("continue", token))
            page = self._request(
                f"{what} matching {query}",
                "GET",
                f"/api/v1/namespaces/{_segment(namespace)}/pods",
                query=params,
            )
            for pod in page.get("items") or ():
                pod.setdefault("apiVersion", "v1")
                pod.setdefault("kind", "Pod")
                pods.append(pod)
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return pods

    def patch_images(self, cleared: Cleared[ImagePatch]) -> dict[str, Any]:
        """Apply the guarded JSON Patch a cleared write carries; the patched object as raw JSON.

        A ``test`` op that no longer holds raises PreconditionFailed and changes nothing. This
        is the one place patches are sent, and it sends only what the write guard cleared
        (:func:`~imagerefresh.planner.clear_writes`): anything else is a TypeError, never a request.
        """
        if not isinstance(cleared, Cleared) or not isinstance(cleared.write, ImagePatch):
            raise TypeError("only a patch the write guard cleared is sent")
        patch = cleared.write
        target = patch.target
        path = _workload_path(target.kind, target.namespace, target.name)
        images = {change.container: change.image for change in patch.changes}
        obj = self._request(
            f"patch {target.kind} {target.namespace}/{target.name} ({patch.purpose} of "
            f"{', '.join(images)})",
            "PATCH",
            path,
            query=[("fieldManager", FIELD_MANAGER)],
            body=patch.json_patch(),
            content_type=JSON_PATCH,
        )
        log.info("images patched", target=str(target), purpose=str(patch.purpose), images=images)
        for observer in self._patch_observers:
            try:
                observer(obj)
            except Exception:  # an observer's bug must not turn a landed patch into an error
                log.exception("a patch observer failed", target=str(target))
        return obj

    def observe_patches(self, observer: Callable[[Mapping[str, Any]], None]) -> None:
        """Tell ``observer`` of every workload a patch lands on, as the API server answered
        it (the generation it produced: what a watch-fed copy must reach before it is read)."""
        self._patch_observers.append(observer)

    # -- pull secrets -----------------------------------------------------------------------

    def read_pull_secrets(
        self, namespace: str, pod_spec: Mapping[str, Any], cache: ReadCache | None = None
    ) -> list[dict[str, Credentials]]:
        """The docker configs the kubelet will try for pods of ``pod_spec``, in its order.

        Each credential carries its secret's ``namespace/name`` (:attr:`Credentials.source`):
        that, never the username, is how status and metrics name the account.

        A pod gets its template's ``imagePullSecrets``; only when it has none does the
        ServiceAccount admission plugin give it those of its ServiceAccount (``default``
        unless named) — so this reads exactly one of the two lists, as the pod will have it.
        A secret that does not exist is skipped, as the kubelet skips it; a missing service
        account has no secrets; a secret we may not read raises Forbidden (fail closed).
        With a ``cache`` (one tick's), each ServiceAccount and secret is read once per tick.
        """
        cache = cache if cache is not None else ReadCache()
        names = _names(pod_spec.get("imagePullSecrets"))
        if not names:
            account = str(
                pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount") or "default"
            )
            names = cache.get(
                ("ServiceAccount", namespace, account),
                lambda: self._service_account_pull_secrets(namespace, account),
            )
        configs: list[dict[str, Credentials]] = []
        for name in dict.fromkeys(names):
            config = cache.get(
                ("Secret", namespace, name), partial(self._read_pull_secret, namespace, name)
            )
            if config is not None:
                configs.append(config)
        return configs

    def _service_account_pull_secrets(self, namespace: str, account: str) -> list[str]:
        try:
            obj = self._request(
                f"get ServiceAccount {namespace}/{account}",
                "GET",
                f"/api/v1/namespaces/{_segment(namespace)}/serviceaccounts/{_segment(account)}",
            )
        except NotFound:
            log.info(
                "service account missing: no pull secrets", account=account, namespace=namespace
            )
            return []
        return _names(obj.get("imagePullSecrets"))

    def _read_pull_secret(self, namespace: str, name: str) -> dict[str, Credentials] | None:
        what = f"get Secret {namespace}/{name}"
        try:
            secret = self._request(
                what, "GET", f"/api/v1/namespaces/{_segment(namespace)}/secrets/{_segment(name)}"
            )
        except NotFound:
            log.warning(
                "pull secret missing: skipped, as the kubelet skips it",
                secret=name,
                namespace=namespace,
            )
            return None
        except Forbidden as error:
            if error.status != 403:
                raise  # 401: the operator's own credentials, not this secret's grant
            # The chart grants Secrets by name only, none by default: say which value to set.
            raise Forbidden(
                f"{error} — or, installed with the Helm chart, add {name!r} to the chart value "
                f"{PULL_SECRETS_VALUE} (the only Secrets it grants, by name)",
                status=error.status,
            ) from error
        kind = secret.get("type")
        key = _PULL_SECRET_KEYS.get(str(kind))
        encoded = (secret.get("data") or {}).get(key) if key else None
        if not encoded:
            log.warning(
                "pull secret is not a docker config: skipped",
                secret=name,
                namespace=namespace,
                type=kind,
            )
            return None
        try:
            return parse_docker_config(
                base64.b64decode(encoded, validate=True), source=f"{namespace}/{name}"
            )
        except (binascii.Error, InvalidDockerConfig) as error:
            # The kubelet fails the pull on such a secret, so must we: never guess an identity.
            raise KubeError(
                f"{what}: the pull secret cannot be read as {key} ({error}); recreate it "
                "with `kubectl create secret docker-registry`"
            ) from error

    # -- policies -----------------------------------------------------------------------------

    def read_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ImageRefreshPolicy as raw API JSON, or None when it does not exist."""
        try:
            return self._request(
                f"get {POLICY_KIND} {namespace}/{name}", "GET", _policy_path(namespace, name)
            )
        except NotFound:
            return None

    def replace_policy_status(
        self, policy: Mapping[str, Any], status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT ``status`` as of ``policy``'s resourceVersion; ResourceConflict when it is stale."""
        metadata = policy["metadata"]
        if not metadata.get("resourceVersion"):
            raise ValueError("replace_policy_status needs the policy's metadata.resourceVersion")
        body = {
            **policy,
            "apiVersion": policy.get("apiVersion") or f"{POLICY_GROUP}/{POLICY_VERSION}",
            "kind": policy.get("kind") or POLICY_KIND,
            "status": dict(status),
        }
        return self._request(
            f"update {POLICY_KIND} {metadata['namespace']}/{metadata['name']} status",
            "PUT",
            _policy_path(metadata["namespace"], metadata["name"]) + "/status",
            query=[("fieldManager", FIELD_MANAGER)],
            body=body,
        )

    def annotate_policy(self, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation on the policy (a merge patch; other annotations stay)."""
        self._request(
            f"patch {POLICY_KIND} {namespace}/{name} annotation {key}",
            "PATCH",
            _policy_path(namespace, name),
            query=[("fieldManager", FIELD_MANAGER)],
            body={"metadata": {"annotations": {key: value}}},
            content_type=MERGE_PATCH,
        )

    def read_policy_schema(self) -> dict[str, Any]:
        """The ImageRefreshPolicy's structural schema as the API server serves it now.

        Read from the group version's OpenAPI v3 document, not from the CRD object: any
        authenticated client may read the document, while reading CRDs would need a
        cluster-wide grant. A KubeError when it cannot be read or describes no such kind (the
        CRD is not installed, or the answer is not an OpenAPI document).
        """
        what = f"read the OpenAPI v3 schema of {POLICY_PLURAL}.{POLICY_GROUP}/{POLICY_VERSION}"
        return _kind_schema(self._request(what, "GET", _OPENAPI), what)

    # -- listing, for `imagerefresh audit` ---------------------------------------------------

    def list_workloads(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every Deployment/DaemonSet/StatefulSet of ``kind`` in ``namespace`` (None: all)."""
        resource = _WORKLOADS[str(kind)]
        where = f"/namespaces/{_segment(namespace)}" if namespace is not None else ""
        items = self._list(
            f"list {resource}.apps {_scope(namespace)}", f"/apis/apps/v1{where}/{resource}"
        )
        for item in items:
            item.setdefault("kind", str(kind))
        return items

    def list_policies(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every ImageRefreshPolicy in ``namespace`` (None: all)."""
        base = f"/apis/{POLICY_GROUP}/{POLICY_VERSION}"
        where = f"/namespaces/{_segment(namespace)}" if namespace is not None else ""
        return self._list(
            f"list {POLICY_PLURAL}.{POLICY_GROUP} {_scope(namespace)}",
            f"{base}{where}/{POLICY_PLURAL}",
        )

    # -- nodes, for offline evidence ----------------------------------------------------------

    def list_nodes(
        self, keep: Callable[[Json], T | None], *, cap: int = MAX_NODES
    ) -> tuple[list[T], bool]:
        """What ``keep`` makes of each node (None: nothing), and whether the list is complete.

        Nodes are large (their image lists alone run to tens of KiB), so each is handed to
        ``keep`` as its page arrives and never held past it. At most ``cap`` nodes are read;
        ``complete`` is False when the list stopped there with more left, so a caller can tell
        a node not listed from a node that does not exist.
        """
        kept: list[T] = []
        read = 0
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", max(1, min(_PAGE, cap - read)))]
            if token is not None:
                query.append(("continue", token))
            page = self._request("list nodes", "GET", "/api/v1/nodes", query=query)
            items = page.get("items")
            items = items if isinstance(items, list) else []
            room = max(0, cap - read)
            for item in items[:room]:
                if isinstance(item, dict) and (found := keep(item)) is not None:
                    kept.append(found)
            read += min(len(items), room)
            token = (page.get("metadata") or {}).get("continue") or None
            if len(items) > room:  # a page larger than asked for: the cap still holds
                return kept, False
            if token is None:
                return kept, True
            if read >= cap:
                return kept, False

    def namespace_exists(self, namespace: str) -> bool:
        """Whether the namespace exists (Forbidden when the caller may not get namespaces)."""
        try:
            self._request(
                f"get namespace {namespace}", "GET", f"/api/v1/namespaces/{_segment(namespace)}"
            )
        except NotFound:
            return False
        return True

    def _list(self, what: str, path: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", _PAGE)]
            if token is not None:
                query.append(("continue", token))
            page = self._request(what, "GET", path, query=query)
            items += page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    # -- the leader-election Lease ----------------------------------------------------------------
    # Never gated: taking and renewing the Lease is how a process earns the right to write.

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease as raw API JSON, or None when it does not exist."""
        try:
            return self._request(
                f"get Lease {namespace}/{name}", "GET", _lease_path(namespace, name)
            )
        except NotFound:
            return None

    def watch_lease(
        self, namespace: str, name: str, resource_version: str, seconds: int
    ) -> dict[str, Any] | None:
        """The Lease's next change after ``resource_version`` (the event: ``type``, ``object``),
        or None when ``seconds`` pass without one.

        A watch of one object by name (``fieldSelector=metadata.name``), which RBAC allows with
        ``resourceNames``: a standby sees each renewal as it is written, so it judges the
        lease's expiry from the moment of the holder's last renewal, not from its own next
        poll. A watch the API server ends with an error (410: that version is too old) raises.
        """
        what = f"watch Lease {namespace}/{name}"
        query = [
            ("watch", "true"),
            ("fieldSelector", f"metadata.name={name}"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(max(1, seconds))),
        ]
        path = _LEASES.format(namespace=_segment(namespace))
        timeout = (self._timeout[0], max(1, seconds) + self._timeout[1])
        try:
            response = _send(
                self.api_client, "GET", path, query, {"Accept": "application/json"}, None, timeout
            )
            try:
                event = _first_change(response)
            finally:
                response.release_conn()
        except Exception as error:
            raise translate(error, what=what) from error
        if event is not None and event.get("type") == "ERROR":
            status = (event.get("object") or {}).get("code")
            raise KubeError(
                f"{what}: the API server ended the watch: "
                f"{(event.get('object') or {}).get('message', 'no message')}",
                status=status if isinstance(status, int) else None,
            )
        return event

    def create_lease(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease; a 409 (someone created it first) raises a KubeError of status 409."""
        return self._request(
            f"create Lease {namespace}/{name}",
            "POST",
            _LEASES.format(namespace=_segment(namespace)),
            query=[("fieldManager", FIELD_MANAGER)],
            body={
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": dict(spec),
            },
            gated=False,
        )

    def replace_lease(
        self, namespace: str, name: str, resource_version: str, spec: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT the Lease's spec as of ``resource_version``: ResourceConflict when it moved on."""
        if not resource_version:
            raise ValueError("replace_lease needs the Lease's metadata.resourceVersion")
        return self._request(
            f"update Lease {namespace}/{name}",
            "PUT",
            _lease_path(namespace, name),
            query=[("fieldManager", FIELD_MANAGER)],
            body={
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "resourceVersion": resource_version,
                },
                "spec": dict(spec),
            },
            gated=False,
        )

    # -- events -------------------------------------------------------------------------------

    def post_event(
        self, regarding: Mapping[str, Any], type: str, reason: str, message: str
    ) -> None:
        """Record a core/v1 Event about ``regarding``; best-effort: failures are only logged."""
        metadata = regarding.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        name = str(metadata.get("name") or "unknown")
        what = f"create Event {reason} in {namespace} about {regarding.get('kind')} {name}"
        try:
            self._request(
                what,
                "POST",
                f"/api/v1/namespaces/{_segment(namespace)}/events",
                query=[("fieldManager", FIELD_MANAGER)],
                body=_event(regarding, namespace, type, reason, message),
                answer=False,  # the Event as created is of no use to us
            )
        except Exception as error:  # events must never break a tick
            log.warning("event not posted", reason=reason, error=str(translate(error, what=what)))

    # -- plumbing -------------------------------------------------------------------------------

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
            response = _send(self.api_client, method, path, query, headers, body, self._timeout)
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


def _send(
    client: kubernetes.client.ApiClient,
    method: str,
    path: str,
    query: Query,
    headers: dict[str, str],
    body: Any,
    timeout: tuple[float, float],
) -> Any:
    """One request through ``client``; the unread urllib3 response of a 2xx answer.

    Anything else raises the ApiException the generated API methods raise. The client's own
    request path differs between its two generators (``kubernetes`` < 35 and ≥ 35): both
    are served, exactly as their generated methods call them with ``_preload_content=False``.
    """
    params = list(query)
    if hasattr(client, "param_serialize"):  # openapi-generator ≥ 6.6 (kubernetes ≥ 35)
        request = client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()  # type: ignore[no-untyped-call]
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response
    legacy: Any = client  # the legacy generator: non-2xx raises in its REST layer
    return legacy.call_api(
        path,
        method,
        query_params=params,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=False,
        _request_timeout=timeout,
    )


def _selector_query(namespace: str, selector: Mapping[str, Any]) -> str:
    try:
        return label_selector(selector)
    except InvalidSelector as error:
        raise KubeError(
            f"list pods in {namespace}: the workload's spec.selector cannot be used ({error}); "
            "fix the selector"
        ) from error


def _union_query(selectors: Sequence[Mapping[str, Any]]) -> str | None:
    """``key in (v1,v2,…)`` selecting a superset of every selector's pods; None if there is none.

    Every selector must pin the same ``matchLabels`` key; its values are the union. A single
    selector needs no union (its own query is exact).
    """
    if len(selectors) < 2:
        return None
    labels = [dict(selector.get("matchLabels") or {}) for selector in selectors]
    shared = set(labels[0]).intersection(*labels[1:])
    if not shared:
        return None
    key = "app" if "app" in shared else min(shared)
    values = sorted({str(found[key]) for found in labels})
    return f"{key} in ({','.join(values)})"


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _segment(value: str) -> str:
    """A name as one URL path segment."""
    return quote(str(value), safe="")


def _workload_path(kind: str, namespace: str, name: str) -> str:
    try:
        resource = _WORKLOADS[str(kind)]
    except KeyError:
        raise ValueError(
            f"unsupported workload kind {kind!r}: Deployment, DaemonSet or StatefulSet"
        ) from None
    return f"/apis/apps/v1/namespaces/{_segment(namespace)}/{resource}/{_segment(name)}"


def _policy_path(namespace: str, name: str) -> str:
    return _POLICIES.format(namespace=_segment(namespace)) + f"/{_segment(name)}"


def _first_change(response: Any) -> dict[str, Any] | None:
    """The first event of a watch stream that is not a bookmark, or None if it ends first."""
    for line in response:
        if not line.strip():
            continue
        event = json.loads(line)
        if isinstance(event, dict) and event.get("type") != "BOOKMARK":
            return event
    return None


def _kind_schema(document: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The schema of ImageRefreshPolicy in an OpenAPI v3 document: the one whose
    ``x-kubernetes-group-version-kind`` names it (its List kind is another)."""
    components = document.get("components")
    schemas = components.get("schemas") if isinstance(components, Mapping) else None
    if not isinstance(schemas, Mapping):
        raise KubeError(f"{what}: the answer is not an OpenAPI v3 document; retried next tick")
    wanted = {"group": POLICY_GROUP, "version": POLICY_VERSION, "kind": POLICY_KIND}
    for schema in schemas.values():
        kinds = schema.get("x-kubernetes-group-version-kind") if isinstance(schema, dict) else None
        if isinstance(kinds, list) and wanted in kinds:
            return schema  # type: ignore[no-any-return]
    raise KubeError(f"{what}: it describes no {POLICY_KIND}; is the CRD installed?")


def _lease_path(namespace: str, name: str) -> str:
    return _LEASES.format(namespace=_segment(namespace)) + f"/{_segment(name)}"


def _scope(namespace: str | None) -> str:
    return f"in namespace {namespace}" if namespace is not None else "in all namespaces"


def _names(references: Any) -> list[str]:
    """The ``name``s of a list of LocalObjectReferences (entries without one are ignored)."""
    return [str(ref["name"]) for ref in references or () if ref.get("name")]


def _event(
    regarding: Mapping[str, Any], namespace: str, type: str, reason: str, message: str
) -> dict[str, Any]:
    metadata = regarding.get("metadata") or {}
    name = str(metadata.get("name") or "unknown")
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    involved = {
        "apiVersion": regarding.get("apiVersion"),
        "kind": regarding.get("kind"),
        "name": name,
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }
    if len(message) > MAX_EVENT_MESSAGE:
        message = message[: MAX_EVENT_MESSAGE - 1] + "…"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # As client-go's recorder names them: the object's name and a unique hex suffix.
        "metadata": {"name": f"{name[:236]}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": {k: v for k, v in involved.items() if v},
        "type": type,
        "reason": reason,
        "message": message,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
