"""The reading half of ``imagerefresh audit``: policies and workloads, as the caller may see them.

Policies are always read in every namespace: a policy may target workloads outside its own, so
a narrower read would report covered workloads as uncovered. Workloads are read in the audited
namespaces (``--namespace``), else in every namespace. Anything the caller may not read is an
:class:`AuditUnreadable` naming the permission to grant: an audit never reports "clean" on
evidence it could not see — a namespace it may not look up (no ``get`` on namespaces) counts as
existing only when it holds a workload the caller can list, since a list in a namespace that
does not exist answers, like an empty one, with nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from imagerefresh.audit import WORKLOAD_KINDS, AuditedPolicy, AuditedWorkload, Claim
from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import Forbidden, KubeError
from imagerefresh.models import PolicySpec

__all__ = ["AuditUnreadable", "Coverage", "read_coverage"]


class AuditUnreadable(Exception):
    """What the audit could not read, and what to grant or fix."""


@dataclass(frozen=True)
class Coverage:
    policies: list[AuditedPolicy]
    workloads: list[AuditedWorkload]


def _policy(obj: dict[str, Any]) -> AuditedPolicy:
    metadata = obj["metadata"]
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    spec = obj.get("spec") or {}
    try:
        return AuditedPolicy(namespace, name, PolicySpec.model_validate(spec))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        return AuditedPolicy(namespace, name, None, problems, _lenient_claims(namespace, spec))


def _lenient_claims(namespace: str, spec: Mapping[str, Any]) -> tuple[Claim, ...]:
    """What an unreadable spec still names, read as the operator's claim index reads it: it
    claims those containers (a Conflict for any other policy declaring them) though it
    refreshes none."""
    claims: list[Claim] = []
    targets = spec.get("targets")
    for target in targets if isinstance(targets, list) else ():
        if not isinstance(target, dict) or target.get("kind") not in WORKLOAD_KINDS:
            continue
        if not isinstance(target.get("name"), str):
            continue
        where = str(target.get("namespace") or namespace)
        containers = target.get("containers")
        for container in containers if isinstance(containers, list) else ():
            if isinstance(container, dict) and isinstance(container.get("name"), str):
                claims.append((target["kind"], where, target["name"], container["name"]))
    return tuple(claims)


def _denied(error: KubeError) -> AuditUnreadable:
    # The API's own message names the verb, resource and scope refused (and who was refused).
    return AuditUnreadable(
        f"{error.for_one_shot()}. imagerefresh audit needs `list` on "
        "imagerefreshpolicies.images.tracebloc.io in all namespaces, and `list` on "
        "deployments, daemonsets and statefulsets (apps) in every audited namespace (all of "
        "them without --namespace): grant them to the account you run it as, or narrow the "
        "audit with --namespace"
    )


def _unknown(namespace: str, error: Forbidden) -> AuditUnreadable:
    return AuditUnreadable(
        f"cannot tell whether namespace {namespace!r} exists: {error.for_one_shot()}; it holds "
        "no workload you can list, which is also how a mistyped name looks. Check the "
        "--namespace value, or grant `get` on namespaces to the account you run it as"
    )


def read_coverage(api: KubeApi, namespaces: tuple[str, ...]) -> Coverage:
    """The policies (all namespaces) and the workloads of ``namespaces`` (all when empty)."""
    try:
        unknown: dict[str, Forbidden] = {}
        for namespace in namespaces:
            try:
                exists = api.namespace_exists(namespace)
            except Forbidden as refusal:
                unknown[namespace] = refusal  # the workloads it holds, if any, will tell
                continue
            if not exists:
                raise AuditUnreadable(
                    f"namespace {namespace!r} does not exist; check the --namespace value"
                )
        policies = [_policy(p) for p in api.list_policies()]
        scopes: tuple[str | None, ...] = namespaces or (None,)
        workloads = [
            AuditedWorkload.from_api(obj)
            for scope in scopes
            for kind in WORKLOAD_KINDS
            for obj in api.list_workloads(kind, scope)
        ]
    except Forbidden as error:
        raise _denied(error) from error
    except KubeError as error:
        raise AuditUnreadable(error.for_one_shot()) from error
    seen = {workload.namespace for workload in workloads}
    for namespace, forbidden in unknown.items():
        if namespace not in seen:
            raise _unknown(namespace, forbidden)
    return Coverage(policies, workloads)
