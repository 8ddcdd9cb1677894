"""The listed public keys: what is accepted, how it is named, and every way one is refused."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa, x25519
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from imagerefresh.signatures import (
    MAX_KEYS,
    MAX_PEM_CHARS,
    InvalidPublicKey,
    SignatureError,
    parse_public_key,
    parse_public_keys,
)

from support.signing import TestKey


def _pem(key: PublicKeyTypes) -> str:
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


PEM_BLOCK = (
    "the public key must be one PEM block that starts with -----BEGIN PUBLIC KEY----- "
    "(cosign.pub's form)"
)
NOT_READ = "the public key is not a public key cryptography can read: "


def _x25519_pem() -> str:
    # A key cryptography reads, but for key agreement: no signature scheme at all.
    return _pem(x25519.X25519PrivateKey.generate().public_key())


def _rsa_pem(bits: int) -> str:
    # Only the public half is needed: any odd modulus of that many bits is a key to parse.
    return _pem(rsa.RSAPublicNumbers(65537, (1 << (bits - 1)) | 1).public_key())


# Each refusal as the policy's refusal shows it, whole: `says` must match all of it.
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", re.escape(PEM_BLOCK)),
        ("x" * (MAX_PEM_CHARS + 1),
         "the public key is 4097 characters; one public key is at most 4096"),
        (P256.pem + P256.pem, re.escape(PEM_BLOCK)),
        ("garbage\n" + P256.pem, re.escape(PEM_BLOCK)),
        (P256.pem.strip() + "\ntrailer", "the public key must end with -----END PUBLIC KEY-----"),
        (P256.private_pem.decode(),
         re.escape("the public key is a private key; list the public key (cosign.pub)")),
        (P256.pem.replace("PUBLIC KEY", "RSA PUBLIC KEY"), re.escape(PEM_BLOCK)),
        ("-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----",
         "the public key is not valid base64 between its PEM lines"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", NOT_READ + ".+"),
        (_pem(ec.generate_private_key(ec.SECP521R1()).public_key()),
         "the public key is an ECDSA key on secp521r1; only P-256 and P-384 are supported"),
        (_pem(ec.generate_private_key(ec.SECP256K1()).public_key()),
         "the public key is an ECDSA key on secp256k1; only P-256 and P-384 are supported"),
        (_pem(rsa.generate_private_key(65537, 1024).public_key()),
         "the public key is an RSA key of 1024 bits; 2048 to 8192 bits are supported"),
        (_rsa_pem(8193),
         "the public key is an RSA key of 8193 bits; 2048 to 8192 bits are supported"),
        (_pem(ed25519.Ed25519PrivateKey.generate().public_key()),
         re.escape("the public key is an Ed25519 key; cosign signs with those as Ed25519ph, "
                   "which cannot be verified here: use an ECDSA P-256 key "
                   "(cosign generate-key-pair)")),
        (_x25519_pem(),
         "the public key is a X25519PublicKey; supported are ECDSA P-256/P-384 and RSA keys"),
        (_explicit_curve_pem(),
         "the public key is not in the canonical encoding cosign writes|" + NOT_READ + ".+"),
    ],
    ids=[
        "empty", "over-the-pem-bound", "two-blocks", "text-before-the-block", "text-after",
        "a-private-key", "pkcs1-rsa-block", "bad-base64", "not-a-key", "p521", "secp256k1",
        "rsa-1024", "rsa-8193", "ed25519-signed-prehashed-by-cosign", "x25519-no-signing-key",
        "explicit-curve-parameters",
    ],
)  # fmt: skip
def test_unusable_keys_are_refused_with_the_whole_reason(text: str, says: str) -> None:
    with pytest.raises(InvalidPublicKey) as raised:
        parse_public_key(text)
    assert re.fullmatch(says, str(raised.value), re.DOTALL), str(raised.value)
    assert isinstance(raised.value, ValueError | SignatureError)


def test_the_largest_rsa_key_and_a_key_of_exactly_the_pem_bound_are_accepted() -> None:
    assert parse_public_key(_rsa_pem(8192)).kind == "RSA 8192"
    padded = P256.pem + " " * (MAX_PEM_CHARS - len(P256.pem))
    assert len(padded) == MAX_PEM_CHARS
    assert parse_public_key(padded).fingerprint == P256.fingerprint


def test_a_key_list_keeps_its_order_and_is_bounded_to_eight_distinct_keys() -> None:
    keys = [TestKey.p256() for _ in range(MAX_KEYS)]
    parsed = parse_public_keys([k.pem for k in keys])
    assert [p.fingerprint for p in parsed] == [k.fingerprint for k in keys]
    with pytest.raises(InvalidPublicKey, match="at most 8"):
        parse_public_keys([k.pem for k in keys] + [TestKey.p256().pem])


def test_an_empty_key_list_is_refused() -> None:
    with pytest.raises(InvalidPublicKey) as raised:
        parse_public_keys([])
    assert str(raised.value) == "verify.publicKeys lists no key; list at least one"


def test_a_repeated_key_is_refused_naming_both_entries() -> None:
    with pytest.raises(InvalidPublicKey, match=r"publicKeys\[2\] is the same key as .*\[0\]"):
        parse_public_keys([P256.pem, TestKey.p256().pem, P256.pem])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nonsense", "must be one PEM block that starts with -----BEGIN PUBLIC KEY----- "
                     "(cosign.pub's form)"),
        (_pem(ec.generate_private_key(ec.SECP521R1()).public_key()),
         "is an ECDSA key on secp521r1; only P-256 and P-384 are supported"),
    ],
    ids=["not-pem", "an-unsupported-curve"],
)  # fmt: skip
def test_a_bad_key_in_a_list_is_named_by_its_index(text: str, says: str) -> None:
    with pytest.raises(InvalidPublicKey) as raised:
        parse_public_keys([P256.pem, text])
    assert str(raised.value) == f"verify.publicKeys[1] {says}"


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


def test_keys_are_the_same_key_exactly_when_their_fingerprints_are() -> None:
    lines = P256.pem.strip().splitlines()
    first = parse_public_key(P256.pem)
    rewrapped = parse_public_key("\n".join([lines[0], "".join(lines[1:-1]), lines[-1]]))
    other = parse_public_key(TestKey.p256().pem)
    assert first == rewrapped
    assert hash(first) == hash(rewrapped)
    assert first != other
    assert first != first.fingerprint  # not a key: unequal, and no error
    assert len({first, rewrapped, other}) == 2


def test_the_operator_loads_cryptography_only_when_a_policy_lists_a_key() -> None:
    # In a process of its own: what `imagerefresh run` imports, then a policy with a key.
    code = (
        "import sys\n"
        "import imagerefresh.cli.operate\n"
        "from imagerefresh.models import PolicySpec\n"
        "spec = {'targets': [{'kind': 'Deployment', 'name': 'd',"
        " 'containers': [{'name': 'c', 'image': 'r.example/a:prod'}]}]}\n"
        "PolicySpec.model_validate(spec)\n"
        "print(any(m.startswith('cryptography') for m in sys.modules))\n"
        "spec['verify'] = {'publicKeys': [sys.argv[1]]}\n"
        "PolicySpec.model_validate(spec)\n"
        "print(any(m.startswith('cryptography') for m in sys.modules))\n"
    )
    pem = _pem(ec.generate_private_key(ec.SECP256R1()).public_key())
    done = subprocess.run(
        [sys.executable, "-c", code, pem], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["False", "True"]
