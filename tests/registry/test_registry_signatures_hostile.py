"""Signature lookups against a hostile registry: refused as RegistryErrors, or judged, never
believed.

:class:`~support.hostile_registry.HostileRegistry` stands before a real registry holding real
cosign signatures (support/signed_images.py) and misbehaves for one request singled out by its
path — the signature manifest, a blob, the referrers endpoint. What must not be read at all (a
body over its cap, a manifest not hashing to its digest, a redirect to plain HTTP, a 5xx, a 429)
is a :class:`~imagerefresh.registry.RegistryError` of the documented kind, never evidence and
never another exception; a blob that is not what its descriptor names is handed over, and the
verifier refuses it. Each test also asserts what the front received.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

import httpx
import pytest

from imagerefresh.reference import ImageReference, parse
from imagerefresh.registry import (
    RegistryAuthError,
    RegistryClient,
    RegistryError,
    RegistryProtocolError,
    RegistryServerError,
    RegistryThrottled,
    RegistryTimeout,
)
from imagerefresh.signatures import (
    MAX_BUNDLE_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_PAYLOAD_BYTES,
    BundleEvidence,
    Failure,
    LegacyEvidence,
    Untrusted,
    Verdict,
    Verified,
    fallback_tag,
    legacy_tag,
    verify,
)

from support.hostile_registry import HostileRegistry
from support.referrers_env import ReferrersRegistry
from support.registry_env import client_for, free_port
from support.signed_images import PATH, SignedImages

pytestmark = pytest.mark.registry

OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def tracked(host: str) -> ImageReference:
    return parse(f"{host}/{PATH}:tracked")


def manifest_digest(host: str, reference: str) -> str:
    """The digest of the manifest ``reference`` names, as the registry itself answers."""
    answer = httpx.get(
        f"http://{host}/v2/{PATH}/manifests/{reference}",
        headers={"Accept": f"{OCI_INDEX}, application/vnd.oci.image.manifest.v1+json"},
    )
    answer.raise_for_status()
    return "sha256:" + hashlib.sha256(answer.content).hexdigest()


def judged(
    signed: SignedImages,
    digest: str,
    legacy: LegacyEvidence | None,
    bundles: Sequence[BundleEvidence],
) -> Verdict:
    """The verdict on what was read, for the repository the signatures name."""
    reference = tracked(signed.hosts["distribution"])
    return verify(digest, reference, [signed.main], legacy=legacy, bundles=bundles)


@pytest.fixture
def before_referrers(referrers_registry: ReferrersRegistry) -> Iterator[HostileRegistry]:
    """A hostile front before the registry with the referrers API."""
    front = HostileRegistry(referrers_registry.host).start()
    yield front
    front.stop()


# --- bodies over their caps ------------------------------------------------------------------


async def test_a_signature_manifest_over_its_cap_is_refused_while_it_is_read(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    digest = cosign_signed.digest("distribution", "legacy")
    signature = manifest_digest(hostile.backend, legacy_tag(digest))
    hostile.behaviour, hostile.only = "oversized-get", signature
    hostile.body_bytes = MAX_MANIFEST_BYTES + 1
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError, match=f"over the {MAX_MANIFEST_BYTES}-byte cap"):
            await client.legacy_signature(tracked(hostile.host), digest)
    assert [(r.method, r.target.rsplit("/", 1)[1]) for r in hostile.received] == [
        ("HEAD", legacy_tag(digest)),
        ("GET", signature),
    ]


@pytest.mark.parametrize(
    ("case", "cap"), [("legacy", MAX_PAYLOAD_BYTES), ("bundle", MAX_BUNDLE_BYTES)]
)
async def test_a_blob_is_read_up_to_its_cap_and_handed_over_one_byte_more_is_refused(
    cosign_signed: SignedImages, hostile: HostileRegistry, case: str, cap: int
) -> None:
    digest = cosign_signed.digest("distribution", case)
    hostile.behaviour, hostile.only, hostile.body_bytes = "oversized-get", "/blobs/", cap
    async with client_for(hostile.host) as client:
        legacy = await client.legacy_signature(tracked(hostile.host), digest)
        bundles = await client.bundle_signatures(tracked(hostile.host), digest)
        read = [*(legacy.payloads.values() if legacy else ()), *(b.bundle for b in bundles)]
        assert [len(blob or b"") for blob in read] == [cap]  # handed over whole
        verdict = judged(cosign_signed, digest, legacy, bundles)
        assert isinstance(verdict, Untrusted)
        assert (verdict.failure, verdict.format) == (Failure.PAYLOAD_HASH_MISMATCH, case)
        hostile.body_bytes = cap + 1
        with pytest.raises(RegistryProtocolError, match=f"over the {cap}-byte cap"):
            await (
                client.legacy_signature(tracked(hostile.host), digest)
                if case == "legacy"
                else client.bundle_signatures(tracked(hostile.host), digest)
            )


@pytest.mark.parametrize("size", [MAX_MANIFEST_BYTES, MAX_MANIFEST_BYTES + 1])
async def test_a_referrers_index_over_its_cap_is_refused_and_one_at_it_is_read(
    cosign_signed: SignedImages, before_referrers: HostileRegistry, size: int
) -> None:
    # No hash to check a referrers answer against: the cap alone bounds it. At the cap it is
    # read (and found to be no index); one byte more and it is not read to the end.
    digest = cosign_signed.digest("referrers", "bundle")
    front = before_referrers
    front.behaviour, front.only, front.body_bytes = "oversized-get", "/referrers/", size
    async with client_for(front.host) as client:
        with pytest.raises(RegistryProtocolError) as refused:
            await client.bundle_signatures(tracked(front.host), digest)
    if size > MAX_MANIFEST_BYTES:
        assert f"over the {MAX_MANIFEST_BYTES}-byte cap" in str(refused.value)
    else:
        assert "an index that cannot be read" in str(refused.value)
    assert "fix the registry" in str(refused.value)
    assert [r.method for r in front.received] == ["GET"]


# --- content that is not what it was asked by -----------------------------------------------


def _singled_out(signed: SignedImages, which: str) -> tuple[str, str]:
    """(digest, the path fragment to single out) for a manifest asked for by digest."""
    host = signed.hosts["distribution"]
    if which == "signature manifest":
        digest = signed.digest("distribution", "legacy")
        return digest, manifest_digest(host, legacy_tag(digest))
    digest = signed.digest("distribution", "bundle")
    index = httpx.get(f"http://{host}/v2/{PATH}/manifests/{fallback_tag(digest)}",
                      headers={"Accept": OCI_INDEX})  # fmt: skip
    if which == "fallback index":
        return digest, "sha256:" + hashlib.sha256(index.content).hexdigest()
    return digest, index.json()["manifests"][0]["digest"]  # the referrer


@pytest.mark.parametrize("which", ["signature manifest", "fallback index", "referrer"])
async def test_a_manifest_that_does_not_hash_to_its_digest_is_refused(
    cosign_signed: SignedImages, hostile: HostileRegistry, which: str
) -> None:
    digest, singled_out = _singled_out(cosign_signed, which)
    hostile.behaviour, hostile.only = "tampered-get", singled_out
    async with client_for(hostile.host) as client:
        lookup = (
            client.legacy_signature if which == "signature manifest" else client.bundle_signatures
        )
        with pytest.raises(RegistryProtocolError, match="does not hash to it") as refused:
            await lookup(tracked(hostile.host), digest)
    assert refused.value.reference == str(tracked(hostile.host))
    assert hostile.received[-1].target.endswith(singled_out)  # nothing asked after it


@pytest.mark.parametrize("case", ["legacy", "bundle"])
async def test_a_blob_that_is_not_what_its_descriptor_names_is_handed_over_and_refused(
    cosign_signed: SignedImages, hostile: HostileRegistry, case: str
) -> None:
    digest = cosign_signed.digest("distribution", case)
    hostile.behaviour, hostile.only = "tampered-get", "/blobs/"
    async with client_for(hostile.host) as client:
        legacy = await client.legacy_signature(tracked(hostile.host), digest)
        bundles = await client.bundle_signatures(tracked(hostile.host), digest)
    verdict = judged(cosign_signed, digest, legacy, bundles)
    assert isinstance(verdict, Untrusted)
    assert (verdict.failure, verdict.format) == (Failure.PAYLOAD_HASH_MISMATCH, case)


async def test_a_missing_blob_is_absence_handed_over_not_an_error(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    digest = cosign_signed.digest("distribution", "legacy")
    hostile.behaviour, hostile.only, hostile.status = "status", "/blobs/", 404
    async with client_for(hostile.host) as client:
        legacy = await client.legacy_signature(tracked(hostile.host), digest)
    assert legacy is not None
    assert legacy.payloads == {}
    verdict = judged(cosign_signed, digest, legacy, ())
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.MALFORMED
    assert "was not read" in verdict.detail


# --- redirects, server errors, refusals, throttling, the deadline ----------------------------


async def test_a_blob_redirected_to_plain_http_is_refused_and_not_followed(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    digest = cosign_signed.digest("distribution", "legacy")
    hostile.behaviour, hostile.only = "redirect-get", "/blobs/"
    hostile.redirect_to = f"http://127.0.0.1:{free_port()}"  # not on the insecure list
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError, match="a redirect never leaves HTTPS"):
            await client.legacy_signature(tracked(hostile.host), digest)
    assert [r.status for r in hostile.received if "/blobs/" in r.target] == [302]


@pytest.mark.parametrize("where", ["signature tag", "referrers", "blob"])
async def test_a_server_error_is_retried_then_a_registry_error_never_absence(
    cosign_signed: SignedImages, hostile: HostileRegistry, where: str
) -> None:
    case = "bundle" if where == "referrers" else "legacy"
    digest = cosign_signed.digest("distribution", case)
    hostile.behaviour, hostile.status = "status", 500
    hostile.only = {"signature tag": ".sig", "referrers": "/referrers/", "blob": "/blobs/"}[where]
    async with client_for(hostile.host, retries=2) as client:
        lookup = client.bundle_signatures if where == "referrers" else client.legacy_signature
        with pytest.raises(RegistryServerError, match=r"failed .* with 500") as failed:
            await lookup(tracked(hostile.host), digest)
        # A 500 is no answer: the registry is not taken to lack the referrers API.
        assert not client.no_referrers_api.lacks(hostile.host)
    assert failed.value.reference == str(tracked(hostile.host))
    assert [r.status for r in hostile.received if hostile.only in r.target] == [500] * 3


async def test_a_refused_signature_tag_is_an_auth_error_with_advice(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    hostile.behaviour, hostile.only, hostile.status = "status", ".sig", 403
    digest = cosign_signed.digest("distribution", "legacy")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryAuthError, match="give the pull secret's account read"):
            await client.legacy_signature(tracked(hostile.host), digest)


async def test_a_429_pauses_the_registry_for_signature_lookups_too(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    hostile.behaviour, hostile.retry_after = "throttle", "120"
    digest = cosign_signed.digest("distribution", "legacy")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryThrottled, match="429"):
            await client.legacy_signature(tracked(hostile.host), digest)
        with pytest.raises(RegistryThrottled, match="paused"):
            await client.bundle_signatures(tracked(hostile.host), digest)
    assert len(hostile.received) == 1  # the paused registry was asked nothing more


async def test_a_dripping_registry_ends_a_lookup_at_its_total_deadline(
    cosign_signed: SignedImages, hostile: HostileRegistry
) -> None:
    hostile.behaviour = "drip-head"
    digest = cosign_signed.digest("distribution", "legacy")
    async with client_for(hostile.host, timeout=10.0, deadline=1.0) as client:
        with pytest.raises(RegistryTimeout, match="within the 1s deadline"):
            await client.legacy_signature(tracked(hostile.host), digest)


# --- what says a registry has no referrers API ------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "status"), [("status", 400), ("status", 406), ("html-get", 0)]
)
async def test_a_referrers_answer_that_is_no_index_means_no_api_and_the_fallback_tag_is_read(
    cosign_signed: SignedImages, hostile: HostileRegistry, behaviour: str, status: int
) -> None:
    # As go-containerregistry reads (and cosign writes): 400, 404, 406, or a 200 that is not
    # an OCI index, and the fallback tag holds the referrers.
    digest = cosign_signed.digest("distribution", "bundle")
    hostile.behaviour, hostile.only, hostile.status = behaviour, "/referrers/", status
    async with client_for(hostile.host) as client:
        bundles = await client.bundle_signatures(tracked(hostile.host), digest)
        assert client.no_referrers_api.lacks(hostile.host)
    assert isinstance(judged(cosign_signed, digest, None, bundles), Verified)
    assert f"/manifests/{fallback_tag(digest)}" in [
        r.target.split(PATH)[1] for r in hostile.received
    ]


async def test_every_failure_is_a_registry_error_naming_the_lookup(
    cosign_signed: SignedImages,
) -> None:
    # A registry that is not there at all.
    host = f"127.0.0.1:{free_port()}"
    digest = cosign_signed.digest("distribution", "legacy")
    async with RegistryClient(insecure_registries=[host], retries=0) as client:
        for lookup in (client.legacy_signature, client.bundle_signatures):
            with pytest.raises(RegistryError) as failed:
                await lookup(tracked(host), digest)
            assert failed.value.reference == str(tracked(host))
            assert "check the address" in str(failed.value)
