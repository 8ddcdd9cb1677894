"""Legacy ``.sig`` signatures: the success case, and each check that turns one away.

Every row builds the ``.sig`` evidence cosign would push, changes one thing, and names the
check that must catch it; the one key listed is ``KEY`` unless the row says otherwise.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable

import pytest

from imagerefresh.reference import parse
from imagerefresh.signatures import (
    MAX_CANDIDATES,
    MAX_KEYS,
    MAX_PAYLOAD_BYTES,
    Failure,
    InvalidPublicKey,
    LegacyEvidence,
    Untrusted,
    Verified,
    legacy_tag,
    parse_public_keys,
    signature_layers,
    verify,
)

from support.signing import TestKey, legacy, payload

KEY, OTHER = TestKey.p256(), TestKey.p256()
D = "sha256:" + "ab" * 32
E = "sha256:" + "cd" * 32
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
REPO = "registry.example:5000/team/app"
TRACKED = parse(REPO + ":prod")
KEYS = parse_public_keys([KEY.pem])


def _signed(body: bytes, key: TestKey = KEY) -> tuple[bytes, bytes]:
    return body, key.sign(body)


def _good() -> LegacyEvidence:
    return legacy(_signed(payload(D, REPO)))


def test_a_payload_signed_by_a_listed_key_for_this_digest_and_repository_is_verified() -> None:
    verdict = verify(D, TRACKED, KEYS, legacy=_good())
    assert verdict == Verified(digest=D, key=KEY.fingerprint, format="legacy")
    assert verdict.ok


def test_the_second_listed_key_verifies_and_is_the_one_reported() -> None:
    keys = parse_public_keys([OTHER.pem, KEY.pem])
    verdict = verify(D, TRACKED, keys, legacy=_good())
    assert isinstance(verdict, Verified)
    assert verdict.key == KEY.fingerprint


@pytest.mark.parametrize(
    ("key", "kind"),
    [(TestKey.p384(), "p384-sha384"), (TestKey.rsa(), "rsa-pkcs1-sha256")],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_other_supported_key_kinds_verify_with_their_own_scheme(key: TestKey, kind: str) -> None:
    evidence = legacy(_signed(payload(D, REPO), key))
    verdict = verify(D, TRACKED, parse_public_keys([key.pem]), legacy=evidence)
    assert verdict == Verified(digest=D, key=key.fingerprint, format="legacy"), kind


@pytest.mark.parametrize(
    "reference",
    ["registry.example:5000/team/app", "registry.example:5000/team/app:prod",
     f"registry.example:5000/team/app@{D}"],
    ids=["repository", "with-a-tag", "with-this-digest"],
)  # fmt: skip
def test_the_repository_claim_may_carry_a_tag_or_this_digest(reference: str) -> None:
    evidence = legacy(_signed(payload(D, reference)))
    assert verify(D, TRACKED, KEYS, legacy=evidence).ok


def test_docker_hub_names_are_compared_after_normalisation() -> None:
    evidence = legacy(_signed(payload(D, "index.docker.io/library/nginx")))
    assert verify(D, parse("nginx:1.27"), KEYS, legacy=evidence).ok


def test_one_good_layer_among_bad_ones_verifies() -> None:
    evidence = legacy(
        _signed(payload(E, REPO)), _signed(payload(D, REPO), OTHER), _signed(payload(D, REPO))
    )
    assert verify(D, TRACKED, KEYS, legacy=evidence).ok


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


GOOD = payload(D, REPO)  # the payload every row starts from: its bytes never vary
ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN = "'cosign container image signature'"


def _body_swapped() -> LegacyEvidence:
    # The registry serves other bytes than the descriptor names.
    return legacy(_signed(GOOD), blobs={_sha(GOOD): payload(E, REPO)})


def _layer_not_read() -> LegacyEvidence:
    return legacy(_signed(GOOD), blobs={})


def _read_over_its_cap() -> LegacyEvidence:
    # The descriptor names a small payload; the registry sends more than is ever read.
    return legacy(_signed(GOOD), blobs={_sha(GOOD): b" " * (MAX_PAYLOAD_BYTES + 1)})


def _altered_after_signing() -> LegacyEvidence:
    body, signature = _signed(GOOD)
    return legacy((body.replace(b'"optional":null', b'"optional":{}'), signature))


OVERSIZED = GOOD[:-1] + b"," + b'"x":"' + b"y" * MAX_PAYLOAD_BYTES + b'"}'


def _duplicate_claim() -> LegacyEvidence:
    body = GOOD.replace(
        b'"type"', b'"image":{"docker-manifest-digest":"' + E.encode() + b'"},"type"'
    )
    return legacy(_signed(body))


def _edited(evidence: LegacyEvidence, **layer: object) -> LegacyEvidence:
    """``evidence`` with its first layer's descriptor fields replaced (the manifest is given
    as read: nothing names its digest)."""
    manifest = json.loads(evidence.manifest)
    manifest["layers"][0].update(layer)
    return evidence.model_copy(update={"manifest": json.dumps(manifest).encode()})


def _annotated(signature: str) -> LegacyEvidence:
    return _edited(legacy(_signed(GOOD)), annotations={ANNOTATION: signature})


# A layer named by 64 characters after "sha256:" that are no hash: the blob is not it.
NO_HASH = "sha256:" + "a" * 31 + ":" + "b" * 32

CASES: list[tuple[str, Callable[[], LegacyEvidence | None], Failure, str]] = [
    ("nothing-at-the-sig-tag", lambda: None, Failure.NO_SIGNATURE,
     f"no signature of {D} was found"),
    ("a-sig-manifest-without-simple-signing-layers", lambda: legacy(), Failure.NO_SIGNATURE,
     "the signature manifest has no signature layer"),
    ("signed-by-an-unlisted-key", lambda: legacy(_signed(GOOD, OTHER)),
     Failure.BAD_SIGNATURE, "no listed key verifies the signature"),
    ("payload-altered-after-signing", _altered_after_signing, Failure.BAD_SIGNATURE,
     "no listed key verifies the signature"),
    ("signature-of-other-bytes", lambda: legacy((GOOD, KEY.sign(b"other"))),
     Failure.BAD_SIGNATURE, "no listed key verifies the signature"),
    ("no-signature-annotation", lambda: legacy((GOOD, None)), Failure.MALFORMED,
     f"the layer has no {ANNOTATION} annotation"),
    ("a-signature-that-is-not-base64", lambda: _annotated("!!!!"), Failure.MALFORMED,
     "the layer's signature is not base64"),
    ("a-signature-in-non-canonical-base64", lambda: _annotated("AB=="), Failure.MALFORMED,
     "the layer's signature is not canonical base64"),
    ("blob-differs-from-its-descriptor", _body_swapped, Failure.PAYLOAD_HASH_MISMATCH,
     f"the signature payload is {_sha(payload(E, REPO))} ({len(GOOD)} bytes), "
     f"its descriptor names {_sha(GOOD)} ({len(GOOD)} bytes)"),
    ("a-descriptor-digest-that-is-no-hash",
     lambda: _edited(legacy(_signed(GOOD), blobs={NO_HASH: GOOD}), digest=NO_HASH),
     Failure.PAYLOAD_HASH_MISMATCH,
     f"the signature payload is {_sha(GOOD)} ({len(GOOD)} bytes), "
     f"its descriptor names {NO_HASH} ({len(GOOD)} bytes)"),
    ("a-layer-named-by-another-algorithm",
     lambda: _edited(legacy(_signed(GOOD)), digest="sha512:" + "ab" * 32), Failure.MALFORMED,
     f"the signature payload is named by 'sha512:{'ab' * 32}', not sha256"),
    ("layer-blob-not-read", _layer_not_read, Failure.MALFORMED,
     f"the signature payload {_sha(GOOD)} was not read"),
    ("payload-over-its-cap", lambda: legacy(_signed(OVERSIZED)), Failure.TOO_LARGE,
     f"the signature payload is {len(OVERSIZED)} bytes; at most 65536 are read"),
    ("payload-read-over-its-cap", _read_over_its_cap, Failure.TOO_LARGE,
     "the signature payload is 65537 bytes; at most 65536 are read"),
    ("another-digest", lambda: legacy(_signed(payload(E, REPO))), Failure.DIGEST_MISMATCH,
     f"the signature is for {E}, not {D}"),
    ("the-reference-names-another-digest",
     lambda: legacy(_signed(payload(D, f"{REPO}@{E}"))), Failure.DIGEST_MISMATCH,
     f"the signature's reference names {E}"),
    ("another-repository", lambda: legacy(_signed(payload(D, "registry.example:5000/team/other"))),
     Failure.REPOSITORY_MISMATCH,
     "the signature is for registry.example:5000/team/other, not registry.example:5000/team/app"),
    ("another-registry", lambda: legacy(_signed(payload(D, "mirror.example/team/app"))),
     Failure.REPOSITORY_MISMATCH,
     "the signature is for mirror.example/team/app, not registry.example:5000/team/app"),
    ("no-repository-at-all", lambda: legacy(_signed(payload(D, "Not A Reference"))),
     Failure.REPOSITORY_MISMATCH,
     "the signature names no repository (invalid reference 'Not A Reference': repository name "
     "'library/Not A Reference' must be lowercase)"),
    ("a-red-hat-simple-signature",
     lambda: legacy(_signed(payload(D, REPO, kind="atomic container signature"))),
     Failure.WRONG_TYPE, f"the payload's type is 'atomic container signature', not {COSIGN}"),
    ("a-critical-part-that-is-no-object",
     lambda: legacy(_signed(b'{"critical":"cosign container image signature"}')),
     Failure.WRONG_TYPE, f"the payload's type is None, not {COSIGN}"),
    ("an-unknown-critical-field", lambda: legacy(_signed(payload(D, REPO, extra="x"))),
     Failure.MALFORMED, "the signed payload: critical.extra: Extra inputs are not permitted"),
    ("a-duplicated-claim", _duplicate_claim, Failure.MALFORMED,
     "'image' appears twice in one JSON object"),
    ("signed-bytes-that-are-not-utf8", lambda: legacy(_signed(b"\xff not json")),
     Failure.MALFORMED, "the signed payload is not UTF-8"),
    ("signed-bytes-that-are-not-json", lambda: legacy(_signed(b"not json")),
     Failure.MALFORMED,
     "the signed payload is not JSON (Expecting value: line 1 column 1 (char 0))"),
    ("not-an-image-manifest", lambda: legacy(_signed(GOOD), media_type=OCI_INDEX),
     Failure.MALFORMED, f"the signature manifest is a '{OCI_INDEX}', no image"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "failure", "detail"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_failed_check_is_named_in_the_verdict_in_the_words_a_user_reads(
    build: Callable[[], LegacyEvidence | None], failure: Failure, detail: str
) -> None:
    evidence = build()
    verdict = verify(D, TRACKED, KEYS, legacy=evidence)
    assert isinstance(verdict, Untrusted)
    assert (verdict.failure, verdict.detail, verdict.digest) == (failure, detail, D)
    assert verdict.format == (None if evidence is None else "legacy")


SIG = re.escape("the signature manifest")


@pytest.mark.parametrize(
    ("manifest", "detail"),
    [(b"", SIG + re.escape(" is not JSON (Expecting value: line 1 column 1 (char 0))")),
     (b"[]", SIG + " is not a JSON object"),
     (b"{", SIG + re.escape(" is not JSON (Expecting property name enclosed in double quotes: "
                            "line 1 column 2 (char 1))")),
     (b'{"schemaVersion":2,"layers":"x"}', SIG + ": layers: Input should be a valid list"),
     (b"\xfe\xff{}", SIG + " is not UTF-8"),
     (b'{"schemaVersion":NaN,"layers":[]}', "NaN is not JSON"),
     (b'{"a":1,"a":2}', "'a' appears twice in one JSON object"),
     (b"[" * 100_000, SIG + r" is not JSON \(maximum recursion depth exceeded.*\)")],
    ids=["empty", "array", "truncated", "wrong-shape", "not-utf8", "nan", "duplicate-key",
         "deeply-nested"],
)  # fmt: skip
def test_an_unreadable_sig_manifest_is_malformed_saying_why_not_a_crash(
    manifest: bytes, detail: str
) -> None:
    verdict = verify(D, TRACKED, KEYS, legacy=LegacyEvidence(manifest=manifest))
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.MALFORMED
    assert re.fullmatch(detail, verdict.detail, re.DOTALL), verdict.detail


def test_an_oversized_sig_manifest_is_refused_before_it_is_parsed() -> None:
    verdict = verify(D, TRACKED, KEYS, legacy=LegacyEvidence(manifest=b" " * (600 * 1024)))
    assert isinstance(verdict, Untrusted)
    assert (verdict.failure, verdict.detail) == (
        Failure.TOO_LARGE,
        "the signature manifest is 614400 bytes; at most 524288 are read",
    )


def test_a_payload_of_exactly_its_cap_is_read_and_verifies() -> None:
    # JSON may end in whitespace: cosign's payload, padded to the last byte that is read.
    body = GOOD + b" " * (MAX_PAYLOAD_BYTES - len(GOOD))
    assert len(body) == MAX_PAYLOAD_BYTES
    assert verify(D, TRACKED, KEYS, legacy=legacy(_signed(body))).ok


def test_as_many_keys_as_are_tried_verify_and_one_more_is_refused() -> None:
    others = parse_public_keys([TestKey.p256().pem for _ in range(MAX_KEYS - 1)])
    verdict = verify(D, TRACKED, (*others, *KEYS), legacy=_good())
    assert verdict == Verified(digest=D, key=KEY.fingerprint, format="legacy")
    with pytest.raises(InvalidPublicKey) as raised:
        verify(D, TRACKED, (*others, *KEYS, *KEYS), legacy=_good())
    assert str(raised.value) == "9 keys given; at most 8 are tried"


def test_the_failure_reported_is_the_one_that_got_furthest() -> None:
    evidence = legacy(
        _signed(payload(D, REPO), OTHER),  # bad-signature
        _signed(payload(D, "registry.example:5000/team/other")),  # repository-mismatch
        _signed(payload(E, REPO)),  # digest-mismatch
    )
    verdict = verify(D, TRACKED, KEYS, legacy=evidence)
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.REPOSITORY_MISMATCH


def test_only_the_first_sixteen_signature_layers_are_read() -> None:
    junk = [_signed(payload(E, REPO)) for _ in range(MAX_CANDIDATES)]
    evidence = legacy(*junk, _signed(payload(D, REPO)))
    assert len(signature_layers(evidence.manifest)) == MAX_CANDIDATES
    assert not verify(D, TRACKED, KEYS, legacy=evidence).ok


def test_the_sig_tag_is_the_digest_with_a_dash_and_dot_sig() -> None:
    assert legacy_tag(D) == "sha256-" + "ab" * 32 + ".sig"


def test_docker_media_types_are_read_as_cosign_writes_them_with_cosign_docker_media_types() -> None:
    evidence = legacy(
        _signed(payload(D, REPO)), media_type="application/vnd.docker.distribution.manifest.v2+json"
    )
    assert verify(D, TRACKED, KEYS, legacy=evidence).ok
