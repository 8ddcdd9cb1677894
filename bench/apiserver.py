"""API cost, read from kube-apiserver's own ``apiserver_request_total`` (by verb and resource).

The counter has no user label, so the bench isolates the operator by what only it does while
the window is open (its ticks) and by request kind:

* reads: GET and LIST of the objects a tick reads (workloads, pods, service accounts, secrets,
  policies), less the bench's own (it polls policies and workloads while it waits, and counts
  those requests to subtract them). The controllers and kwok read through watches (WATCH is
  left out: a watch is one long request, counted when it ends).
* writes: PATCH of a workload (controllers write workloads with PUT), PUT of a policy's status,
  PATCH of a policy less the bench's own ``refresh-now`` bumps (counted and subtracted), and
  POST of an Event — the controllers post Events too while a rollout runs, so the operator's
  share is the number of new Events whose reporting component is ``imagerefresh``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import kubernetes.client
from harness import parse_prometheus

from support.cluster_env import Cluster

__all__ = ["ApiWindow", "Cost", "WatchTraffic", "watch_traffic"]

READ_RESOURCES = {
    "nodes",  # offline evidence: the operator runs with --read-nodes
    "deployments",
    "daemonsets",
    "statefulsets",
    "pods",
    "serviceaccounts",
    "secrets",
    "imagerefreshpolicies",
}
WORKLOADS = {"deployments", "daemonsets", "statefulsets"}
RequestKey = tuple[str, str, str]  # verb, resource, subresource


def scrape(cluster: Cluster) -> Counter[RequestKey]:
    text = cluster.kubectl("get", "--raw", "/metrics", timeout=60).stdout
    counts: Counter[RequestKey] = Counter()
    for (name, labels), value in parse_prometheus(text).items():
        if name != "apiserver_request_total":
            continue
        found = dict(labels)
        key = (found.get("verb", ""), found.get("resource", ""), found.get("subresource", ""))
        counts[key] += int(value)
    return counts


@dataclass
class WatchTraffic:
    """What kube-apiserver sent on all watches (``apiserver_watch_events_total`` and
    ``apiserver_watch_events_sizes``), by resource: every watcher's share, the operator's with
    the controllers', kwok's and kopf's — compared between the operator's settings, the
    difference is the operator's."""

    events: Counter[str] = field(default_factory=Counter)
    sent: Counter[str] = field(default_factory=Counter)  # bytes

    def since(self, before: WatchTraffic) -> WatchTraffic:
        return WatchTraffic(self.events - before.events, self.sent - before.sent)

    def plus(self, other: WatchTraffic) -> WatchTraffic:
        return WatchTraffic(self.events + other.events, self.sent + other.sent)

    def text(self, rounds: int, top: int = 5) -> str:
        rounds = max(rounds, 1)
        return ", ".join(
            f"{kind} {count / rounds:.0f} ({self.sent[kind] / rounds / 2**20:.1f} MiB)"
            for kind, count in self.events.most_common(top)
        )


def watch_traffic(cluster: Cluster) -> WatchTraffic:
    text = cluster.kubectl("get", "--raw", "/metrics", timeout=60).stdout
    traffic = WatchTraffic()
    for (name, labels), value in parse_prometheus(text).items():
        found = dict(labels)
        kind = found.get("resource") or found.get("kind", "")
        if name == "apiserver_watch_events_total":
            traffic.events[kind] += int(value)
        elif name == "apiserver_watch_events_sizes_sum":
            traffic.sent[kind] += int(value)
    return traffic


def _operator_events(core: kubernetes.client.CoreV1Api) -> set[str]:
    names = set()
    for event in core.list_event_for_all_namespaces(limit=5000).items:
        component = event.reporting_component or (event.source.component if event.source else "")
        if component == "imagerefresh":
            names.add(f"{event.metadata.namespace}/{event.metadata.name}")
    return names


@dataclass
class Cost:
    """Operator API requests in a window, by (verb, resource/subresource)."""

    reads: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)
    ticks: int = 0

    def add(self, other: Cost) -> None:
        self.reads.update(other.reads)
        self.writes.update(other.writes)
        self.ticks += other.ticks

    @property
    def read_total(self) -> int:
        return sum(self.reads.values())

    @property
    def write_total(self) -> int:
        return sum(self.writes.values())

    def per_tick(self, counts: Counter[str]) -> str:
        ticks = max(self.ticks, 1)
        return ", ".join(f"{k} {v / ticks:.2g}" for k, v in sorted(counts.items()) if v) or "none"


@dataclass
class ApiWindow:
    cluster: Cluster
    core: kubernetes.client.CoreV1Api
    bumps: Callable[[], int]  # how many refresh-now PATCHes the bench has sent so far
    own: Callable[[], Counter[RequestKey]]  # the bench's own reads so far

    def measure(self, ticks: int, action: Callable[[], object]) -> Cost:
        """Run ``action`` (which makes ``ticks`` policy ticks) between two scrapes."""
        events_before = _operator_events(self.core)
        bumps_before, own_before = self.bumps(), Counter(self.own())
        before = scrape(self.cluster)
        action()
        after = scrape(self.cluster)
        bumps = self.bumps() - bumps_before
        after.subtract(self.own() - own_before)
        events = len(_operator_events(self.core) - events_before)
        delta = after - before
        cost = Cost(ticks=ticks)
        for (verb, resource, sub), count in delta.items():
            what = f"{verb} {resource}{'/' + sub if sub else ''}"
            # WATCH is not counted: the controllers' own watches of the same resources cannot
            # be told apart from the operator's here (its streams resume every 4 minutes).
            if verb in ("GET", "LIST") and resource in READ_RESOURCES:
                cost.reads[what] += count
            elif verb == "PATCH" and resource in WORKLOADS and not sub:
                cost.writes[what] += count
            elif resource == "imagerefreshpolicies" and verb in ("PUT", "PATCH", "POST", "DELETE"):
                mine = bumps if (verb == "PATCH" and not sub) else 0
                if count - mine:
                    cost.writes[what] += count - mine
        if events:
            cost.writes["POST events"] += events
        return cost
