"""Reading what cosign stored for a digest, for the offline verifier: bounded, and counted.

cosign keeps a digest's signatures in two places, and both are read as cosign itself does:

* **legacy** — the tag ``sha256-<hex>.sig``: a HEAD of the tag (an unsigned digest costs only
  that), a GET of its manifest by the digest the HEAD answered, and a blob GET per
  simple-signing layer;
* **bundles** — the referrers of the digest: the OCI referrers API
  (``GET /v2/<name>/referrers/<digest>``), or where a registry has none, the index its fallback
  tag ``sha256-<hex>`` holds (a HEAD first); then per referrer a GET of its manifest by digest
  and a blob GET of its Sigstore bundle.

A registry has no referrers API when it answers 404, 400 or 406, or 200 with anything but an
OCI image index — the rule of go-containerregistry, through which cosign writes the fallback
tag in exactly those cases. That is remembered per registry for an hour
(:class:`NoReferrersApi`), so steady state does not ask again.

Nothing read here is believed: the bytes are handed to :func:`imagerefresh.signatures.verify`,
which checks every blob against its descriptor and every signature against the listed keys. So
a layer or bundle whose blob is missing, too large by its descriptor, or named by a digest that
is not sha256 is handed over without its blob (the verifier says why it does not count), and a
referrer that is no bundle is handed over as it is. What is refused here is what must not be
read at all: a body over its cap (:data:`~imagerefresh.signatures.MAX_MANIFEST_BYTES`,
:data:`~imagerefresh.signatures.MAX_PAYLOAD_BYTES`,
:data:`~imagerefresh.signatures.MAX_BUNDLE_BYTES`), a manifest that does not hash to the digest
it was asked by, a referrers index that cannot be read — each a
:class:`~imagerefresh.registry.errors.RegistryError`, as is every failure but absence (404). At
most :data:`~imagerefresh.signatures.MAX_CANDIDATES` layers or referrers are read.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import structlog

from imagerefresh.reference import InvalidReference, parse_digest
from imagerefresh.registry.errors import RegistryProtocolError
from imagerefresh.registry.repository import OCI_INDEX, RepositoryReader
from imagerefresh.registry.transport import media_type_of
from imagerefresh.signatures import (
    MAX_BUNDLE_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_PAYLOAD_BYTES,
    BundleEvidence,
    Descriptor,
    LegacyEvidence,
    Rejected,
    bundle_layer,
    fallback_tag,
    legacy_tag,
    referrer_manifests,
    signature_layers,
)

__all__ = [
    "MAX_REGISTRIES_REMEMBERED",
    "NO_REFERRERS_API_STATUSES",
    "REFERRERS_MEMORY_SECONDS",
    "NoReferrersApi",
    "read_bundles",
    "read_legacy",
]

log = structlog.get_logger(__name__)

# Answers to a referrers GET that mean the registry has no referrers API (go-containerregistry's
# rule; distribution 2.8 answers 404 "page not found").
NO_REFERRERS_API_STATUSES = frozenset({400, 404, 406})
# A registry found without the referrers API is not asked for it again for this long: it may
# gain one with an upgrade, and then the fallback tag is no longer where cosign writes.
REFERRERS_MEMORY_SECONDS = 3600.0
# Registries remembered without the API; the least recently found are forgotten first.
MAX_REGISTRIES_REMEMBERED = 256


class NoReferrersApi:
    """The registries found without the referrers API lately, by host."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        lifetime: float = REFERRERS_MEMORY_SECONDS,
        capacity: int = MAX_REGISTRIES_REMEMBERED,
    ) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.capacity = capacity
        self._found_at: OrderedDict[str, float] = OrderedDict()

    def lacks(self, host: str) -> bool:
        """Whether ``host`` was found without the referrers API less than a lifetime ago."""
        found_at = self._found_at.get(host)
        if found_at is None:
            return False
        if self.clock() - found_at >= self.lifetime:
            del self._found_at[host]
            return False
        return True

    def remember(self, host: str) -> None:
        self._found_at.pop(host, None)
        self._found_at[host] = self.clock()
        while len(self._found_at) > self.capacity:
            self._found_at.popitem(last=False)

    def __len__(self) -> int:
        return len(self._found_at)


