"""Row 9: the registry requests ``spec.verify`` adds, as the registries received them.

One policy with ``verify`` (its ticks asked for) over five one-replica Deployments in
``bench-signatures``, each tracking one repository, each first pinned at the build its tag
answers:

- ``legacy`` and ``bundle``: on distribution 2.8 behind the counting front, each new build
  signed by the pinned cosign in the legacy format (the ``.sig`` tag) or the bundle format
  (under the fallback tag ``sha256-<hex>``: distribution has no referrers API);
- ``referrers``: on the registry with the referrers API, new builds signed in the bundle format;
- ``unsigned`` and ``unsigned-referrers``: one build, never signed, one on each registry.

Counted is every request about a repository but its tag's manifest — the resolution a tick
sends with or without ``verify``: signature tags, referrers, manifests by digest, blobs. On
distribution from the front's record; on the other registry from its access log (the operator's
own count of requests to it says when the log is complete). The first tick of the policy is the
first lookup of each repository (and of each registry); then each change pushes a new signed
build to the three signed repositories and asks for one tick, which pins them (and, being asked
for, looks the unsigned builds up again at once — an interval tick does so only when their
backoff is due); then ticks with nothing new.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import Json, OperatorRun, note, wait_for

from support.cluster_env import Cluster
from support.cosign_env import key_pair
from support.hub_front import HubFront
from support.operator_env import kwok_pod_template
from support.referrers_env import ReferrersRegistry
from support.registry_env import ImagePusher
from support.signing import cosign_sign

__all__ = ["NAMESPACE", "measure"]

NAMESPACE = "bench-signatures"
POLICY = "signatures"
PASSWORD = "bench-signatures"
# repository → (its registry, cosign's bundle format; None: never signed)
REPOSITORIES: dict[str, tuple[str, bool | None]] = {
    "legacy": ("distribution", False),
    "bundle": ("distribution", True),
    "referrers": ("referrers", True),
    "unsigned": ("distribution", None),
    "unsigned-referrers": ("referrers", None),
}
SIGNED = [name for name, (_, bundle) in REPOSITORIES.items() if bundle is not None]
UNSIGNED = [name for name, (_, bundle) in REPOSITORIES.items() if bundle is None]

Row = tuple[str, str, str, bool | None]  # figure, measured, target, met


def kind_of(method: str, what: str, status: int) -> str:
    """One request below ``/v2/<repository>/``, as the rows name it."""
    if status == 401:
        return "challenge"
    if what.startswith("referrers/"):
        return "referrers GET"
    if what.startswith("blobs/"):
        return "blob GET"
    return "HEAD" if method == "HEAD" else "manifest GET"


def text(counts: Counter[str]) -> str:
    order = ("HEAD", "manifest GET", "referrers GET", "blob GET", "challenge")
    parts = ", ".join(f"{k} {counts[k]}" for k in order if counts.get(k))
    return f"{sum(counts.values())} ({parts or 'none'})"


def each(samples: Sequence[Counter[str]]) -> str:
    """One lookup's requests when every sample agrees, else the spread."""
    shown = {text(s) for s in samples}
    if len(shown) == 1:
        return f"{shown.pop()} each of {len(samples)}"
    totals = [sum(s.values()) for s in samples]
    return f"median {statistics.median(totals)}, {min(totals)} to {max(totals)} ({len(samples)})"


@dataclass
class Marks:
    front: int
    log: int
    counted: float  # the operator's count of requests to the referrers registry


class SignatureCost:
    def __init__(
        self,
        cluster: Cluster,
        front: HubFront,
        registry: str,
        referrers: ReferrersRegistry,
        cosign: Path,
        work: Path,
        operator: OperatorRun,
    ) -> None:
        self.cluster, self.front, self.referrers, self.operator = (
            cluster,
            front,
            referrers,
            operator,
        )
        self.cosign = cosign
        self.keys = key_pair(cosign, work / "keys", PASSWORD)
        self.pushed_to = {"distribution": registry, "referrers": referrers.host}
        self.tracked_at = {"distribution": front.host, "referrers": referrers.host}
        self.pushers = {where: ImagePusher(host) for where, host in self.pushed_to.items()}

    def close(self) -> None:
        for pusher in self.pushers.values():
            pusher.close()

    def path(self, name: str) -> str:
        return f"{NAMESPACE}/{name}"

    def repository(self, name: str) -> str:
        return f"{self.tracked_at[REPOSITORIES[name][0]]}/{self.path(name)}"

    def push(self, name: str, seed: str) -> str:
        """A new build of ``name``'s tag, signed as its repository is."""
        where, bundle = REPOSITORIES[name]
        digest = self.pushers[where].push(self.path(name), "prod", seed=seed).digest
        if bundle is not None:
            cosign_sign(
                self.cosign,
                self.keys.private,
                f"{self.pushed_to[where]}/{self.path(name)}@{digest}",
                bundle_format=bundle,
                password=PASSWORD,
                identity=None if bundle else self.repository(name),
            )
        return digest

    def counted(self) -> float:
        return self.operator.operator.metric(
            "imagerefresh_registry_requests_total", registry=self.referrers.host
        )

    def marks(self) -> Marks:
        return Marks(len(self.front.served), len(self.referrers.requests()), self.counted())

    def since(self, marks: Marks) -> dict[str, Counter[str]]:
        """Each repository's requests beyond its tag's manifest since ``marks``."""
        # The registry logs a request just after answering it: complete once it has logged as
        # many as the operator counted.
        expected = self.counted() - marks.counted
        wait_for(
            lambda: len(self.referrers.requests()) - marks.log >= expected,
            "the referrers registry's log",
            30,
            0.05,
        )
        seen: dict[str, list[tuple[str, str, int]]] = {}
        served = [(r.method, r.path, r.status) for r in self.front.served[marks.front :]]
        logged = [(r.method, r.target, r.status) for r in self.referrers.requests()[marks.log :]]
        for name, (where, _) in REPOSITORIES.items():
            prefix = f"/v2/{self.path(name)}/"
            requests = served if where == "distribution" else logged
            seen[name] = [
                (method, target.removeprefix(prefix), status)
                for method, target, status in requests
                if target.startswith(prefix)
            ]
        return {
            name: Counter(kind_of(m, w, s) for m, w, s in found if w != "manifests/prod")
            for name, found in seen.items()
        }

    def objects(self, digests: dict[str, str]) -> list[Json]:
        deployments: list[Json] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": kwok_pod_template(
                        {"app": f"{self.repository(name)}@{digests[name]}"}, labels={"app": name}
                    ),
                },
            }
            for name in REPOSITORIES
        ]
        return deployments

    def policy(self) -> Json:
        return {
            "apiVersion": "images.tracebloc.io/v1alpha1",
            "kind": "ImageRefreshPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "interval": "15m",
                "healthyFor": "5s",  # Current seconds after the rollout settled
                "verify": {"publicKeys": [self.keys.public.read_text()]},
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": name,
                        "containers": [{"name": "app", "image": f"{self.repository(name)}:prod"}],
                    }
                    for name in REPOSITORIES
                ],
            },
        }

    def phases(self) -> dict[str, str]:
        found = self.cluster.get("irp", POLICY, "-n", NAMESPACE)
        return {t["name"]: t["phase"] for t in (found.get("status") or {}).get("targets") or ()}

    def template(self, name: str) -> str:
        found = self.cluster.get("deployment", name, "-n", NAMESPACE)
        return str(found["spec"]["template"]["spec"]["containers"][0]["image"])


