"""Pull secrets: the docker configs the kubelet will try for a pod, read as it reads them."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from functools import partial
from typing import Any

import structlog

from imagerefresh.credentials import Credentials, InvalidDockerConfig, parse_docker_config
from imagerefresh.kube.errors import Forbidden, KubeError, NotFound
from imagerefresh.kube.readcache import ReadCache
from imagerefresh.kube.transport import (
    Transport,
    segment,
)

log = structlog.get_logger(__name__)

__all__ = ["PULL_SECRETS_VALUE", "PullSecretReads"]

# The chart value listing the only Secrets the operator may read (chart/values.yaml).
PULL_SECRETS_VALUE = "rbac.pullSecrets.names"
# Pull-secret types the kubelet reads, and the data key each keeps its docker config under.
_PULL_SECRET_KEYS = {
    "kubernetes.io/dockerconfigjson": ".dockerconfigjson",
    "kubernetes.io/dockercfg": ".dockercfg",
}


class PullSecretReads(Transport):
    """ServiceAccounts' and pod templates' pull secrets, each parsed as the kubelet would."""

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
                f"/api/v1/namespaces/{segment(namespace)}/serviceaccounts/{segment(account)}",
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
                what, "GET", f"/api/v1/namespaces/{segment(namespace)}/secrets/{segment(name)}"
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


def _names(references: Any) -> list[str]:
    """The ``name``s of a list of LocalObjectReferences (entries without one are ignored)."""
    return [str(ref["name"]) for ref in references or () if ref.get("name")]