def _readable(descriptor: Descriptor, limit: int) -> bool:
    """Whether the blob ``descriptor`` names is worth a request: a sha256 digest (the only
    kind the verifier accepts; anything else must never reach a URL) and a size within
    ``limit`` (a larger one the verifier refuses by its descriptor alone)."""
    try:
        parse_digest(descriptor.digest)
    except InvalidReference:
        return False
    return descriptor.digest.startswith("sha256:") and descriptor.size <= limit


async def read_legacy(reader: RepositoryReader, digest: str) -> LegacyEvidence | None:
    """The ``sha256-<hex>.sig`` tag's manifest and its simple-signing layers' blobs; None when
    the tag does not exist."""
    manifest = await reader.tagged_manifest(legacy_tag(digest), limit=MAX_MANIFEST_BYTES)
    if manifest is None:
        return None
    try:
        layers = signature_layers(manifest)
    except Rejected:
        return LegacyEvidence(manifest=manifest)  # the verifier says what is wrong with it
    payloads: dict[str, bytes] = {}
    for layer in layers:
        if layer.digest in payloads or not _readable(layer, MAX_PAYLOAD_BYTES):
            continue
        payload = await reader.blob(layer.digest, limit=MAX_PAYLOAD_BYTES)
        if payload is not None:
            payloads[layer.digest] = payload
    return LegacyEvidence(manifest=manifest, payloads=payloads)


async def read_bundles(
    reader: RepositoryReader, digest: str, no_api: NoReferrersApi
) -> tuple[BundleEvidence, ...]:
    """Each referrer of ``digest`` that may be a bundle, with its bundle's blob."""
    index = await _referrers_index(reader, digest, no_api)
    if index is None:
        return ()
    try:
        listed = referrer_manifests(index)
    except Rejected as rejected:
        raise RegistryProtocolError(
            f"{reader.host} lists the referrers of {digest} in an index that cannot be read "
            f"({rejected.detail[:200]}); no bundle signature can be found — fix the registry, "
            f"or the tag {fallback_tag(digest)} if it holds that index",
            registry=reader.host,
        ) from None
    referrers = dict.fromkeys(d.digest for d in listed if _readable(d, MAX_MANIFEST_BYTES))
    found = [await _referrer(reader, referrer, digest) for referrer in referrers]
    return tuple(evidence for evidence in found if evidence is not None)


async def _referrers_index(
    reader: RepositoryReader, digest: str, no_api: NoReferrersApi
) -> bytes | None:
    """The referrers index of ``digest``: the referrers API's answer, or the fallback tag's
    index where the registry has no API (None when that tag does not exist)."""
    if not no_api.lacks(reader.host):
        answer = await reader.referrers(
            digest, limit=MAX_MANIFEST_BYTES, handled=NO_REFERRERS_API_STATUSES
        )
        if answer.status_code == 200 and media_type_of(answer.headers) == OCI_INDEX:
            return answer.content
        log.info(
            "the registry has no referrers API; its fallback tags are read",
            registry=reader.host,
            status=answer.status_code,
        )
        no_api.remember(reader.host)
    return await reader.tagged_manifest(fallback_tag(digest), limit=MAX_MANIFEST_BYTES)


async def _referrer(reader: RepositoryReader, referrer: str, digest: str) -> BundleEvidence | None:
    """The referrer's manifest and its bundle's blob; None when the referrer is gone."""
    manifest = await reader.manifest(referrer, limit=MAX_MANIFEST_BYTES)
    if manifest is None:
        return None
    try:
        layer = bundle_layer(manifest, digest=digest)
    except Rejected:
        return BundleEvidence(manifest=manifest)  # the verifier says what it is instead
    if not _readable(layer, MAX_BUNDLE_BYTES):
        return BundleEvidence(manifest=manifest)
    return BundleEvidence(
        manifest=manifest, bundle=await reader.blob(layer.digest, limit=MAX_BUNDLE_BYTES)
    )
