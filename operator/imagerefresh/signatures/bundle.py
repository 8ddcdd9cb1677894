"""cosign's bundle storage: a Sigstore bundle attached to the image as an OCI referrer.

``cosign sign`` (cosign 3's default, or ``--new-bundle-format``) pushes an OCI manifest whose
``subject`` is the image and whose one layer is a Sigstore bundle
(``application/vnd.dev.sigstore.bundle.v0.3+json``). It is found through the referrers API,
or, where a registry has none, the index tagged ``sha256-<hex>``. The bundle's DSSE envelope
signs the pre-authentication encoding of its payload (never the payload alone):

    "DSSEv1" SP len(type) SP type SP len(body) SP body

and that payload is an in-toto Statement. A bundle is a signature of digest ``D`` only when,
in this order:

1. the referrer's manifest names ``D`` as its subject and has exactly one bundle layer, whose
   blob is the one its descriptor names, within its cap;
2. the bundle is a v0.3 bundle holding a DSSE envelope;
3. a listed key verifies one of the envelope's signatures over that encoding — nothing in the
   envelope's payload or its type is believed before that;
4. the payload's type is in-toto's and the payload is an in-toto Statement whose predicate
   type is cosign's signature predicate (any other, an SBOM or provenance from ``cosign
   attest``, is an attestation, not a signature), of the Statement type ``cosign sign``
   writes, in-toto v1;
5. the Statement has exactly one subject, and its digest is ``D`` and nothing else.

A Statement names no repository, so a bundle carries no repository claim: a bundle made for
the same digest in another repository, and copied next to this one, counts. The bundle's
certificate and transparency-log entries are not used: verification is by the listed keys
only, offline. Its key hint (``verificationMaterial.publicKey.hint``: the base64 sha256 of
the signing key's DER, which ``cosign sign --key`` writes) and a signature's ``keyid`` in the
same form only order the keys: the key they name is tried first, then every other listed key.
At most :data:`MAX_ENVELOPE_SIGNATURES` signatures of an envelope are tried (cosign writes one).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from imagerefresh.signatures.documents import (
    MAX_BUNDLE_BYTES,
    MAX_CANDIDATES,
    MAX_MANIFEST_BYTES,
    OCI_EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    Document,
    Index,
    Manifest,
    check_blob,
    decode_base64,
    load_json,
    parse_model,
)
from imagerefresh.signatures.errors import Rejected
from imagerefresh.signatures.keys import PublicKey
from imagerefresh.signatures.verdict import Failure

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "COSIGN_SIGN_PREDICATE",
    "IN_TOTO_PAYLOAD",
    "IN_TOTO_STATEMENT",
    "MAX_ENVELOPE_SIGNATURES",
    "bundle_layer",
    "fallback_tag",
    "pae",
    "referrer_manifests",
    "verify_bundle",
]

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
IN_TOTO_STATEMENT = "https://in-toto.io/Statement/v1"
COSIGN_SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
# An envelope signed by more parties than this is not cosign's (it writes one); each costs a
# check per listed key.
MAX_ENVELOPE_SIGNATURES = MAX_CANDIDATES
_SHA256_BYTES = 32
# A referrer may be listed with the empty artifact type, or none, and still be a bundle.
_BUNDLE_ARTIFACT_TYPES = (BUNDLE_MEDIA_TYPE, OCI_EMPTY, None)


class _Signature(Document):
    sig: str
    keyid: str | None = None


class _Envelope(Document):
    payload: str
    payload_type: str = Field(alias="payloadType")
    signatures: list[_Signature]


class _Bundle(Document):
    media_type: str = Field(alias="mediaType")
    dsse_envelope: _Envelope | None = Field(default=None, alias="dsseEnvelope")


class _Subject(Document):
    digest: dict[str, str]


class _Statement(Document):
    type: str = Field(alias="_type")
    subject: list[_Subject]
    predicate_type: str = Field(alias="predicateType")


def fallback_tag(digest: str) -> str:
    """The tag of the referrers index on a registry without the referrers API."""
    algorithm, _, encoded = digest.partition(":")
    return f"{algorithm}-{encoded}"


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what a DSSE signature is over."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def referrer_manifests(index: bytes) -> tuple[Descriptor, ...]:
    """The manifests of a referrers index that may be bundles and are read: image manifests
    whose artifact type is a bundle's, empty or absent, the first
    :data:`~imagerefresh.signatures.documents.MAX_CANDIDATES`. Raises
    :class:`~imagerefresh.signatures.errors.Rejected` for an index that is none."""
    document = load_json(index, what="the referrers index", limit=MAX_MANIFEST_BYTES)
    parsed = parse_model(Index, document, what="the referrers index")
    if parsed.media_type not in (OCI_INDEX, None):
        raise Rejected(Failure.MALFORMED, f"the referrers index is a {parsed.media_type!r}")
    candidates = [
        entry
        for entry in parsed.manifests
        if entry.media_type == OCI_MANIFEST and entry.artifact_type in _BUNDLE_ARTIFACT_TYPES
    ]
    return tuple(candidates[:MAX_CANDIDATES])


def bundle_layer(manifest: bytes, *, digest: str) -> Descriptor:
    """The bundle layer of a referrer's manifest that names ``digest`` as its subject."""
    document = load_json(manifest, what="the referrer manifest", limit=MAX_MANIFEST_BYTES)
    parsed = parse_model(Manifest, document, what="the referrer manifest")
    if parsed.media_type != OCI_MANIFEST:
        raise Rejected(Failure.MALFORMED, f"the referrer is a {parsed.media_type!r}, no manifest")
    if parsed.subject is None or parsed.subject.digest != digest:
        named = "no subject" if parsed.subject is None else parsed.subject.digest
        raise Rejected(Failure.SUBJECT_MISMATCH, f"the referrer is about {named}, not {digest}")
    layers = [layer for layer in parsed.layers if layer.media_type == BUNDLE_MEDIA_TYPE]
    if not layers:
        raise Rejected(Failure.NO_SIGNATURE, "the referrer holds no Sigstore bundle")
    if len(layers) > 1:
        raise Rejected(Failure.MALFORMED, f"the referrer holds {len(layers)} bundles, not one")
    return layers[0]


