"""The claim index (:mod:`imagerefresh.runtime.claims`): whose container is claimed elsewhere."""

from __future__ import annotations

from typing import Any

from imagerefresh.models import WorkloadKind
from imagerefresh.planner import NamespacePolicy, TargetKey
from imagerefresh.runtime.claims import ClaimIndex


def spec(*targets: tuple[str, str, list[str]]) -> dict[str, Any]:
    """Targets as (namespace or "", Deployment name, container names)."""
    return {
        "targets": [
            {
                "kind": "Deployment",
                "name": name,
                **({"namespace": namespace} if namespace else {}),
                "containers": [{"name": c, "image": f"r.example/{c}:prod"} for c in containers],
            }
            for namespace, name, containers in targets
        ]
    }


def policy(namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": body}


def key(namespace: str, name: str) -> TargetKey:
    return TargetKey(WorkloadKind.DEPLOYMENT, namespace, name)


def test_a_container_another_policy_declares_is_claimed_elsewhere_and_names_it() -> None:
    index = ClaimIndex()
    index.update("u1", "edge", "one", spec(("", "web", ["api", "sidecar"])))
    index.update("u2", "edge", "two", spec(("edge", "web", ["api"]), ("", "db", ["pg"])))

    asked = policy("edge", "one", spec(("", "web", ["api", "sidecar"])))
    assert index.elsewhere(asked) == {(key("edge", "web"), "api"): "edge/two"}
    asked = policy("edge", "two", spec(("edge", "web", ["api"]), ("", "db", ["pg"])))
    assert index.elsewhere(asked) == {(key("edge", "web"), "api"): "edge/one"}


def test_the_spec_the_tick_read_is_asked_about_not_the_watch_s_older_copy() -> None:
    index = ClaimIndex()
    index.update("u1", "edge", "one", spec(("", "web", ["api"])))  # the watch's copy
    index.update("u2", "edge", "two", spec(("", "db", ["pg"])))

    newer = policy("edge", "one", spec(("", "web", ["api"]), ("", "db", ["pg"])))
    assert index.elsewhere(newer) == {(key("edge", "db"), "pg"): "edge/two"}


def test_claims_of_a_forgotten_or_changed_policy_are_gone() -> None:
    index = ClaimIndex()
    index.update("u1", "edge", "one", spec(("", "web", ["api"])))
    index.update("u2", "edge", "two", spec(("", "web", ["api"])))
    index.update("u3", "edge", "three", spec(("", "web", ["api"])))
    asked = policy("edge", "one", spec(("", "web", ["api"])))
    assert index.elsewhere(asked) == {(key("edge", "web"), "api"): "edge/three"}

    index.update("u3", "edge", "three", spec(("", "other", ["api"])))
    assert index.elsewhere(asked) == {(key("edge", "web"), "api"): "edge/two"}
    index.forget("u2")
    assert index.elsewhere(asked) == {}


def test_a_declaration_outside_its_policy_s_reach_claims_nothing() -> None:
    index = ClaimIndex(NamespacePolicy(frozenset({("ops", "edge")})))
    index.update("u1", "tenant", "grab", spec(("edge", "web", ["api"])))  # no pair: no claim
    index.update("u2", "ops", "paired", spec(("edge", "db", ["pg"])))  # paired: a claim

    asked = policy("edge", "owner", spec(("", "web", ["api"]), ("", "db", ["pg"])))
    assert index.elsewhere(asked) == {(key("edge", "db"), "pg"): "ops/paired"}
