"""Which policy declares which container: so that two policies never write one image in turns.

The index is fed by the watch on policies (every policy the operator serves, as kopf sees it)
and read by each tick, which passes the claims of *other* policies to the planner: a container
two policies declare is a ``Conflict`` on both. Targets are keyed after namespace defaulting,
so a target with an explicit namespace and one without meet here. The raw spec is read
leniently — a policy whose spec cannot be read claims what can be read of it.

A declaration outside what its policy may reach (another namespace the operator's allow-list
does not pair with the policy's) claims nothing: otherwise anyone who may create a policy in
their own namespace could name another team's workload and turn its owner's target into a
Conflict — never refreshed again. That policy's own target is a Conflict saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagerefresh.models import WorkloadKind
from imagerefresh.planner import NamespacePolicy, TargetKey

__all__ = ["Claim", "ClaimIndex"]

Claim = tuple[TargetKey, str]  # (workload, container)


def _claims(namespace: str, spec: Mapping[str, Any], reach: NamespacePolicy) -> frozenset[Claim]:
    claims: set[Claim] = set()
    targets = spec.get("targets")
    for target in targets if isinstance(targets, list) else ():
        if not isinstance(target, dict):
            continue
        try:
            key = TargetKey(
                WorkloadKind(str(target.get("kind"))),
                str(target.get("namespace") or namespace),
                str(target["name"]),
            )
        except (KeyError, ValueError):
            continue
        if not reach.allows(namespace, key.namespace):
            continue
        containers = target.get("containers")
        for container in containers if isinstance(containers, list) else ():
            if isinstance(container, dict) and isinstance(container.get("name"), str):
                claims.add((key, container["name"]))
    return frozenset(claims)


class ClaimIndex:
    """Every served policy's claims, within what each may reach (``reach``)."""

    def __init__(self, reach: NamespacePolicy | None = None) -> None:
        self._reach = reach or NamespacePolicy()
        self._by_uid: dict[str, tuple[str, frozenset[Claim]]] = {}

    def update(self, uid: str, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        self._by_uid[uid] = (f"{namespace}/{name}", _claims(namespace, spec, self._reach))

    def forget(self, uid: str) -> None:
        self._by_uid.pop(uid, None)

    def elsewhere(self, namespace: str, name: str) -> dict[Claim, str]:
        """Every claim of a policy other than ``namespace/name``, with that policy's name."""
        me = f"{namespace}/{name}"
        return {
            claim: policy
            for policy, claims in self._by_uid.values()
            if policy != me
            for claim in claims
        }
