"""Offline verification of cosign's key-based signatures: bytes in, a verdict out.

``spec.verify`` pins a digest only when it carries a valid signature by one of the listed
public keys. This package is the pure core of that check: it never reads the network or the
disk, it is handed what the registry client read from the two places cosign stores
signatures, and it returns a :data:`~imagerefresh.signatures.verdict.Verdict` — verified by
which key, or the check that failed. No transparency log, certificate or TUF root is needed,
so an edge that is offline when a build lands can still verify it.

* :mod:`~imagerefresh.signatures.keys` — the listed public keys, parsed and bounded;
* :mod:`~imagerefresh.signatures.legacy` — the ``sha256-<hex>.sig`` tag's simple signing;
* :mod:`~imagerefresh.signatures.bundle` — Sigstore bundles attached as OCI referrers;
* :mod:`~imagerefresh.signatures.documents` — bounded, strict reading of untrusted bytes;
* :mod:`~imagerefresh.signatures.verify` — one verdict from every candidate.
"""

from imagerefresh.signatures.bundle import (
    BUNDLE_MEDIA_TYPE,
    COSIGN_SIGN_PREDICATE,
    bundle_layer,
    fallback_tag,
    pae,
    referrer_manifests,
)
from imagerefresh.signatures.documents import (
    MAX_BUNDLE_BYTES,
    MAX_CANDIDATES,
    MAX_MANIFEST_BYTES,
    MAX_PAYLOAD_BYTES,
    Descriptor,
)
from imagerefresh.signatures.errors import InvalidPublicKey, Rejected, SignatureError
from imagerefresh.signatures.keys import (
    MAX_KEYS,
    MAX_PEM_CHARS,
    PublicKey,
    parse_public_key,
    parse_public_keys,
)
from imagerefresh.signatures.legacy import SIMPLE_SIGNING, legacy_tag, signature_layers
from imagerefresh.signatures.verdict import Failure, Format, Untrusted, Verdict, Verified
from imagerefresh.signatures.verify import BundleEvidence, LegacyEvidence, verify

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "COSIGN_SIGN_PREDICATE",
    "MAX_BUNDLE_BYTES",
    "MAX_CANDIDATES",
    "MAX_KEYS",
    "MAX_MANIFEST_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_PEM_CHARS",
    "SIMPLE_SIGNING",
    "BundleEvidence",
    "Descriptor",
    "Failure",
    "Format",
    "InvalidPublicKey",
    "LegacyEvidence",
    "PublicKey",
    "Rejected",
    "SignatureError",
    "Untrusted",
    "Verdict",
    "Verified",
    "bundle_layer",
    "fallback_tag",
    "legacy_tag",
    "pae",
    "parse_public_key",
    "parse_public_keys",
    "referrer_manifests",
    "signature_layers",
    "verify",
]
