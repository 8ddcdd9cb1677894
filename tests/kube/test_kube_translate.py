"""translate() and the selector renderer on their own: every branch, without a cluster.

The real API server's answers (403 from RBAC, 404, 409, the 422 of a failed JSON Patch `test`)
are exercised in test_kube_api.py; here the same bodies are replayed to pin the rules that
distinguish them (a 422 *with* causes is a validation error, not a precondition).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3

from imagerefresh.kube import (
    Forbidden,
    KubeError,
    KubeUnavailable,
    NotFound,
    PreconditionFailed,
    ResourceConflict,
    translate,
)
from imagerefresh.kube.errors import ErrorAnswer, UnusableConfig
from imagerefresh.kube.selectors import InvalidSelector, label_selector

WHAT = "patch Deployment ns/web"
GENERIC_422 = "the server rejected our request due to an error in our request"


def api_error(status: int, message: str, reason: str = "", **details: Any) -> ErrorAnswer:
    body = {
        "kind": "Status",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": status,
    }
    return ErrorAnswer(status, reason, json.dumps(body))


# As urllib3 raises a handshake the CA does not verify, after its retries.
TLS_FAILED = urllib3.exceptions.MaxRetryError(
    None,  # type: ignore[arg-type]
    "/apis",
    urllib3.exceptions.SSLError("certificate verify failed: unable to get local issuer"),
)


CASES: list[tuple[Exception, type[KubeError], int | None, str]] = [
    (
        api_error(
            403,
            'deployments.apps "web" is forbidden: User "system:serviceaccount:ops:op" '
            'cannot patch resource "deployments" in API group "apps" in the namespace "ns"',
            "Forbidden",
        ),
        Forbidden,
        403,
        "grant patch on deployments.apps in namespace ns to the operator's ServiceAccount",
    ),
    (
        api_error(
            403,
            'namespaces is forbidden: User "u" cannot list resource "namespaces" at the '
            "cluster scope",
            "Forbidden",
        ),
        Forbidden,
        403,
        "grant list on namespaces cluster-wide",
    ),
    (api_error(401, "Unauthorized", "Unauthorized"), Forbidden, 401, "credentials"),
    (api_error(404, 'deployments.apps "web" not found', "NotFound"), NotFound, 404, "create"),
    (
        api_error(409, "the object has been modified", "Conflict"),
        ResourceConflict,
        409,
        "read it again",
    ),
    (
        api_error(422, GENERIC_422, "Invalid"),
        PreconditionFailed,
        422,
        "nothing was changed",
    ),
    (
        api_error(503, "etcd leader changed", "ServiceUnavailable"),
        KubeUnavailable,
        503,
        "retried",
    ),
    (api_error(429, "too many requests", "TooManyRequests"), KubeUnavailable, 429, "retried"),
    (TLS_FAILED, KubeUnavailable, None, "the CA in the kubeconfig"),
    (urllib3.exceptions.SSLError("bad handshake"), KubeUnavailable, None, "the CA"),
    (
        urllib3.exceptions.ReadTimeoutError(None, "/apis", "Read timed out."),  # type: ignore[arg-type]
        KubeUnavailable,
        None,
        "could not be reached",
    ),
    (ConnectionRefusedError(111, "refused"), KubeUnavailable, None, "could not be reached"),
    (UnusableConfig("the kubeconfig has no context 'x'"), KubeError, None, "set KUBECONFIG"),
]


@pytest.mark.parametrize(("error", "kind", "status", "advice"), CASES)
def test_translate_picks_the_kind_and_says_what_to_do(
    error: Exception, kind: type[KubeError], status: int | None, advice: str
) -> None:
    translated = translate(error, what=WHAT)
    assert type(translated) is kind
    assert translated.status == status
    assert str(translated).startswith(WHAT)
    assert advice in str(translated)
    assert translated.reason == kind.__name__


@pytest.mark.parametrize(("error", "kind", "status", "advice"), CASES)
def test_a_one_shot_command_is_never_told_that_a_tick_retries_it_or_the_operator_lacks_rights(
    error: Exception, kind: type[KubeError], status: int | None, advice: str
) -> None:
    said = translate(error, what=WHAT).for_one_shot()
    assert said.startswith(WHAT)
    assert "tick" not in said
    assert "retried" not in said
    assert "the operator" not in said
    assert "ServiceAccount" not in said


@pytest.mark.parametrize(
    ("error", "advice"),
    [
        (
            CASES[0][0],
            "the account your kubeconfig uses (system:serviceaccount:ops:op) needs "
            "patch on deployments.apps in namespace ns: have it granted",
        ),
        (
            api_error(403, "forbidden", "Forbidden"),
            "the account your kubeconfig uses needs the RBAC rights to patch Deployment ns/web",
        ),
        (api_error(401, "Unauthorized", "Unauthorized"), "did not accept your credentials"),
        (api_error(503, "etcd leader changed"), "run the command again later"),
        (api_error(409, "the object has been modified", "Conflict"), "run the command again"),
        (api_error(422, GENERIC_422, "Invalid"), "nothing was changed; run the command again"),
        (TLS_FAILED, "the CA in the kubeconfig, then run the"),
        (
            ConnectionRefusedError(111, "refused"),
            "that your kubeconfig names it (--kubeconfig, --context), then run the command again",
        ),
        (
            UnusableConfig("the kubeconfig sets no current-context; name a context"),
            "pass --kubeconfig FILE (and --context "
            "NAME) or set KUBECONFIG; without either, ~/.kube/config is read",
        ),
    ],
)
def test_a_one_shot_command_is_told_what_to_do_itself(error: Exception, advice: str) -> None:
    assert advice in translate(error, what=WHAT).for_one_shot()


def test_a_422_with_causes_is_a_validation_error_not_a_precondition() -> None:
    error = api_error(
        422,
        'Deployment.apps "web" is invalid: spec.template.spec.containers[0].image: Required value',
        "Invalid",
        name="web",
        causes=[
            {"reason": "FieldValueRequired", "field": "spec.template.spec.containers[0].image"}
        ],
    )
    translated = translate(error, what=WHAT)
    assert type(translated) is KubeError
    assert "Required value" in str(translated)


def test_an_admission_refusal_mentioning_a_failed_test_is_not_a_precondition() -> None:
    message = (
        "ValidatingAdmissionPolicy 'smoke-test' with binding 'smoke-test' denied request: "
        "image changes failed the release test"
    )
    translated = translate(api_error(422, message, "Invalid"), what=WHAT)
    assert type(translated) is KubeError
    assert translated.status == 422


def test_the_json_patch_librarys_own_test_failure_is_a_precondition() -> None:
    message = "testing value /spec/template/spec/containers/0/image failed: test failed"
    assert type(translate(api_error(422, message, "Invalid"), what=WHAT)) is PreconditionFailed


def test_an_already_exists_409_is_not_a_resource_conflict() -> None:
    error = api_error(409, 'events "x" already exists', "AlreadyExists")
    assert type(translate(error, what="create Event")) is KubeError


def test_translate_leaves_kube_errors_alone_and_wraps_the_unexpected() -> None:
    original = NotFound("gone", status=404)
    assert translate(original, what=WHAT) is original
    odd = translate(RuntimeError("boom"), what=WHAT)
    assert type(odd) is KubeError
    assert "RuntimeError" in str(odd)


@pytest.mark.parametrize(
    ("selector", "query"),
    [
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        (
            {
                "matchLabels": {"app": "x"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["web", "api"]},
                    {"key": "track", "operator": "NotIn", "values": ["canary"]},
                    {"key": "team", "operator": "Exists"},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            },
            "app=x,tier in (api,web),track notin (canary),team,!legacy",
        ),
    ],
)
def test_label_selector_renders_kubectls_grammar(selector: dict[str, Any], query: str) -> None:
    assert label_selector(selector) == query


@pytest.mark.parametrize(
    "selector",
    [
        {},
        {"matchLabels": {}, "matchExpressions": []},
        {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"operator": "Exists"}]},
    ],
)
def test_label_selector_refuses_what_would_select_the_wrong_pods(selector: dict[str, Any]) -> None:
    with pytest.raises(InvalidSelector):
        label_selector(selector)
