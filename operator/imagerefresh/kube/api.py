"""The operator's only door to the Kubernetes API: a small facade over its own connection.

:class:`KubeApi` reads and writes raw API JSON — camelCase, exactly as the API server sends it
(never turned into model classes) — because the planner's ``from_api`` constructors and the
policy models take that shape. Every failure leaves here as a
:class:`~imagerefresh.kube.errors.KubeError` made by :func:`~imagerefresh.kube.errors.translate`;
nothing above this module sees urllib3.

Writes are few and guarded. With leader election on, every write but the Lease's own is
refused before it is sent (:class:`~imagerefresh.kube.errors.NotLeader`) unless the
``write_gate`` says this process still holds the Lease — so a deposed leader cannot write over
its successor, whatever part of it is still running. Image patches are JSON Patches whose
``test`` ops pin what we read (a concurrent change fails them as :class:`PreconditionFailed`),
status is replaced with the ``resourceVersion`` it was computed from (a concurrent write fails
it as :class:`ResourceConflict`), and events are best-effort — they never break a tick.

No API client exists until :meth:`KubeApi.from_environment` (or the caller) builds one.

Each resource's requests live in a module of their own (:mod:`.workloads`, :mod:`.secrets`,
:mod:`.policies`, :mod:`.leases`, :mod:`.cluster`, :mod:`.events`), all sent through
:class:`~imagerefresh.kube.transport.Transport`; this class joins them into the one client the
operator holds.

Requests are sent by URL path on the operator's own connection
(:class:`~imagerefresh.kube.transport.Connection`), not through the official client: its
generated API classes hold thousands of methods we never call (loading them cost about 26 MiB
of resident memory), and the client itself weighs about 125 MiB installed and is imported by
kopf at start whenever it is installed (about a quarter of a CPU-second of every start).
"""

from __future__ import annotations

from imagerefresh.kube.cluster import MAX_NODES, ClusterReads
from imagerefresh.kube.events import EVENT_COMPONENT, EventWrites
from imagerefresh.kube.leases import LeaseRequests
from imagerefresh.kube.policies import (
    POLICY_GROUP,
    POLICY_KIND,
    POLICY_PLURAL,
    POLICY_VERSION,
    PolicyRequests,
)
from imagerefresh.kube.secrets import PULL_SECRETS_VALUE, PullSecretReads
from imagerefresh.kube.transport import FIELD_MANAGER, MERGE_PATCH
from imagerefresh.kube.workloads import WorkloadRequests

__all__ = [
    "EVENT_COMPONENT",
    "FIELD_MANAGER",
    "MAX_NODES",
    "MERGE_PATCH",
    "POLICY_GROUP",
    "POLICY_KIND",
    "POLICY_PLURAL",
    "POLICY_VERSION",
    "PULL_SECRETS_VALUE",
    "KubeApi",
]


class KubeApi(
    WorkloadRequests,
    PullSecretReads,
    PolicyRequests,
    LeaseRequests,
    ClusterReads,
    EventWrites,
):
    """Reads workloads, pods, pull secrets and policies; patches images; writes status, events."""
