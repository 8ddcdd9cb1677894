"""The registry client: digests for tags, and what signs a digest, with authentication and
rate-limit accounting.

:class:`RegistryClient` resolves one reference; :mod:`imagerefresh.resolver` fans many out with
one request per unique (reference, credentials). It also reads the evidence cosign stored for
a digest (:meth:`~RegistryClient.legacy_signature`, :meth:`~RegistryClient.bundle_signatures`)
for the offline verifier, :mod:`imagerefresh.signatures`. Every failure is a
:class:`~imagerefresh.registry.errors.RegistryError`, at the latest when a lookup's total
deadline passes; where a signature may simply be absent, absence is an answer, not an error.
"""

from imagerefresh.reference import registry_host
from imagerefresh.registry.client import (
    DEFAULT_CONCURRENCY_PER_REGISTRY,
    DEFAULT_DEADLINE,
    MANIFEST_MEDIA_TYPES,
    RegistryClient,
    RequestObserver,
    Resolution,
)
from imagerefresh.registry.errors import (
    ManifestNotFound,
    PullBudgetHeld,
    RegistryAuthError,
    RegistryError,
    RegistryInternalError,
    RegistryProtocolError,
    RegistryServerError,
    RegistryThrottled,
    RegistryTimeout,
    RegistryUnavailable,
    RegistryUnreachable,
)

__all__ = [
    "DEFAULT_CONCURRENCY_PER_REGISTRY",
    "DEFAULT_DEADLINE",
    "MANIFEST_MEDIA_TYPES",
    "ManifestNotFound",
    "PullBudgetHeld",
    "RegistryAuthError",
    "RegistryClient",
    "RegistryError",
    "RegistryInternalError",
    "RegistryProtocolError",
    "RegistryServerError",
    "RegistryThrottled",
    "RegistryTimeout",
    "RegistryUnavailable",
    "RegistryUnreachable",
    "RequestObserver",
    "Resolution",
    "registry_host",
]
