"""Each tenant pays for itself: what one policy's signatures cost lands on that policy.

The operator runs as ``imagerefresh run`` on the local cluster (kwok nodes), with signatures
made by the pinned cosign, offline:

* a **hostile** policy lists the eight costliest keys a policy may (RSA-8192, committed under
  tests/support/keys) and pins 17 digests, each with 16 referrers: 15 bundles of 16 envelope
  signatures that no key made, then a real cosign bundle by the tenant's own key, which it does
  not list (cosign 3.1.3 refuses RSA keys over 4096 bits, so it cannot sign with the listed
  ones). Looking one up costs 1,920 RSA-8192 verifications (15 bundles of 16 signatures, under
  8 keys), most of a second of CPU here, in 16 checks (one per referrer), and ends Untrusted;
* an **honest** policy beside it tracks a tag whose new build cosign signed with its P-256 key.

Wall-clock figures (``/healthz`` within 1 s, the honest pin within 5 s of its tick) are what an
SRE cares about and what the test prints; they are not what it asserts, because on a busy
2-core machine any figure can be missed for reasons that have nothing to do with the operator.
What it asserts cannot come out differently under load:

* **healthz is answered while a check runs.** Each probe reads the checks finished
  (``imagerefresh_signature_check_cpu_seconds_count``) and running
  (``imagerefresh_signature_checks_in_progress``) from ``/metrics`` — served by its own thread,
  not the event loop — then asks ``/healthz``, then reads them again. A check in progress
  before, and no check finished after, means one check spanned the whole ``/healthz`` answer.
  Were checks run on the event loop, that could never happen: the loop would answer only once
  the check had finished, so the count after would be higher. The test asks for five such
  probes (a hostile check lasts tens of milliseconds of CPU, a probe a few of wall clock, and
  there are hundreds of checks), and that every probe was answered.
* **the honest verdict does not wait for the hostile backlog.** The honest pin lands while the
  hostile policy's first tick is still checking (its tick counter still 0): an honest lookup
  needs two checks of a millisecond, the hostile tick 256 of tens of milliseconds — whatever the
  machine's load, the honest one only waits behind the hostile backlog if the pool makes it.
* **the per-tick cap, and verdicts by account, and the reserve**, read from the status, the
  events and the requests the registry front received.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from imagerefresh.signatures import BundleEvidence, fallback_tag, legacy_tag, parse_public_key

from support.cluster_env import Cluster, eventually
from support.cosign_env import key_pair
from support.heavy_keys import rsa8192_keys
from support.hub_front import HubFront
from support.operator_env import (
    Operator,
    front_of,
    pull_secret,
    running_operator,
    watched_namespace,
)
from support.registry_env import ImagePusher
from support.scenario import deployment, images, policy, status
from support.signing import (
    bundle,
    bundle_document,
    cosign_sign,
    push_signatures,
    read_evidence,
    statement,
)

# No build happens here (make binaries made cosign): the budget is the scenario's own.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

PASSWORD = "tenant-costs"
HOSTILE_DIGESTS = 17  # one more than a policy looks up in one tick
CONTAINERS_PER_WORKLOAD = 10
JUNK_REFERRERS = 15
RSA8192_BYTES = 1024
CHECKS = "imagerefresh_signature_check_cpu_seconds_count"
RUNNING = "imagerefresh_signature_checks_in_progress"


@pytest.fixture(scope="module")
def operator(
    crd_installed: Cluster, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The module's operator; its interval grid starts an interval (15m) after it does, so the
    only ticks are a new policy's first and those a test asks for."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(crd_installed, registry, log, grid_from_start=True) as running:
        yield running


def push(host: str, path: str, tag: str, seed: str) -> str:
    pusher = ImagePusher(host)
    try:
        return pusher.push(path, tag, seed=seed).digest
    finally:
        pusher.close()


def rolled_out(cluster: Cluster, ns: str, name: str = "app") -> None:
    """Wait for the Deployment's rollout: a policy's first tick then judges it settled (one
    in flight would be skipped, never gated)."""
    cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=120s")


def target_of(cluster: Cluster, ns: str, policy_name: str, workload: str) -> dict[str, Any]:
    return next(t for t in status(cluster, ns, policy_name)["targets"] if t["name"] == workload)


# --- what the operator's metrics and /healthz say, probe by probe ---------------------------------


@dataclass(frozen=True)
class Checks:
    finished: float
    running: float


@dataclass(frozen=True)
class Probe:
    before: Checks
    after: Checks
    status: int  # of /healthz; 0 when it was not answered
    seconds: float  # how long /healthz took to answer (wall clock: reported, not asserted)

    @property
    def during_a_check(self) -> bool:
        """One check spanned the whole /healthz answer (see the module docstring)."""
        return self.before.running >= 1 and self.after.finished == self.before.finished


def checks(operator: Operator, http: httpx.Client) -> Checks:
    text = http.get(f"http://127.0.0.1:{operator.metrics_port}/metrics").text
    values = dict(re.findall(r"^(\w+) (\S+)$", text, re.MULTILINE))
    return Checks(float(values.get(CHECKS, 0)), float(values.get(RUNNING, 0)))


class Prober:
    """Probes /healthz, between two reads of the checks, until stopped."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator
        self.probes: list[Probe] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthz-prober", daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        url = f"http://127.0.0.1:{self.operator.liveness_port}/healthz"
        # A probe not answered within a minute is a failure whatever the machine's load.
        with httpx.Client(timeout=60) as http:
            while not self._stop.is_set():
                before = checks(self.operator, http)
                started = time.monotonic()
                try:
                    answered = http.get(url).status_code
                except httpx.HTTPError:
                    answered = 0
                seconds = time.monotonic() - started
                self.probes.append(Probe(before, checks(self.operator, http), answered, seconds))
                self._stop.wait(0.05)


