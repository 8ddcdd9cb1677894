"""Every way a Kubernetes API call can fail, as one hierarchy, translated in one place.

The transport raises :class:`ErrorAnswer` for an answer outside 2xx (its HTTP status and
``Status`` body), urllib3 errors for transport trouble, and :class:`UnusableConfig` when no
server or credentials can be made from the pod or the kubeconfig. :func:`translate` turns each
into a :class:`KubeError` subclass whose message says what happened *and what to do*, so callers
handle API trouble by kind, never by status code. What to do depends on who reads it: the
operator's log (its ServiceAccount; its next tick retries) or a person who ran a one-shot
command with their own kubeconfig (nothing retries it for them), so each error carries both
wordings (:meth:`KubeError.for_one_shot`), written here and nowhere else.

``KubeError``
  ├─ ``NotFound``            — 404
  ├─ ``Forbidden``           — 401/403: names the verb and resource to grant (RBAC)
  ├─ ``PreconditionFailed``  — a JSON Patch ``test`` op failed: the object changed since read
  ├─ ``ResourceConflict``    — 409: a stale ``resourceVersion`` on an update
  ├─ ``KubeUnavailable``     — no usable answer: connection refused, timeouts, 429, 5xx
  └─ ``NotLeader``           — never sent: this process no longer holds the leader Lease

How a failed ``test`` op is recognised: the API server applies a JSON Patch and, when that
fails for any reason (a ``test`` whose value differs, a path that no longer exists), answers
422 ``Invalid`` with the fixed message "the server rejected our request due to an error in our
request" and *no* causes — the JSON Patch library's own message is dropped
(``NewGenericServerResponse`` in k8s.io/apiserver's patch handler). A 422 from validating the
patched object always carries ``details.causes``. So a cause-less 422 means "the document no
longer matches the patch": nothing was changed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import urllib3

__all__ = [
    "ErrorAnswer",
    "Forbidden",
    "KubeError",
    "KubeUnavailable",
    "NotFound",
    "NotLeader",
    "PreconditionFailed",
    "ResourceConflict",
    "UnusableConfig",
    "translate",
]

_MAX_DETAIL = 300
_GENERIC_422 = "the server rejected our request due to an error in our request"
_TEST_OP_FAILED = re.compile(r"\btesting value \S+ failed\b")
# "deployments.apps "x" is forbidden: User "…" cannot patch resource "deployments" in API group
# "apps" in the namespace "ns"" (the group and namespace parts are absent for core/cluster ones).
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]+)")?'
)


class ErrorAnswer(Exception):
    """The API server answered outside 2xx: its status, reason, headers and (raw) body."""

    def __init__(
        self, status: int, reason: str | None, body: str = "", headers: Any = None
    ) -> None:
        super().__init__(f"({status}) {reason}")
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers


class UnusableConfig(Exception):
    """No server or credentials could be made from the pod's ServiceAccount or a kubeconfig."""


class KubeError(Exception):
    """A Kubernetes API call failed; the message says what happened and what to do.

    ``str(error)`` says it to the operator's log (the operator retries on its next tick, as its
    ServiceAccount); :meth:`for_one_shot` says it to a person who ran a one-shot command with
    their own kubeconfig — nothing retries it for them, and the account is theirs.
    """

    def __init__(self, message: str, *, status: int | None = None, one_shot: str | None = None):
        super().__init__(message)
        self.status = status
        self._one_shot = one_shot

    @property
    def reason(self) -> str:
        """A CamelCase reason for conditions and events."""
        return type(self).__name__

    def for_one_shot(self) -> str:
        """The message for a one-shot command (``plan``, ``audit``, ``reset``, ...)."""
        return self._one_shot or str(self)


class NotFound(KubeError):
    """The object (or its namespace) does not exist."""


class Forbidden(KubeError):
    """RBAC (403) or authentication (401) refused the call: grant it, or fix the credentials."""


class PreconditionFailed(KubeError):
    """A JSON Patch ``test`` op failed: the object changed since we read it; nothing changed."""


class ResourceConflict(KubeError):
    """An update carried a stale ``resourceVersion`` (409): read again and retry."""


class KubeUnavailable(KubeError):
    """No usable answer from the API server; worth retrying later."""


class NotLeader(KubeError):
    """A write refused before it was sent: leader election is on and this process does not
    hold the Lease (any more). It writes nothing and exits; its Deployment restarts it."""


_RUN_AGAIN = "then run the command again"
_CLI_CONFIG = (
    "pass --kubeconfig FILE (and --context NAME) or set KUBECONFIG; without either, "
    "~/.kube/config is read"
)


