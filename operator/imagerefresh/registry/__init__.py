"""The registry client: digests for tags, with authentication and rate-limit accounting.

:class:`RegistryClient` resolves one reference; :mod:`imagerefresh.resolver` fans many out with
one request per unique (reference, credentials). Every failure is a
:class:`~imagerefresh.registry.errors.RegistryError`, at the latest when a resolution's total
deadline passes.
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