def measure(
    cluster: Cluster,
    front: HubFront,
    registry: str,
    referrers: ReferrersRegistry,
    cosign: Path,
    work: Path,
    operator: OperatorRun,
    tick: Callable[[list[tuple[str, str]]], Any],
    changes: int,
    ticks: int,
) -> list[Row]:
    cost = SignatureCost(cluster, front, registry, referrers, cosign, work, operator)
    policy = [(NAMESPACE, POLICY)]
    try:
        digests = {name: cost.push(name, f"{name}-0") for name in REPOSITORIES}
        cluster.apply(*cost.objects(digests), namespace=NAMESPACE)
        for name in REPOSITORIES:
            cluster.kubectl(
                "rollout", "status", "-n", NAMESPACE, f"deployment/{name}", "--timeout=180s"
            )
        marks = cost.marks()
        before = operator.ticks()
        cluster.apply(cost.policy(), namespace=NAMESPACE)
        operator.wait_ticks(before, policy)
        first = cost.since(marks)
        expected = {name: "Current" for name in SIGNED} | {name: "Untrusted" for name in UNSIGNED}
        if cost.phases() != expected:
            raise RuntimeError(f"signatures: first tick's phases {cost.phases()}, not {expected}")

        new: dict[str, list[Counter[str]]] = {name: [] for name in SIGNED}
        again: dict[str, list[Counter[str]]] = {name: [] for name in UNSIGNED}
        for cycle in range(1, changes + 1):
            note(f"signatures: change {cycle} of {changes}")
            pushed = {name: cost.push(name, f"{name}-{cycle}") for name in SIGNED}
            marks = cost.marks()
            tick(policy)
            counts = cost.since(marks)
            for name, digest in pushed.items():
                if cost.template(name) != f"{cost.repository(name)}@{digest}":
                    raise RuntimeError(f"signatures: {name} was not pinned to {digest}")
                new[name].append(counts[name])
            for name in UNSIGNED:
                again[name].append(counts[name])
            wait_for(lambda: cost.phases() == expected, "the signed builds Current", 180, 0.2)

        verified: Counter[str] = Counter()
        for _ in range(ticks):
            marks = cost.marks()
            tick(policy)
            counts = cost.since(marks)
            for name in SIGNED:
                verified.update(counts[name])
            for name in UNSIGNED:  # asked for: each tick looks the unsigned builds up again
                again[name].append(counts[name])
    finally:
        cost.close()

    per_tick = sum(verified.values()) / ticks
    return [
        ("new signed build, legacy .sig tag (distribution, behind the front): requests per "
         "build", each(new["legacy"]), "", None),
        ("new signed build, bundle under the fallback tag (distribution, no referrers API): "
         "requests per build", each(new["bundle"]), "", None),
        ("new signed build, bundle through the referrers API: requests per build",
         each(new["referrers"]), "", None),
        ("first lookup of a signed build (the policy's first tick; on distribution the "
         "referrers API is probed, then known absent for an hour): legacy / bundle, fallback "
         "tag / bundle, referrers API",
         f"{text(first['legacy'])} / {text(first['bundle'])} / {text(first['referrers'])}",
         "", None),
        ("unsigned build, first lookup: distribution / referrers API",
         f"{text(first['unsigned'])} / {text(first['unsigned-referrers'])}", "", None),
        ("unsigned build, each lookup again (a tick asked for; an interval tick only when its "
         "backoff is due: the next interval, doubling to 6 h): distribution / referrers API",
         f"{each(again['unsigned'])} / {each(again['unsigned-referrers'])}", "", None),
        (f"verified builds (3), each further tick ({ticks} ticks asked for): signature "
         "requests per tick", f"{per_tick:g}" + (f" ({text(verified)} in all)" if verified
         else ""), "0", per_tick == 0),
    ]  # fmt: skip
