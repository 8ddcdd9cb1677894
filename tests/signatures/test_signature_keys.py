"""The listed public keys: what is accepted, how it is named, and every way one is refused."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from imagerefresh.signatures import (
    MAX_KEYS,
    MAX_PEM_CHARS,
    InvalidPublicKey,
    SignatureError,
    parse_public_key,
    parse_public_keys,
)

from support.signing import TestKey


def _pem(key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


P256 = TestKey.p256()


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        (P256, "ECDSA P-256"),
        (TestKey.p384(), "ECDSA P-384"),
        (TestKey.rsa(2048), "RSA 2048"),
        (TestKey.rsa(3072), "RSA 3072"),
    ],
    ids=["p256-cosign-default", "p384", "rsa2048", "rsa3072"],
)
def test_supported_keys_parse_and_are_named_by_the_sha256_of_their_der(
    key: TestKey, kind: str
) -> None:
    parsed = parse_public_key(key.pem)
    der = serialization.load_pem_public_key(key.pem.encode()).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert parsed.kind == kind
    assert parsed.fingerprint == "sha256:" + hashlib.sha256(der).hexdigest() == key.fingerprint


def test_surrounding_whitespace_and_rewrapped_base64_give_the_same_key() -> None:
    lines = P256.pem.strip().splitlines()
    rewrapped = "\n  " + lines[0] + "\n" + "".join(lines[1:-1]) + "\n" + lines[-1] + "\n\n"
    assert parse_public_key(rewrapped).fingerprint == P256.fingerprint


def _explicit_curve_pem() -> str:
    # A P-256 key whose SPKI spells out the curve's parameters instead of naming it.
    der = bytes.fromhex(
        "3082014b3082010306072a8648ce3d02013081f7020101302c06072a8648ce3d0101022100ffffffff"
        "00000001000000000000000000000000ffffffffffffffffffffffff305b0420ffffffff0000000100"
        "0000000000000000000000fffffffffffffffffffffffc04205ac635d8aa3a93e7b3ebbd55769886bc"
        "651d06b0cc53b0f63bce3c3e27d2604b031500c49d360886e704936a6678e1139d26b7819f7e900441"
        "046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c2964fe342e2fe1a7f9b"
        "8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5022100ffffffff00000000ffffffffffff"
        "ffffbce6faada7179e84f3b9cac2fc63255102010103420004"
    )
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    body = base64.b64encode(der + point[1:]).decode()
    return f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "one PEM block"),
        ("x" * (MAX_PEM_CHARS + 1), "at most 4096"),
        (P256.pem + P256.pem, "one PEM block"),
        ("garbage\n" + P256.pem, "one PEM block"),
        (P256.pem.strip() + "\ntrailer", "must end with"),
        (P256.private_pem.decode(), "private key"),
        (P256.pem.replace("PUBLIC KEY", "RSA PUBLIC KEY"), "one PEM block"),
        ("-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----", "not valid base64"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", "cannot read|can read"),
        (_pem(ec.generate_private_key(ec.SECP521R1()).public_key()), "only P-256 and P-384"),
        (_pem(ec.generate_private_key(ec.SECP256K1()).public_key()), "only P-256 and P-384"),
        (_pem(rsa.generate_private_key(65537, 1024).public_key()), "1024 bits"),
        (_pem(ed25519.Ed25519PrivateKey.generate().public_key()), "Ed25519ph"),
        (_explicit_curve_pem(), "canonical encoding|cannot read|can read"),
    ],
    ids=[
        "empty", "over-the-pem-bound", "two-blocks", "text-before-the-block", "text-after",
        "a-private-key", "pkcs1-rsa-block", "bad-base64", "not-a-key", "p521", "secp256k1",
        "rsa-1024", "ed25519-signed-prehashed-by-cosign", "explicit-curve-parameters",
    ],
)  # fmt: skip
def test_unusable_keys_are_refused_with_a_reason(text: str, says: str) -> None:
    with pytest.raises(InvalidPublicKey, match=says) as raised:
        parse_public_key(text)
    assert isinstance(raised.value, ValueError | SignatureError)


def test_a_key_list_keeps_its_order_and_is_bounded_to_eight_distinct_keys() -> None:
    keys = [TestKey.p256() for _ in range(MAX_KEYS)]
    parsed = parse_public_keys([k.pem for k in keys])
    assert [p.fingerprint for p in parsed] == [k.fingerprint for k in keys]
    with pytest.raises(InvalidPublicKey, match="at most 8"):
        parse_public_keys([k.pem for k in keys] + [TestKey.p256().pem])


def test_an_empty_key_list_is_refused() -> None:
    with pytest.raises(InvalidPublicKey, match="no key"):
        parse_public_keys([])


def test_a_repeated_key_is_refused_naming_both_entries() -> None:
    with pytest.raises(InvalidPublicKey, match=r"publicKeys\[2\] is the same key as .*\[0\]"):
        parse_public_keys([P256.pem, TestKey.p256().pem, P256.pem])


def test_a_bad_key_in_a_list_is_named_by_its_index() -> None:
    with pytest.raises(InvalidPublicKey, match=r"verify.publicKeys\[1\]"):
        parse_public_keys([P256.pem, "nonsense"])


@pytest.mark.parametrize("key", [P256, TestKey.rsa()], ids=["ecdsa", "rsa"])
@pytest.mark.parametrize(
    "signature", [b"", b"\x00" * 64, b"\x30\x02\x01", b"\xff" * 600],
    ids=["empty", "raw-r-s", "truncated-der", "oversized"],
)  # fmt: skip
def test_a_garbled_signature_does_not_verify_and_raises_nothing(
    key: TestKey, signature: bytes
) -> None:
    assert parse_public_key(key.pem).verifies(signature, b"payload") is False


def test_a_signature_verifies_only_over_the_bytes_it_signed() -> None:
    parsed = parse_public_key(P256.pem)
    assert parsed.verifies(P256.sign(b"payload"), b"payload")
    assert not parsed.verifies(P256.sign(b"payload"), b"payload ")
