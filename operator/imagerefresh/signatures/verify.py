"""One verdict for one digest, from everything its signature locations held.

The caller reads the two places cosign stores signatures — the ``sha256-<hex>.sig`` tag
(:class:`LegacyEvidence`) and the referrers of the digest (:class:`BundleEvidence`, one per
referrer) — and hands the bytes here; nothing here reads the network or the disk. The digest
is verified when any one candidate passes every check under any listed key; otherwise the
verdict names the failure of the candidate that got furthest (see
:class:`~imagerefresh.signatures.verdict.Failure`). No candidate at all is ``no-signature``.
At most :data:`~imagerefresh.signatures.documents.MAX_CANDIDATES` layers and as many
referrers are considered, and at most :data:`~imagerefresh.signatures.keys.MAX_KEYS` keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from imagerefresh.reference import ImageReference, parse_digest
from imagerefresh.signatures.bundle import bundle_layer, verify_bundle
from imagerefresh.signatures.documents import MAX_CANDIDATES
from imagerefresh.signatures.errors import InvalidPublicKey, Rejected
from imagerefresh.signatures.keys import MAX_KEYS, PublicKey
from imagerefresh.signatures.legacy import signature_layers, verify_layer
from imagerefresh.signatures.verdict import Failure, Format, Untrusted, Verdict, Verified

__all__ = ["BundleEvidence", "LegacyEvidence", "verify"]


class _Evidence(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class LegacyEvidence(_Evidence):
    """What the ``sha256-<hex>.sig`` tag held: its manifest, and the layer blobs read."""

    manifest: bytes
    payloads: Mapping[str, bytes] = Field(default_factory=dict)  # layer digest → blob


class BundleEvidence(_Evidence):
    """One referrer of the digest: its manifest, and the blob of its bundle layer."""

    manifest: bytes
    bundle: bytes | None = None


def _legacy(
    evidence: LegacyEvidence, digest: str, repository: ImageReference, keys: Sequence[PublicKey]
) -> list[Callable[[], PublicKey]]:
    layers = signature_layers(evidence.manifest)
    if not layers:
        raise Rejected(Failure.NO_SIGNATURE, "the signature manifest has no signature layer")
    return [
        partial(
            verify_layer,
            layer,
            evidence.payloads.get(layer.digest),
            digest=digest,
            repository=repository,
            keys=keys,
        )
        for layer in layers
    ]


def _bundle(evidence: BundleEvidence, digest: str, keys: Sequence[PublicKey]) -> PublicKey:
    return verify_bundle(
        bundle_layer(evidence.manifest, digest=digest), evidence.bundle, digest=digest, keys=keys
    )


def verify(
    digest: str,
    repository: ImageReference,
    keys: Sequence[PublicKey],
    *,
    legacy: LegacyEvidence | None = None,
    bundles: Sequence[BundleEvidence] = (),
) -> Verdict:
    """Whether ``digest`` of ``repository`` carries a valid signature by one of ``keys``."""
    parse_digest(digest)
    if len(keys) > MAX_KEYS:
        raise InvalidPublicKey(f"{len(keys)} keys given; at most {MAX_KEYS} are tried")
    candidates: list[tuple[Format, Callable[[], PublicKey]]] = []
    failures: list[tuple[Format, Rejected]] = []
    if legacy is not None:
        try:
            candidates += [("legacy", check) for check in _legacy(legacy, digest, repository, keys)]
        except Rejected as rejected:
            failures.append(("legacy", rejected))
    for evidence in bundles[:MAX_CANDIDATES]:
        candidates.append(("bundle", partial(_bundle, evidence, digest, keys)))
    for found, check in candidates:
        try:
            key = check()
        except Rejected as rejected:
            failures.append((found, rejected))
            continue
        return Verified(digest=digest, key=key.fingerprint, format=found)
    if not failures:
        return Untrusted(
            digest=digest,
            failure=Failure.NO_SIGNATURE,
            detail=f"no signature of {digest} was found",
        )
    # The first of the candidates that got furthest: max keeps the earliest of equals.
    where, furthest = max(failures, key=lambda failed: failed[1].failure.rank)
    return Untrusted(digest=digest, failure=furthest.failure, detail=furthest.detail, format=where)
