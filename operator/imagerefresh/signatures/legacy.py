"""cosign's legacy storage: simple-signing payloads in the ``sha256-<hex>.sig`` tag.

The tag's manifest has one layer per signing, each a simple-signing payload whose signature
(base64, over the payload's raw bytes) is in the layer's annotation. A layer is a signature
of digest ``D`` in repository ``R`` only when, in this order:

1. its blob is the one the descriptor names, within its cap;
2. a listed key verifies the signature over exactly those bytes — nothing in the payload is
   believed before that;
3. the payload is cosign's: ``critical.type`` is ``cosign container image signature`` and
   ``critical`` holds nothing else than the simple-signing format defines (its consumers
   must refuse unknown critical fields);
4. ``critical.image.docker-manifest-digest`` is exactly ``D``;
5. ``critical.identity.docker-reference`` names ``R`` once both are normalised by the
   reference grammar (``index.docker.io/library/nginx`` is ``docker.io/library/nginx``).
   ``cosign verify`` does not check this claim; without it a signature of the same build
   pushed to any other repository by the same key would count here.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ConfigDict, Field

from imagerefresh.reference import ImageReference, InvalidReference, parse
from imagerefresh.signatures.documents import (
    DOCKER_MANIFEST,
    MAX_CANDIDATES,
    MAX_MANIFEST_BYTES,
    MAX_PAYLOAD_BYTES,
    OCI_MANIFEST,
    Descriptor,
    Document,
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
    "COSIGN_SIGNATURE_TYPE",
    "SIGNATURE_ANNOTATION",
    "SIMPLE_SIGNING",
    "legacy_tag",
    "signature_layers",
    "verify_layer",
]

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN_SIGNATURE_TYPE = "cosign container image signature"


class _Strict(Document):
    # The payload's critical part: no field beyond the format's is accepted.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


class _Identity(_Strict):
    docker_reference: str = Field(alias="docker-reference")


class _Image(_Strict):
    docker_manifest_digest: str = Field(alias="docker-manifest-digest")


class _Critical(_Strict):
    identity: _Identity
    image: _Image
    type: str


class _Payload(Document):
    critical: _Critical
    optional: dict[str, object] | None = None


def legacy_tag(digest: str) -> str:
    """The tag cosign stores ``digest``'s legacy signatures under: ``sha256-<hex>.sig``."""
    algorithm, _, encoded = digest.partition(":")
    return f"{algorithm}-{encoded}.sig"


def _manifest(data: bytes) -> Manifest:
    manifest = parse_model(
        Manifest, load_json(data, what="the signature manifest", limit=MAX_MANIFEST_BYTES),
        what="the signature manifest",
    )  # fmt: skip
    # COSIGN_DOCKER_MEDIA_TYPES=1 makes cosign write Docker's manifest type instead of OCI's.
    if manifest.media_type not in (OCI_MANIFEST, DOCKER_MANIFEST):
        raise Rejected(
            Failure.MALFORMED, f"the signature manifest is a {manifest.media_type!r}, no image"
        )
    return manifest


def signature_layers(manifest: bytes) -> tuple[Descriptor, ...]:
    """The simple-signing layers of a ``.sig`` manifest that are read: the first
    :data:`~imagerefresh.signatures.documents.MAX_CANDIDATES`. Raises
    :class:`~imagerefresh.signatures.errors.Rejected` for a manifest that is none."""
    layers = [layer for layer in _manifest(manifest).layers if layer.media_type == SIMPLE_SIGNING]
    return tuple(layers[:MAX_CANDIDATES])


def _same_repository(claimed: str, repository: ImageReference, digest: str) -> None:
    try:
        named = parse(claimed)
    except InvalidReference as error:
        raise Rejected(
            Failure.REPOSITORY_MISMATCH, f"the signature names no repository ({error})"
        ) from None
    if named.repository != repository.repository:
        raise Rejected(
            Failure.REPOSITORY_MISMATCH,
            f"the signature is for {named.repository}, not {repository.repository}",
        )
    if named.digest is not None and named.digest != digest:
        raise Rejected(Failure.DIGEST_MISMATCH, f"the signature's reference names {named.digest}")


def verify_layer(
    layer: Descriptor,
    payload: bytes | None,
    *,
    digest: str,
    repository: ImageReference,
    keys: Sequence[PublicKey],
) -> PublicKey:
    """The key by which ``layer`` signs ``digest`` in ``repository``; else raise
    :class:`~imagerefresh.signatures.errors.Rejected` naming the first check that failed."""
    blob = check_blob(layer, payload, what="the signature payload", limit=MAX_PAYLOAD_BYTES)
    annotation = layer.annotations.get(SIGNATURE_ANNOTATION)
    if annotation is None:
        raise Rejected(Failure.MALFORMED, f"the layer has no {SIGNATURE_ANNOTATION} annotation")
    signature = decode_base64(annotation, what="the layer's signature")
    key = next((key for key in keys if key.verifies(signature, blob)), None)
    if key is None:
        raise Rejected(Failure.BAD_SIGNATURE, "no listed key verifies the signature")
    document = load_json(blob, what="the signed payload", limit=MAX_PAYLOAD_BYTES)
    # The type is read before the rest is validated: another format's payload (an
    # attestation, a Red Hat simple signature) is told apart from a malformed cosign one.
    critical = document.get("critical")
    claimed_type = critical.get("type") if isinstance(critical, dict) else None
    if claimed_type != COSIGN_SIGNATURE_TYPE:
        raise Rejected(
            Failure.WRONG_TYPE,
            f"the payload's type is {claimed_type!r}, not {COSIGN_SIGNATURE_TYPE!r}",
        )
    claims = parse_model(_Payload, document, what="the signed payload").critical
    if claims.image.docker_manifest_digest != digest:
        raise Rejected(
            Failure.DIGEST_MISMATCH,
            f"the signature is for {claims.image.docker_manifest_digest}, not {digest}",
        )
    _same_repository(claims.identity.docker_reference, repository, digest)
    return key
