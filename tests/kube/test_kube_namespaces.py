"""NamespaceScope: which namespaces' policies are served, in kopf's documented pattern grammar."""

from __future__ import annotations

import pytest

from imagerefresh.kube.namespaces import NamespaceScope, is_pattern

# kopf's own examples (kopf._cogs.structs.references.match_namespace's documentation), then
# the edges: exact names, whitespace around globs, a doubled exclusion mark.
MATCHES = [
    ("myapp-*, !*-pr-*, *pr-123", "myapp-test", True),
    ("myapp-*, !*-pr-*, *pr-123", "myapp-live", True),
    ("myapp-*, !*-pr-*, *pr-123", "myapp-pr-123", True),
    ("myapp-*, !*-pr-*, *pr-123", "myapp-pr-456", False),
    ("myapp-*, !*-pr-*, *pr-123", "otherapp-pr-123", False),
    ("!*-pr-*, *pr-123", "myapp-test", True),
    ("!*-pr-*, *pr-123", "anyapp-anything", True),
    ("!*-pr-*, *pr-123", "otherapp-pr-123", True),
    ("!*-pr-*, *pr-123", "myapp-pr-456", False),
    ("irp-*", "irp-a", True),
    ("irp-*", "irq-a", False),
    ("irp-?", "irp-a", True),
    ("irp-?", "irp-ab", False),
    ("*,!kube-*", "kube-system", False),
    ("*,!kube-*", "tracebloc", True),
    ("irp-*, !kube-*", "default", False),  # an exclusion never includes
    ("!!kube-*", "kube-system", False),
    ("!X*", "tracebloc", True),  # only the `!` marks are stripped from an exclusion
    ("tracebloc", "tracebloc", True),
    ("tracebloc", "tracebloc-node-agents", False),
    ("Tracebloc", "tracebloc", False),
]


# `name`, not `namespace`: an argument named like the cluster fixture marks a test `cluster`.
@pytest.mark.parametrize(("pattern", "name", "served"), MATCHES)
def test_a_pattern_serves_the_namespaces_kopfs_grammar_says(
    pattern: str, name: str, served: bool
) -> None:
    assert NamespaceScope.of([pattern]).serves(name) is served


def test_a_namespace_is_served_when_any_given_value_serves_it() -> None:
    scope = NamespaceScope.of(["tracebloc", "edge-*"])
    assert scope.serves("tracebloc")
    assert scope.serves("edge-7")
    assert not scope.serves("default")


def test_no_value_given_serves_every_namespace() -> None:
    assert NamespaceScope().serves("anything")
    assert NamespaceScope().clusterwide


@pytest.mark.parametrize(
    ("given", "clusterwide"),
    [
        (("tracebloc",), False),
        (("tracebloc", "tracebloc-node-agents"), False),
        (("tracebloc", "irp-*"), True),
        (("!kube-*",), True),
        (("a,b",), True),
        (("irp-?",), True),
    ],
)
def test_policies_are_watched_cluster_wide_exactly_when_a_value_is_a_pattern(
    given: tuple[str, ...], clusterwide: bool
) -> None:
    assert NamespaceScope.of(given).clusterwide is clusterwide
    assert any(is_pattern(ns) for ns in given) is clusterwide
