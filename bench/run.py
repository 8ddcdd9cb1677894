"""``make bench``: the operator measured against SPEC §10's targets and the CronJob it replaces.

It brings up its own local environment (``e2e/local up`` with the state dir ``.e2e-bench/``), a
Docker-Hub-like front that counts every registry request, and ``imagerefresh run`` with the
production resolution window; runs the five measurements of issue 7; prints one table with
every figure, its target and, where there is one, the baseline and the ratio to it; and tears
everything down. Sizes are environment variables (see ``Config``) so that a development run can
be small; the defaults are the issue's.

    make bench                                   # the full run (about 30 minutes on 2 cores)
    BENCH_SOAK_SECONDS=120 BENCH_PUSHES=4 make bench   # a shorter soak
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

import httpx
import image as image_rows
import kubernetes.client
import planning
import pre_pull
import real_node
import signing_cost
from apiserver import ApiWindow, Cost, WatchTraffic, watch_traffic
from apiserver_profile import ApiserverProfile, ApiserverProfiler
from cpu_profile import Profile, Sampler
from fleet import (
    EDGE_AGENTS,
    EDGE_CP,
    EDGE_HEALTHY_FOR,
    EDGE_IMAGES,
    Fleet,
    edge_policy,
    edge_workloads,
)
from harness import (
    CRD,
    REPO,
    Environment,
    HubFront,
    OperatorRun,
    Patched,
    Triggers,
    api_client,
    cpu_seconds,
    note,
    rss_kib,
    runtime_venv,
    wait_for,
)
from imports import ROUNDS as IMPORT_ROUNDS
from imports import import_costs

from imagerefresh.runtime.kept import label_keys
from imagerefresh.runtime.watches import KeptWorkload, WatchedPod

from support.cluster_env import Cluster
from support.cosign_env import built_cosign
from support.hub_front import ServedRequest
from support.realnode_env import RealNode
from support.referrers_env import ReferrersRegistry, built
from support.registry_env import ImagePusher


@dataclass
class Copies:
    """What the watch-fed copies of a fleet's namespaces would hold whole, and keep (bytes of
    compact JSON)."""

    workloads: int = 0
    workloads_whole: int = 0
    workloads_kept: int = 0
    pods: int = 0
    pods_whole: int = 0
    pods_kept: int = 0


def _json_size(item: object) -> int:
    return len(json.dumps(item, separators=(",", ":")))


BARE_OPERATOR = Path(__file__).resolve().with_name("bare_operator.py")
BARE_DAEMONS = Path(__file__).resolve().with_name("bare_daemon_operator.py")
BARE_STARTUP = Path(__file__).resolve().with_name("bare_startup_operator.py")
BARE_STARTUP_ROUNDS = 3
WINDOW = 10.0  # imagerefresh run's default --resolution-window, which the bench keeps
HUB_TOKEN_LIFETIME = 300  # Docker Hub's anonymous pull tokens live 300 s
# The fleet's interval: its measured rounds are its own interval ticks, at the instants of a
# grid the bench places (--tick-grid-phase), not ticks asked for: an asked-for tick takes no
# registry answer from before it was asked, so it would not measure steady state.
GRID_INTERVAL = 30.0
# kube-apiserver's CPU profile of a scale round and of the floor: this long from the first write.
APISERVER_PROFILE_SECONDS = 10
# At the edge, one digest change writes no more than polling did (2 patches, 3 status, 9 events).
EDGE_CHANGE_WRITES = 14
LEASE_SECONDS = 15.0  # imagerefresh run's default --leader-election-lease-duration
LAPSED_TOKEN_LIFETIME = 5  # shorter than the spacing of measured ticks: every tick needs one


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


@dataclass(frozen=True)
class Config:
    policies: int = field(default_factory=lambda: _int("BENCH_POLICIES", 100))
    targets: int = field(default_factory=lambda: _int("BENCH_TARGETS", 5))
    references: int = field(default_factory=lambda: _int("BENCH_REFERENCES", 20))
    namespaces: int = field(default_factory=lambda: _int("BENCH_NAMESPACES", 10))
    replicas: int = field(default_factory=lambda: _int("BENCH_REPLICAS", 1))
    ticks: int = field(default_factory=lambda: _int("BENCH_TICKS", 5))
    changes: int = field(default_factory=lambda: _int("BENCH_CHANGES", 3))
    scale_rounds: int = field(default_factory=lambda: _int("BENCH_SCALE_ROUNDS", 3))
    soak_seconds: int = field(default_factory=lambda: _int("BENCH_SOAK_SECONDS", 600))
    kills: int = field(default_factory=lambda: _int("BENCH_KILLS", 3))
    pushes: int = field(default_factory=lambda: _int("BENCH_PUSHES", 20))
    interval: int = field(default_factory=lambda: _int("BENCH_INTERVAL", 30))
    state: Path = field(
        default_factory=lambda: Path(os.environ.get("BENCH_STATE") or REPO / ".e2e-bench")
    )
    # Logs and samples outlive the environment (whose state dir `e2e/local down` removes).
    logs: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="imagerefresh-bench-")))
    # For development only: parts to leave out (image, edge, node, signatures, scale, soak,
    # takeover).
    skip: frozenset[str] = field(
        default_factory=lambda: frozenset(filter(None, os.environ.get("BENCH_SKIP", "").split(",")))
    )


# ---------------------------------------------------------------------------------------------
# The table


@dataclass
class Row:
    section: str
    figure: str
    measured: str
    target: str = ""
    baseline: str = ""
    ratio: str = ""
    verdict: str = ""


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)

    def add(self, *args: str, ok: bool | None = None) -> None:
        row = Row(*args)
        if ok is not None:
            row.verdict = "met" if ok else "MISSED"
        self.rows.append(row)
        note(f"{row.section} | {row.figure}: {row.measured} {row.verdict}")

    def render(self) -> str:
        head = ("", "figure", "measured", "target", "baseline (CronJob)", "ratio", "")
        cells = [head] + [
            (r.section, r.figure, r.measured, r.target, r.baseline, r.ratio, r.verdict)
            for r in sorted(self.rows, key=lambda r: r.section.split(" ")[0])
        ]
        lines = ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
        lines.insert(1, "|" + "|".join("---" for _ in head) + "|")
        return "\n".join(lines)


def _fmt(value: float, digits: int = 1) -> str:
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _ratio(measured: float, baseline: float) -> str:
    return f"{measured / baseline:.2f}x" if baseline else ""


@dataclass
class Round:
    """Policies triggered together: when each trigger was answered and each tick ended."""

    triggered: dict[str, float]  # "namespace/name" → wall time
    ends: dict[str, float]
    patched: list[Patched]

    @property
    def started(self) -> float:
        return min(self.triggered.values())

    @property
    def span(self) -> float:
        """First trigger → last tick done."""
        return max(self.ends.values()) - self.started

    def per_policy(self) -> list[float]:
        return [self.ends[p] - at for p, at in self.triggered.items() if p in self.ends]


# ---------------------------------------------------------------------------------------------
# Registry counting


def classify(kind: str, method: str) -> str:
    if kind == "token":
        return "token"
    if kind == "manifest":
        return method  # HEAD or GET
    return "other"


def registry_counts(
    front: HubFront, since: int, repositories: Iterable[str] | None = None
) -> Counter[str]:
    """Requests the front served since ``since``; only about ``repositories``, when given.

    The fleet's rows name its repositories: the edge's policy is still there during them and
    ticks on its own grid, and its requests are not the fleet's.
    """
    wanted = None if repositories is None else set(repositories)
    counts: Counter[str] = Counter()
    for served in list(front.served[since:]):
        if wanted is not None and not _concerns(served, wanted):
            continue
        counts[classify(served.kind, served.method)] += 1
    return counts


def _concerns(served: ServedRequest, repositories: set[str]) -> bool:
    if served.kind == "token":
        return any(scope.split(":")[1] in repositories for scope in served.scopes if ":" in scope)
    return served.path.removeprefix("/v2/").split("/manifests/")[0] in repositories


def per_tick_text(counts: Counter[str], ticks: float) -> str:
    parts = [f"{k} {_fmt(counts.get(k, 0) / ticks, 2)}" for k in ("token", "HEAD", "GET")]
    if counts.get("other"):
        parts.append(f"other {_fmt(counts['other'] / ticks, 2)}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# The bench


class Bench:
    def __init__(self, config: Config, env: Environment, cluster: Cluster) -> None:
        self.config, self.env, self.cluster = config, env, cluster
        self.table = Table()
        self.client = api_client(cluster)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.apps = kubernetes.client.AppsV1Api(self.client)
        self.custom = kubernetes.client.CustomObjectsApi(self.client)
        self.triggers = Triggers(self.client)
        self.front = HubFront(env.registry, limit=None, token_lifetime=LAPSED_TOKEN_LIFETIME)
        self.pusher = ImagePusher(env.registry)
        self.operator: OperatorRun | None = None
        self.referrers: ReferrersRegistry | None = None  # for the signatures' rows
        self.venv = runtime_venv()  # the operator and bare kopf as the image installs them
        self.bare: dict[str, subprocess.Popen[bytes]] = {}
        self.fleet = Fleet(
            config.policies,
            config.targets,
            config.references,
            config.namespaces,
            config.replicas,
            interval=f"{GRID_INTERVAL:g}s",
        )
        self.grid_phase = time.time()  # of the operator's interval grid
        self.own_reads: Counter[tuple[str, str, str]] = Counter()  # subtracted from API costs
        self.api = ApiWindow(cluster, self.core, lambda: self.triggers.sent, lambda: self.own_reads)
        self.last_resolution = 0.0
        self.digests: dict[str, str] = {}
        self.fleet_digests: dict[int, str] = {}

    # -- plumbing ------------------------------------------------------------------------

    def start_operator(self, namespaces: Iterable[str], name: str) -> OperatorRun:
        self.operator = OperatorRun.start(
            self.cluster,
            self.env.registry,
            self.front,
            self.config.logs / f"{name}.log",
            namespaces,
            pairs=[f"{EDGE_CP}={EDGE_AGENTS}"],
            window=WINDOW,
            venv=self.venv,
            extra_args=(
                "--tick-grid-phase",
                repr(self.grid_phase),
                # Offline evidence from the nodes' image lists, as an SRE who enables it runs:
                # its cost shows in the API rows (one LIST nodes per round at most).
                "--read-nodes",
                # Helper pods for the prePull rows (the bench's policies ask for it there only).
                "--pre-pull-pods",
                *(("--insecure-registry", self.referrers.host) if self.referrers else ()),
                # A comparison run (e.g. --no-watch-evidence), same cluster and fleet.
                *os.environ.get("BENCH_OPERATOR_ARGS", "").split(),
            ),
        )
        note(f"imagerefresh run started (pid {self.operator.pid}), log {name}.log")
        return self.operator

    def spaced(self) -> None:
        """Wait until the resolution window has passed since the last resolution.

        A tick within the window reuses its answers (that is what the window is for, across
        policies); a policy's own next tick is an interval later, so a measured tick must not
        lean on the previous measured tick's answers.
        """
        delay = self.last_resolution + WINDOW + 0.5 - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def tick(self, policies: list[tuple[str, str]]) -> Round:
        """Bump every policy at once and wait until each has ticked; what the log tells."""
        assert self.operator is not None
        log = self.operator.log
        before = self.operator.ticks()
        ends_mark, patched_mark = len(log.tick_ends), len(log.patched)
        triggered = self.triggers.bump(policies)
        self.operator.wait_ticks(before, policies, timeout=300)
        # Each tick resolved after its reads, some time before it ended: count from the end.
        self.last_resolution = time.monotonic()
        ends: dict[str, float] = {}
        for policy, at in log.tick_ends[ends_mark:]:
            ends.setdefault(policy, at)
        return Round(
            {f"{ns}/{name}": at for (ns, name), at in triggered.items()},
            ends,
            log.patched[patched_mark:],
        )

    def next_instant(self, ahead: float = 1.0) -> float:
        """The first instant of the fleet's grid at least ``ahead`` seconds from now."""
        after = time.time() + ahead
        return (
            self.grid_phase + math.ceil((after - self.grid_phase) / GRID_INTERVAL) * GRID_INTERVAL
        )

    def grid_round(
        self,
        policies: list[tuple[str, str]],
        instant: float | None = None,
        just_before: Callable[[], object] | None = None,
    ) -> Round:
        """Wait for a grid instant (the next, by default) and for every policy's tick of it.

        ``just_before`` runs a second before the instant (the marks are taken before it, so a
        ``just_before`` that runs past the instant loses no tick of it).
        """
        assert self.operator is not None
        instant = self.next_instant() if instant is None else instant
        log = self.operator.log
        before = self.operator.ticks()
        ends_mark, patched_mark = len(log.tick_ends), len(log.patched)
        if just_before is not None:
            time.sleep(max(0.0, instant - 1.0 - time.time()))
            just_before()
        time.sleep(max(0.0, instant - time.time()))
        self.operator.wait_ticks(before, policies, timeout=300)
        self.last_resolution = time.monotonic()
        wanted = {f"{ns}/{name}" for ns, name in policies}
        ends: dict[str, float] = {}
        for policy, at in log.tick_ends[ends_mark:]:
            if policy in wanted:
                ends.setdefault(policy, at)
        return Round(dict.fromkeys(wanted, instant), ends, log.patched[patched_mark:])

    def _warm(self, namespace: str, marks: list[int]) -> None:
        """Tick the warm policy, then note how many requests the front had served."""
        self.tick([(namespace, "bench-warm")])
        marks.append(len(self.front.served))

    def _grid_round_into(
        self,
        policies: list[tuple[str, str]],
        instant: float,
        just_before: Callable[[], object],
        rounds: list[Round],
    ) -> None:
        rounds.append(self.grid_round(policies, instant, just_before))

    def push(self, path: str, seed: str) -> str:
        pushed = self.pusher.push(path, "prod", seed=seed)
        return pushed.digest

    def apply(self, namespace: str, objects: list[dict[str, Any]]) -> None:
        self.cluster.apply(*objects, namespace=namespace)

    def namespace(self, name: str) -> None:
        self.cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        wait_for(
            lambda: (
                self.cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode
                == 0
            ),
            f"ServiceAccount default in {name}",
            60,
        )

    def settled(self, namespaces: Iterable[str]) -> bool:
        for namespace in namespaces:
            for kind in ("deployment", "daemon_set"):
                self.own_reads[("LIST", kind.replace("_", "") + "s", "")] += 1
                items = getattr(self.apps, f"list_namespaced_{kind}")(namespace).items
                for obj in items:
                    status, spec = obj.status, obj.spec
                    if (status.observed_generation or 0) < (obj.metadata.generation or 0):
                        return False
                    if kind == "deployment":
                        want = spec.replicas or 0
                        if (
                            (status.updated_replicas or 0) < want
                            or (status.available_replicas or 0) < want
                            or (status.replicas or 0) > want
                        ):
                            return False
                    elif (status.updated_number_scheduled or 0) < (
                        status.desired_number_scheduled or 0
                    ) or (status.number_available or 0) < (status.desired_number_scheduled or 0):
                        return False
        return True

    def phases(self, policies: Iterable[tuple[str, str]]) -> Counter[str]:
        return Counter(str(target.get("phase")) for _, target in self.targets(policies))

    def targets(self, policies: Iterable[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
        """Every target's status in ``policies``, by ``namespace/policy/target``."""
        found: list[tuple[str, dict[str, Any]]] = []
        for namespace, name in policies:
            self.own_reads[("GET", "imagerefreshpolicies", "")] += 1
            obj = cast(
                dict[str, Any],
                self.custom.get_namespaced_custom_object(
                    "images.tracebloc.io", "v1alpha1", namespace, "imagerefreshpolicies", name
                ),
            )
            for target in (obj.get("status") or {}).get("targets") or ():
                found.append((f"{namespace}/{name}/{target.get('name')}", target))
        return found

    # -- set-up --------------------------------------------------------------------------

    def setup(self) -> None:
        self.front.start()
        note(f"counting front on {self.front.host} before the registry at {self.env.registry}")
        self.cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        self.cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/imagerefreshpolicies.images.tracebloc.io",
        )
        watched = [EDGE_CP, EDGE_AGENTS, real_node.NAMESPACE, pre_pull.NAMESPACE]
        if "signatures" not in self.config.skip:
            watched.append(signing_cost.NAMESPACE)
            (self.config.logs / "referrers").mkdir()
            self.referrers = ReferrersRegistry(built(), self.config.logs / "referrers").start()
            note(f"referrers registry on {self.referrers.host}")
        for namespace in watched:
            self.namespace(namespace)
        self.start_operator([*watched, f"{self.fleet.prefix}-*"], "operator")

    # -- (a) the edge: registry and API cost ----------------------------------------------

    def edge(self) -> None:
        ticks = self.config.ticks
        for image in EDGE_IMAGES:
            self.digests[image] = self.push(f"tracebloc/{image}", f"{image}-0")
        control_plane, agents = edge_workloads(self.front.host, self.digests)
        self.apply(EDGE_CP, control_plane)
        self.apply(EDGE_AGENTS, agents)
        wait_for(lambda: self.settled([EDGE_CP, EDGE_AGENTS]), "the edge workloads", 180)
        operator = self.operator
        assert operator is not None
        edge = [(EDGE_CP, "control-plane")]
        unique = len(EDGE_IMAGES)
        baseline = 2 * unique  # per image and tick: one token request, one HEAD (FACTS.md)

        mark = len(self.front.served)
        before = operator.ticks()
        self.apply(EDGE_CP, [edge_policy(self.front.host)])
        operator.wait_ticks(before, edge)
        self.last_resolution = time.monotonic()
        cold = registry_counts(self.front, mark)
        self.table.add(
            "1a registry, edge (3 workloads, 3 unique refs)",
            "first tick (no challenge or token yet), requests",
            f"{sum(cold.values())} ({per_tick_text(cold, 1)})",
            "",
            str(baseline),
            _ratio(sum(cold.values()), baseline),
        )

        # Tokens lapsed between ticks: the production interval (15m) is longer than Docker
        # Hub's 300 s token lifetime, so every real tick needs fresh tokens.
        mark = len(self.front.served)
        for _ in range(ticks):
            self.spaced()
            time.sleep(LAPSED_TOKEN_LIFETIME)
            self.tick(edge)
        lapsed = registry_counts(self.front, mark)
        self._registry_rows(
            "1a registry, edge",
            lapsed,
            ticks,
            unique,
            baseline,
            "per tick, tokens lapsed (interval > token lifetime, as 15m vs 300 s)",
        )

        self.front.token_lifetime = HUB_TOKEN_LIFETIME
        self.spaced()
        self.tick(edge)  # takes tokens that now outlive the measured ticks
        mark = len(self.front.served)
        idle = Cost()
        for _ in range(ticks):
            self.spaced()
            idle.add(self.api.measure(1, lambda: self.tick(edge)))
        warm = registry_counts(self.front, mark)
        self._registry_rows(
            "1a registry, edge",
            warm,
            ticks,
            unique,
            baseline,
            "per tick, tokens still valid (ticks within 300 s)",
        )
        self._api_rows("2 API, edge", "idle tick", idle)
        workload_reads = _workload_reads(idle) / max(idle.ticks, 1)
        self.table.add(
            "2 API, edge",
            "idle tick: workload and pod reads per tick (watch-fed copies)",
            _fmt(workload_reads, 2),
            "0",
            ok=workload_reads == 0,
        )

        # One digest change: push, the tick that patches; the operator follows the rollout by
        # itself (follow-up ticks) and its health window until Current. Measured: the API cost
        # of the whole change, and the time from the window's end to the verdict in status.
        change = Cost()
        verdicts: list[float] = []
        for cycle in range(1, self.config.changes + 1):
            self.digests["jobs-manager"] = self.push("tracebloc/jobs-manager", f"jm-{cycle}")
            self.spaced()
            change.add(self.api.measure(1, lambda: self._one_change(edge, verdicts)))
        self._api_rows(
            "2 API, edge",
            "one digest change: its tick, then follow-ups until Current",
            change,
            idle_target=False,
        )
        per_change = change.write_total / max(change.ticks, 1)
        self.table.add(
            "2 API, edge",
            "one digest change until Current: API writes (polling's, 2026-12-01: 14)",
            _fmt(per_change, 2),
            f"≤ {EDGE_CHANGE_WRITES}",
            ok=per_change <= EDGE_CHANGE_WRITES,
        )
        self.table.add(
            "5 latency, verdicts",
            f"health window end → verdict in status (Current), median / max ({len(verdicts)} "
            f"verdicts, healthyFor {EDGE_HEALTHY_FOR}s, interval 15m: no interval tick in "
            "between)",
            f"{_fmt(statistics.median(verdicts), 2)} s / {_fmt(max(verdicts), 2)} s",
            "< 1 s",
            ok=max(verdicts) < 1,
        )

    def real_node(self) -> None:
        node = RealNode(self.cluster, str(self.cluster.node), Path(str(self.cluster.e2e_state)))
        rows = real_node.measure(
            self.client, node, self.pusher, self.triggers.bump, self.config.changes
        )
        for figure, measured, kwok in rows:
            self.table.add("5 latency, real node", figure, measured, "", f"kwok {kwok}")
        for figure, with_pre_pull, without, target, met in pre_pull.measure(
            self.client, node, self.pusher, self.triggers.bump, self.config.changes
        ):
            baseline = f"without prePull {without}"
            self.table.add("5 latency, real node", figure, with_pre_pull, target, baseline, ok=met)

    def signatures(self) -> None:
        """Row 9: the registry requests spec.verify adds, per build and per tick."""
        assert self.operator is not None
        assert self.referrers is not None
        lifetime, self.front.token_lifetime = self.front.token_lifetime, HUB_TOKEN_LIFETIME
        try:  # tokens outlive the section's ticks: no challenge is verification's doing
            rows = signing_cost.measure(
                self.cluster,
                self.front,
                self.env.registry,
                self.referrers,
                built_cosign(),
                self.config.logs / "signatures",
                self.operator,
                self.tick,
                self.config.changes,
                self.config.ticks,
            )
        finally:
            self.front.token_lifetime = lifetime
        for figure, measured, target, ok in rows:
            self.table.add("9 signatures (spec.verify)", figure, measured, target, ok=ok)

    def _one_change(self, edge: list[tuple[str, str]], verdicts: list[float]) -> None:
        """Tick once (it patches), then wait — never ticking — for the rollouts, their health
        windows and the verdicts: each from its window's end (``pending.settledAt`` plus
        healthyFor, as the operator recorded it) to its target seen Current."""
        self.tick(edge)
        ends: dict[str, float] = {}  # target → its window's end (epoch seconds)
        judged: dict[str, float] = {}  # target → when it was seen Current

        def verdicts_in() -> bool:
            found = self.targets(edge)
            for name, target in found:
                settled = (target.get("pending") or {}).get("settledAt")
                if settled:
                    at = datetime.fromisoformat(settled.replace("Z", "+00:00")).timestamp()
                    ends[name] = at + EDGE_HEALTHY_FOR
                elif target.get("phase") == "Current" and name in ends:
                    judged.setdefault(name, time.time())
            return {target.get("phase") for _, target in found} == {"Current"}

        wait_for(verdicts_in, "the verdicts", 180, 0.1)
        verdicts.extend(judged[name] - end for name, end in ends.items() if name in judged)

    def _registry_rows(
        self,
        section: str,
        counts: Counter[str],
        ticks: float,
        unique: int,
        baseline: int,
        what: str,
    ) -> None:
        total = sum(counts.values()) / ticks
        self.table.add(
            section,
            f"{what}: requests",
            f"{_fmt(total, 2)} ({per_tick_text(counts, ticks)})",
            f"≤ {unique + 1}",
            str(baseline),
            _ratio(total, baseline),
            ok=total <= unique + 1,
        )
        gets = counts.get("GET", 0) / ticks
        self.table.add(section, f"{what}: manifest GETs", _fmt(gets, 2), "0", "0", "", ok=gets == 0)

    def _api_rows(self, section: str, what: str, cost: Cost, idle_target: bool = True) -> None:
        ticks = max(cost.ticks, 1)
        self.table.add(
            section,
            f"{what}: reads per tick",
            f"{_fmt(cost.read_total / ticks, 2)} ({cost.per_tick(cost.reads)})",
        )
        self.table.add(
            section,
            f"{what}: writes per tick",
            f"{_fmt(cost.write_total / ticks, 2)} ({cost.per_tick(cost.writes)})",
            "0" if idle_target else "",
            ok=(cost.write_total == 0) if idle_target else None,
        )

    # -- (b) the fleet: registry, API, tick time at scale --------------------------------

    def fleet_up(self) -> None:
        fleet = self.fleet
        self.front.token_lifetime = LAPSED_TOKEN_LIFETIME  # the fleet's scopes: new tokens
        digests = {r: self.push(fleet.path(r), f"app-{r}-0") for r in range(fleet.references)}
        self.fleet_digests = digests
        objects = fleet.objects(self.front.host, digests)
        for namespace in fleet.namespace_names:
            self.namespace(namespace)
        for namespace, items in objects.items():
            self.apply(namespace, [o for o in items if o["kind"] == "Deployment"])
        note(f"{fleet.policies * fleet.targets} Deployments applied; waiting for their pods")
        wait_for(lambda: self.settled(fleet.namespace_names), "the fleet's workloads", 900, 2)
        assert self.operator is not None
        mark = len(self.front.served)
        before = self.operator.ticks()
        for namespace, items in objects.items():
            self.apply(namespace, [o for o in items if o["kind"] == "ImageRefreshPolicy"])
        self.operator.wait_ticks(before, fleet.policy_keys, timeout=600)
        self.last_resolution = time.monotonic()
        cold = registry_counts(self.front, mark, self.fleet.repositories)
        self.table.add(
            f"1b registry, {fleet.policies} policies x {fleet.targets} targets, "
            f"{fleet.references} unique refs",
            "first ticks (policies created), requests per round",
            f"{sum(cold.values())} ({per_tick_text(cold, 1)})",
            "",
            str(2 * fleet.references),
            _ratio(sum(cold.values()), 2 * fleet.references),
        )

    def fleet_registry_and_api(self) -> None:
        fleet = self.fleet
        section = "1b registry, fleet (a round = every policy ticking once)"
        baseline, unique = 2 * fleet.references, fleet.references
        keys = fleet.policy_keys
        # Rounds are the fleet's own interval ticks, 30 s apart: past the resolution window, and
        # past the tokens' 5 s lifetime for the first set.
        self.grid_round(keys)
        mark = len(self.front.served)
        for _ in range(self.config.ticks):
            self.grid_round(keys)
        lapsed = registry_counts(self.front, mark, self.fleet.repositories)
        self._registry_rows(
            section, lapsed, self.config.ticks, unique, baseline, "per round, tokens lapsed"
        )
        self.front.token_lifetime = HUB_TOKEN_LIFETIME
        self.grid_round(keys)  # tokens of the longer lifetime
        mark = len(self.front.served)
        idle = Cost()
        durations: list[float] = []
        for _ in range(self.config.ticks):

            def round_() -> None:
                durations.append(self.grid_round(keys).span)

            idle.add(self.api.measure(len(keys), round_))
        warm = registry_counts(self.front, mark, self.fleet.repositories)
        self._registry_rows(
            section, warm, self.config.ticks, unique, baseline, "per round, tokens still valid"
        )
        self._api_rows("2 API, fleet", "idle policy tick", idle)
        per_tick = idle.read_total / max(idle.ticks, 1)
        self.table.add(
            "2 API, fleet",
            "idle policy tick: all reads per tick (the policy's own GET included)",
            _fmt(per_tick, 2),
            "≤ 1",
            ok=per_tick <= 1,
        )
        node_lists = idle.reads.get("LIST nodes", 0) / self.config.ticks
        self.table.add(
            "2 API, fleet",
            f"node LISTs per round ({len(keys)} policies, --read-nodes)",
            _fmt(node_lists, 2),
            "≤ 1",
            ok=node_lists <= 1,
        )
        self.table.add(
            "3 tick time at scale",
            f"idle round: grid instant → all {len(keys)} policy ticks done, median / max",
            f"{_fmt(statistics.median(durations), 2)} s / {_fmt(max(durations), 2)} s",
        )

    def scale(self) -> None:
        """Tick time at scale: every target drifts at once; registry time excluded."""
        assert self.operator is not None
        fleet, keys = self.fleet, self.fleet.policy_keys
        warm_ns, warm = fleet.warm_policy(self.front.host, self.fleet_digests)
        before = self.operator.ticks()
        self.apply(warm_ns, warm)
        self.operator.wait_ticks(before, [(warm_ns, "bench-warm")])
        patched_all: list[float] = []
        ticks_done: list[float] = []
        registry_during: list[int] = []
        cpu_used: dict[str, float] = {}  # CPU seconds each process spent in the timed rounds
        per_policy: list[float] = []
        profiles: list[Profile] = []
        drift_cost = Cost()
        traffic = WatchTraffic()
        apiserver_profiles: list[ApiserverProfile] = []
        for round_no in range(1, self.config.scale_rounds + 1):
            # Push right after an instant, so that no instant falls between the pushes and
            # the measured one (which would start some of the refreshes early).
            idle = self.grid_round(keys)
            for ref in range(fleet.references):
                self.push(fleet.path(ref), f"app-{ref}-{round_no}")
            instant = self.next_instant(ahead=8.0)
            if instant != idle.started + GRID_INTERVAL:
                raise RuntimeError("pushing the round's digests took past the next grid instant")
            marks: list[int] = []
            # Fills the resolution window a second before the instant: the grid's ticks share
            # its fresh answers, so the round measures the Kubernetes side (registry time
            # excluded, SPEC §11). Its own few reads count in the round's API cost.
            warm = partial(self._warm, warm_ns, marks)

            pids = {"imagerefresh": self.operator.pid} | self.env.component_pids()
            sampler = Sampler(self.operator.pid, self.config.logs / f"scale-{round_no}.pyspy")
            profiler = ApiserverProfiler(
                self.cluster,
                APISERVER_PROFILE_SECONDS,
                self.config.logs / f"scale-{round_no}.apiserver.pprof",
                at=instant,
            )
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            traffic_before = watch_traffic(self.cluster)
            timed_rounds: list[Round] = []
            drift_cost.add(
                self.api.measure(
                    len(keys), partial(self._grid_round_into, keys, instant, warm, timed_rounds)
                )
            )
            traffic = traffic.plus(watch_traffic(self.cluster).since(traffic_before))
            sampled = sampler.stop()
            if sampled is not None:
                profiles.append(sampled)
            apiserver_profiled = profiler.stop()
            if apiserver_profiled is not None:
                apiserver_profiles.append(apiserver_profiled)
            mark = marks[0]
            timed = timed_rounds[0]
            for name, pid in pids.items():
                cpu_used[name] = cpu_used.get(name, 0.0) + cpu_seconds(pid) - cpu_before[name]
            registry_during.append(
                sum(registry_counts(self.front, mark, self.fleet.repositories).values())
            )
            if len(timed.patched) < len(keys) * fleet.targets:
                raise RuntimeError(
                    f"round {round_no}: {len(timed.patched)} patches, "
                    f"{len(keys) * fleet.targets} expected"
                )
            patched_all.append(max(p.at for p in timed.patched) - timed.started)
            ticks_done.append(timed.span)
            per_policy.extend(timed.per_policy())
            note(f"scale round {round_no}: {len(timed.patched)} patched in {patched_all[-1]:.2f}s")
            wait_for(lambda: self.settled(fleet.namespace_names), "the fleet's rollouts", 900, 2)
            for _ in range(5):
                self.tick(keys)
                if set(self.phases(keys)) == {"Current"}:
                    break
        n = fleet.policies * fleet.targets
        self.custom.delete_namespaced_custom_object(
            "images.tracebloc.io", "v1alpha1", warm_ns, "imagerefreshpolicies", "bench-warm"
        )
        floor, floor_cpu, floor_profile = self._patch_floor(n)
        rounds = len(patched_all)
        self.table.add(
            "3 tick time at scale",
            f"{n} targets drift at once: grid instant → all {n} patched, median / max "
            f"({len(patched_all)} rounds)",
            f"{_fmt(statistics.median(patched_all), 2)} s / {_fmt(max(patched_all), 2)} s",
            "≤ 1.5x floor",
            f"floor {_fmt(floor, 2)} s",
            f"{statistics.median(patched_all) / floor:.2f}x / {max(patched_all) / floor:.2f}x",
            ok=max(patched_all) <= 1.5 * floor,
        )
        apiserver = cpu_used.get("kube-apiserver", 0.0) / rounds
        self.table.add(
            "3 tick time at scale",
            "same rounds: kube-apiserver CPU seconds per round, from before the grid instant to "
            "the last tick done (the floor's: first write sent to last answered, so few of its "
            "rollouts' follow-on writes fall in it)",
            _fmt(apiserver, 2),
            "",
            f"floor {_fmt(floor_cpu, 2)}",
            f"{apiserver / floor_cpu:.2f}x" if floor_cpu else "",
            # Without the profiles (no Go to read them), this row carries the verdict.
            ok=None if apiserver_profiles and floor_profile else apiserver <= 2 * floor_cpu,
        )
        if apiserver_profiles and floor_profile is not None:
            worst = max(apiserver_profiles, key=lambda taken: taken.seconds)
            profiled = worst.seconds
            self.table.add(
                "3 tick time at scale",
                f"same rounds: kube-apiserver CPU seconds in the {APISERVER_PROFILE_SECONDS} s "
                "from the grid instant (the worst round), against the floor's from its first "
                "write: equal windows, each holding its writes and the rollouts they start "
                "(its pprof profile)",
                _fmt(profiled, 2),
                "≤ 2x floor's",
                f"floor {_fmt(floor_profile.seconds, 2)}",
                f"{profiled / floor_profile.seconds:.2f}x" if floor_profile.seconds else "",
                ok=profiled <= 2 * floor_profile.seconds,
            )
            for label, taken in (("the worst round", worst), ("floor", floor_profile)):
                self.table.add(
                    "3 tick time at scale",
                    f"where kube-apiserver's CPU goes in those {APISERVER_PROFILE_SECONDS} s, "
                    f"{label} (pprof: the goroutine storing each kind of request, a lower bound "
                    "each)",
                    taken.shares(),
                )
        self.table.add(
            "3 tick time at scale",
            "same rounds: the operator's CPU per policy tick (follow-ups of the round included)",
            f"{_fmt(cpu_used.get('imagerefresh', 0.0) / rounds / len(keys) * 1000, 3)} ms",
        )
        if profiles:
            merged = Profile(
                sum(p.samples for p in profiles),
                sum((p.categories for p in profiles), Counter()),
                sum((p.leaves for p in profiles), Counter()),
            )
            self.table.add(
                "3 tick time at scale",
                f"same rounds: where the operator's CPU goes (py-spy, {merged.samples} samples)",
                merged.shares(),
            )
            self.table.add(
                "3 tick time at scale",
                "same rounds: the operator's hottest functions (self time)",
                merged.hottest(),
            )
        self.table.add(
            "3 tick time at scale",
            f"same rounds: grid instant → all {len(keys)} policy ticks done, median / max",
            f"{_fmt(statistics.median(ticks_done), 2)} s / {_fmt(max(ticks_done), 2)} s",
        )
        self.table.add(
            "3 tick time at scale",
            "same rounds: one policy, the instant → its tick done, median / max",
            f"{_fmt(statistics.median(per_policy), 2)} s / {_fmt(max(per_policy), 2)} s",
        )
        self.table.add(
            "3 tick time at scale",
            "same rounds: watch events the API server sent per round, every watcher's, by "
            "resource (the operator's share is the difference between its settings)",
            traffic.text(rounds),
        )
        busiest = sorted(cpu_used.items(), key=lambda item: -item[1])
        self.table.add(
            "3 tick time at scale",
            f"same rounds: CPU seconds per round on {os.cpu_count()} cores, by process",
            ", ".join(f"{name} {_fmt(used / rounds, 2)}" for name, used in busiest if used > 0),
        )
        self._api_rows(
            "3 tick time at scale",
            "same rounds, per policy tick (with the follow-ups that began meanwhile)",
            drift_cost,
            idle_target=False,
        )
        self.table.add(
            "3 tick time at scale",
            "registry requests during the timed rounds (window warmed)",
            f"{_fmt(statistics.mean(registry_during), 1)} per round",
            "0",
            ok=max(registry_during) == 0,
        )

    def _watched_copies(self, namespaces: list[str]) -> Copies:
        """What the operator's copies of ``namespaces`` would hold whole, and what they keep
        (runtime/kept: of a pod, only the labels the namespace's selectors read)."""
        copies = Copies()
        for namespace in namespaces:
            answer = self.apps.list_namespaced_deployment(namespace, _preload_content=False)
            keys: set[str] = set()
            for item in json.loads(answer.data)["items"]:
                copies.workloads += 1
                copies.workloads_whole += _json_size(item)
                copies.workloads_kept += len(KeptWorkload.of(item, "Deployment").raw)
                keys |= label_keys(item["spec"].get("selector") or {})
            answer = self.core.list_namespaced_pod(namespace, _preload_content=False)
            for item in json.loads(answer.data)["items"]:
                copies.pods += 1
                copies.pods_whole += _json_size(item)
                copies.pods_kept += WatchedPod.from_api(item, keys).size
        return copies

    def _patch_floor(self, n: int) -> tuple[float, float, ApiserverProfile | None]:
        """What the same cluster needs for the writes alone: the floor under row 3's figure.

        For each policy, its intent write (a merge patch of its whole status, the size of the
        operator's PUT: the status it carries with each target's message changed, so that the
        write is a real one) and then one JSON Patch of each of its workloads' pod template (an
        annotation: a rollout as an image change starts one, and no image moves under the
        operator's feet), sent by a plain client 16 at a time, each policy's patches only once
        its intent write is answered — the writes a perfect operator could not avoid, with
        none of its reads, outcome writes or events.
        """
        fleet = self.fleet
        # A JSON Patch, as the operator's are (a list body: the client sends it as one).
        body = [
            {
                "op": "add",
                "path": "/spec/template/metadata/annotations",
                "value": {"bench/floor": "1"},
            }
        ]
        statuses = {
            (item["metadata"]["namespace"], item["metadata"]["name"]): item
            for item in cast(
                dict[str, Any],
                self.custom.list_cluster_custom_object(
                    "images.tracebloc.io", "v1alpha1", "imagerefreshpolicies"
                ),
            )["items"]
        }
        pids = self.env.component_pids()
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        pool = ThreadPoolExecutor(16)
        profiler = ApiserverProfiler(
            self.cluster, APISERVER_PROFILE_SECONDS, self.config.logs / "floor.apiserver.pprof"
        )

        def patch(namespace: str, name: str) -> None:
            self.apps.patch_namespaced_deployment(name, namespace, body)

        def intent(index: int) -> list[Future[None]]:
            namespace, name = fleet.namespace(index), fleet.policy_name(index)
            status = statuses[(namespace, name)].get("status", {})
            for target in status.get("targets", []):
                target["message"] = f"{target.get('message', '')} (floor)"
            # A merge patch of the whole status: no resourceVersion to race the operator for.
            self.custom.patch_namespaced_custom_object_status(
                "images.tracebloc.io",
                "v1alpha1",
                namespace,
                "imagerefreshpolicies",
                name,
                {"status": status},
            )
            return [
                pool.submit(patch, namespace, fleet.workload_name(index, t))
                for t in range(fleet.targets)
            ]

        started = time.monotonic()
        with pool:
            intents = [pool.submit(intent, index) for index in range(fleet.policies)]
            for patches in [i.result() for i in intents]:
                for sent in patches:
                    sent.result()
        took = time.monotonic() - started
        used = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        self.table.add(
            "3 tick time at scale",
            f"floor: the {fleet.policies} intent writes and {n} template patches alone, from a "
            "plain client 16 at a time (no reads, outcome writes or events): first sent → last "
            "answered",
            f"{_fmt(took, 2)} s (kube-apiserver {_fmt(used.get('kube-apiserver', 0), 2)} CPU s)",
        )
        profiled = profiler.stop()
        wait_for(lambda: self.settled(fleet.namespace_names), "the fleet's rollouts", 900, 2)
        return took, used.get("kube-apiserver", 0.0), profiled

    # -- (4) memory soak and (5) latency ----------------------------------------------------

    def soak(self) -> None:
        fleet, config, keys = self.fleet, self.config, self.fleet.policy_keys
        assert self.operator is not None
        self.operator.stop()
        body = {"spec": {"interval": f"{config.interval}s"}}
        for namespace, name in keys:
            self.custom.patch_namespaced_custom_object(
                "images.tracebloc.io",
                "v1alpha1",
                namespace,
                "imagerefreshpolicies",
                name,
                body,
                _content_type="application/merge-patch+json",
            )
        namespaces = [f"{fleet.prefix}-*"]
        operator = self.start_operator(namespaces, "operator-soak")
        # The operator tunes glibc's allocator (imagerefresh.allocator); a bare kopf with the
        # same settings (as environment variables) shows what that alone is worth.
        tuned = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072"}
        for name, script, extra in (
            ("bare", BARE_OPERATOR, {}),
            ("bare-tuned", BARE_OPERATOR, tuned),
            ("daemons", BARE_DAEMONS, {}),
        ):
            log = (config.logs / f"kopf-{name}.log").open("wb")
            self.bare[name] = subprocess.Popen(
                [
                    str(self.venv / "bin" / "kopf"),
                    "run",
                    "--standalone",
                    "--namespace",
                    namespaces[0],
                    str(script),
                ],
                stdout=log,
                stderr=log,
                env=self.cluster.env | extra,
            )
            note(f"kopf run {script.name} started (pid {self.bare[name].pid})")
        pids = {"operator": operator.pid} | {n: p.pid for n, p in self.bare.items()}
        samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(5):
                try:
                    samples.append((time.monotonic(), {n: rss_kib(p) for n, p in pids.items()}))
                except (OSError, RuntimeError):
                    continue

        sampler = threading.Thread(target=sample, daemon=True)
        started = time.monotonic()
        sampler.start()
        # The start-up round (every policy at once, no token, no challenge yet) is not steady
        # state: registry requests are counted from its end.
        operator.wait_ticks({}, keys, timeout=300)
        counted_from = time.monotonic()
        mark = len(self.front.served)
        ticks_before = sum(operator.ticks().values())

        spacing = config.soak_seconds / max(config.pushes, 1)
        pushes: list[tuple[int, str, float]] = []  # reference, digest, pushed at (wall)
        rng = random.Random(7)
        for index in range(config.pushes):
            at = counted_from + index * spacing + rng.uniform(0.25, 0.75) * spacing
            time.sleep(max(0.0, at - time.monotonic()))
            ref = index % fleet.references
            digest = self.push(fleet.path(ref), f"soak-{ref}-{index}")
            pushes.append((ref, digest, time.time()))
            note(f"soak push {index + 1}/{config.pushes}: {fleet.path(ref)} → {digest[:19]}…")
        time.sleep(max(0.0, counted_from + config.soak_seconds - time.monotonic()))
        expected = fleet.policies * fleet.targets // fleet.references

        def latencies() -> list[list[float]]:
            operator.log.poll()
            return [
                [
                    patch.at - at
                    for patch in operator.log.patched
                    if any(digest in image for image in patch.images.values())
                ]
                for _ref, digest, at in pushes
            ]

        deadline = time.monotonic() + 3 * config.interval + 30
        while any(len(x) < expected for x in latencies()) and time.monotonic() < deadline:
            time.sleep(1)
        stop.set()
        sampler.join()
        elapsed = time.monotonic() - started
        rounds = (time.monotonic() - counted_from) / config.interval
        soak_counts = registry_counts(self.front, mark, self.fleet.repositories)
        ticks = sum(operator.ticks().values()) - ticks_before
        if not operator.alive() or any(p.poll() is not None for p in self.bare.values()):
            raise RuntimeError("an operator died during the soak")
        final = {n: rss_kib(p) for n, p in pids.items()}

        section = f"4 memory, soak {_fmt(elapsed / 60, 1)} min over (b), {int(ticks)} ticks"
        late = [found for at, found in samples if at - started >= elapsed / 2]
        steady = {n: statistics.median(f[n][0] for f in late) / 1024 for n in pids}
        peak = {n: final[n][1] / 1024 for n in pids}
        for what, value in (
            ("steady RSS (median, second half)", steady),
            ("peak RSS (VmHWM)", peak),
        ):
            self.table.add(
                section,
                f"{what}: operator vs bare kopf (one no-op event handler)",
                f"{_fmt(value['operator'])} MiB",
                "≤ 1.25x bare",
                f"bare kopf {_fmt(value['bare'])} MiB",
                _ratio(value["operator"], value["bare"]),
                ok=value["operator"] <= 1.25 * value["bare"],
            )
        self.table.add(
            section,
            "context: bare kopf with the operator's allocator settings, steady / peak",
            f"{_fmt(steady['bare-tuned'])} MiB / {_fmt(peak['bare-tuned'])} MiB",
            "",
            "",
            f"operator {_ratio(steady['operator'], steady['bare-tuned'])} of it (steady)",
        )
        self.table.add(
            section,
            "context: kopf with a no-op daemon per policy (the operator's own mechanism), "
            "steady / peak",
            f"{_fmt(steady['daemons'])} MiB / {_fmt(peak['daemons'])} MiB",
            "",
            "",
            f"operator {_ratio(steady['operator'], steady['daemons'])} of it (steady)",
        )
        copies = self._watched_copies(fleet.namespace_names)
        self.table.add(
            section,
            "what the watch-fed copies keep (included above), compact JSON: whole → kept",
            f"{copies.workloads} workloads, {_fmt(copies.workloads_whole / 1024, 1)} → "
            f"{_fmt(copies.workloads_kept / 1024, 1)} KiB; {copies.pods} pods, "
            f"{_fmt(copies.pods_whole / 1024, 1)} → {_fmt(copies.pods_kept / 1024, 1)} KiB",
        )
        baseline = 2 * fleet.references
        per_interval = sum(soak_counts.values()) / rounds
        self.table.add(
            "1b registry, fleet",
            f"soak: per {config.interval} s interval, start-up round excluded (tokens live "
            "300 s; policies on their interval grid)",
            f"{_fmt(per_interval, 2)} ({per_tick_text(soak_counts, rounds)})",
            f"≤ {fleet.references + 1}",
            str(baseline),
            _ratio(per_interval, baseline),
            ok=per_interval <= fleet.references + 1 and soak_counts.get("GET", 0) == 0,
        )

        found = latencies()
        every = [x for per_push in found for x in per_push]
        if not every:
            raise RuntimeError("no pushed digest was patched during the soak")
        firsts = [min(x) for x in found if x]
        missing = sum(max(0, expected - len(x)) for x in found)
        limit = config.interval + 1
        self.table.add(
            f"5 latency, {len(pushes)} pushes, interval {config.interval} s",
            f"push → template patched, every workload ({len(every)}), median / max"
            + (f"; {missing} never patched" if missing else ""),
            f"{_fmt(statistics.median(every))} s / {_fmt(max(every))} s",
            f"≤ {limit} s",
            ok=max(every) <= limit and not missing,
        )
        self.table.add(
            f"5 latency, {len(pushes)} pushes, interval {config.interval} s",
            "push → first workload patched, median / max",
            f"{_fmt(statistics.median(firsts))} s / {_fmt(max(firsts))} s",
            f"≤ {limit} s",
            ok=max(firsts) <= limit,
        )
        (config.logs / "soak-rss.json").write_text(json.dumps(samples))

    # -- (6) leader election: a standby takes over -------------------------------------------

    def takeover(self) -> None:
        """Two operators with ``--leader-elect`` (production timings) on the edge; the leader is
        killed (SIGKILL: no release) and the standby's takeover timed, to its first tick done."""
        assert self.operator is not None
        self.operator.stop()
        edge = [(EDGE_CP, "control-plane")]
        kills = self.config.kills
        leads, acts, ticks = [], [], []
        leader = self._candidate("a")
        # Its first tick done, polled every 50 ms: the CPU it took from exec, imports, leader
        # election and the first policy's tick included (what a crash restart costs at 100m),
        # and where it went after the imports (py-spy attaches only once the interpreter is up,
        # which here was after the imports: their CPU is row 8's).
        sampler = Sampler(leader.pid, self.config.logs / "startup.pyspy", rate=250)
        leader.wait_ticks({}, edge, timeout=120, poll=0.05)
        started = cpu_seconds(leader.pid)
        startup = sampler.stop()
        wait_for(lambda: self._leads(leader), "the first leader", 60)
        for kill in range(1, kills + 1):
            standby = self._candidate("b" if kill % 2 else "a", kill)
            wait_for(partial(self._stands_by, standby), "the standby's metrics", 60)
            # A standby in steady state has watched the leader renew for a while: its clock
            # for the lease runs from the last renewal, not from its own first sighting.
            time.sleep(LEASE_SECONDS + random.uniform(0, 2))
            before = standby.ticks()
            os.kill(leader.pid, signal.SIGKILL)
            killed = time.monotonic()
            assert leader.operator.process is not None
            leader.operator.process.wait(10)
            wait_for(partial(self._leads, standby), "the standby to lead", 120, 0.1)
            leads.append(time.monotonic() - killed)
            standby.wait_ticks(before, edge, timeout=120, poll=0.05)
            acts.append(time.monotonic() - killed)
            ticks.append(acts[-1] - leads[-1])
            note(f"takeover {kill}: leads after {leads[-1]:.1f} s, ticked after {acts[-1]:.1f} s")
            leader = standby
        leader.stop()
        self.operator = None
        cpu, _ = image_rows.chart_limits()
        self.table.add(
            "6 leader election (lease 15 s, renew 10 s, retry 2 s)",
            "start-up: CPU seconds from exec to the first tick done (--leader-elect, the edge)",
            f"{_fmt(started, 2)} CPU-s (≈ {_fmt(started / cpu, 1)} s at the chart's "
            f"{cpu * 1000:g}m)",
            "≤ 0.6 CPU-s",
            ok=started <= 0.6,
        )
        if startup is not None:
            self.table.add(
                "6 leader election (lease 15 s, renew 10 s, retry 2 s)",
                f"start-up: where its CPU went (py-spy, {startup.samples} samples); hottest",
                f"{startup.shares()}; {startup.hottest()}",
            )
        floor = statistics.median(self._bare_startup() for _ in range(BARE_STARTUP_ROUNDS))
        self.table.add(
            "6 leader election (lease 15 s, renew 10 s, retry 2 s)",
            "start-up's floor: a bare kopf operator from exec to its first handler call, on the "
            f"same policy (median of {BARE_STARTUP_ROUNDS})",
            f"{_fmt(floor, 2)} CPU-s; the operator {_fmt(started, 2)} = "
            f"{_fmt(started / floor, 2)}x",
        )
        imports = import_costs(self.venv)
        self.table.add(
            "6 leader election (lease 15 s, renew 10 s, retry 2 s)",
            "start-up's floor: CPU of each import alone in a fresh process (median of "
            f"{IMPORT_ROUNDS})",
            ", ".join(f"{name} {_fmt(seconds, 2)} CPU-s" for name, seconds in imports.items()),
        )
        lease = LEASE_SECONDS
        self.table.add(
            "6 leader election (lease 15 s, renew 10 s, retry 2 s)",
            f"leader killed (SIGKILL) → standby leads, median / max ({kills} kills)",
            f"{_fmt(statistics.median(leads), 2)} s / {_fmt(max(leads), 2)} s",
        )
        self.table.add(
            "6 leader election (lease 15 s, renew 10 s, retry 2 s)",
            "leader killed → standby's first tick done (acting), median / max; its tick alone, max",
            f"{_fmt(statistics.median(acts), 2)} s / {_fmt(max(acts), 2)} s; "
            f"{_fmt(max(ticks), 2)} s",
            "≤ lease + one tick",
            ok=all(act <= lease + tick for act, tick in zip(acts, ticks, strict=True)),
        )

    def _candidate(self, identity: str, generation: int = 0) -> OperatorRun:
        run = OperatorRun.start(
            self.cluster,
            self.env.registry,
            self.front,
            self.config.logs / f"operator-leader-{identity}-{generation}.log",
            [EDGE_CP, EDGE_AGENTS],
            pairs=[f"{EDGE_CP}={EDGE_AGENTS}"],
            window=WINDOW,
            venv=self.venv,
            extra_args=(
                "--leader-elect",
                f"--leader-election-namespace={EDGE_CP}",
                f"--leader-election-identity=bench-{identity}-{generation}",
            ),
        )
        note(f"imagerefresh run --leader-elect started as bench-{identity}-{generation}")
        return run

    def _bare_startup(self) -> float:
        """CPU seconds a bare kopf operator takes from exec to its first handler call."""
        report = Path(tempfile.mkdtemp()) / "cpu"
        with (self.config.logs / "kopf-startup.log").open("ab") as log:
            process = subprocess.Popen(
                [
                    str(self.venv / "bin" / "kopf"),
                    "run",
                    "--standalone",
                    "--namespace",
                    EDGE_CP,
                    str(BARE_STARTUP),
                ],
                stdout=log,
                stderr=log,
                env=self.cluster.env | {"BARE_STARTUP_FILE": str(report)},
            )
            try:
                wait_for(report.exists, "the bare kopf operator's first handler call", 120, 0.05)
                time.sleep(0.1)  # written, not only created
                return float(report.read_text())
            finally:
                process.terminate()
                process.wait(30)

    @staticmethod
    def _leader_gauge(run: OperatorRun) -> float | None:
        """Its ``imagerefresh_leader`` (None while its metrics are not served yet)."""
        try:
            return float(run.operator.metric("imagerefresh_leader"))
        except httpx.HTTPError:
            return None

    def _leads(self, run: OperatorRun) -> bool:
        return self._leader_gauge(run) == 1

    def _stands_by(self, run: OperatorRun) -> bool:
        return self._leader_gauge(run) == 0

    # -- the whole run ------------------------------------------------------------------------

    def planning(self) -> None:
        """Row 7: planning the largest policies the CRD admits (pure: no cluster involved)."""
        for cost in planning.measure():
            figure = (
                f"{cost.case} ({cost.targets} targets, {cost.containers} containers, "
                f"{cost.decisions} decisions): CPU per plan, median / worst"
            )
            at_limit = f"{_fmt(cost.worst / planning.LIMIT, 2)} s at the chart's 100m"
            self.table.add(
                "7 planning, largest admitted policies",
                figure,
                f"{_fmt(cost.median * 1000)} ms / {_fmt(cost.worst * 1000)} ms ({at_limit})",
                "< 100 ms",
                ok=cost.worst < 0.1,
            )

    def image(self) -> None:
        """Row 8: the image's size and its start-up under the chart's CPU, with what dominates
        each (bench/image.py; needs podman, not the cluster)."""
        for figure, measured in image_rows.rows(image_rows.image_tag()):
            self.table.add("8 image", figure, measured)

    def run(self) -> None:
        note("planning the largest admitted policies")
        self.planning()
        if "image" not in self.config.skip:
            note("the image: size and start-up under the chart's CPU")
            self.image()
        self.setup()
        if "edge" not in self.config.skip:
            note("(a) the edge: registry requests and API cost")
            self.edge()
        if "node" not in self.config.skip:
            note("latency on the real node, next to kwok")
            self.real_node()
        if "signatures" not in self.config.skip:
            note("signatures: the registry requests spec.verify adds")
            self.signatures()
        note("(b) the fleet: creating it")
        self.fleet_up()
        note("(b) the fleet: registry requests and API cost per round")
        self.fleet_registry_and_api()
        if "scale" not in self.config.skip:
            note("tick time at scale")
            self.scale()
        if "soak" not in self.config.skip:
            note(f"memory soak and latency ({self.config.soak_seconds} s)")
            self.soak()
        if "edge" not in self.config.skip and "takeover" not in self.config.skip:
            note("leader election: takeovers")
            self.takeover()

    def close(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        for process in self.bare.values():
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        self.front.stop()
        if self.referrers is not None:
            self.referrers.stop()
        self.pusher.close()
        self.triggers.close()
        self.client.close()  # type: ignore[no-untyped-call]


def _workload_reads(cost: Cost) -> int:
    """GETs and LISTs of workloads and pods: what the watch-fed copies are to spare."""
    return sum(
        count
        for what, count in cost.reads.items()
        if what.split(" ")[1] in {"deployments", "daemonsets", "statefulsets", "pods"}
    )


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    config = Config()
    env = Environment(config.state)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    bench: Bench | None = None
    cleanup: list[Callable[[], None]] = []
    # `make` interrupted or a CI timeout: tear down all the same (SIGINT already does).
    signal.signal(signal.SIGTERM, _terminated)
    try:
        cluster = env.up()
        cleanup.append(env.down)
        bench = Bench(config, env, cluster)
        cleanup.append(bench.close)
        bench.run()
    except Exception as error:
        print(f"bench failed: {error}", file=sys.stderr)
        if bench is not None and bench.table.rows:
            print(bench.table.render())
        return 1
    finally:
        for step in reversed(cleanup):
            try:
                step()
            except Exception as error:
                note(f"cleanup: {error}")
    assert bench is not None
    print(
        f"\nimagerefresh benchmark, {date}, on {os.cpu_count()} cores "
        f"({config.policies} policies x {config.targets} targets, {config.references} refs, "
        f"soak {config.soak_seconds} s)\n"
    )
    print(bench.table.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
