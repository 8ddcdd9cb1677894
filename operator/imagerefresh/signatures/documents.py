"""Reading the untrusted bytes signatures arrive in: bounded, strict, and checked by digest.

Everything here is read from a registry anyone who can push may write to, so each body is
refused over its cap before it is parsed, JSON must be UTF-8 without duplicate keys (two
parsers that keep different duplicates would disagree about what was signed), base64 must be
canonical, and a blob counts only when its sha256 and size are what its descriptor names.
Failures are :class:`~imagerefresh.signatures.errors.Rejected`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagerefresh.signatures.errors import Rejected
from imagerefresh.signatures.verdict import Failure

__all__ = [
    "MAX_BUNDLE_BYTES",
    "MAX_CANDIDATES",
    "MAX_MANIFEST_BYTES",
    "MAX_PAYLOAD_BYTES",
    "OCI_EMPTY",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "Descriptor",
    "Document",
    "Index",
    "Manifest",
    "check_blob",
    "decode_base64",
    "load_json",
    "parse_model",
]

# Caps on what is read, checked before parsing. A signature manifest holds one small layer
# per signing; a referrers index one descriptor per artifact; a simple-signing payload is a
# few hundred bytes (more with `cosign sign -a` annotations); a key-based bundle about 1 KiB
# (more with a certificate chain or transparency-log entries, which are ignored here).
MAX_MANIFEST_BYTES = 512 * 1024
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_BUNDLE_BYTES = 128 * 1024
# At most this many layers of a signature manifest, or referrers of a digest, are read.
MAX_CANDIDATES = 16

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"

_M = TypeVar("_M", bound=BaseModel)


class Document(BaseModel):
    """A JSON object of a format: unknown fields are kept, not trusted; types are strict."""

    model_config = ConfigDict(frozen=True, extra="allow", strict=True, populate_by_name=True)


class Descriptor(Document):
    """An OCI content descriptor."""

    media_type: str = Field(alias="mediaType")
    digest: str
    size: int = Field(ge=0)
    annotations: dict[str, str] = Field(default_factory=dict)
    artifact_type: str | None = Field(default=None, alias="artifactType")


class Manifest(Document):
    """An OCI (or Docker v2) image manifest; ``subject`` when it is a referrer."""

    schema_version: int = Field(alias="schemaVersion")
    media_type: str | None = Field(default=None, alias="mediaType")
    layers: list[Descriptor]
    subject: Descriptor | None = None
    annotations: dict[str, str] = Field(default_factory=dict)


class Index(Document):
    """An OCI image index: the referrers API's answer, or its fallback tag."""

    schema_version: int = Field(alias="schemaVersion")
    media_type: str | None = Field(default=None, alias="mediaType")
    manifests: list[Descriptor]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise Rejected(Failure.MALFORMED, f"{key!r} appears twice in one JSON object")
        document[key] = value
    return document


def _no_constant(name: str) -> object:
    raise Rejected(Failure.MALFORMED, f"{name} is not JSON")


def load_json(data: bytes, *, what: str, limit: int) -> dict[str, Any]:
    """``data`` as a JSON object, refused when over ``limit`` bytes before it is parsed."""
    if len(data) > limit:
        raise Rejected(Failure.TOO_LARGE, f"{what} is {len(data)} bytes; at most {limit} are read")
    try:
        text = data.decode("utf-8")
        document = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise Rejected(Failure.MALFORMED, f"{what} is not UTF-8") from None
    except (ValueError, RecursionError) as error:
        raise Rejected(Failure.MALFORMED, f"{what} is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise Rejected(Failure.MALFORMED, f"{what} is not a JSON object")
    return document


def parse_model(model: type[_M], document: object, *, what: str) -> _M:
    """``document`` validated as ``model``; a mismatch is malformed, naming the first field."""
    try:
        return model.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        raise Rejected(Failure.MALFORMED, f"{what}: {where}: {first['msg']}") from None


def decode_base64(text: str, *, what: str) -> bytes:
    """Standard, padded base64 — the form cosign and protobuf's JSON write — and only that."""
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Rejected(Failure.MALFORMED, f"{what} is not base64") from None
    if base64.b64encode(decoded).decode("ascii") != text:
        raise Rejected(Failure.MALFORMED, f"{what} is not canonical base64")
    return decoded


def check_blob(descriptor: Descriptor, blob: bytes | None, *, what: str, limit: int) -> bytes:
    """``blob`` when it is exactly the content ``descriptor`` names (sha256 and size)."""
    algorithm, _, encoded = descriptor.digest.partition(":")
    if algorithm != "sha256" or len(encoded) != 64:
        raise Rejected(Failure.MALFORMED, f"{what} is named by {descriptor.digest!r}, not sha256")
    if descriptor.size > limit:
        raise Rejected(
            Failure.TOO_LARGE, f"{what} is {descriptor.size} bytes; at most {limit} are read"
        )
    if blob is None:
        raise Rejected(Failure.MALFORMED, f"{what} {descriptor.digest} was not read")
    if len(blob) > limit:
        raise Rejected(Failure.TOO_LARGE, f"{what} is {len(blob)} bytes; at most {limit} are read")
    actual = hashlib.sha256(blob).hexdigest()
    if actual != encoded or len(blob) != descriptor.size:
        raise Rejected(
            Failure.PAYLOAD_HASH_MISMATCH,
            f"{what} is sha256:{actual} ({len(blob)} bytes), "
            f"its descriptor names {descriptor.digest} ({descriptor.size} bytes)",
        )
    return blob
