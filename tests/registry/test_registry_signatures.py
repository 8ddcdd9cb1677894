"""The registry client reads what real cosign stored, on both kinds of registry.

Images are signed by the pinned cosign (support/signed_images.py) on distribution 2.8, which has
no referrers API (bundles under the fallback tag ``sha256-<hex>``), and on
go-containerregistry's registry, which has it (bundles attached through it). What the client
reads is handed to :func:`imagerefresh.signatures.verify`. Every request count is asserted
twice: as the client counted it (its observer and ledger) and as the registry received it —
the counting front before distribution (:class:`~support.hostile_registry.HostileRegistry`,
``honest``) or the referrers registry's own access log.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

import httpx
import pytest

from imagerefresh.ratelimit import RequestKind
from imagerefresh.reference import ImageReference, parse
from imagerefresh.registry import RegistryClient
from imagerefresh.registry.signatures import REFERRERS_MEMORY_SECONDS, NoReferrersApi
from imagerefresh.signatures import (
    BUNDLE_MEDIA_TYPE,
    MAX_CANDIDATES,
    MAX_PAYLOAD_BYTES,
    SIMPLE_SIGNING,
    BundleEvidence,
    Failure,
    LegacyEvidence,
    PublicKey,
    Untrusted,
    Verified,
    bundle_layer,
    fallback_tag,
    legacy_tag,
    signature_layers,
    verify,
)

from support.cluster_env import eventually
from support.hostile_registry import HostileRegistry
from support.hub_front import HubFront
from support.referrers_env import ReferrersRegistry
from support.registry_env import FakeClock, ImagePusher, client_for
from support.signed_images import PATH, SignedImages

pytestmark = pytest.mark.registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"

Seen = tuple[str, str, int]  # (method, path below /v2/<repository>/, status)
Observed = list[tuple[str, RequestKind, str]]


class _Request(Protocol):
    @property
    def method(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def status(self) -> int: ...


def seen(requests: Sequence[_Request], path: str = PATH) -> list[Seen]:
    """The requests a registry received, as (method, path below the repository, status)."""
    prefix = f"/v2/{path}/"
    return [(r.method, r.target.removeprefix(prefix), r.status) for r in requests]


def kinds(requests: list[Seen]) -> list[tuple[RequestKind, str]]:
    """What the client should have counted for these requests: their kinds and statuses."""

    def kind(method: str, what: str) -> RequestKind:
        if method == "HEAD":
            return RequestKind.HEAD
        return RequestKind.BLOB if what.startswith("blobs/") else RequestKind.GET

    return [(kind(method, what), str(status)) for method, what, status in requests]


def assert_counted(
    client: RegistryClient, host: str, observed: Observed, received: list[Seen]
) -> None:
    """The client counted, in its observer (the metrics) and its ledger, exactly the requests
    the registry received, each under its kind."""
    assert [(kind, outcome) for _, kind, outcome in observed] == kinds(received)
    budget = client.ledger.budget(host, "anonymous")
    assert budget.requests == Counter(kind for kind, _ in kinds(received))


def sha256(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def tracked(host: str, path: str = PATH) -> ImageReference:
    return parse(f"{host}/{path}:tracked")


def observing(observed: Observed) -> Callable[[str, RequestKind, str], None]:
    return lambda host, kind, outcome: observed.append((host, kind, outcome))


async def read_both(
    client: RegistryClient, reference: ImageReference, digest: str
) -> tuple[LegacyEvidence | None, tuple[BundleEvidence, ...]]:
    return (
        await client.legacy_signature(reference, digest),
        await client.bundle_signatures(reference, digest),
    )


def logged_since(
    registry: ReferrersRegistry, mark: int, count: int, path: str = PATH
) -> list[Seen]:
    """The requests the registry logged after the first ``mark``, once ``count`` are there
    (it logs a request just after answering it)."""
    eventually(lambda: len(registry.requests()) - mark >= count, timeout=10, what="the log")
    return seen(registry.requests()[mark:], path)


# --- what the client reads verifies ----------------------------------------------------------


@pytest.mark.parametrize("where", ["distribution", "referrers"])
@pytest.mark.parametrize("case", ["legacy", "bundle"])
async def test_real_cosign_signatures_read_by_the_client_verify_under_the_signing_key_only(
    cosign_signed: SignedImages, where: str, case: str
) -> None:
    host, digest = cosign_signed.hosts[where], cosign_signed.digest(where, case)
    reference = tracked(host)
    async with client_for(host) as client:
        legacy, bundles = await read_both(client, reference, digest)
    # cosign 3 writes one format per signing; the other place holds nothing.
    assert (legacy is not None, len(bundles)) == ((True, 0) if case == "legacy" else (False, 1))

    def verdict(key: PublicKey) -> Verified | Untrusted:
        return verify(digest, reference, [key], legacy=legacy, bundles=bundles)

    main = cosign_signed.main
    assert verdict(main) == Verified(digest=digest, key=main.fingerprint, format=case)
    refused = verdict(cosign_signed.other)
    assert isinstance(refused, Untrusted)
    assert (refused.failure, refused.format) == (Failure.BAD_SIGNATURE, case)


def test_cosign_3_attaches_bundles_through_the_referrers_api_where_there_is_one(
    cosign_signed: SignedImages,
) -> None:
    digest = cosign_signed.digest("referrers", "bundle")
    base = f"http://{cosign_signed.hosts['referrers']}/v2/{PATH}"
    with httpx.Client(base_url=base, timeout=10) as http:
        listed = http.get(f"/referrers/{digest}", headers={"Accept": OCI_INDEX})
        assert listed.headers["content-type"] == OCI_INDEX
        (entry,) = listed.json()["manifests"]
        # The registry lists the config's type, the empty one (cosign #4422): no filtering on it.
        assert entry["artifactType"] == OCI_EMPTY
        assert http.head(f"/manifests/{fallback_tag(digest)}").status_code == 404  # no tag


# --- what each lookup costs, as the registry received it -----------------------------------


def _distribution_expected(
    signed: SignedImages, case: str, digest: str, legacy: LegacyEvidence | None,
    bundles: tuple[BundleEvidence, ...],
) -> list[Seen]:  # fmt: skip
    if legacy is not None:
        (layer,) = signature_layers(legacy.manifest)
        reads_legacy = [
            ("HEAD", f"manifests/{legacy_tag(digest)}", 200),
            ("GET", f"manifests/{sha256(legacy.manifest)}", 200),
            ("GET", f"blobs/{layer.digest}", 200),
        ]
    else:
        reads_legacy = [("HEAD", f"manifests/{legacy_tag(digest)}", 404)]
    reads_bundles: list[Seen] = [("GET", f"referrers/{digest}", 404)]
    if not bundles:
        return [*reads_legacy, *reads_bundles, ("HEAD", f"manifests/{fallback_tag(digest)}", 404)]
    (found,) = bundles
    index = httpx.get(
        f"http://{signed.hosts['distribution']}/v2/{PATH}/manifests/{fallback_tag(digest)}",
        headers={"Accept": OCI_INDEX},
    ).content
    return [
        *reads_legacy,
        *reads_bundles,
        ("HEAD", f"manifests/{fallback_tag(digest)}", 200),
        ("GET", f"manifests/{sha256(index)}", 200),
        ("GET", f"manifests/{sha256(found.manifest)}", 200),
        ("GET", f"blobs/{bundle_layer(found.manifest, digest=digest).digest}", 200),
    ]


@pytest.mark.parametrize("case", ["legacy", "bundle", "unsigned"])
async def test_on_distribution_a_head_comes_first_and_bundles_come_from_the_fallback_tag(
    cosign_signed: SignedImages, hostile: HostileRegistry, case: str
) -> None:
    digest = cosign_signed.digest("distribution", case)
    observed: Observed = []
    async with client_for(hostile.host, observer=observing(observed)) as client:
        legacy, bundles = await read_both(client, tracked(hostile.host), digest)
    received = seen(hostile.received)
    assert received == _distribution_expected(cosign_signed, case, digest, legacy, bundles)
    assert_counted(client, hostile.host, observed, received)


@pytest.mark.parametrize("case", ["legacy", "bundle", "unsigned"])
async def test_with_the_referrers_api_bundles_cost_one_get_and_no_tag_is_asked_for(
    cosign_signed: SignedImages, referrers_registry: ReferrersRegistry, case: str
) -> None:
    host, digest = referrers_registry.host, cosign_signed.digest("referrers", case)
    observed: Observed = []
    mark = len(referrers_registry.requests())
    async with client_for(host, observer=observing(observed)) as client:
        legacy, bundles = await read_both(client, tracked(host), digest)
    received = logged_since(referrers_registry, mark, len(observed))
    if legacy is None:
        expected = [("HEAD", f"manifests/{legacy_tag(digest)}", 404)]
    else:
        (layer,) = signature_layers(legacy.manifest)
        expected = [
            ("HEAD", f"manifests/{legacy_tag(digest)}", 200),
            ("GET", f"manifests/{sha256(legacy.manifest)}", 200),
            ("GET", f"blobs/{layer.digest}", 200),
        ]
    expected.append(("GET", f"referrers/{digest}", 200))  # an empty index when unsigned
    for found in bundles:
        expected.append(("GET", f"manifests/{sha256(found.manifest)}", 200))
        expected.append(("GET", f"blobs/{bundle_layer(found.manifest, digest=digest).digest}", 200))
    assert received == expected
    assert_counted(client, host, observed, received)
    assert not client.no_referrers_api.lacks(host)


async def test_an_unsigned_digest_is_two_heads_and_one_referrers_get_then_two_heads(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    # Steady state on a registry without the referrers API: nothing is pulled for a digest
    # that has no signature, and the referrers API is not asked again.
    digest = cosign_signed.digest("distribution", "unsigned")
    async with client_for(hostile.host) as client:
        first = await read_both(client, tracked(hostile.host), digest)
        hostile.received.clear()
        again = await read_both(client, tracked(hostile.host), digest)
        budget = client.ledger.budget(hostile.host, "anonymous")
    assert first == again == (None, ())
    assert seen(hostile.received) == [
        ("HEAD", f"manifests/{legacy_tag(digest)}", 404),
        ("HEAD", f"manifests/{fallback_tag(digest)}", 404),
    ]
    assert budget.requests[RequestKind.GET] == 1  # the first referrers GET, never again


# --- the registries without the referrers API are remembered, for a while -------------------


async def test_a_registry_without_the_referrers_api_is_not_asked_again_for_an_hour(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    clock = FakeClock()
    legacy, bundle = (cosign_signed.digest("distribution", c) for c in ("legacy", "bundle"))
    reference = tracked(hostile.host)
    async with client_for(hostile.host, clock=clock) as client:
        await client.bundle_signatures(reference, legacy)
        clock.now += REFERRERS_MEMORY_SECONDS - 1
        found = await client.bundle_signatures(reference, bundle)  # another digest, same host
        referrers_gets = [w for m, w, _ in seen(hostile.received) if w.startswith("referrers/")]
        assert referrers_gets == [f"referrers/{legacy}"]
        assert len(found) == 1  # found under the fallback tag all the same
        clock.now += 1
        await client.bundle_signatures(reference, legacy)
    referrers_gets = [w for m, w, _ in seen(hostile.received) if w.startswith("referrers/")]
    assert referrers_gets == [f"referrers/{legacy}", f"referrers/{legacy}"]  # asked anew


async def test_what_is_remembered_is_the_registry_not_the_repository_or_another_registry(
    cosign_signed: SignedImages, hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    other = pusher.push("signed/other", "v1", seed="other-repository").digest
    digest = cosign_signed.digest("distribution", "unsigned")
    direct = cosign_signed.hosts["distribution"]
    async with client_for(hostile.host, direct) as client:
        await client.bundle_signatures(tracked(hostile.host), digest)
        await client.bundle_signatures(tracked(hostile.host, "signed/other"), other)
        assert not client.no_referrers_api.lacks(direct)
        await client.bundle_signatures(tracked(direct), digest)
        assert client.no_referrers_api.lacks(direct)
    referrers_gets = [r for r in hostile.received if "/referrers/" in r.target]
    assert len(referrers_gets) == 1


def test_the_memory_of_registries_without_the_api_is_bounded_least_recent_first() -> None:
    clock = FakeClock()
    memory = NoReferrersApi(clock, capacity=2)
    for host in ("a.example", "b.example", "c.example"):
        memory.remember(host)
    assert [memory.lacks(h) for h in ("a.example", "b.example", "c.example")] == [
        False, True, True,
    ]  # fmt: skip
    assert len(memory) == 2
    clock.now += REFERRERS_MEMORY_SECONDS
    assert not memory.lacks("b.example")
    assert len(memory) == 1  # an expired entry is dropped when asked about


# --- Docker Hub: tokens and the pull budget --------------------------------------------------


async def test_behind_docker_hub_a_signature_costs_one_pull_blobs_none_and_no_extra_token(
    cosign_signed: SignedImages, hub_front: HubFront
) -> None:
    digest = cosign_signed.digest("distribution", "legacy")
    reference = tracked(hub_front.host)
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        await client.resolve(parse(f"{hub_front.host}/{PATH}:legacy"))
        legacy, bundles = await read_both(client, reference, digest)
        budget = client.ledger.budget(hub_front.host, "anonymous")
    served = [(r.kind, r.method, r.status) for r in hub_front.served if r.status != 401]
    assert served.count(("token", "GET", 200)) == 1  # one token for the repository's scope
    # Docker Hub charged the one manifest GET that answered: the .sig manifest's.
    assert hub_front.remaining_for("anonymous") == hub_front.remaining - 1
    assert ("other", "GET", 200) in served  # the payload blob, not charged
    assert budget.requests[RequestKind.BLOB] == 1
    # The ledger charges every GET it sent — the .sig manifest, the referrers GET (answered
    # 404 here) and the GETs a 401 challenged — never the blob.
    gets = [r for r in hub_front.served if r.method == "GET" and r.kind != "token"]
    assert budget.requests[RequestKind.GET] == len(gets) - 1
    assert budget.report is not None
    assert budget.report.remaining == hub_front.remaining_for("anonymous")
    verdict = verify(digest, tracked(cosign_signed.hosts["distribution"]), [cosign_signed.main],
                     legacy=legacy, bundles=bundles)  # fmt: skip
    assert isinstance(verdict, Verified)


# --- bounds ------------------------------------------------------------------------------------


def _oci_manifest(layers: list[dict[str, object]], **extra: object) -> bytes:
    config = {"mediaType": OCI_EMPTY, "size": 2, "digest": sha256(b"{}")}
    document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config,
                "layers": layers, **extra}  # fmt: skip
    return json.dumps(document).encode()


async def test_at_most_sixteen_signature_layers_are_read(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    digest = pusher.push("signed/many-layers", "v1", seed="many-layers").digest
    pusher.put_blob("signed/many-layers", b"{}")
    layers = []
    for n in range(MAX_CANDIDATES + 4):
        body = b'{"layer": %d}' % n
        layers.append({"mediaType": SIMPLE_SIGNING, "size": len(body),
                       "digest": pusher.put_blob("signed/many-layers", body)})  # fmt: skip
    pusher.put_manifest("signed/many-layers", legacy_tag(digest), OCI_MANIFEST,
                        _oci_manifest(layers))  # fmt: skip
    async with client_for(hostile.host) as client:
        legacy = await client.legacy_signature(tracked(hostile.host, "signed/many-layers"), digest)
    assert legacy is not None
    assert list(legacy.payloads) == [layer["digest"] for layer in layers[:MAX_CANDIDATES]]
    blobs = [r for r in hostile.received if "/blobs/" in r.target]
    assert len(blobs) == MAX_CANDIDATES


async def test_at_most_sixteen_referrers_are_read(referrers_registry: ReferrersRegistry) -> None:
    path, host = "signed/many-referrers", referrers_registry.host
    pusher = ImagePusher(host)
    try:
        digest = pusher.push(path, "v1", seed="many-referrers").digest
        pusher.put_blob(path, b"{}")
        for n in range(MAX_CANDIDATES + 4):
            blob = b'{"referrer": %d}' % n
            layer = {"mediaType": BUNDLE_MEDIA_TYPE, "size": len(blob),
                     "digest": pusher.put_blob(path, blob)}  # fmt: skip
            subject = {"mediaType": OCI_MANIFEST, "size": 1, "digest": digest}
            body = _oci_manifest([layer], artifactType=BUNDLE_MEDIA_TYPE, subject=subject)
            pusher.put_manifest(path, sha256(body), OCI_MANIFEST, body)
    finally:
        pusher.close()
    mark = len(referrers_registry.requests())
    observed: Observed = []
    async with client_for(host, observer=observing(observed)) as client:
        bundles = await client.bundle_signatures(tracked(host, path), digest)
    received = logged_since(referrers_registry, mark, len(observed), path)
    assert len(bundles) == MAX_CANDIDATES
    assert all(found.bundle is not None for found in bundles)
    assert [w.split("/")[0] for _, w, _ in received].count("manifests") == MAX_CANDIDATES
    assert [w.split("/")[0] for _, w, _ in received].count("blobs") == MAX_CANDIDATES


async def test_only_blobs_a_verifier_could_accept_are_asked_for_each_once(
    referrers_registry: ReferrersRegistry,
) -> None:
    # A digest that is not sha256 (or not a digest at all) never reaches a URL; a layer whose
    # descriptor is over the cap is refused by the verifier on its descriptor alone. (This
    # registry stores such a manifest; distribution refuses it.)
    path, host = "signed/odd-layers", referrers_registry.host
    pusher = ImagePusher(host)
    good = b'{"critical": {}}'
    try:
        digest = pusher.push(path, "v1", seed="odd-layers").digest
        good_digest = pusher.put_blob(path, good)
        layers: list[dict[str, object]] = [
            {"mediaType": SIMPLE_SIGNING, "size": len(good), "digest": good_digest},
            {"mediaType": SIMPLE_SIGNING, "size": len(good), "digest": good_digest},
            {"mediaType": SIMPLE_SIGNING, "size": 10, "digest": "sha256:../../../v2/_catalog"},
            {"mediaType": SIMPLE_SIGNING, "size": 10, "digest": "sha512:" + "ab" * 64},
            {"mediaType": SIMPLE_SIGNING, "size": MAX_PAYLOAD_BYTES + 1, "digest": sha256(b"x")},
        ]
        pusher.put_manifest(path, legacy_tag(digest), OCI_MANIFEST, _oci_manifest(layers))
    finally:
        pusher.close()
    mark = len(referrers_registry.requests())
    observed: Observed = []
    async with client_for(host, observer=observing(observed)) as client:
        legacy = await client.legacy_signature(tracked(host, path), digest)
    assert legacy is not None
    assert legacy.payloads == {good_digest: good}
    received = logged_since(referrers_registry, mark, len(observed), path)
    assert [w for _, w, _ in received if w.startswith("blobs/")] == [f"blobs/{good_digest}"]


async def test_a_referrer_that_is_no_bundle_is_handed_over_without_a_blob(
    referrers_registry: ReferrersRegistry,
) -> None:
    path, host = "signed/not-a-bundle", referrers_registry.host
    pusher = ImagePusher(host)
    try:
        digest = pusher.push(path, "v1", seed="not-a-bundle").digest
        pusher.put_blob(path, b"{}")
        sbom = b'{"spdxVersion": "SPDX-2.3"}'
        layer = {"mediaType": "application/spdx+json", "size": len(sbom),
                 "digest": pusher.put_blob(path, sbom)}  # fmt: skip
        subject = {"mediaType": OCI_MANIFEST, "size": 1, "digest": digest}
        body = _oci_manifest([layer], subject=subject)
        pusher.put_manifest(path, sha256(body), OCI_MANIFEST, body)
    finally:
        pusher.close()
    mark = len(referrers_registry.requests())
    observed: Observed = []
    async with client_for(host, observer=observing(observed)) as client:
        bundles = await client.bundle_signatures(tracked(host, path), digest)
    assert bundles == (BundleEvidence(manifest=body),)
    received = logged_since(referrers_registry, mark, len(observed), path)
    assert [(m, w.split("/")[0]) for m, w, _ in received] == [
        ("GET", "referrers"), ("GET", "manifests"),
    ]  # fmt: skip
    verdict = verify(digest, tracked(host, path), [], bundles=bundles)
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.NO_SIGNATURE
