"""Legacy ``.sig`` signatures: the success case, and each check that turns one away.

Every row builds the ``.sig`` evidence cosign would push, changes one thing, and names the
check that must catch it; the one key listed is ``KEY`` unless the row says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from imagerefresh.reference import parse
from imagerefresh.signatures import (
    MAX_CANDIDATES,
    MAX_PAYLOAD_BYTES,
    Failure,
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


def _body_swapped() -> LegacyEvidence:
    # The registry serves other bytes than the descriptor names.
    body, signature = _signed(payload(D, REPO))
    good = legacy((body, signature))
    (digest,) = good.payloads
    return legacy((body, signature), blobs={digest: payload(E, REPO)})


def _layer_not_read() -> LegacyEvidence:
    return legacy(_signed(payload(D, REPO)), blobs={})


def _altered_after_signing() -> LegacyEvidence:
    body, signature = _signed(payload(D, REPO))
    return legacy((body.replace(b'"optional":null', b'"optional":{}'), signature))


def _oversized() -> LegacyEvidence:
    body = payload(D, REPO)[:-1] + b"," + b'"x":"' + b"y" * MAX_PAYLOAD_BYTES + b'"}'
    return legacy(_signed(body))


def _duplicate_claim() -> LegacyEvidence:
    body = payload(D, REPO).replace(
        b'"type"', b'"image":{"docker-manifest-digest":"' + E.encode() + b'"},"type"'
    )
    return legacy(_signed(body))


CASES: list[tuple[str, Callable[[], LegacyEvidence | None], Failure]] = [
    ("nothing-at-the-sig-tag", lambda: None, Failure.NO_SIGNATURE),
    ("a-sig-manifest-without-simple-signing-layers", lambda: legacy(), Failure.NO_SIGNATURE),
    ("signed-by-an-unlisted-key", lambda: legacy(_signed(payload(D, REPO), OTHER)),
     Failure.BAD_SIGNATURE),
    ("payload-altered-after-signing", _altered_after_signing, Failure.BAD_SIGNATURE),
    ("signature-of-other-bytes", lambda: legacy((payload(D, REPO), KEY.sign(b"other"))),
     Failure.BAD_SIGNATURE),
    ("no-signature-annotation", lambda: legacy((payload(D, REPO), None)), Failure.MALFORMED),
    ("blob-differs-from-its-descriptor", _body_swapped, Failure.PAYLOAD_HASH_MISMATCH),
    ("layer-blob-not-read", _layer_not_read, Failure.MALFORMED),
    ("payload-over-its-cap", _oversized, Failure.TOO_LARGE),
    ("another-digest", lambda: legacy(_signed(payload(E, REPO))), Failure.DIGEST_MISMATCH),
    ("the-reference-names-another-digest",
     lambda: legacy(_signed(payload(D, f"{REPO}@{E}"))), Failure.DIGEST_MISMATCH),
    ("another-repository", lambda: legacy(_signed(payload(D, "registry.example:5000/team/other"))),
     Failure.REPOSITORY_MISMATCH),
    ("another-registry", lambda: legacy(_signed(payload(D, "mirror.example/team/app"))),
     Failure.REPOSITORY_MISMATCH),
    ("no-repository-at-all", lambda: legacy(_signed(payload(D, "Not A Reference"))),
     Failure.REPOSITORY_MISMATCH),
    ("a-red-hat-simple-signature",
     lambda: legacy(_signed(payload(D, REPO, kind="atomic container signature"))),
     Failure.WRONG_TYPE),
    ("an-unknown-critical-field", lambda: legacy(_signed(payload(D, REPO, extra="x"))),
     Failure.MALFORMED),
    ("a-duplicated-claim", _duplicate_claim, Failure.MALFORMED),
    ("signed-bytes-that-are-not-json", lambda: legacy(_signed(b"\xff not json")),
     Failure.MALFORMED),
    ("not-an-image-manifest", lambda: legacy(_signed(payload(D, REPO)), media_type=OCI_INDEX),
     Failure.MALFORMED),
]  # fmt: skip


@pytest.mark.parametrize(("build", "failure"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_failed_check_is_named_in_the_verdict(
    build: Callable[[], LegacyEvidence | None], failure: Failure
) -> None:
    evidence = build()
    verdict = verify(D, TRACKED, KEYS, legacy=evidence)
    assert isinstance(verdict, Untrusted)
    assert (verdict.failure, verdict.digest) == (failure, D), verdict.detail
    assert verdict.format == (None if evidence is None else "legacy")


@pytest.mark.parametrize(
    "manifest",
    [b"", b"[]", b"{", b'{"schemaVersion":2,"layers":"x"}', b"\xfe\xff{}", b"NaN",
     b'{"a":1,"a":2}', b"[" * 100_000],
    ids=["empty", "array", "truncated", "wrong-shape", "not-utf8", "nan", "duplicate-key",
         "deeply-nested"],
)  # fmt: skip
def test_an_unreadable_sig_manifest_is_malformed_not_a_crash(manifest: bytes) -> None:
    verdict = verify(D, TRACKED, KEYS, legacy=LegacyEvidence(manifest=manifest))
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.MALFORMED


def test_an_oversized_sig_manifest_is_refused_before_it_is_parsed() -> None:
    verdict = verify(D, TRACKED, KEYS, legacy=LegacyEvidence(manifest=b" " * (600 * 1024)))
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.TOO_LARGE


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
