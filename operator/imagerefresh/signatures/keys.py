"""The public keys of ``spec.verify``: parsed strictly, bounded, and named by fingerprint.

A key is a PEM ``PUBLIC KEY`` block (SubjectPublicKeyInfo), exactly as ``cosign
generate-key-pair`` writes ``cosign.pub``. Each key fixes its own signature scheme, the one
cosign signs with for that kind of key, so a signature is never tried under a weaker one:

* ECDSA P-256 with SHA-256 (cosign's default key), ECDSA P-384 with SHA-384;
* RSA of 2048 bits or more, PKCS #1 v1.5 with SHA-256.

Ed25519 keys are refused: cosign signs with them as Ed25519ph (pre-hashed), which the
``cryptography`` library does not verify, and a scheme that cannot be checked is not accepted
on trust. Other curves, DSA, PKCS #1 ``RSA PUBLIC KEY`` blocks and private keys are refused too.

The fingerprint is ``sha256:`` and the hex sha256 of the key's DER, which is what
``status.verifiedBy`` reports. The DER must be the canonical encoding of the key, so one key
has one fingerprint however it was pasted.

``cryptography`` is imported when the first key is parsed, not with this module: its compiled
core is about 7 MiB of resident memory and 20 ms of every start, which an operator whose
policies verify no signature would pay for nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagerefresh.signatures.errors import InvalidPublicKey

if TYPE_CHECKING:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    _VerifyingKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey

__all__ = [
    "MAX_KEYS",
    "MAX_PEM_CHARS",
    "MIN_RSA_BITS",
    "PublicKey",
    "parse_public_key",
    "parse_public_keys",
]

# A signature costs at most this many verifications, whatever a policy lists.
MAX_KEYS = 8
# An RSA-8192 public key is about 1,500 characters of PEM; anything much longer is not one key.
MAX_PEM_CHARS = 4096
MIN_RSA_BITS = 2048
# Larger RSA keys make each verification slower for no gain cosign offers.
MAX_RSA_BITS = 8192

_BEGIN = "-----BEGIN PUBLIC KEY-----"
_END = "-----END PUBLIC KEY-----"


@dataclass(frozen=True, slots=True, eq=False)
class PublicKey:
    """One usable key: its fingerprint, what it is, and the scheme it verifies with.

    Two keys are the same key when their fingerprints are (the canonical DER is one per key).
    """

    fingerprint: str  # sha256:<hex of the DER's sha256>
    kind: str  # "ECDSA P-256", "ECDSA P-384", "RSA 3072"
    _key: _VerifyingKey
    _hash: hashes.HashAlgorithm

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def verifies(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is this key's signature over ``message``."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric import ec, padding

        try:
            if isinstance(self._key, ec.EllipticCurvePublicKey):
                self._key.verify(signature, message, ec.ECDSA(self._hash))
            else:
                self._key.verify(signature, message, padding.PKCS1v15(), self._hash)
        except InvalidSignature:
            return False
        return True


def _der(text: str, where: str) -> bytes:
    """The DER inside exactly one PEM PUBLIC KEY block, and nothing else but whitespace."""
    stripped = text.strip()
    if "PRIVATE KEY" in stripped:
        raise InvalidPublicKey(f"{where} is a private key; list the public key (cosign.pub)")
    if stripped.count("-----BEGIN ") != 1 or not stripped.startswith(_BEGIN):
        raise InvalidPublicKey(
            f"{where} must be one PEM block that starts with {_BEGIN} (cosign.pub's form)"
        )
    if not stripped.endswith(_END):
        raise InvalidPublicKey(f"{where} must end with {_END}")
    body = "".join(stripped.removeprefix(_BEGIN).removesuffix(_END).split())
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidPublicKey(f"{where} is not valid base64 between its PEM lines") from None


def _scheme(key: object, where: str) -> tuple[_VerifyingKey, hashes.HashAlgorithm, str]:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    if isinstance(key, ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1):
            return key, hashes.SHA256(), "ECDSA P-256"
        if isinstance(key.curve, ec.SECP384R1):
            return key, hashes.SHA384(), "ECDSA P-384"
        raise InvalidPublicKey(
            f"{where} is an ECDSA key on {key.curve.name}; only P-256 and P-384 are supported"
        )
    if isinstance(key, rsa.RSAPublicKey):
        if not MIN_RSA_BITS <= key.key_size <= MAX_RSA_BITS:
            raise InvalidPublicKey(
                f"{where} is an RSA key of {key.key_size} bits; "
                f"{MIN_RSA_BITS} to {MAX_RSA_BITS} bits are supported"
            )
        return key, hashes.SHA256(), f"RSA {key.key_size}"
    if isinstance(key, ed25519.Ed25519PublicKey):
        raise InvalidPublicKey(
            f"{where} is an Ed25519 key; cosign signs with those as Ed25519ph, which cannot be "
            "verified here: use an ECDSA P-256 key (cosign generate-key-pair)"
        )
    raise InvalidPublicKey(
        f"{where} is a {type(key).__name__}; supported are ECDSA P-256/P-384 and RSA keys"
    )


def parse_public_key(text: str, *, where: str = "the public key") -> PublicKey:
    """Parse one PEM public key; raise :class:`InvalidPublicKey` saying why it is unusable."""
    if len(text) > MAX_PEM_CHARS:
        raise InvalidPublicKey(
            f"{where} is {len(text)} characters; one public key is at most {MAX_PEM_CHARS}"
        )
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    der = _der(text, where)
    try:
        loaded = serialization.load_der_public_key(der)
    except (ValueError, UnsupportedAlgorithm) as error:
        raise InvalidPublicKey(
            f"{where} is not a public key cryptography can read: {error}"
        ) from error
    key, hash_algorithm, kind = _scheme(loaded, where)
    canonical = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if canonical != der:
        # A non-canonical encoding (explicit curve parameters, trailing bytes) would give one
        # key two fingerprints, and is not what cosign writes.
        raise InvalidPublicKey(f"{where} is not in the canonical encoding cosign writes")
    fingerprint = "sha256:" + hashlib.sha256(der).hexdigest()
    return PublicKey(fingerprint, kind, key, hash_algorithm)


def parse_public_keys(texts: Sequence[str]) -> tuple[PublicKey, ...]:
    """Parse ``spec.verify.publicKeys``: 1 to :data:`MAX_KEYS` distinct keys, in order."""
    if not texts:
        raise InvalidPublicKey("verify.publicKeys lists no key; list at least one")
    if len(texts) > MAX_KEYS:
        raise InvalidPublicKey(
            f"verify.publicKeys lists {len(texts)} keys; at most {MAX_KEYS} are tried"
        )
    keys: list[PublicKey] = []
    for index, text in enumerate(texts):
        key = parse_public_key(text, where=f"verify.publicKeys[{index}]")
        for earlier, seen in enumerate(keys):
            if seen.fingerprint == key.fingerprint:
                raise InvalidPublicKey(
                    f"verify.publicKeys[{index}] is the same key as verify.publicKeys[{earlier}]"
                )
        keys.append(key)
    return tuple(keys)
