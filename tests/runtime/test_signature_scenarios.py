"""Signatures end to end: what the operator pins, holds and reads again with ``spec.verify``.

The operator runs as ``imagerefresh run`` against the local cluster (kwok nodes), behind the
Docker-Hub-like front that records every request it serves (support/hub_front.py), with the
registry that has the referrers API (support/referrers_env.py, its access log) and a hostile
front (support/hostile_registry.py) on its insecure list. Builds are signed by the pinned cosign
with keys ``cosign generate-key-pair`` made here, offline — key-based, no transparency log, and
support/signing.py fails any cosign run that dials beyond loopback. Every verdict is read where
it lands: the pod template's image, the status the operator wrote (phase, message,
``verifiedBy``), its events, its metrics, and the requests the registries received.

Images are pushed to the distribution registry and tracked through the front, so the front's
record is every request the operator made for them; a legacy signature therefore claims the
front's repository (``cosign sign --sign-container-identity``), as one made for a proxy's pull
reference does.

Each build without a valid signature is cross-checked with ``cosign verify --key``: it agrees
with the operator except where the operator is stricter on purpose (tests/signatures/
test_signature_cosign.py documents each: cosign checks no repository claim, and cosign 3.1.3
accepts an attestation).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.signatures import Failure, fallback_tag, legacy_tag, parse_public_key

from support.cluster_env import Cluster, eventually
from support.cosign_env import KeyPair, key_pair
from support.hostile_registry import HostileRegistry
from support.hub_front import ServedRequest
from support.operator_env import Operator, front_of, running_operator, watched_namespace
from support.referrers_env import ReferrersRegistry
from support.registry_env import ImagePusher
from support.scenario import (
    condition,
    deployment,
    event_reasons,
    images,
    policy,
    settle,
    status,
    target,
    target_status,
)
from support.signing import (
    copy_manifest,
    cosign_attest,
    cosign_sign,
    cosign_verifies,
    read_evidence,
)

pytestmark = pytest.mark.cluster

PASSWORD = "signature-scenarios"
POLICY = "control-plane"
LONGER_THAN_THE_MODULE = "900"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"

Seen = tuple[str, str, int]  # (method, path below /v2/<repository>/, status)


# --- the signer: real cosign, real keys ----------------------------------------------------------


@dataclass(frozen=True)
class Signer:
    """The pinned cosign and two key pairs it generated: ``main`` (the policies list it) and
    ``other`` (listed nowhere)."""

    cosign: Path
    main: KeyPair
    other: KeyPair
    predicate: Path  # a SLSA provenance predicate, for an attestation

    @property
    def pem(self) -> str:
        """``main``'s public key, as ``spec.verify.publicKeys`` lists it."""
        return self.main.public.read_text()

    @property
    def fingerprint(self) -> str:
        """``main``'s fingerprint, as ``verifiedBy`` reports it."""
        return parse_public_key(self.pem).fingerprint

    def sign(
        self, host: str, path: str, digest: str, *, bundle: bool = False,
        key: KeyPair | None = None, claim: str | None = None,
    ) -> None:  # fmt: skip
        """``cosign sign`` of ``host/path@digest`` (legacy or bundle format); a legacy payload
        claims the repository ``claim`` (the tracked one, default ``host/path``)."""
        signer = key or self.main
        cosign_sign(self.cosign, signer.private, f"{host}/{path}@{digest}", bundle_format=bundle,
                    password=signer.password, identity=None if bundle else claim)  # fmt: skip

    def attest(self, host: str, path: str, digest: str) -> None:
        cosign_attest(self.cosign, self.main.private, f"{host}/{path}@{digest}", self.predicate,
                      password=self.main.password)  # fmt: skip

    def cosign_accepts(self, host: str, path: str, digest: str) -> bool:
        """``cosign verify --key`` with ``main``'s public key, offline."""
        return cosign_verifies(self.cosign, self.main.public, f"{host}/{path}@{digest}")


@pytest.fixture(scope="module")
def signer(cosign: Path, tmp_path_factory: pytest.TempPathFactory) -> Signer:
    work = tmp_path_factory.mktemp("signature-scenarios")
    predicate = work / "provenance.json"
    predicate.write_text(json.dumps({"buildType": "https://example.com/build"}))
    return Signer(
        cosign, key_pair(cosign, work / "main", PASSWORD), key_pair(cosign, work / "other"),
        predicate,
    )  # fmt: skip


# --- the operator, its registries, and what they received ----------------------------------------


@pytest.fixture(scope="module")
def failing_front(registry: str) -> Iterator[HostileRegistry]:
    """A front before the registry, honest until a test singles a path out."""
    front = HostileRegistry(registry).start()
    yield front
    front.stop()


