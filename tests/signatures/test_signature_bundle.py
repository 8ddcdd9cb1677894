"""Sigstore bundles attached as referrers: the success case, and each check that turns one away.

Every row builds the referrer ``cosign sign`` would push (an OCI manifest whose subject is
the image, one bundle layer, a DSSE envelope of an in-toto Statement signed over DSSE's
pre-authentication encoding), changes one thing, and names the check that must catch it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable

import pytest

from imagerefresh.reference import parse
from imagerefresh.signatures import (
    COSIGN_SIGN_PREDICATE,
    MAX_BUNDLE_BYTES,
    MAX_CANDIDATES,
    BundleEvidence,
    Failure,
    Rejected,
    Untrusted,
    Verified,
    fallback_tag,
    pae,
    parse_public_keys,
    referrer_manifests,
    verify,
)
from imagerefresh.signatures.documents import Index, parse_model

from support.signing import (
    IN_TOTO_PAYLOAD,
    IN_TOTO_V1,
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
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


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


def _referrer(**fields: object) -> BundleEvidence:
    """A good referrer whose manifest has ``fields`` replaced (None: left out)."""
    good = bundle(D, KEY)
    manifest = json.loads(good.manifest)
    manifest.update(fields)
    manifest = {name: value for name, value in manifest.items() if value is not None}
    return good.model_copy(update={"manifest": json.dumps(manifest).encode()})


def _described(document: bytes) -> BundleEvidence:
    # A referrer whose bundle layer is exactly ``document``: it passes the digest check.
    return bundle(D, document=document)


def _sig_not_base64() -> BundleEvidence:
    signed = json.loads(_signed(statement(D)))
    signed["dsseEnvelope"]["signatures"][0]["sig"] = "!!!!"
    return _described(json.dumps(signed).encode())


def _sha(data: bytes | None) -> str:
    assert data is not None
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(evidence: BundleEvidence) -> tuple[str, int]:
    layer = json.loads(evidence.manifest)["layers"][0]
    return layer["digest"], layer["size"]


def _swapped_detail(evidence: BundleEvidence) -> str:
    named, size = _layer(evidence)
    read = evidence.bundle or b""
    return (
        f"the bundle is {_sha(read)} ({len(read)} bytes), "
        f"its descriptor names {named} ({size} bytes)"
    )


def _oversized_detail(evidence: BundleEvidence) -> str:
    return f"the bundle is {_layer(evidence)[1]} bytes; at most 131072 are read"


def _subjects(*encoded: dict[str, str]) -> str:
    return f"the statement's subjects are {list(encoded)}, not {D}"


AB, CD = {"sha256": "ab" * 32}, {"sha256": "cd" * 32}
SHAPELESS_STATEMENT = json.dumps(
    {"_type": IN_TOTO_V1, "predicateType": COSIGN_SIGN_PREDICATE, "predicate": {}}
).encode()

# Each row: how the referrer is built, the check that turns it away, and the verdict's detail
# as an SRE reads it in the Untrusted event (or how to make it from the evidence).
Detail = str | Callable[[BundleEvidence], str]
CASES: list[tuple[str, Callable[[], BundleEvidence], Failure, Detail]] = [
    ("signed-by-an-unlisted-key", lambda: bundle(D, OTHER), Failure.BAD_SIGNATURE,
     "no listed key verifies the envelope"),
    ("signed-over-the-raw-payload-not-pae", _signature_over_the_raw_payload, Failure.BAD_SIGNATURE,
     "no listed key verifies the envelope"),
    ("payload-altered-after-signing", _payload_swapped, Failure.BAD_SIGNATURE,
     "no listed key verifies the envelope"),
    ("payload-type-altered-after-signing", _payload_type_swapped, Failure.BAD_SIGNATURE,
     "no listed key verifies the envelope"),
    ("an-envelope-without-signatures", lambda: _signatures(0), Failure.BAD_SIGNATURE,
     "the envelope holds 0 signatures"),
    ("an-envelope-with-more-signatures-than-read", lambda: _signatures(MAX_CANDIDATES + 1),
     Failure.TOO_LARGE, "the envelope holds 17 signatures"),
    ("an-envelope-signature-that-is-not-base64", _sig_not_base64, Failure.MALFORMED,
     "an envelope signature is not base64"),
    ("an-slsa-provenance-attestation",
     lambda: bundle(D, KEY, body=statement(D, predicate_type=SLSA)), Failure.NOT_A_SIGNATURE,
     f"the statement is an attestation ({SLSA}), not a signature"),
    ("an-spdx-attestation",
     lambda: bundle(D, KEY, body=statement(D, predicate_type="https://spdx.dev/Document")),
     Failure.NOT_A_SIGNATURE,
     "the statement is an attestation (https://spdx.dev/Document), not a signature"),
    ("a-statement-of-another-digest", lambda: bundle(D, KEY, body=statement(E)),
     Failure.SUBJECT_MISMATCH, _subjects(CD)),
    ("a-statement-of-this-and-another-digest",
     lambda: bundle(D, KEY, body=statement(D, subjects=[AB, CD])),
     Failure.SUBJECT_MISMATCH, _subjects(AB, CD)),
    ("a-subject-with-an-extra-digest",
     lambda: bundle(D, KEY, body=statement(D, subjects=[{**AB, "sha512": "00"}])),
     Failure.SUBJECT_MISMATCH, _subjects({**AB, "sha512": "00"})),
    ("a-statement-without-subject", lambda: bundle(D, KEY, body=statement(D, subjects=[])),
     Failure.SUBJECT_MISMATCH, _subjects()),
    ("a-statement-of-no-shape", lambda: bundle(D, KEY, body=SHAPELESS_STATEMENT),
     Failure.MALFORMED, "the signed statement: subject: Field required"),
    ("a-referrer-of-another-image", lambda: bundle(E, KEY, subject=E), Failure.SUBJECT_MISMATCH,
     f"the referrer is about {E}, not {D}"),
    ("a-referrer-of-another-image-holding-this-digest-s-statement",
     lambda: bundle(D, KEY, subject=E), Failure.SUBJECT_MISMATCH,
     f"the referrer is about {E}, not {D}"),
    ("a-referrer-without-subject", lambda: _referrer(subject=None), Failure.SUBJECT_MISMATCH,
     f"the referrer is about no subject, not {D}"),
    ("a-referrer-that-is-an-index", lambda: _referrer(mediaType=OCI_INDEX), Failure.MALFORMED,
     f"the referrer is a '{OCI_INDEX}', no manifest"),
    ("a-referrer-manifest-of-no-shape", lambda: _referrer(layers="x"), Failure.MALFORMED,
     "the referrer manifest: layers: Input should be a valid list"),
    ("a-referrer-manifest-that-is-not-json",
     lambda: BundleEvidence(manifest=b"{", bundle=None), Failure.MALFORMED,
     "the referrer manifest is not JSON (Expecting property name enclosed in double quotes: "
     "line 1 column 2 (char 1))"),
    ("an-in-toto-v0.1-statement",
     lambda: bundle(D, KEY, body=statement(D, kind="https://in-toto.io/Statement/v0.1")),
     Failure.WRONG_TYPE, "the statement is a 'https://in-toto.io/Statement/v0.1'"),
    ("a-dsse-payload-that-is-not-in-toto",
     lambda: _described(_signed(statement(D), payload_type="text/plain")),
     Failure.WRONG_TYPE, "the envelope's payload is a 'text/plain'"),
    ("a-bundle-of-another-version",
     lambda: _described(_signed(statement(D)).replace(b"v0.3", b"v0.1")),
     Failure.WRONG_TYPE, "the bundle is a 'application/vnd.dev.sigstore.bundle.v0.1+json'"),
    ("a-bundle-of-a-blob-signature", _message_signature, Failure.WRONG_TYPE,
     "the bundle holds no DSSE envelope"),
    ("a-bundle-of-no-shape", lambda: _described(b"{}"), Failure.MALFORMED,
     "the bundle: mediaType: Field required"),
    ("a-bundle-that-is-not-json", lambda: _described(b"not json"), Failure.MALFORMED,
     "the bundle is not JSON (Expecting value: line 1 column 1 (char 0))"),
    ("blob-differs-from-its-descriptor", _blob_swapped, Failure.PAYLOAD_HASH_MISMATCH,
     _swapped_detail),
    ("bundle-not-read", lambda: bundle(D, KEY).model_copy(update={"bundle": None}),
     Failure.MALFORMED, lambda evidence: f"the bundle {_layer(evidence)[0]} was not read"),
    ("two-bundle-layers", _two_bundle_layers, Failure.MALFORMED,
     "the referrer holds 2 bundles, not one"),
    ("no-bundle-layer", _no_bundle_layer, Failure.NO_SIGNATURE,
     "the referrer holds no Sigstore bundle"),
    ("bundle-over-its-cap", _oversized, Failure.TOO_LARGE, _oversized_detail),
    ("signed-bytes-that-are-not-json", lambda: bundle(D, KEY, body=b"\x00 not json"),
     Failure.MALFORMED,
     "the signed statement is not JSON (Expecting value: line 1 column 1 (char 0))"),
    ("a-payload-in-url-safe-base64",
     lambda: _described(_signed(b"\xfb\xff" + statement(D)).replace(b'"+/', b'"-_')),
     Failure.MALFORMED, "the envelope's payload is not base64"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "failure", "detail"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_failed_check_is_named_in_the_verdict_in_the_words_a_user_reads(
    build: Callable[[], BundleEvidence],
    failure: Failure,
    detail: Detail,
) -> None:
    evidence = build()
    verdict = verify(D, TRACKED, KEYS, bundles=[evidence])
    assert isinstance(verdict, Untrusted)
    expected = detail if isinstance(detail, str) else detail(evidence)
    assert (verdict.failure, verdict.format, verdict.detail) == (failure, "bundle", expected)


def test_an_envelope_with_as_many_signatures_as_are_read_verifies() -> None:
    verdict = verify(D, TRACKED, KEYS, bundles=[_signatures(MAX_CANDIDATES)])
    assert verdict == Verified(digest=D, key=KEY.fingerprint, format="bundle")


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


@pytest.mark.parametrize(
    ("index", "detail"),
    [(b"{", "the referrers index is not JSON (Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1))"),
     (b'{"schemaVersion": 2}', "the referrers index: manifests: Field required"),
     (json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "manifests": []}).encode(),
      "the referrers index is a 'application/vnd.oci.image.manifest.v1+json'")],
    ids=["not-json", "no-manifests", "a-manifest-not-an-index"],
)  # fmt: skip
def test_an_unreadable_referrers_index_is_malformed_in_the_words_the_registry_error_quotes(
    index: bytes, detail: str
) -> None:
    with pytest.raises(Rejected) as raised:
        referrer_manifests(index)
    assert (raised.value.failure, raised.value.detail) == (Failure.MALFORMED, detail)
    assert str(raised.value) == f"malformed: {detail}"  # as a log line shows it


def test_a_document_that_is_no_object_is_named_at_the_top_level() -> None:
    # load_json only hands objects on; parse_model still names a non-object for what it is.
    with pytest.raises(Rejected) as raised:
        parse_model(Index, [], what="the referrers index")
    assert raised.value.detail == (
        "the referrers index: the top level: "
        "Input should be a valid dictionary or instance of Index"
    )
