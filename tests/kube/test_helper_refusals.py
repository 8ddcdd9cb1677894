"""What refused a pre-pull helper pod, and what to do, from the API server's own words: each
admission that can refuse one is named with its remedy, and a refusal that is no admission
(RBAC, validation) is left to the message that already says what to grant or fix."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.kube.pods import explain_refusal

NS = "tracebloc-node-agents"
POD = 'pods "imagerefresh-prepull-0a1b2c3d4e5f60718293"'


def helper(host_network: bool) -> dict[str, Any]:
    return {"spec": {"hostNetwork": True} if host_network else {}}


SAID: dict[str, tuple[str, bool, list[str]]] = {
    "pod security, baseline, on the host's network": (
        f'{POD} is forbidden: violates PodSecurity "baseline:latest": host namespaces '
        "(hostNetwork=true)",
        True,
        [
            "Pod Security Admission refused the helper pod",
            f"namespace {NS} enforces the 'baseline' level",
            "pod-security.kubernetes.io/enforce=baseline",
            "forbids host namespaces (hostNetwork=true)",
            "Label the namespace pod-security.kubernetes.io/enforce=privileged",
            "prePull: false",
        ],
    ),
    "pod security, restricted, a changed pod": (
        f'{POD} is forbidden: violates PodSecurity "restricted:v1.37": seccompProfile '
        '(pod or container "pull-0" must set securityContext.seccompProfile.type to '
        '"RuntimeDefault" or "Localhost")',
        False,
        ["enforces the 'restricted' level", "a mutating webhook or policy"],
    ),
    "OpenShift's security context constraints": (
        f"{POD} is forbidden: unable to validate against any security context constraint: "
        '[provider "restricted-v2": Forbidden: not usable by user or serviceaccount, '
        "spec.securityContext.runAsUser: Invalid value: 65534: must be in the ranges: "
        "[1000650000, 1000659999]]",
        False,
        [
            "OpenShift's security context constraints refused the helper pod",
            "must be in the ranges: [1000650000, 1000659999]",
            "prePull.runAsUser and prePull.runAsGroup to null",
            "--pre-pull-user platform",
        ],
    ),
    "OpenShift, on the host's network": (
        f"{POD} is forbidden: unable to validate against any security context constraint: "
        '[provider "restricted-v2": Forbidden: not usable by user or serviceaccount, '
        "spec.securityContext.hostNetwork: Invalid value: true: Host network is not allowed "
        "to be used]",
        True,
        ["hostnetwork-v2", "prePull: false"],
    ),
    "the chart's fence": (
        f"{POD} is invalid: : ValidatingAdmissionPolicy 'tracebloc-r-imagerefresh-pre-pull' "
        "with binding 'tracebloc-r-imagerefresh-pre-pull' denied request: imagerefresh "
        "pre-pull fence: a helper pod has no priorityClassName (a cluster whose globalDefault "
        "PriorityClass puts one on every pod: set prePull.defaultPriorityClassName to its name)",
        False,
        [
            "the chart's pre-pull admission policy (tracebloc-r-imagerefresh-pre-pull)",
            "a helper pod has no priorityClassName",
            "something changed it on the way",
        ],
    ),
    "a webhook": (
        f'admission webhook "validate.kyverno.svc-fail" denied the request: {POD}: '
        "disallow-host-path: autogen failed",
        False,
        ["admission (validate.kyverno.svc-fail) refused the helper pod", "prePull: false"],
    ),
    "another admission policy": (
        f"{POD} is invalid: : ValidatingAdmissionPolicy 'edge-no-tolerations' with binding "
        "'edge-no-tolerations' denied request: no tolerations here",
        False,
        ["admission (edge-no-tolerations) refused the helper pod", "no tolerations here"],
    ),
}


@pytest.mark.parametrize("case", sorted(SAID))
def test_each_admission_that_refuses_a_helper_is_named_with_what_to_do(case: str) -> None:
    message, host_network, expected = SAID[case]
    explained = explain_refusal(message, NS, helper(host_network))
    assert explained is not None
    for part in expected:
        assert part in explained, explained


@pytest.mark.parametrize(
    "message",
    [
        'pods is forbidden: User "system:serviceaccount:tracebloc:r-imagerefresh" cannot '
        'create resource "pods" in API group "" in the namespace "tracebloc-node-agents"',
        f'{POD} is invalid: spec.containers[0].image: Invalid value: "x": must be a reference',
    ],
)
def test_a_refusal_that_is_no_admission_is_left_to_its_own_message(message: str) -> None:
    assert explain_refusal(message, NS, helper(False)) is None


def test_the_host_network_advice_is_given_only_for_a_helper_on_the_hosts_network() -> None:
    message = SAID["OpenShift's security context constraints"][0]
    assert "hostnetwork-v2" not in (explain_refusal(message, NS, helper(False)) or "")
    assert "hostnetwork-v2" in (explain_refusal(message, NS, helper(True)) or "")
