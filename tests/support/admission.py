"""Admission faults on the real API server: ValidatingAdmissionPolicies the tests install.

A ValidatingAdmissionPolicy with a Deny binding refuses matching writes with a CEL rule (HTTP
422, the policy's message), as a platform team's admission rules do — no webhook server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.cluster_env import Cluster

__all__ = ["deny"]


@pytest.fixture
def deny(cluster: Cluster) -> Iterator[Any]:
    """Install ValidatingAdmissionPolicies (and their bindings); removed afterwards."""
    names: list[str] = []

    def install(name: str, namespace: str, resource: str, group: str, expression: str) -> None:
        cluster.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [group],
                                "apiVersions": ["*"],
                                "operations": ["UPDATE"],
                                "resources": [resource],
                            }
                        ]
                    },
                    "validations": [{"expression": expression, "message": f"{name} says no"}],
                },
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {
                    "policyName": name,
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": namespace}
                        }
                    },
                },
            },
        )
        names.append(name)

    yield install
    for name in names:
        cluster.kubectl(
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            name,
            "--ignore-not-found",
        )
