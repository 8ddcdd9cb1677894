"""The operator's only door to the Kubernetes API: a small facade over the official client.

:class:`KubeApi` reads and writes raw API JSON — camelCase, exactly as the API server sends it
(every call uses ``_preload_content=False`` and ``json.loads``, never the client's model
classes) — because the planner's ``from_api`` constructors and the policy models take that
shape. Every failure leaves here as a :class:`~imagerefresh.kube.errors.KubeError` made by
:func:`~imagerefresh.kube.errors.translate`; nothing above this module sees ``ApiException``
or urllib3.

Writes are few and guarded: image patches are JSON Patches whose ``test`` ops pin what we
read (a concurrent change fails them as :class:`PreconditionFailed`), status is replaced with
the ``resourceVersion`` it was computed from (a concurrent write fails it as
:class:`ResourceConflict`), and events are best-effort — they never break a tick.

No API client exists until :meth:`KubeApi.from_environment` (or the caller) builds one.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
import kubernetes.config
import structlog

from imagerefresh.credentials import Credentials, InvalidDockerConfig, parse_docker_config
from imagerefresh.kube.errors import KubeError, NotFound, translate
from imagerefresh.kube.selectors import InvalidSelector, label_selector
from imagerefresh.planner.actions import ImagePatch

__all__ = [
    "EVENT_COMPONENT",
    "POLICY_GROUP",
    "POLICY_KIND",
    "POLICY_PLURAL",
    "POLICY_VERSION",
    "KubeApi",
]

log = structlog.get_logger(__name__)

POLICY_GROUP = "images.tracebloc.io"
POLICY_VERSION = "v1alpha1"
POLICY_PLURAL = "imagerefreshpolicies"
POLICY_KIND = "ImageRefreshPolicy"
EVENT_COMPONENT = "imagerefresh"
FIELD_MANAGER = "imagerefresh"
MAX_EVENT_MESSAGE = 1024
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds: a hung API server never hangs a tick
_PAGE = 500

# kind → the AppsV1Api method suffix (read_namespaced_<suffix>, patch_namespaced_<suffix>)
_WORKLOADS = {"Deployment": "deployment", "DaemonSet": "daemon_set", "StatefulSet": "stateful_set"}
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
    ) -> None:
        self.api_client = api_client
        self._timeout = timeout
        self._apps = kubernetes.client.AppsV1Api(api_client)
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._custom = kubernetes.client.CustomObjectsApi(api_client)

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> KubeApi:
        """In a pod, its ServiceAccount; else ``kubeconfig``, ``$KUBECONFIG`` or ~/.kube/config.

        An explicit ``kubeconfig`` always wins. ``kubeconfig`` may list several files separated
        by ``os.pathsep``, as ``$KUBECONFIG`` may. The kubeconfig is never written back.
        """
        configuration = kubernetes.client.Configuration()
        try:
            if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
            else:
                path = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=path, client_configuration=configuration, persist_config=False
                )
        except kubernetes.config.ConfigException as error:
            raise translate(error, what="configure the Kubernetes client") from error
        except (OSError, ValueError) as error:  # an unreadable or malformed kubeconfig
            unusable = kubernetes.config.ConfigException(f"{type(error).__name__}: {error}")
            raise translate(unusable, what="configure the Kubernetes client") from error
        return cls(kubernetes.client.ApiClient(configuration))

    def close(self) -> None:
        """Release the client's connection pool."""
        self.api_client.close()  # type: ignore[no-untyped-call]

    # -- workloads and pods ---------------------------------------------------------------

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment/DaemonSet/StatefulSet as raw API JSON, or None when it does not exist."""
        suffix = _workload_suffix(kind)
        try:
            obj = self._call(
                f"get {kind} {namespace}/{name}",
                getattr(self._apps, f"read_namespaced_{suffix}"),
                name,
                namespace,
            )
        except NotFound:
            return None
        obj.setdefault("apiVersion", "apps/v1")
        obj.setdefault("kind", str(kind))
        return obj

    def list_pods(self, namespace: str, selector: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pods ``selector`` (a workload's ``spec.selector``) matches, as raw API JSON."""
        what = f"list pods in {namespace}"
        try:
            query = label_selector(selector)
        except InvalidSelector as error:
            raise KubeError(
                f"{what}: the workload's spec.selector cannot be used ({error}); fix the selector"
            ) from error
        pods: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self._call(
                f"{what} matching {query}",
                self._core.list_namespaced_pod,
                namespace,
                label_selector=query,
                limit=_PAGE,
                _continue=token,
            )
            for pod in page.get("items") or ():
                pod.setdefault("apiVersion", "v1")
                pod.setdefault("kind", "Pod")
                pods.append(pod)
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return pods

    def patch_images(self, patch: ImagePatch) -> dict[str, Any]:
        """Apply the guarded JSON Patch to ``patch.target``; the patched object as raw JSON.

        A ``test`` op that no longer holds raises PreconditionFailed and changes nothing.
        """
        target = patch.target
        suffix = _workload_suffix(target.kind)
        images = {change.container: change.image for change in patch.changes}
        obj = self._call(
            f"patch {target.kind} {target.namespace}/{target.name} ({patch.purpose} of "
            f"{', '.join(images)})",
            getattr(self._apps, f"patch_namespaced_{suffix}"),
            target.name,
            target.namespace,
            patch.json_patch(),
            field_manager=FIELD_MANAGER,
            _content_type=JSON_PATCH,
        )
        log.info("images patched", target=str(target), purpose=str(patch.purpose), images=images)
        return obj

    # -- pull secrets -----------------------------------------------------------------------

    def read_pull_secrets(
        self, namespace: str, pod_spec: Mapping[str, Any]
    ) -> list[dict[str, Credentials]]:
        """The docker configs the kubelet will try for pods of ``pod_spec``, in its order.

        A pod gets its template's ``imagePullSecrets``; only when it has none does the
        ServiceAccount admission plugin give it those of its ServiceAccount (``default``
        unless named) — so this reads exactly one of the two lists, as the pod will have it.
        A secret that does not exist is skipped, as the kubelet skips it; a missing service
        account has no secrets; a secret we may not read raises Forbidden (fail closed).
        """
        names = _names(pod_spec.get("imagePullSecrets"))
        if not names:
            account = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
            names = self._service_account_pull_secrets(namespace, str(account or "default"))
        configs: list[dict[str, Credentials]] = []
        for name in dict.fromkeys(names):
            config = self._read_pull_secret(namespace, name)
            if config is not None:
                configs.append(config)
        return configs

    def _service_account_pull_secrets(self, namespace: str, account: str) -> list[str]:
        try:
            obj = self._call(
                f"get ServiceAccount {namespace}/{account}",
                self._core.read_namespaced_service_account,
                account,
                namespace,
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
            secret = self._call(what, self._core.read_namespaced_secret, name, namespace)
        except NotFound:
            log.warning(
                "pull secret missing: skipped, as the kubelet skips it",
                secret=name,
                namespace=namespace,
            )
            return None
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
            return parse_docker_config(base64.b64decode(encoded, validate=True))
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
            return self._call(
                f"get {POLICY_KIND} {namespace}/{name}",
                self._custom.get_namespaced_custom_object,
                POLICY_GROUP,
                POLICY_VERSION,
                namespace,
                POLICY_PLURAL,
                name,
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
        return self._call(
            f"update {POLICY_KIND} {metadata['namespace']}/{metadata['name']} status",
            self._custom.replace_namespaced_custom_object_status,
            POLICY_GROUP,
            POLICY_VERSION,
            metadata["namespace"],
            POLICY_PLURAL,
            metadata["name"],
            body,
            field_manager=FIELD_MANAGER,
        )

    def annotate_policy(self, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation on the policy (a merge patch; other annotations stay)."""
        self._call(
            f"patch {POLICY_KIND} {namespace}/{name} annotation {key}",
            self._custom.patch_namespaced_custom_object,
            POLICY_GROUP,
            POLICY_VERSION,
            namespace,
            POLICY_PLURAL,
            name,
            {"metadata": {"annotations": {key: value}}},
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
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
            body = _event(regarding, namespace, type, reason, message)
            self._call(
                what,
                self._core.create_namespaced_event,
                namespace,
                kubernetes.client.CoreV1Event.from_dict(body),
                field_manager=FIELD_MANAGER,
            )
        except Exception as error:  # events must never break a tick
            log.warning("event not posted", reason=reason, error=str(translate(error, what=what)))

    # -- plumbing -------------------------------------------------------------------------------

    def _call(
        self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """Call ``method`` for its raw JSON answer; every failure becomes a KubeError."""
        try:
            response = method(
                *args, _preload_content=False, _request_timeout=self._timeout, **kwargs
            )
            try:
                data = response.data
            finally:
                response.release_conn()
            parsed = json.loads(data)
        except Exception as error:
            raise translate(error, what=what) from error
        if not isinstance(parsed, dict):
            raise KubeError(f"{what}: the API server answered with a non-object; retried later")
        return parsed


def _workload_suffix(kind: str) -> str:
    try:
        return _WORKLOADS[str(kind)]
    except KeyError:
        raise ValueError(
            f"unsupported workload kind {kind!r}: Deployment, DaemonSet or StatefulSet"
        ) from None


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
