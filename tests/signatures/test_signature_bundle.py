"""Sigstore bundles attached as referrers: the success case, and each check that turns one away.

Every row builds the referrer ``cosign sign`` would push (an OCI manifest whose subject is
the image, one bundle layer, a DSSE envelope of an in-toto Statement signed over DSSE's
pre-authentication encoding), changes one thing, and names the check that must catch it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest

from imagerefresh.reference import parse
from imagerefresh.signatures import (
    MAX_BUNDLE_BYTES,
    MAX_CANDIDATES,
    BundleEvidence,
    Failure,
    Untrusted,
    Verified,
    fallback_tag,
    pae,
    parse_public_keys,
    referrer_manifests,
    verify,
)

from support.signing import (
    IN_TOTO_PAYLOAD,
    TestKey,
    bundle,
    bundle_document,
    legacy,
    payload,
    statement,
)

KEY, OTHER = TestKey.p256(), TestKey.p256()
D = "sha256:" + "ab" * 32
E = "sha256:" + "cd" * 32
TRACKED = parse("registry.example:5000/team/app:prod")
KEYS = parse_public_keys([KEY.pem])
SLSA = "https://slsa.dev/provenance/v0.2"


def _signed(body: bytes, key: TestKey = KEY, payload_type: str = IN_TOTO_PAYLOAD) -> bytes:
    return bundle_document(body, [key.sign(pae(payload_type, body))], payload_type=payload_type)


def test_pae_is_dssev1_with_byte_lengths_of_type_and_body() -> None:
    assert pae("application/x", "héllo".encode()) == b"DSSEv1 13 application/x 6 h\xc3\xa9llo"


def test_a_statement_of_this_digest_signed_by_a_listed_key_is_verified() -> None:
    verdict = verify(D, TRACKED, KEYS, bundles=[bundle(D, KEY)])
    assert verdict == Verified(digest=D, key=KEY.fingerprint, format="bundle")


@pytest.mark.parametrize("key", [TestKey.p384(), TestKey.rsa()], ids=["p384", "rsa"])
def test_other_supported_key_kinds_verify_bundles(key: TestKey) -> None:
    assert verify(D, TRACKED, parse_public_keys([key.pem]), bundles=[bundle(D, key)]).ok


def test_a_bundle_carries_no_repository_claim_so_any_tracked_repository_accepts_it() -> None:
    assert verify(D, parse("elsewhere.example/x:1"), KEYS, bundles=[bundle(D, KEY)]).ok


def test_one_of_several_envelope_signatures_by_a_listed_key_is_enough() -> None:
    body = statement(D)
    message = pae(IN_TOTO_PAYLOAD, body)
    document = bundle_document(body, [OTHER.sign(message), KEY.sign(message)])
    assert verify(D, TRACKED, KEYS, bundles=[bundle(D, document=document)]).ok


def test_a_good_bundle_verifies_beside_a_bad_legacy_signature_and_an_attestation() -> None:
    attestation = bundle(D, KEY, body=statement(D, predicate_type=SLSA))
    bad_legacy = legacy((payload(E, "registry.example:5000/team/app"), KEY.sign(b"x")))
    verdict = verify(D, TRACKED, KEYS, legacy=bad_legacy, bundles=[attestation, bundle(D, KEY)])
    assert verdict == Verified(digest=D, key=KEY.fingerprint, format="bundle")


def _signature_over_the_raw_payload() -> BundleEvidence:
    # Signed like a legacy payload, not over DSSE's encoding: no DSSE verifier accepts it.
    body = statement(D)
    return bundle(D, document=bundle_document(body, [KEY.sign(body)]))


def _payload_swapped() -> BundleEvidence:
    signed = json.loads(_signed(statement(D)))
    signed["dsseEnvelope"]["payload"] = base64.b64encode(
        statement(D).replace(b"{}", b"[]")
    ).decode()
    return bundle(D, document=json.dumps(signed).encode())


def _payload_type_swapped() -> BundleEvidence:
    # The type is inside the signed encoding: changing it breaks the signature.
    signed = json.loads(_signed(statement(D)))
    signed["dsseEnvelope"]["payloadType"] = "application/vnd.in-toto+json; x"
    return bundle(D, document=json.dumps(signed).encode())


def _blob_swapped() -> BundleEvidence:
    good = bundle(D, KEY)
    return good.model_copy(update={"bundle": _signed(statement(E))})


def _two_bundle_layers() -> BundleEvidence:
    good = bundle(D, KEY)
    manifest = json.loads(good.manifest)
    manifest["layers"] = manifest["layers"] * 2
    return good.model_copy(update={"manifest": json.dumps(manifest).encode()})


def _no_bundle_layer() -> BundleEvidence:
    good = bundle(D, KEY)
    manifest = json.loads(good.manifest)
    manifest["layers"][0]["mediaType"] = "application/spdx+json"
    return good.model_copy(update={"manifest": json.dumps(manifest).encode()})


def _oversized() -> BundleEvidence:
    body = statement(D).replace(
        b'"predicate": {}', b'"predicate": {"x": "' + b"y" * MAX_BUNDLE_BYTES + b'"}'
    )
    return bundle(D, document=_signed(body))


def _message_signature() -> BundleEvidence:
    # A bundle of a signed blob (cosign sign-blob), not of an image.
    document = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {},
        "messageSignature": {"signature": "AA=="},
    }
    return bundle(D, document=json.dumps(document).encode())


def _signatures(count: int) -> BundleEvidence:
    body = statement(D)
    return bundle(D, document=bundle_document(body, [KEY.sign(pae(IN_TOTO_PAYLOAD, body))] * count))


CASES: list[tuple[str, Callable[[], BundleEvidence], Failure]] = [
    ("signed-by-an-unlisted-key", lambda: bundle(D, OTHER), Failure.BAD_SIGNATURE),
    ("signed-over-the-raw-payload-not-pae", _signature_over_the_raw_payload, Failure.BAD_SIGNATURE),
    ("payload-altered-after-signing", _payload_swapped, Failure.BAD_SIGNATURE),
    ("payload-type-altered-after-signing", _payload_type_swapped, Failure.BAD_SIGNATURE),
    ("an-envelope-without-signatures", lambda: _signatures(0), Failure.BAD_SIGNATURE),
    ("an-envelope-with-more-signatures-than-read", lambda: _signatures(MAX_CANDIDATES + 1),
     Failure.TOO_LARGE),
    ("an-slsa-provenance-attestation",
     lambda: bundle(D, KEY, body=statement(D, predicate_type=SLSA)), Failure.NOT_A_SIGNATURE),
    ("an-spdx-attestation",
     lambda: bundle(D, KEY, body=statement(D, predicate_type="https://spdx.dev/Document")),
     Failure.NOT_A_SIGNATURE),
    ("a-statement-of-another-digest", lambda: bundle(D, KEY, body=statement(E)),
     Failure.SUBJECT_MISMATCH),
    ("a-statement-of-this-and-another-digest",
     lambda: bundle(D, KEY, body=statement(D, subjects=[{"sha256": "ab" * 32},
                                                        {"sha256": "cd" * 32}])),
     Failure.SUBJECT_MISMATCH),
    ("a-subject-with-an-extra-digest",
     lambda: bundle(D, KEY, body=statement(D, subjects=[{"sha256": "ab" * 32, "sha512": "00"}])),
     Failure.SUBJECT_MISMATCH),
    ("a-statement-without-subject", lambda: bundle(D, KEY, body=statement(D, subjects=[])),
     Failure.SUBJECT_MISMATCH),
    ("a-referrer-of-another-image", lambda: bundle(E, KEY, subject=E), Failure.SUBJECT_MISMATCH),
    ("an-in-toto-v0.1-statement",
     lambda: bundle(D, KEY, body=statement(D, kind="https://in-toto.io/Statement/v0.1")),
     Failure.WRONG_TYPE),
    ("a-dsse-payload-that-is-not-in-toto",
     lambda: bundle(D, document=_signed(statement(D), payload_type="text/plain")),
     Failure.WRONG_TYPE),
    ("a-bundle-of-another-version",
     lambda: bundle(D, document=_signed(statement(D)).replace(b"v0.3", b"v0.1")),
     Failure.WRONG_TYPE),
    ("a-bundle-of-a-blob-signature", _message_signature, Failure.WRONG_TYPE),
    ("blob-differs-from-its-descriptor", _blob_swapped, Failure.PAYLOAD_HASH_MISMATCH),
    ("bundle-not-read", lambda: bundle(D, KEY).model_copy(update={"bundle": None}),
     Failure.MALFORMED),
    ("two-bundle-layers", _two_bundle_layers, Failure.MALFORMED),
    ("no-bundle-layer", _no_bundle_layer, Failure.NO_SIGNATURE),
    ("bundle-over-its-cap", _oversized, Failure.TOO_LARGE),
    ("signed-bytes-that-are-not-json", lambda: bundle(D, KEY, body=b"\x00 not json"),
     Failure.MALFORMED),
    ("a-payload-in-url-safe-base64",
     lambda: bundle(D, document=_signed(b"\xfb\xff" + statement(D)).replace(b'"+/', b'"-_')),
     Failure.MALFORMED),
]  # fmt: skip


@pytest.mark.parametrize(("build", "failure"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_failed_check_is_named_in_the_verdict(
    build: Callable[[], BundleEvidence], failure: Failure
) -> None:
    verdict = verify(D, TRACKED, KEYS, bundles=[build()])
    assert isinstance(verdict, Untrusted)
    assert (verdict.failure, verdict.format) == (failure, "bundle"), verdict.detail


def test_an_attestation_alone_is_not_a_signature_even_when_signed_by_the_key() -> None:
    verdict = verify(
        D, TRACKED, KEYS, bundles=[bundle(D, KEY, body=statement(D, predicate_type=SLSA))]
    )
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.NOT_A_SIGNATURE
    assert SLSA in verdict.detail


def test_no_referrers_and_no_sig_tag_is_no_signature() -> None:
    verdict = verify(D, TRACKED, KEYS)
    assert isinstance(verdict, Untrusted)
    assert (verdict.failure, verdict.format) == (Failure.NO_SIGNATURE, None)


def test_only_the_first_sixteen_referrers_are_read() -> None:
    attestations = [bundle(D, KEY, body=statement(D, predicate_type=SLSA))] * MAX_CANDIDATES
    assert not verify(D, TRACKED, KEYS, bundles=[*attestations, bundle(D, KEY)]).ok


def _index(*entries: dict[str, object]) -> bytes:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": list(entries),
        }
    ).encode()


def _entry(
    artifact_type: str | None, media_type: str = "application/vnd.oci.image.manifest.v1+json"
) -> dict[str, object]:
    entry: dict[str, object] = {"mediaType": media_type, "size": 10, "digest": "sha256:" + "0" * 64}
    if artifact_type is not None:
        entry["artifactType"] = artifact_type
    return entry


def test_referrers_that_may_be_bundles_are_kept_including_the_empty_artifact_type() -> None:
    index = _index(
        _entry("application/vnd.dev.sigstore.bundle.v0.3+json"),
        _entry("application/vnd.oci.empty.v1+json"),  # how some cosign versions list bundles
        _entry(None),
        _entry("application/spdx+json"),  # an SBOM artifact: never a bundle
        _entry(None, media_type="application/vnd.oci.image.index.v1+json"),
    )
    assert len(referrer_manifests(index)) == 3


def test_at_most_sixteen_referrers_are_listed_for_reading() -> None:
    assert len(referrer_manifests(_index(*[_entry(None)] * 40))) == MAX_CANDIDATES


def test_the_fallback_tag_is_the_digest_with_a_dash() -> None:
    assert fallback_tag(D) == "sha256-" + "ab" * 32