@pytest.fixture(scope="module")
def operator(
    crd_installed: Cluster,
    registry: str,
    referrers_registry: ReferrersRegistry,
    failing_front: HostileRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    """The module's operator, with the referrers registry and the failing front on its
    insecure list. Its interval grid starts a whole interval (15m) after it does, so the only
    ticks are those a test asks for (or a new policy's first one): the requests counted between
    them are theirs alone. Its registry deadlines are longer than the module: an answer the
    failing front holds is released by the test, never given up on."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    extra = ("--insecure-registry", referrers_registry.host, "--insecure-registry",
             failing_front.host, "--registry-timeout", LONGER_THAN_THE_MODULE,
             "--registry-deadline", LONGER_THAN_THE_MODULE)  # fmt: skip
    with running_operator(
        crd_installed, registry, log, grid_from_start=True, extra_args=extra
    ) as running:
        yield running


def policy_target(cluster: Cluster, ns: str, name: str, workload: str) -> dict[str, Any]:
    """The status of ``workload``'s target in the policy ``name``."""
    return next(t for t in status(cluster, ns, name)["targets"] if t["name"] == workload)


def signed_policy(signer: Signer, *targets: dict[str, Any], name: str = POLICY) -> dict[str, Any]:
    # A short health window: what is verified and pinned is judged Current seconds later.
    return policy(name, *targets, verify={"publicKeys": [signer.pem]}, healthyFor="2s")


def roll_out(cluster: Cluster, ns: str, *names: str) -> None:
    for name in names:
        cluster.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=60s")


def generation(cluster: Cluster, ns: str, name: str) -> int:
    return int(cluster.get("deployment", name, "-n", ns)["metadata"]["generation"])


def warnings(cluster: Cluster, ns: str, involved: str, reason: str) -> list[str]:
    """The messages of the Warning events of ``reason`` about ``involved``, once there is one
    (a tick posts its events in the background)."""

    def posted() -> list[str] | None:
        events = cluster.get(
            "events", "-n", ns, "--field-selector", f"involvedObject.name={involved}"
        )
        found = [
            e["message"]
            for e in events["items"]
            if e["reason"] == reason and e["type"] == "Warning"
        ]
        return found or None

    return eventually(posted, timeout=30, what=f"a {reason} Warning about {involved}")


def received(served: list[ServedRequest], repository: str) -> list[Seen]:
    """What the front served about ``repository``, as (method, path below it, status)."""
    prefix = f"/v2/{repository}/"
    return [
        (r.method, r.path.removeprefix(prefix), r.status)
        for r in served
        if r.path.startswith(prefix)
    ]


def beyond_the_tag(seen: list[Seen], tag: str = "prod") -> list[Seen]:
    """Every request but those for the tracked tag's manifest: the signature tags, the
    referrers, the manifests asked by digest, the blobs."""
    return [r for r in seen if r[1] != f"manifests/{tag}"]


def about_signatures_of(seen: list[Seen], digest: str) -> list[Seen]:
    """The requests that start a signature lookup of ``digest``: its legacy tag, its
    referrers (a lookup of another digest, say the previous build a rollback could restore,
    is not one of them)."""
    return [
        r
        for r in seen
        if r[1] == f"manifests/{legacy_tag(digest)}" or r[1].startswith(f"referrers/{digest}")
    ]


def logged(registry: ReferrersRegistry, mark: int, repository: str) -> list[Seen]:
    """What the referrers registry logged about ``repository`` after its first ``mark`` lines."""
    prefix = f"/v2/{repository}/"
    return [
        (r.method, r.target.removeprefix(prefix), r.status)
        for r in registry.requests()[mark:]
        if r.target.startswith(prefix)
    ]


# --- a signed push, in each format ---------------------------------------------------------------

# deployment (and repository) → (the registry it is pushed to, cosign's bundle format)
FORMATS: dict[str, tuple[str, bool]] = {
    "legacy-sig-tag": ("distribution", False),
    "bundle-fallback-tag": ("distribution", True),
    "bundle-referrers-api": ("referrers", True),
}


@dataclass(frozen=True)
class Pinned:
    ns: str
    repositories: dict[str, str]  # name → the tracked repository (host/path)
    digests: dict[str, str]  # name → the signed digest its tag answers
    front_mark: int  # the front's record and the referrers log before the first tick
    log_mark: int


@pytest.fixture(scope="module")
def pinned(
    operator: Operator,
    cluster: Cluster,
    registry: str,
    referrers_registry: ReferrersRegistry,
    signer: Signer,
) -> Iterator[Pinned]:
    """One policy over three Deployments on their tags, each tag answering a build signed in
    one format; the policy's first tick has run."""
    front = front_of(operator)
    pushed_to = {"distribution": registry, "referrers": referrers_registry.host}
    tracked_at = {"distribution": front.host, "referrers": referrers_registry.host}
    with watched_namespace(cluster, "sig-pinned") as ns:
        repositories, digests = {}, {}
        for name, (where, bundle) in FORMATS.items():
            path = f"{ns}/{name}"
            pusher = ImagePusher(pushed_to[where])
            try:
                digests[name] = pusher.push(path, "prod", seed=f"{ns}-{name}").digest
            finally:
                pusher.close()
            repositories[name] = f"{tracked_at[where]}/{path}"
            signer.sign(pushed_to[where], path, digests[name], bundle=bundle,
                        claim=repositories[name])  # fmt: skip
        tags = {name: f"{repository}:prod" for name, repository in repositories.items()}
        cluster.apply(
            *(deployment(name, {"app": tag}, replicas=1) for name, tag in tags.items()),
            namespace=ns,
        )
        roll_out(cluster, ns, *tags)
        front_mark, log_mark = len(front.served), len(referrers_registry.requests())
        cluster.apply(
            signed_policy(signer, *(target(name, app=tag) for name, tag in tags.items())),
            namespace=ns,
        )
        operator.wait_first_tick(ns, POLICY)
        yield Pinned(ns, repositories, digests, front_mark, log_mark)


def _where_it_was_found(
    name: str, pinned: Pinned, front_seen: list[Seen], referrers: ReferrersRegistry
) -> None:
    digest = pinned.digests[name]
    if name == "legacy-sig-tag":  # the .sig tag, read through the front
        assert ("HEAD", f"manifests/{legacy_tag(digest)}", 200) in front_seen
    elif name == "bundle-fallback-tag":  # no referrers API on distribution 2.8: its tag
        assert ("GET", f"referrers/{digest}", 404) in front_seen
        assert ("HEAD", f"manifests/{fallback_tag(digest)}", 200) in front_seen
    else:  # the referrers API, and no fallback tag asked for
        path = pinned.repositories[name].split("/", 1)[1]
        seen = eventually(
            lambda: (found := logged(referrers, pinned.log_mark, path))
            and ("GET", f"referrers/{digest}", 200) in found and found,
            timeout=10, what="the referrers API asked",
        )  # fmt: skip
        assert not [r for r in seen if r[1] == f"manifests/{fallback_tag(digest)}"]


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_signed_push_is_pinned_and_verified_by_names_the_signing_key(
    operator: Operator,
    cluster: Cluster,
    pinned: Pinned,
    signer: Signer,
    referrers_registry: ReferrersRegistry,
    name: str,
) -> None:
    ns, digest, repository = pinned.ns, pinned.digests[name], pinned.repositories[name]
    path = repository.split("/", 1)[1]
    front_seen = received(front_of(operator).served[pinned.front_mark :], path)
    assert images(cluster, ns, name) == {"app": f"{repository}@{digest}"}
    found = settle(operator, cluster, ns, name)
    (container,) = found["containers"]
    assert container["desired"] == digest
    assert container["verifiedBy"] == signer.fingerprint
    assert event_reasons(cluster, ns, name, "Refreshing", "Refreshed")
    _where_it_was_found(name, pinned, front_seen, referrers_registry)


# --- steady state --------------------------------------------------------------------------------


def test_once_verified_further_ticks_send_no_signature_request(
    operator: Operator,
    cluster: Cluster,
    pinned: Pinned,
    referrers_registry: ReferrersRegistry,
) -> None:
    ns, front = pinned.ns, front_of(operator)
    for name in FORMATS:
        settle(operator, cluster, ns, name)  # verified by this process, and Current
    front_mark, log_mark = len(front.served), len(referrers_registry.requests())
    lookups = operator.metric("imagerefresh_signature_lookups_total")
    host = referrers_registry.host
    counted = {
        kind: operator.metric("imagerefresh_registry_requests_total", registry=host, kind=kind)
        for kind in ("HEAD", "GET", "blob")
    }
    ticks = 3
    for _ in range(ticks):
        operator.tick(ns, POLICY)

    for name in ("legacy-sig-tag", "bundle-fallback-tag"):
        path = pinned.repositories[name].split("/", 1)[1]
        seen = received(front.served[front_mark:], path)
        assert beyond_the_tag(seen) == []
        assert seen.count(("HEAD", "manifests/prod", 200)) == ticks  # each tick asked the tag
    # The referrers registry: the operator counted a HEAD of the tag per tick and nothing else,
    # and the registry logged just those.
    assert {
        kind: operator.metric("imagerefresh_registry_requests_total", registry=host, kind=kind)
        - before
        for kind, before in counted.items()
    } == {"HEAD": ticks, "GET": 0, "blob": 0}
    path = pinned.repositories["bundle-referrers-api"].split("/", 1)[1]
    seen = eventually(
        lambda: (found := logged(referrers_registry, log_mark, path)) and len(found) >= ticks
        and found,
        timeout=10, what="the referrers registry's log of the ticks",
    )  # fmt: skip
    assert seen == [("HEAD", "manifests/prod", 200)] * ticks
    assert operator.metric("imagerefresh_signature_lookups_total") == lookups
    assert all(target_status(cluster, ns, n)["phase"] == "Current" for n in FORMATS)


# --- a restart verifies again --------------------------------------------------------------------


def test_a_restarted_operator_reads_the_signatures_again_before_it_reports_them(
    operator: Operator,
    cluster: Cluster,
    pinned: Pinned,
    signer: Signer,
    referrers_registry: ReferrersRegistry,
) -> None:
    ns, front = pinned.ns, front_of(operator)
    for name in FORMATS:
        settle(operator, cluster, ns, name)
    generations = {name: generation(cluster, ns, name) for name in FORMATS}
    front_mark, log_mark = len(front.served), len(referrers_registry.requests())

    operator.stop()
    operator.start()
    operator.wait_first_tick(ns, POLICY)

    # The new process's first tick read every signature again: no verdict outlived the old one
    # (status holds verifiedBy, and it is not taken for one).
    paths = {name: pinned.repositories[name].split("/", 1)[1] for name in FORMATS}
    legacy, bundle = pinned.digests["legacy-sig-tag"], pinned.digests["bundle-fallback-tag"]
    assert ("HEAD", f"manifests/{legacy_tag(legacy)}", 200) in received(
        front.served[front_mark:], paths["legacy-sig-tag"]
    )
    assert ("HEAD", f"manifests/{fallback_tag(bundle)}", 200) in received(
        front.served[front_mark:], paths["bundle-fallback-tag"]
    )
    referred = pinned.digests["bundle-referrers-api"]
    eventually(
        lambda: (
            ("GET", f"referrers/{referred}", 200)
            in logged(referrers_registry, log_mark, paths["bundle-referrers-api"])
        ),
        timeout=10,
        what="the referrers asked for again",
    )
    assert operator.metric(
        "imagerefresh_signature_lookups_total", registry=referrers_registry.host
    ) == 1  # fmt: skip
    assert operator.metric(
        "imagerefresh_signature_lookups_total", registry=front.host, outcome="verified"
    ) >= 2  # fmt: skip
    for name in FORMATS:
        found = target_status(cluster, ns, name)
        assert (found["phase"], found["containers"][0]["verifiedBy"]) == (
            "Current", signer.fingerprint,
        )  # fmt: skip
        assert generation(cluster, ns, name) == generations[name]  # nothing patched again


# --- no valid signature: Untrusted, untouched; and cosign's opinion ------------------------------


@dataclass(frozen=True)
class Row:
    failure: Failure  # the check the operator names
    cosign_accepts: bool  # what cosign verify --key says of the same artifacts


UNTRUSTED: dict[str, Row] = {
    "unsigned": Row(Failure.NO_SIGNATURE, cosign_accepts=False),
    "signed-by-another-key": Row(Failure.BAD_SIGNATURE, cosign_accepts=False),
    "signature-of-another-digest": Row(Failure.DIGEST_MISMATCH, cosign_accepts=False),
    # cosign verify does not check a legacy payload's repository claim; the operator does.
    "signature-for-another-repository": Row(Failure.REPOSITORY_MISMATCH, cosign_accepts=True),
    "tampered-payload": Row(Failure.BAD_SIGNATURE, cosign_accepts=False),
    # cosign 3.1.3's verify accepts a bundle of any predicate type; an attestation is no signature.
    "attestation-only": Row(Failure.NOT_A_SIGNATURE, cosign_accepts=True),
}


@dataclass(frozen=True)
class Build:
    """What makes one row's build: where it is pushed and how it is (not) signed."""

    pusher: ImagePusher
    signer: Signer
    registry: str
    front: str
    path: str  # the tracked repository's path (namespace/row)
    seed: str

    def push(self, path: str | None = None, tag: str = "prod", seed: str = "") -> str:
        return self.pusher.push(path or self.path, tag, seed=seed or self.seed).digest

    def sign(self, digest: str, path: str | None = None, **options: Any) -> None:
        where = path or self.path
        self.signer.sign(self.registry, where, digest, claim=f"{self.front}/{where}", **options)


def _unsigned(build: Build) -> str:
    return build.push()


def _signed_by_another_key(build: Build) -> str:
    digest = build.push()
    build.sign(digest, key=build.signer.other)
    return digest


def _signature_of_another_digest(build: Build) -> str:
    """Another build's signature stored under this one's .sig tag, as it was made."""
    signed = build.push(tag="signed", seed=f"{build.seed}-signed")
    build.sign(signed)
    digest = build.push()
    copy_manifest(build.registry, build.path, legacy_tag(signed), build.path, legacy_tag(digest))
    return digest


def _signature_for_another_repository(build: Build) -> str:
    """The same build, signed in another repository; its signature copied here."""
    elsewhere = f"{build.path}-elsewhere"
    digest = build.push(path=elsewhere)
    build.sign(digest, path=elsewhere)
    assert build.push() == digest
    copy_manifest(build.registry, elsewhere, legacy_tag(digest), build.path, legacy_tag(digest))
    return digest


def _tampered_payload(build: Build) -> str:
    """Another build's signature whose payload was edited to name this build."""
    signed = build.push(tag="signed", seed=f"{build.seed}-signed")
    build.sign(signed)
    digest = build.push()
    evidence, _ = read_evidence(build.registry, build.path, signed)
    assert evidence is not None
    manifest = json.loads(evidence.manifest)
    (layer,) = manifest["layers"]
    payload = json.loads(evidence.payloads[layer["digest"]])
    payload["critical"]["image"]["docker-manifest-digest"] = digest
    edited = json.dumps(payload, separators=(",", ":")).encode()
    layer.update(digest=build.pusher.put_blob(build.path, edited), size=len(edited))
    body = json.dumps(manifest, separators=(",", ":")).encode()
    build.pusher.put_manifest(build.path, legacy_tag(digest), OCI_MANIFEST, body)
    return digest


def _attestation_only(build: Build) -> str:
    digest = build.push()
    build.signer.attest(build.registry, build.path, digest)
    return digest


BUILDS: dict[str, Callable[[Build], str]] = {
    "unsigned": _unsigned,
    "signed-by-another-key": _signed_by_another_key,
    "signature-of-another-digest": _signature_of_another_digest,
    "signature-for-another-repository": _signature_for_another_repository,
    "tampered-payload": _tampered_payload,
    "attestation-only": _attestation_only,
}


@dataclass(frozen=True)
class Held:
    ns: str
    tags: dict[str, str]  # row → the tracked image (through the front)
    digests: dict[str, str]  # row → the digest its tag answers


@pytest.fixture(scope="module")
def held(operator: Operator, cluster: Cluster, registry: str, signer: Signer) -> Iterator[Held]:
    """One policy over a Deployment per row, each on its tag, the tag answering the row's
    build; the policy's first tick has run."""
    front = front_of(operator)
    with watched_namespace(cluster, "sig-untrusted") as ns:
        pusher = ImagePusher(registry)
        try:
            digests = {
                row: make(Build(pusher, signer, registry, front.host, f"{ns}/{row}", f"{ns}-{row}"))
                for row, make in BUILDS.items()
            }
        finally:
            pusher.close()
        tags = {row: f"{front.host}/{ns}/{row}:prod" for row in UNTRUSTED}
        cluster.apply(
            *(deployment(row, {"app": tag}, replicas=1) for row, tag in tags.items()),
            namespace=ns,
        )
        roll_out(cluster, ns, *tags)
        cluster.apply(
            signed_policy(signer, *(target(row, app=tag) for row, tag in tags.items())),
            namespace=ns,
        )
        operator.wait_first_tick(ns, POLICY)
        yield Held(ns, tags, digests)


@pytest.mark.parametrize("row", list(UNTRUSTED))
def test_a_build_without_a_valid_signature_is_left_untouched_and_untrusted_naming_the_check(
    operator: Operator, cluster: Cluster, held: Held, row: str
) -> None:
    ns, digest, failure = held.ns, held.digests[row], UNTRUSTED[row].failure
    assert images(cluster, ns, row) == {"app": held.tags[row]}
    assert generation(cluster, ns, row) == 1  # never patched
    found = target_status(cluster, ns, row)
    assert found["phase"] == "Untrusted"
    assert f"{digest} carries no valid signature" in found["message"]
    assert f"({failure}: " in found["message"]
    (container,) = found["containers"]
    assert container["desired"] == digest
    assert "verifiedBy" not in container
    messages = warnings(cluster, ns, row, "Untrusted")
    assert any(digest in m and f"({failure}: " in m for m in messages), messages
    assert operator.metric("imagerefresh_target_untrusted", namespace=ns, target=f"{ns}/{row}") == 1


def test_a_policy_with_an_untrusted_target_is_not_ready(cluster: Cluster, held: Held) -> None:
    assert condition(cluster, held.ns, "Ready")["status"] == "False"
    phases = [t["phase"] for t in status(cluster, held.ns)["targets"]]
    assert phases == ["Untrusted"] * len(UNTRUSTED)


# What the operator concluded of each build against what cosign verify --key says; they differ
# only where the operator is stricter on purpose.
KNOWN_DIFFERENCES = {"signature-for-another-repository", "attestation-only"}


@pytest.mark.parametrize("row", [*FORMATS, *UNTRUSTED])
def test_cosign_verify_agrees_with_the_operator_except_where_it_is_stricter_on_purpose(
    cluster: Cluster,
    registry: str,
    referrers_registry: ReferrersRegistry,
    signer: Signer,
    pinned: Pinned,
    held: Held,
    row: str,
) -> None:
    if row in FORMATS:
        ns, digest = pinned.ns, pinned.digests[row]
        host = referrers_registry.host if FORMATS[row][0] == "referrers" else registry
        verdict = target_status(cluster, ns, row)["containers"][0].get("verifiedBy")
        operator_accepts, cosign_expected = verdict == signer.fingerprint, True
    else:
        ns, digest, host = held.ns, held.digests[row], registry
        operator_accepts = target_status(cluster, ns, row)["phase"] != "Untrusted"
        cosign_expected = UNTRUSTED[row].cosign_accepts
    accepted = signer.cosign_accepts(host, f"{ns}/{row}", digest)
    assert accepted is cosign_expected
    assert (operator_accepts == accepted) is (row not in KNOWN_DIFFERENCES)


# --- a forged verifiedBy -------------------------------------------------------------------------


def test_a_forged_verified_by_written_into_status_changes_nothing(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    signer: Signer,
) -> None:
    ns, front = policy_namespace, front_of(operator)
    digest = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-forged").digest
    tag = f"{front.host}/{ns}/app:prod"
    cluster.apply(deployment("app", {"app": tag}, replicas=1), namespace=ns)
    roll_out(cluster, ns, "app")
    cluster.apply(signed_policy(signer, target("app", app=tag)), namespace=ns)
    operator.wait_first_tick(ns, POLICY)
    assert target_status(cluster, ns, "app")["phase"] == "Untrusted"

    # Anyone with update on the status subresource can write this.
    targets = status(cluster, ns)["targets"]
    targets[0]["containers"][0]["verifiedBy"] = signer.fingerprint
    forged = json.dumps({"status": {"targets": targets}})
    cluster.kubectl(
        "patch", "irp", POLICY, "-n", ns, "--subresource=status", "--type=merge", "-p", forged
    )
    assert target_status(cluster, ns, "app")["containers"][0]["verifiedBy"] == signer.fingerprint
    mark = len(front.served)
    operator.tick(ns, POLICY)

    found = target_status(cluster, ns, "app")
    assert found["phase"] == "Untrusted"
    assert "verifiedBy" not in found["containers"][0]  # the report is the operator's own again
    assert images(cluster, ns, "app") == {"app": tag}
    assert generation(cluster, ns, "app") == 1
    # The verdict came from the registry, asked again at the tick asked for.
    seen = received(front.served[mark:], f"{ns}/app")
    assert ("HEAD", f"manifests/{legacy_tag(digest)}", 404) in seen


# --- pods already running an unverified digest ---------------------------------------------------


def test_pods_already_running_an_unverified_digest_are_untrusted_never_current(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    signer: Signer,
) -> None:
    ns, front = policy_namespace, front_of(operator)
    digest = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-running").digest
    tag, at_digest = f"{front.host}/{ns}/app:prod", f"{front.host}/{ns}/app@{digest}"
    annotations = {"imagerefresh.test/image-id.app": at_digest}  # what a kubelet would report
    cluster.apply(
        deployment("adopted", {"app": tag}, replicas=1, annotations=annotations),
        deployment("pinned", {"app": at_digest}, replicas=1),
        namespace=ns,
    )
    roll_out(cluster, ns, "adopted", "pinned")
    cluster.apply(
        signed_policy(signer, target("adopted", app=tag), target("pinned", app=tag)), namespace=ns
    )
    operator.wait_first_tick(ns, POLICY)

    for name, image in (("adopted", tag), ("pinned", at_digest)):
        found = target_status(cluster, ns, name)
        assert found["phase"] == "Untrusted"
        (container,) = found["containers"]
        assert (container["desired"], container["running"]) == (digest, [digest])
        assert "verifiedBy" not in container
        assert images(cluster, ns, name) == {"app": image}
        assert generation(cluster, ns, name) == 1
        assert any(digest in m for m in warnings(cluster, ns, name, "Untrusted"))
    assert condition(cluster, ns, "Ready")["status"] == "False"


# --- a sibling's refresh pins nothing a gate holds ----------------------------------------------


def test_an_unsigned_new_build_stays_on_its_tag_while_its_signed_sibling_refreshes(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    signer: Signer,
) -> None:
    """Both containers on their tags (a fresh install); each tag moves to a new build, the api's
    signed, the sidecar's not. The sidecar stays on its tag: the patch that refreshes the api
    once pinned every container still on a tag to its tag's new digest, unsigned or not."""
    ns, front = policy_namespace, front_of(operator)
    registry = pusher.host
    tags, running = {}, {}
    for name in ("api", "side"):
        running[name] = pusher.push(f"{ns}/{name}", "prod", seed=f"{ns}-{name}-1").digest
        signer.sign(registry, f"{ns}/{name}", running[name], claim=f"{front.host}/{ns}/{name}")
        tags[name] = f"{front.host}/{ns}/{name}:prod"
    annotations = {  # what a kubelet reports for the tags it resolved
        f"imagerefresh.test/image-id.{name}": f"{front.host}/{ns}/{name}@{running[name]}"
        for name in tags
    }
    cluster.apply(deployment("edge", tags, replicas=1, annotations=annotations), namespace=ns)
    roll_out(cluster, ns, "edge")
    signed = pusher.push(f"{ns}/api", "prod", seed=f"{ns}-api-2").digest
    signer.sign(registry, f"{ns}/api", signed, claim=f"{front.host}/{ns}/api")
    unsigned = pusher.push(f"{ns}/side", "prod", seed=f"{ns}-side-2").digest
    cluster.apply(signed_policy(signer, target("edge", **tags)), namespace=ns)
    operator.wait_first_tick(ns, POLICY)

    assert images(cluster, ns, "edge") == {
        "api": f"{front.host}/{ns}/api@{signed}",
        "side": tags["side"],  # never front/side@<unsigned>
    }
    found = target_status(cluster, ns, "edge")
    assert found["phase"] == "Untrusted"
    recorded = found.get("pending", {}).get("images", {})
    assert all(unsigned not in image for image in recorded.values())
    assert any(unsigned in m for m in warnings(cluster, ns, "edge", "Untrusted"))
    assert "WriteRefused" not in event_reasons(cluster, ns, POLICY)


# --- a signature pushed after the build ----------------------------------------------------------


def test_a_signature_pushed_after_the_build_is_remembered_as_missing_until_a_tick_asks_again(
    operator: Operator,
    cluster: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    signer: Signer,
) -> None:
    ns, front = policy_namespace, front_of(operator)
    path = f"{ns}/app"
    repository, claim = f"{front.host}/{path}", f"{front.host}/{path}"
    old = pusher.push(path, "prod", seed=f"{ns}-old").digest
    signer.sign(registry, path, old, claim=claim)
    cluster.apply(
        deployment("app", {"app": f"{repository}@{old}"}, replicas=1),
        deployment("second", {"app": f"{repository}@{old}"}, replicas=1),
        namespace=ns,
    )
    roll_out(cluster, ns, "app", "second")
    new = pusher.push(path, "prod", seed=f"{ns}-new").digest  # pushed unsigned
    cluster.apply(signed_policy(signer, target("app", app=f"{repository}:prod")), namespace=ns)
    operator.wait_first_tick(ns, POLICY)
    found = target_status(cluster, ns, "app")
    assert found["phase"] == "Untrusted"
    assert f"{new} carries no valid signature" in found["message"]
    assert images(cluster, ns, "app") == {"app": f"{repository}@{old}"}

    signer.sign(registry, path, new, claim=claim)  # the signature lands after the build
    # A policy noticed now, on the same tag and keys, takes the remembered verdict (asked
    # again only from the next interval on): no signature request, still Untrusted.
    mark = len(front.served)
    cluster.apply(
        signed_policy(signer, target("second", app=f"{repository}:prod"), name="second"),
        namespace=ns,
    )
    operator.wait_first_tick(ns, "second")
    assert policy_target(cluster, ns, "second", "second")["phase"] == "Untrusted"
    assert beyond_the_tag(received(front.served[mark:], path)) == []

    # A tick asked for asks again at once: the signature is found, the build pinned.
    mark = len(front.served)
    operator.tick(ns, POLICY)
    assert images(cluster, ns, "app") == {"app": f"{repository}@{new}"}
    assert target_status(cluster, ns, "app")["containers"][0]["verifiedBy"] == signer.fingerprint
    assert ("HEAD", f"manifests/{legacy_tag(new)}", 200) in received(front.served[mark:], path)
    # And a verified verdict is shared and final: the other policy's next tick pins it
    # without looking up its signature again (the build it replaces may be looked up: a
    # rollback's target must be verified too).
    mark = len(front.served)
    operator.tick(ns, "second")
    assert images(cluster, ns, "second") == {"app": f"{repository}@{new}"}
    assert about_signatures_of(received(front.served[mark:], path), new) == []


def test_a_tick_asked_for_after_a_signature_lands_takes_no_lookup_that_read_before_it(
    operator: Operator,
    cluster: Cluster,
    registry: str,
    pusher: ImagePusher,
    policy_namespace: str,
    failing_front: HostileRegistry,
    signer: Signer,
) -> None:
    # One policy's lookup reads the .sig tag (nothing there), then the signature lands while
    # that answer is still on its way (the front holds it until the test lets it go).
    ns, path = policy_namespace, f"{policy_namespace}/app"
    repository = f"{failing_front.host}/{path}"
    digest = pusher.push(path, "prod", seed=f"{ns}-in-flight").digest
    cluster.apply(
        deployment("first", {"app": f"{repository}:prod"}, replicas=1),
        deployment("second", {"app": f"{repository}:prod"}, replicas=1),
        namespace=ns,
    )
    roll_out(cluster, ns, "first", "second")
    for name in ("first", "second"):
        cluster.apply(
            signed_policy(signer, target(name, app=f"{repository}:prod"), name=name),
            namespace=ns,
        )
        operator.wait_first_tick(ns, name)
        assert policy_target(cluster, ns, name, name)["phase"] == "Untrusted"
    signature = legacy_tag(digest)
    mark = len(failing_front.received)
    failing_front.hold_next(signature)
    try:
        first = operator.bump(ns, "first")  # asked for: it looks the unsigned digest up again
        eventually(
            lambda: any(signature in r.target for r in failing_front.received[mark:]),
            timeout=30,
            what="the first policy's lookup to read the .sig tag",
        )
        signer.sign(registry, path, digest, claim=repository)
        # Asked for after the signature landed: it looks up on its own and pins the build,
        # while the older lookup's answer is still held.
        operator.tick(ns, "second")
        assert images(cluster, ns, "second") == {"app": f"{repository}@{digest}"}
        held = next(r for r in failing_front.received[mark:] if signature in r.target)
        assert held.completed is None  # the first lookup's answer: still on its way
    finally:
        failing_front.release()
        failing_front.behaviour, failing_front.only = "honest", ""
    operator.wait_answered(ns, "first", first)
    assert policy_target(cluster, ns, "first", "first")["phase"] == "Untrusted"  # read before
    # The older "unsigned", landing last, undoes nothing: the rollout is judged by follow-up
    # ticks nobody asked for, which take the remembered verdict.
    settled = eventually(
        lambda: (found := policy_target(cluster, ns, "second", "second"))["phase"] == "Current"
        and found,
        timeout=60, what="the second policy's rollout judged Current",
    )  # fmt: skip
    assert settled["containers"][0]["verifiedBy"] == signer.fingerprint


# --- a registry failing the signature lookup -----------------------------------------------------


def test_a_registry_failing_the_signature_lookup_degrades_the_target_and_nothing_is_patched(
    operator: Operator,
    cluster: Cluster,
    pusher: ImagePusher,
    policy_namespace: str,
    failing_front: HostileRegistry,
    signer: Signer,
) -> None:
    ns = policy_namespace
    digest = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-failing").digest
    tag = f"{failing_front.host}/{ns}/app:prod"
    cluster.apply(deployment("app", {"app": tag}, replicas=1), namespace=ns)
    roll_out(cluster, ns, "app")
    signature_tag = legacy_tag(digest)
    failing_front.behaviour, failing_front.only, failing_front.status = "status", signature_tag, 500
    try:
        cluster.apply(signed_policy(signer, target("app", app=tag)), namespace=ns)
        operator.wait_first_tick(ns, POLICY)
        found = target_status(cluster, ns, "app")
        assert found["phase"] == "Error"
        assert "could not be read" in found["message"]
        assert condition(cluster, ns, "Degraded")["status"] == "True"
        assert any(digest[:19] in m for m in warnings(cluster, ns, "app", "SignaturesUnreadable"))
        assert images(cluster, ns, "app") == {"app": tag}
        assert generation(cluster, ns, "app") == 1
        answered = [r.status for r in failing_front.received if signature_tag in r.target]
        assert answered
        assert set(answered) == {500}
        assert operator.metric(
            "imagerefresh_signature_lookups_total",
            registry=failing_front.host,
            outcome="unreadable",
        ) == 1  # fmt: skip
    finally:
        failing_front.behaviour, failing_front.only = "honest", ""
    # The same registry answering "not found" everywhere: unsigned, not unreadable.
    operator.tick(ns, POLICY)
    found = target_status(cluster, ns, "app")
    assert found["phase"] == "Untrusted"
    assert f"({Failure.NO_SIGNATURE}: " in found["message"]
    assert condition(cluster, ns, "Degraded")["status"] == "False"
    assert images(cluster, ns, "app") == {"app": tag}