def verify_bundle(
    layer: Descriptor, blob: bytes | None, *, digest: str, keys: Sequence[PublicKey]
) -> PublicKey:
    """The key by which the bundle in ``blob`` signs ``digest``; else raise
    :class:`~imagerefresh.signatures.errors.Rejected` naming the first check that failed."""
    data = check_blob(layer, blob, what="the bundle", limit=MAX_BUNDLE_BYTES)
    raw = load_json(data, what="the bundle", limit=MAX_BUNDLE_BYTES)
    bundle = parse_model(_Bundle, raw, what="the bundle")
    if bundle.media_type != BUNDLE_MEDIA_TYPE:
        raise Rejected(Failure.WRONG_TYPE, f"the bundle is a {bundle.media_type!r}")
    envelope = bundle.dsse_envelope
    if envelope is None:
        raise Rejected(Failure.WRONG_TYPE, "the bundle holds no DSSE envelope")
    if not 1 <= len(envelope.signatures) <= MAX_ENVELOPE_SIGNATURES:
        failure = Failure.BAD_SIGNATURE if not envelope.signatures else Failure.TOO_LARGE
        raise Rejected(failure, f"the envelope holds {len(envelope.signatures)} signatures")
    body = decode_base64(envelope.payload, what="the envelope's payload")
    message = pae(envelope.payload_type, body)
    signatures = [decode_base64(s.sig, what="an envelope signature") for s in envelope.signatures]
    hint = _fingerprint(_hint(raw))
    named = [(hint, _fingerprint(s.keyid)) for s in envelope.signatures]
    key = _signing_key(keys, signatures, named, message)
    if key is None:
        raise Rejected(Failure.BAD_SIGNATURE, "no listed key verifies the envelope")
    # The payload type is read only now: it is part of what was signed.
    if envelope.payload_type != IN_TOTO_PAYLOAD:
        raise Rejected(Failure.WRONG_TYPE, f"the envelope's payload is a {envelope.payload_type!r}")
    document = load_json(body, what="the signed statement", limit=MAX_BUNDLE_BYTES)
    statement = parse_model(_Statement, document, what="the signed statement")
    if statement.predicate_type != COSIGN_SIGN_PREDICATE:
        raise Rejected(
            Failure.NOT_A_SIGNATURE,
            f"the statement is an attestation ({statement.predicate_type}), not a signature",
        )
    if statement.type != IN_TOTO_STATEMENT:
        raise Rejected(Failure.WRONG_TYPE, f"the statement is a {statement.type!r}")
    algorithm, _, encoded = digest.partition(":")
    subjects = [subject.digest for subject in statement.subject]
    if subjects != [{algorithm: encoded}]:
        raise Rejected(
            Failure.SUBJECT_MISMATCH, f"the statement's subjects are {subjects}, not {digest}"
        )
    return key


def _hint(document: Mapping[str, Any]) -> object:
    """``verificationMaterial.publicKey.hint``, whatever it is (None when absent)."""
    material = document.get("verificationMaterial")
    public_key = material.get("publicKey") if isinstance(material, dict) else None
    return public_key.get("hint") if isinstance(public_key, dict) else None


def _fingerprint(named: object) -> str | None:
    """The key fingerprint a hint names (base64 of the sha256 of the key's DER, as cosign
    writes it); None for anything else — a hint is an order, never a reason to refuse."""
    if not isinstance(named, str):
        return None
    try:
        digest = base64.b64decode(named, validate=True)
    except (binascii.Error, ValueError):
        return None
    return "sha256:" + digest.hex() if len(digest) == _SHA256_BYTES else None


def _signing_key(
    keys: Sequence[PublicKey],
    signatures: Sequence[bytes],
    named: Sequence[tuple[str | None, str | None]],
    message: bytes,
) -> PublicKey | None:
    """The listed key that made one of ``signatures`` over ``message``: first each signature
    under the keys it names (``named``: the bundle's hint, the signature's keyid), then under
    every other listed key. Each (signature, key) pair is checked once at most."""
    tried: set[tuple[int, str]] = set()
    for index, signature in enumerate(signatures):
        for key in (k for k in keys if k.fingerprint in named[index]):
            tried.add((index, key.fingerprint))
            if key.verifies(signature, message):
                return key
    for key in keys:
        for index, signature in enumerate(signatures):
            if (index, key.fingerprint) not in tried and key.verifies(signature, message):
                return key
    return None
