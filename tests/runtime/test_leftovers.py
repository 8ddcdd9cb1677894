"""Which helper pods a deleted policy takes with it: only those of targets its last status
records a pre-pull for, and its spec declares in a namespace it may reach — a status anyone
with `update` on it may have written never sends the operator deleting elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.models import WorkloadKind
from imagerefresh.planner import NamespacePolicy, TargetKey
from imagerefresh.runtime.leftovers import leftover_targets

HOME = "edge"
INTENT = {
    "images": {"agent": "tracebloc/agent@sha256:" + "a" * 64},
    "startedAt": "2026-12-04T12:00:00Z",
}


def policy(declared: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": HOME, "name": "control-plane"},
        "spec": {"prePull": True, "targets": declared},
        "status": {"targets": recorded},
    }


def declared(name: str, namespace: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "kind": "DaemonSet",
        "name": name,
        "containers": [{"name": "agent", "image": "tracebloc/agent:prod"}],
    }
    if namespace is not None:
        found["namespace"] = namespace
    return found


def recorded(name: str, namespace: str = HOME, intent: bool = True) -> dict[str, Any]:
    found: dict[str, Any] = {
        "kind": "DaemonSet",
        "namespace": namespace,
        "name": name,
        "phase": "Refreshing",
    }
    if intent:
        found["prePull"] = INTENT
    return found


def key(name: str, namespace: str = HOME) -> TargetKey:
    return TargetKey(WorkloadKind.DAEMONSET, namespace, name)


CASES = {
    "a declared target pre-pulling": (
        policy([declared("agent")], [recorded("agent")]),
        NamespacePolicy(),
        [key("agent")],
    ),
    "a declared target with no pre-pull recorded": (
        policy([declared("agent")], [recorded("agent", intent=False)]),
        NamespacePolicy(),
        [],
    ),
    "a status naming a workload the spec does not declare": (
        policy([declared("agent")], [recorded("other")]),
        NamespacePolicy(),
        [],
    ),
    "a status naming another namespace": (
        policy([declared("agent")], [recorded("agent", namespace="kube-system")]),
        NamespacePolicy(),
        [],
    ),
    "a declared target in a namespace the policy may not reach": (
        policy([declared("agent", "agents")], [recorded("agent", namespace="agents")]),
        NamespacePolicy(),
        [],
    ),
    "the same, allowed by the operator's namespace pairs": (
        policy([declared("agent", "agents")], [recorded("agent", namespace="agents")]),
        NamespacePolicy(frozenset({(HOME, "agents")})),
        [key("agent", "agents")],
    ),
    "an unreadable status": (
        {**policy([declared("agent")], []), "status": {"targets": "nonsense"}},
        NamespacePolicy(),
        [],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_deleted_policy_takes_only_the_helpers_its_spec_and_scope_allow(case: str) -> None:
    body, namespaces, expected = CASES[case]
    assert leftover_targets(body, namespaces) == expected
