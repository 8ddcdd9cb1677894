"""The key a bundle names is tried first: an honest signature costs one check, however many
keys a policy lists; the name is an order, never a verdict.

``cosign sign --key`` writes the signing key's fingerprint into the bundle
(``verificationMaterial.publicKey.hint``, the base64 of the sha256 of its DER; a real cosign
bundle is checked for it in test_signature_cosign.py). Checks are counted by wrapping
:meth:`PublicKey.verifies`: what a hostile policy costs is the number of those calls.
"""

from __future__ import annotations

import json

import pytest

from imagerefresh.reference import parse
from imagerefresh.signatures import (
    MAX_CANDIDATES,
    MAX_KEYS,
    BundleEvidence,
    Failure,
    PublicKey,
    Untrusted,
    Verified,
    pae,
    parse_public_keys,
    verify,
)
from imagerefresh.signatures.bundle import _fingerprint

from support.signing import IN_TOTO_PAYLOAD, TestKey, bundle, bundle_document, key_hint, statement

D = "sha256:" + "ab" * 32
TRACKED = parse("registry.example:5000/team/app:prod")
LISTED = [TestKey.p256() for _ in range(MAX_KEYS)]
KEYS = parse_public_keys([k.pem for k in LISTED])
SIGNER = LISTED[-1]  # listed last: without the hint, every other key is tried first
STRANGER = TestKey.p256()


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fingerprint of each key a signature was checked under, in order."""
    made: list[str] = []
    original = PublicKey.verifies

    def counted(self: PublicKey, signature: bytes, message: bytes) -> bool:
        made.append(self.fingerprint)
        return original(self, signature, message)

    monkeypatch.setattr(PublicKey, "verifies", counted)
    return made


def signed_bundle(signers: list[TestKey], hint: object) -> BundleEvidence:
    body = statement(D)
    signatures = [key.sign(pae(IN_TOTO_PAYLOAD, body)) for key in signers]
    return bundle(D, document=bundle_document(body, signatures, hint=hint))


def test_a_bundle_naming_its_key_costs_one_check_whatever_the_key_s_place(
    checks: list[str],
) -> None:
    evidence = signed_bundle([SIGNER], key_hint(SIGNER.fingerprint))
    verdict = verify(D, TRACKED, KEYS, bundles=[evidence])
    assert verdict == Verified(digest=D, key=SIGNER.fingerprint, format="bundle")
    assert checks == [SIGNER.fingerprint]


def test_without_a_hint_the_listed_keys_are_tried_in_order(checks: list[str]) -> None:
    evidence = signed_bundle([SIGNER], None)
    assert verify(D, TRACKED, KEYS, bundles=[evidence]).ok
    assert checks == [k.fingerprint for k in LISTED]


@pytest.mark.parametrize(
    "hint",
    [key_hint(STRANGER.fingerprint), key_hint(LISTED[0].fingerprint), "!!not base64!!", 42,
     key_hint("sha256:" + "00" * 16)],
    ids=["an-unlisted-key", "another-listed-key", "not-base64", "not-a-string", "too-short"],
)  # fmt: skip
def test_a_wrong_or_malformed_hint_costs_checks_never_the_verdict(
    checks: list[str], hint: object
) -> None:
    evidence = signed_bundle([SIGNER], hint)
    verdict = verify(D, TRACKED, KEYS, bundles=[evidence])
    assert verdict == Verified(digest=D, key=SIGNER.fingerprint, format="bundle")
    assert checks.count(SIGNER.fingerprint) == 1
    assert len(checks) == len(set(checks))  # each key once: one signature


def test_a_hint_naming_a_listed_key_that_did_not_sign_proves_nothing(checks: list[str]) -> None:
    evidence = signed_bundle([STRANGER], key_hint(SIGNER.fingerprint))
    verdict = verify(D, TRACKED, KEYS, bundles=[evidence])
    assert isinstance(verdict, Untrusted)
    assert verdict.failure is Failure.BAD_SIGNATURE
    assert len(checks) == MAX_KEYS  # the named key first, then the other seven, once each
    assert checks[0] == SIGNER.fingerprint


def test_a_hostile_envelope_costs_at_most_its_signatures_times_the_listed_keys(
    checks: list[str],
) -> None:
    evidence = signed_bundle([STRANGER] * MAX_CANDIDATES, key_hint(SIGNER.fingerprint))
    assert not verify(D, TRACKED, KEYS, bundles=[evidence]).ok
    assert len(checks) == MAX_CANDIDATES * MAX_KEYS


@pytest.mark.parametrize(
    "material",
    [None, [], "hint", {"publicKey": None}, {"publicKey": ["hint"]}, {"publicKey": {}},
     {"x509CertificateChain": {}}],
    ids=["null", "a-list", "a-string", "null-key", "key-a-list", "no-hint", "a-certificate"],
)  # fmt: skip
def test_verification_material_of_any_other_shape_names_no_key_and_refuses_nothing(
    checks: list[str], material: object
) -> None:
    body = statement(D)
    document = json.loads(bundle_document(body, [SIGNER.sign(pae(IN_TOTO_PAYLOAD, body))]))
    document["verificationMaterial"] = material
    evidence = bundle(D, document=json.dumps(document).encode())
    verdict = verify(D, TRACKED, KEYS, bundles=[evidence])
    assert verdict == Verified(digest=D, key=SIGNER.fingerprint, format="bundle")
    assert checks == [k.fingerprint for k in LISTED]  # in order: nothing was named


def test_a_signature_naming_its_key_by_keyid_costs_one_check(checks: list[str]) -> None:
    body = statement(D)
    document = json.loads(bundle_document(body, [SIGNER.sign(pae(IN_TOTO_PAYLOAD, body))]))
    document["dsseEnvelope"]["signatures"][0]["keyid"] = key_hint(SIGNER.fingerprint)
    evidence = bundle(D, document=json.dumps(document).encode())
    assert verify(D, TRACKED, KEYS, bundles=[evidence]).ok
    assert checks == [SIGNER.fingerprint]


def _spoiled(hint: str, where: int, junk: str) -> str:
    return hint[:where] + junk + hint[where:]


HINT = key_hint(SIGNER.fingerprint)


@pytest.mark.parametrize(
    "named",
    [_spoiled(HINT, 8, "!"), _spoiled(HINT, 8, "\n"), " " + HINT, HINT + "*"],
    ids=["a-bang-inside", "a-newline-inside", "a-leading-space", "a-trailing-star"],
)
@pytest.mark.parametrize("where", ["hint", "keyid"])
def test_a_name_with_characters_outside_base64_names_no_key(
    checks: list[str], named: str, where: str
) -> None:
    # Dropping the strange characters would name the signer; strict decoding names nobody.
    body = statement(D)
    document = json.loads(bundle_document(body, [SIGNER.sign(pae(IN_TOTO_PAYLOAD, body))]))
    if where == "hint":
        document["verificationMaterial"]["publicKey"]["hint"] = named
    else:
        document["dsseEnvelope"]["signatures"][0]["keyid"] = named
    evidence = bundle(D, document=json.dumps(document).encode())
    verdict = verify(D, TRACKED, KEYS, bundles=[evidence])
    assert verdict == Verified(digest=D, key=SIGNER.fingerprint, format="bundle")
    assert checks == [k.fingerprint for k in LISTED]  # in order: nothing was named


@pytest.mark.parametrize(
    ("named", "fingerprint"),
    [
        (HINT, SIGNER.fingerprint),
        (key_hint("sha256:" + "ab" * 32), "sha256:" + "ab" * 32),
        (key_hint("sha256:" + "ab" * 31), None),
        (key_hint("sha256:" + "ab" * 33), None),
        (key_hint("sha256:" + "ab" * 64), None),
        ("", None),
        ("=", None),
        (_spoiled(HINT, 8, "!"), None),
        (HINT.rstrip("="), None),
        (42, None),
        (None, None),
    ],
    ids=["the-signer", "32-bytes", "31-bytes", "33-bytes", "64-bytes", "empty", "padding-only",
         "a-bang-inside", "unpadded", "a-number", "none"],
)  # fmt: skip
def test_a_key_name_is_a_fingerprint_only_when_it_is_strict_base64_of_32_bytes(
    named: object, fingerprint: str | None
) -> None:
    assert _fingerprint(named) == fingerprint