# --- the hostile policy and the honest one ------------------------------------------------------


def junk_bundle(digest: str) -> BundleEvidence:
    """A referrer of ``digest`` whose bundle holds 16 signatures no key made, each the size of
    an RSA-8192 signature and below any modulus (so each costs a whole verification)."""
    signatures = [b"\x00" + os.urandom(RSA8192_BYTES - 1) for _ in range(16)]
    return bundle(digest, document=bundle_document(statement(digest), signatures, hint=None))


def hostile_workloads(host: str, path: str, digests: list[str]) -> list[dict[str, Any]]:
    chunks = [
        digests[i : i + CONTAINERS_PER_WORKLOAD]
        for i in range(0, len(digests), CONTAINERS_PER_WORKLOAD)
    ]
    return [
        deployment(
            f"h{n}", {f"c{i}": f"{host}/{path}@{d}" for i, d in enumerate(chunk)}, replicas=1
        )
        for n, chunk in enumerate(chunks)
    ]


def hostile_policy(host: str, path: str, digests: list[str], keys: list[str]) -> dict[str, Any]:
    chunks = [
        digests[i : i + CONTAINERS_PER_WORKLOAD]
        for i in range(0, len(digests), CONTAINERS_PER_WORKLOAD)
    ]
    targets = [
        {
            "kind": "Deployment",
            "name": f"h{n}",
            "containers": [
                {"name": f"c{i}", "image": f"{host}/{path}:prod", "digest": d}
                for i, d in enumerate(chunk)
            ],
        }
        for n, chunk in enumerate(chunks)
    ]
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": "hostile"},
        "spec": {"targets": targets, "verify": {"publicKeys": keys}},
    }