def translate(error: Exception, *, what: str) -> KubeError:
    """The :class:`KubeError` for ``error``, raised while doing ``what`` ("get Deployment ns/x")."""
    if isinstance(error, KubeError):
        return error
    if isinstance(error, ErrorAnswer):
        return _from_error_answer(error, what)
    if _is_tls_failure(error):
        head = (
            f"{what}: no TLS connection to the Kubernetes API server "
            f"({_short(str(error))}); check its address and the CA in the kubeconfig"
        )
        return KubeUnavailable(head + "; retried next tick", one_shot=f"{head}, {_RUN_AGAIN}")
    if isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
        head = (
            f"{what}: the Kubernetes API server could not be reached "
            f"({_short(type(error).__name__ + ': ' + str(error))}); check that it is up and "
        )
        return KubeUnavailable(
            head + "that the operator's network path to it works; retried next tick",
            one_shot=head
            + f"that your kubeconfig names it (--kubeconfig, --context), {_RUN_AGAIN}",
        )
    if isinstance(error, UnusableConfig):
        head = f"{what}: no usable Kubernetes client configuration ({_short(str(error))}); "
        return KubeError(
            head + "run in a pod with a ServiceAccount, or set KUBECONFIG to a valid kubeconfig",
            one_shot=head + _CLI_CONFIG,
        )
    return KubeError(
        f"{what}: unexpected {type(error).__name__} from the Kubernetes client "
        f"({_short(str(error))}); this is a bug if it persists, please report it"
    )


def _is_tls_failure(error: Exception) -> bool:
    """A TLS handshake that failed (an unknown CA, a name the certificate does not carry),
    whether urllib3 raised it or wrapped it in the retries it gave up on."""
    if isinstance(error, urllib3.exceptions.MaxRetryError):
        return isinstance(error.reason, urllib3.exceptions.SSLError)
    return isinstance(error, urllib3.exceptions.SSLError)


def _from_error_answer(error: ErrorAnswer, what: str) -> KubeError:
    status = error.status
    body = _status_body(error)
    message = str(body.get("message") or error.reason or "no message")
    detail = _short(message)
    if status == 401:
        return Forbidden(
            f"{what}: the API server did not accept the operator's credentials (401: {detail}); "
            "check the ServiceAccount token or the kubeconfig's user",
            status=status,
            one_shot=f"{what}: the API server did not accept your credentials (401: {detail}); "
            "check the kubeconfig's user: its token or certificate may have expired",
        )
    if status == 403:
        operator, person = _grant(message, what)
        head = f"{what}: forbidden ({detail}); "
        return Forbidden(head + operator, status=status, one_shot=head + person)
    if status == 404:
        return NotFound(
            f"{what}: not found ({detail}); create it or correct the name/namespace",
            status=status,
        )
    if status == 409 and body.get("reason") != "AlreadyExists":
        head = f"{what}: the object changed since it was read (409: {detail}); "
        return ResourceConflict(
            head + "read it again and retry (the next tick does)",
            status=status,
            one_shot=head + "run the command again",
        )
    if status == 422 and _is_patch_application_failure(body, message):
        head = (
            f"{what}: the JSON Patch preconditions no longer hold (a `test` op failed: the "
            "object changed since it was read); nothing was changed; "
        )
        return PreconditionFailed(
            head + "read it again and retry (the next tick does)",
            status=status,
            one_shot=head + "run the command again",
        )
    if status == 429 or status >= 500:
        head = (
            f"{what}: the Kubernetes API server answered {status} ({detail}); it is "
            "overloaded or failing; "
        )
        return KubeUnavailable(
            head + "retried next tick",
            status=status,
            one_shot=head + "run the command again later",
        )
    return KubeError(
        f"{what}: the Kubernetes API server rejected the request ({status}: {detail}); "
        "fix the object or the request it names",
        status=status,
    )


def _status_body(error: ErrorAnswer) -> dict[str, Any]:
    """The ``Status`` object of an error answer, or {} when the body is not one."""
    raw = error.body
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    if not isinstance(raw, str) or not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _is_patch_application_failure(body: dict[str, Any], message: str) -> bool:
    details = body.get("details") or {}
    if details.get("causes"):
        return False  # the patched object failed validation: not a precondition
    # The fixed message of a 422 from NewGenericServerResponse (see the module docstring), or
    # an API server that passes the JSON Patch library's own "testing value … failed" on.
    # Nothing looser: an admission policy's refusal is a 422 whose message is the policy's.
    return message.lower() == _GENERIC_422 or _TEST_OP_FAILED.search(message) is not None


def _grant(message: str, what: str) -> tuple[str, str]:
    """What to grant, said to the operator's log and to a person running a command."""
    match = _FORBIDDEN.search(message)
    if match is None:
        return (
            f"grant the operator's ServiceAccount the RBAC rights to {what}",
            f"the account your kubeconfig uses needs the RBAC rights to {what}",
        )
    resource = match["resource"]
    if match["group"]:
        resource = f"{resource}.{match['group']}"
    scope = f"in namespace {match['namespace']}" if match["namespace"] else "cluster-wide"
    rights = f"{match['verb']} on {resource} {scope}"
    return (
        f"grant {rights} to the operator's ServiceAccount ({match['user']}) with a "
        "Role/RoleBinding",
        f"the account your kubeconfig uses ({match['user']}) needs {rights}: have it granted "
        "(a Role/RoleBinding), or use a kubeconfig that has it",
    )


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"
