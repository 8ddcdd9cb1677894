"""The operator's own configuration: what it watches, what it may reach, how it talks.

It comes from ``imagerefresh run``'s options (the chart renders them); everything a policy may
not decide for itself lives here — which registries are plain HTTP, which namespace pairs a
policy may cross (the confused-deputy guard), and whether the operator may read nodes (a
cluster-wide grant, off unless the chart's values ask for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from imagerefresh.offline import KUBELET_IMAGE_CAP
from imagerefresh.planner import NamespacePolicy
from imagerefresh.planner.helperpod import DEFAULT_RUN_AS, RunAs
from imagerefresh.registry import DEFAULT_DEADLINE

__all__ = ["OperatorConfig", "parse_namespace_pairs"]


def parse_namespace_pairs(values: tuple[str, ...] | list[str]) -> frozenset[tuple[str, str]]:
    """``POLICY_NS=TARGET_NS`` pairs (``*`` for any) from the command line."""
    pairs = set()
    for value in values:
        source, sep, target = value.partition("=")
        if not sep or not source or not target:
            raise ValueError(
                f"invalid namespace pair {value!r}: write POLICY_NAMESPACE=TARGET_NAMESPACE"
            )
        pairs.add((source.strip(), target.strip()))
    return frozenset(pairs)


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    insecure_registries: tuple[str, ...] = ()
    namespaces: NamespacePolicy = field(default_factory=NamespacePolicy)
    # Policies ticking within this many seconds of each other share one registry request
    # per unique reference and credentials.
    resolution_window: float = 10.0
    registry_timeout: float = 10.0  # per read
    # A whole resolution (token, HEAD, GET fallback, retries) ends by then: a registry that
    # drips its answer holds a tick slot this long at most.
    registry_deadline: float = DEFAULT_DEADLINE
    concurrency_per_registry: int = 4
    # Kubernetes requests run on this many threads (the official client is sync), each with its
    # own connection; one tick's reads use at most this many at once.
    kube_concurrency: int = 16
    # Policy ticks running at once (the others wait for a slot). A tick waiting on a registry
    # holds no slot: only its reads and its decision do.
    tick_concurrency: int = 8
    # Offline evidence from the nodes' image lists (``status.images``): reading nodes needs
    # get/list on nodes cluster-wide, so it is off unless asked for; off, only pods prove what
    # a node holds.
    read_nodes: bool = False
    # The kubelets' nodeStatusMaxImages: a node listing this many images may hold more, so an
    # image missing from its list is unknown, not missing (0 or less: the kubelets list all).
    node_status_max_images: int = KUBELET_IMAGE_CAP
    # Policies ticking within this many seconds of each other share one node list (a list is
    # never used once older than this).
    node_list_lifetime: float = 30.0
    # The operator may create pre-pull helper pods (spec.prePull): off unless asked for, as it
    # needs pods create/delete in the target namespaces. Off, a policy asking for prePull holds
    # its refreshes (PrePullNotAllowed) rather than switching without the pull.
    pre_pull_pods: bool = False
    pre_pull_max_deadline: int = 3_600  # seconds a helper pod may live, at most
    # The helper pods' numeric user and group; RunAs(None, None): the platform assigns them.
    pre_pull_run_as: RunAs = DEFAULT_RUN_AS
    # Workloads and pods are read from watch-fed copies where synced (runtime/watches): off,
    # every tick reads them from the API server and rollouts are polled. On by default, as
    # `imagerefresh run` is.
    watch_evidence: bool = True
    # For tests only: planning spins the CPU this many seconds more, so that a test can prove
    # the event loop (the Lease, /healthz) goes on while a large policy is planned.
    planning_delay: float = 0.0
