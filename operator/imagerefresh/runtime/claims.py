"""Which policy declares which container: so that two policies never write one image in turns.

The index is fed by the watch on policies (every policy the operator serves, as kopf sees it)
and read by each tick, which passes the claims of *other* policies to the planner: a container
two policies declare is a ``Conflict`` on both. A tick asks only about the containers its own
policy declares — as the tick read it, which may be newer than the watch's copy — so the index
is kept by claim, and a tick's question costs what its policy declares, not the fleet. Targets
are keyed after namespace defaulting, so a target with an explicit namespace and one without
meet here. The raw spec is read leniently — a policy whose spec cannot be read claims what can
be read of it.

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

# A policy's own declarations are all asked about, within its reach or not (what it may not
# reach, the planner refuses on its own).
_ANYWHERE = NamespacePolicy(frozenset({("*", "*")}))

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
        self._by_claim: dict[Claim, dict[str, str]] = {}  # claim → {uid: "namespace/name"}

    def update(self, uid: str, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        self.forget(uid)
        policy, claims = f"{namespace}/{name}", _claims(namespace, spec, self._reach)
        self._by_uid[uid] = (policy, claims)
        for claim in claims:
            self._by_claim.setdefault(claim, {})[uid] = policy

    def forget(self, uid: str) -> None:
        _, claims = self._by_uid.pop(uid, ("", frozenset()))
        for claim in claims:
            owners = self._by_claim.get(claim, {})
            owners.pop(uid, None)
            if not owners:
                self._by_claim.pop(claim, None)

    def elsewhere(self, policy: Mapping[str, Any]) -> dict[Claim, str]:
        """Each container ``policy`` declares that another policy claims, with that policy's
        name (the first by name, when several do). ``policy`` is the object a tick read."""
        metadata = policy.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        me = f"{namespace}/{name}"
        found = {}
        for claim in _claims(namespace, policy.get("spec") or {}, _ANYWHERE):
            others = [p for p in self._by_claim.get(claim, {}).values() if p != me]
            if others:
                found[claim] = min(others)
        return found