def test_a_hostile_policy_verifying_holds_neither_healthz_nor_an_honest_verdict(
    operator: Operator,
    cluster: Cluster,
    registry: str,
    cosign: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("tenant-costs")
    heavy = rsa8192_keys()
    hostile_key = key_pair(cosign, work / "hostile", PASSWORD)  # listed nowhere
    honest_key = key_pair(cosign, work / "honest", PASSWORD)
    honest_pem = honest_key.public.read_text()
    with (
        watched_namespace(cluster, "tenant-honest") as honest_ns,
        watched_namespace(cluster, "tenant-hostile") as hostile_ns,
    ):
        # The honest policy: Current on a signed build, before anything hostile exists.
        path = f"{honest_ns}/app"
        old = push(registry, path, "prod", f"{honest_ns}-old")
        cosign_sign(cosign, honest_key.private, f"{registry}/{path}@{old}",
                    bundle_format=False, password=PASSWORD)  # fmt: skip
        cluster.apply(deployment("app", {"app": f"{registry}/{path}@{old}"}, replicas=1),
                      namespace=honest_ns)  # fmt: skip
        rolled_out(cluster, honest_ns)
        cluster.apply(
            policy("honest", {"kind": "Deployment", "name": "app",
                              "containers": [{"name": "app", "image": f"{registry}/{path}:prod"}]},
                   verify={"publicKeys": [honest_pem]}),
            namespace=honest_ns,
        )  # fmt: skip
        operator.wait_first_tick(honest_ns, "honest")
        assert target_of(cluster, honest_ns, "honest", "app")["phase"] == "Current"

        # The hostile policy's evidence: real cosign bundles by a key it does not list, each
        # behind 15 bundles of junk signatures.
        hostile_path = f"{hostile_ns}/app"
        digests = [
            push(registry, hostile_path, f"b{n}", f"{hostile_ns}-{n}")
            for n in range(HOSTILE_DIGESTS)
        ]
        pusher = ImagePusher(registry)
        try:
            for digest in digests:
                cosign_sign(cosign, hostile_key.private, f"{registry}/{hostile_path}@{digest}",
                            bundle_format=True, password=PASSWORD)  # fmt: skip
                _, (signed,) = read_evidence(registry, hostile_path, digest)
                junk = [junk_bundle(digest) for _ in range(JUNK_REFERRERS)]
                push_signatures(pusher, hostile_path, digest, bundles=[*junk, signed])
        finally:
            pusher.close()
        workloads = hostile_workloads(registry, hostile_path, digests)
        cluster.apply(*workloads, namespace=hostile_ns)
        for workload in workloads:  # settled: a rollout in flight would be skipped, not gated
            rolled_out(cluster, hostile_ns, workload["metadata"]["name"])

        with Prober(operator) as prober:
            cluster.apply(
                hostile_policy(registry, hostile_path, digests, [k.pem for k in heavy]),
                namespace=hostile_ns,
            )
            with httpx.Client(timeout=10) as http:
                eventually(lambda: checks(operator, http).running >= 1, timeout=120,
                           what="a hostile check to run", interval=0.05)  # fmt: skip
            # A new honest build, signed, while the hostile policy verifies; its tick at once.
            new = push(registry, path, "prod", f"{honest_ns}-new")
            cosign_sign(cosign, honest_key.private, f"{registry}/{path}@{new}",
                        bundle_format=False, password=PASSWORD)  # fmt: skip
            asked = time.monotonic()
            operator.bump(honest_ns, "honest")
            pinned = f"{registry}/{path}@{new}"
            eventually(lambda: images(cluster, honest_ns, "app")["app"] == pinned,
                       timeout=300, what="the honest pin", interval=0.05)  # fmt: skip
            honest_seconds = time.monotonic() - asked
            hostile_ticks_at_pin = operator.ticks(hostile_ns, "hostile")
            with httpx.Client(timeout=10) as http:
                finished_at_pin = checks(operator, http).finished
            operator.wait_first_tick(hostile_ns, "hostile", timeout=600)

        answered = [p for p in prober.probes if p.status == 200]
        during = [p for p in prober.probes if p.status == 200 and p.during_a_check]
        slowest = max(p.seconds for p in answered)
        print(
            f"\nhealthz: {len(prober.probes)} probes, slowest {slowest:.3f}s,"
            f" {len(during)} answered during a check; honest pin {honest_seconds:.2f}s after its"
            f" tick was asked, {finished_at_pin:.0f} checks finished by then"
        )
        assert len(answered) == len(prober.probes)  # every probe answered
        assert len(during) >= 5
        assert hostile_ticks_at_pin == 0

        # The cap: 16 of the 17 digests were looked up in the hostile policy's first tick; the
        # last waits for its next, without blame (queued, not unreadable, nothing Degraded).
        # (Which waits at the next tick is the unit tests': those that waited go first.)
        first = held_containers(cluster, hostile_ns)
        assert len(first["untrusted"]) == 16
        assert len(first["queued"]) == HOSTILE_DIGESTS - 16
        assert not first["unreadable"]
        assert condition_of(cluster, hostile_ns, "hostile", "Degraded")["status"] == "False"
        assert all(
            t["phase"] == "Untrusted" for t in status(cluster, hostile_ns, "hostile")["targets"]
        )


def held_containers(cluster: Cluster, ns: str) -> dict[str, set[str]]:
    """The hostile policy's containers (workload/container) by how its status holds them."""
    found: dict[str, set[str]] = {"untrusted": set(), "queued": set(), "unreadable": set()}
    patterns = {
        "untrusted": r"(c\d+): sha256:[0-9a-f]{64} carries no valid signature by a key of "
        r"spec.verify \(bad-signature",
        "queued": r"(c\d+): signature verification of sha256:[0-9a-f]+… queued",
        "unreadable": r"(c\d+): the signatures of sha256:[0-9a-f]+… could not be read",
    }
    for target in status(cluster, ns, "hostile")["targets"]:
        for kind, pattern in patterns.items():
            found[kind] |= {f"{target['name']}/{c}" for c in re.findall(pattern, target["message"])}
    return found


def condition_of(cluster: Cluster, ns: str, name: str, kind: str) -> dict[str, Any]:
    return next(c for c in status(cluster, ns, name)["conditions"] if c["type"] == kind)


# --- verdicts by account: a registry that hides what an account may not read ---------------------


def fallback_reads(front: HubFront, digest: str) -> list[tuple[str, int]]:
    """(identity, status) of each authorised read of ``digest``'s fallback tag at the front
    (the 401 challenges before each token are left out)."""
    tag = f"/manifests/{fallback_tag(digest)}"
    return [
        (r.identity, r.status) for r in front.served if r.path.endswith(tag) and r.identity != "?"
    ]


def test_one_tenant_reading_no_signature_never_plants_untrusted_for_another(
    operator: Operator, cluster: Cluster, registry: str, cosign: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    """A registry answers 404 to manifest reads of a private repository by anyone without
    access (the front's ``private``): to a stranger pinning its digest, a signed build looks
    unsigned. The tenant with access must get its own verdict — signed — not the stranger's."""
    front = front_of(operator)
    key = key_pair(cosign, tmp_path_factory.mktemp("tenant-keys"), PASSWORD)
    pem = key.public.read_text()
    with (
        watched_namespace(cluster, "tenant-stranger") as stranger,
        watched_namespace(cluster, "tenant-owner") as owner,
    ):
        path = f"{owner}/private"
        digest = push(registry, path, "prod", f"{owner}-private")
        cosign_sign(cosign, key.private, f"{registry}/{path}@{digest}", bundle_format=True,
                    password=PASSWORD)  # fmt: skip
        front.users["owner"] = "owner-password"
        front.private[path] = frozenset({"owner"})
        pinned = f"{front.host}/{path}@{digest}"
        declared = {"kind": "Deployment", "name": "app", "containers": [
            {"name": "app", "image": f"{front.host}/{path}:prod", "digest": digest}]}  # fmt: skip

        cluster.apply(deployment("app", {"app": pinned}, replicas=1), namespace=stranger)
        rolled_out(cluster, stranger)
        cluster.apply(
            policy("control-plane", declared, verify={"publicKeys": [pem]}), namespace=stranger
        )
        operator.wait_first_tick(stranger, "control-plane")
        found = target_of(cluster, stranger, "control-plane", "app")
        assert found["phase"] == "Untrusted"
        assert "no-signature" in found["message"]
        seen = fallback_reads(front, digest)
        assert seen
        assert set(seen) == {("anonymous", 404)}

        secret = pull_secret("owner-pull", {front.host: ("owner", "owner-password")})
        workload = deployment("app", {"app": pinned}, replicas=1)
        workload["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "owner-pull"}]
        cluster.apply(secret, workload, namespace=owner)
        rolled_out(cluster, owner)
        cluster.apply(policy("control-plane", declared, verify={"publicKeys": [pem]}),
                      namespace=owner)  # fmt: skip
        operator.wait_first_tick(owner, "control-plane")
        found = target_of(cluster, owner, "control-plane", "app")
        assert found["phase"] == "Current", found["message"]
        assert found["containers"][0]["verifiedBy"] == parse_public_key(pem).fingerprint
        # It looked the signature up on its own account, and found it.
        assert ("owner", 200) in fallback_reads(front, digest)


# --- the pull budget's reserve --------------------------------------------------------------------


def test_a_signature_lookup_waits_for_the_pull_budget_s_reserve_and_nothing_is_pulled(
    operator: Operator, cluster: Cluster, registry: str, cosign: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    """The front reports the account's remaining pulls on every manifest answer, as Docker Hub
    does. With exactly ``pullBudget.reserve`` left, the lookup's GET of the signature manifest
    would eat into the reserve: the lookup waits (Deferred, VerificationDeferred, RateLimited)
    and the front receives no GET for that account. With pulls to spare, the build is verified
    and pinned."""
    front = front_of(operator)
    key = key_pair(cosign, tmp_path_factory.mktemp("saver-keys"), PASSWORD)
    pem = key.public.read_text()
    reserve = 5
    with watched_namespace(cluster, "tenant-saver") as ns:
        path = f"{ns}/app"
        old = push(registry, path, "old", f"{ns}-old")
        new = push(registry, path, "prod", f"{ns}-new")
        cosign_sign(cosign, key.private, f"{registry}/{path}@{new}", bundle_format=False,
                    password=PASSWORD, identity=f"{front.host}/{path}")  # fmt: skip
        front.users["saver"] = "saver-password"
        front._remaining_by_identity["saver"] = reserve
        secret = pull_secret("saver-pull", {front.host: ("saver", "saver-password")})
        workload = deployment("app", {"app": f"{front.host}/{path}@{old}"}, replicas=1)
        workload["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "saver-pull"}]
        cluster.apply(secret, workload, namespace=ns)
        rolled_out(cluster, ns)
        container = {"name": "app", "image": f"{front.host}/{path}:prod"}
        tracked = {"kind": "Deployment", "name": "app", "containers": [container]}
        cluster.apply(
            policy("control-plane", tracked, verify={"publicKeys": [pem]},
                   pullBudget={"reserve": reserve}),
            namespace=ns,
        )  # fmt: skip
        operator.wait_first_tick(ns, "control-plane")

        found = target_of(cluster, ns, "control-plane", "app")
        assert found["phase"] == "Deferred"
        assert (
            f"held: app: the signatures of {new[:19]}… are not looked up: {front.host} for "
            f"{ns}/saver-pull has {reserve} pulls left of 100 per 21600s; a signature lookup "
            f"needs 1 and {reserve} stay reserved for the kubelet; it is looked up at the next "
            "tick"
        ) in found["message"]
        conditions = {c["type"]: c for c in status(cluster, ns)["conditions"]}
        assert conditions["RateLimited"]["status"] == "True"
        assert conditions["Degraded"]["status"] == "False"
        mine = [r for r in front.served if r.identity == "saver"]
        assert [r.method for r in mine if r.path.endswith(legacy_tag(new))] == ["HEAD"]
        assert not [r for r in mine if r.kind == "manifest" and r.method == "GET"]
        assert front.remaining_for("saver") == reserve
        assert images(cluster, ns, "app") == {"app": f"{front.host}/{path}@{old}"}

        front._remaining_by_identity["saver"] = 100
        operator.tick(ns, "control-plane")
        assert images(cluster, ns, "app") == {"app": f"{front.host}/{path}@{new}"}
