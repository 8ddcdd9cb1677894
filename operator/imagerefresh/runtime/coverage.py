"""The reading half of ``imagerefresh audit``: policies and workloads, as the caller may see them.

Policies are always read in every namespace: a policy may target workloads outside its own, so
a narrower read would report covered workloads as uncovered. Workloads are read in the audited
namespaces (``--namespace``), else in every namespace. Anything the caller may not read is an
:class:`AuditUnreadable` naming the permission to grant: an audit never reports "clean" on
evidence it could not see.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from imagerefresh.audit import WORKLOAD_KINDS, AuditedPolicy, AuditedWorkload
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


def _policy(obj: dict[str, object]) -> AuditedPolicy:
    metadata = obj["metadata"]
    assert isinstance(metadata, dict)
    namespace, name = str(metadata["namespace"]), str(metadata["name"])
    try:
        return AuditedPolicy(namespace, name, PolicySpec.model_validate(obj.get("spec") or {}))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        return AuditedPolicy(namespace, name, None, problems)


def _denied(error: KubeError) -> AuditUnreadable:
    # The API's own message names the verb, resource and scope refused (and who was refused).
    return AuditUnreadable(
        f"{error}. imagerefresh audit needs `list` on imagerefreshpolicies.images.tracebloc.io "
        "in all namespaces, and `list` on deployments, daemonsets and statefulsets (apps) in "
        "every audited namespace (all of them without --namespace): grant them to the account "
        "you run it as, or narrow the audit with --namespace"
    )


def read_coverage(api: KubeApi, namespaces: tuple[str, ...]) -> Coverage:
    """The policies (all namespaces) and the workloads of ``namespaces`` (all when empty)."""
    try:
        for namespace in namespaces:
            try:
                exists = api.namespace_exists(namespace)
            except Forbidden:
                exists = True  # may not get namespaces: the list below still tells what it may see
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
        raise AuditUnreadable(str(error)) from error
    return Coverage(policies, workloads)
