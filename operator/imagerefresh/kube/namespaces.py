"""Which namespaces' policies the operator serves: exact names, globs, or every namespace.

A ``--namespace`` value is an exact name or a pattern in kopf's documented grammar:
comma-separated globs (``*``, ``?``), a ``!`` glob excludes, a leading exclusion implies a
catch-all before it, and an inclusive glob after the first re-includes only what the first
one matched (``myapp-*, !*-pr-*, *pr-123``).

Patterns are matched here, not by kopf. kopf serves a pattern by listing namespaces once,
then running a namespace watcher that starts with a listing of its own, whose objects it
ignores as already known: a namespace created between the two listings is never served until
the operator restarts (reproduced: a policy in it never ticked while a later namespace's did).
So with a pattern the operator watches policies cluster-wide, in one stream, and serves those
whose namespace matches — one watch instead of one per namespace, and no namespace to miss.
Exact names alone keep kopf's per-namespace watches, which need only per-namespace RBAC.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["NamespaceScope", "is_pattern"]

PATTERN_CHARACTERS = "*?!,"


def is_pattern(namespace: str) -> bool:
    """Whether a ``--namespace`` value is a pattern, not one exact namespace name."""
    return any(character in namespace for character in PATTERN_CHARACTERS)


def _matches(name: str, pattern: str) -> bool:
    globs = [glob.strip() for glob in pattern.split(",")]
    if globs[0].startswith("!"):
        globs.insert(0, "*")
    first = matched = fnmatchcase(name, globs[0])
    for glob in globs[1:]:
        if glob.startswith("!"):
            matched = matched and not fnmatchcase(name, glob.lstrip("!"))
        else:
            matched = matched or (first and fnmatchcase(name, glob))
    return matched


@dataclass(frozen=True)
class NamespaceScope:
    """The ``--namespace`` values given (empty with ``--all-namespaces``: every namespace)."""

    given: tuple[str, ...] = ()

    @classmethod
    def of(cls, namespaces: Iterable[str]) -> NamespaceScope:
        return cls(tuple(namespaces))

    @property
    def clusterwide(self) -> bool:
        """Watch policies cluster-wide: every namespace, or some pattern to match here."""
        return not self.given or any(is_pattern(ns) for ns in self.given)

    def serves(self, namespace: str) -> bool:
        """Whether a policy in ``namespace`` is the operator's to serve."""
        return not self.given or any(_matches(namespace, pattern) for pattern in self.given)
