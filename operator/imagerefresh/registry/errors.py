"""Every way asking a registry for a digest, or for a digest's signatures, can fail, as one
hierarchy.

The client translates transport exceptions and HTTP answers into these in one place
(:func:`imagerefresh.registry.transport.translate`), so callers handle registry trouble by kind,
never by status code. Each message says what happened and what to do about it. None of them
ever carries a credential or a token.

``RegistryError``
  ├─ ``RegistryUnavailable``   — could not get an answer: retried with backoff
  │    ├─ ``RegistryUnreachable`` (connection refused, DNS, TLS)
  │    ├─ ``RegistryTimeout`` (a read timed out, or the lookup's total deadline passed)
  │    └─ ``RegistryServerError`` (5xx)
  ├─ ``RegistryThrottled``     — 429; the registry is paused until ``retry_at``
  ├─ ``PullBudgetHeld``        — a pull was not sent: it would take the account's pull budget
  │                              below the asking policy's reserve (nothing failed)
  ├─ ``RegistryAuthError``     — credentials missing or refused (401/403)
  ├─ ``ManifestNotFound``      — the repository or tag does not exist (404; where a signature
  │                              may be absent, a 404 is an answer instead, never this error)
  ├─ ``RegistryProtocolError`` — an answer we cannot trust (malformed digest, bad token JSON,
  │                              a body over its cap, a compressed body, a redirect off HTTPS,
  │                              a 2xx other than 200, a GET fallback that is no manifest, a
  │                              manifest asked by digest that does not hash to it…)
  └─ ``RegistryInternalError`` — resolving failed in a way nobody foresaw (a bug): the
                                 resolver's last line, so one reference never fails another
"""

from __future__ import annotations

__all__ = [
    "ManifestNotFound",
    "PullBudgetHeld",
    "RegistryAuthError",
    "RegistryError",
    "RegistryInternalError",
    "RegistryProtocolError",
    "RegistryServerError",
    "RegistryThrottled",
    "RegistryTimeout",
    "RegistryUnavailable",
    "RegistryUnreachable",
]


class RegistryError(Exception):
    """A registry could not tell us a digest. Never patch on it."""

    def __init__(self, message: str, *, registry: str, reference: str | None = None) -> None:
        super().__init__(message)
        self.registry = registry
        self.reference = reference

    @property
    def reason(self) -> str:
        """A CamelCase reason for conditions and events."""
        return type(self).__name__.removeprefix("Registry")


class RegistryUnavailable(RegistryError):
    """No usable answer arrived; worth retrying."""


class RegistryUnreachable(RegistryUnavailable):
    """The connection failed (refused, DNS, TLS)."""


class RegistryTimeout(RegistryUnavailable):
    """The registry did not answer in time."""


class RegistryServerError(RegistryUnavailable):
    """The registry answered 5xx."""


class RegistryThrottled(RegistryError):
    """The registry answered 429; it is not asked again before ``retry_at`` (seconds, wall)."""

    def __init__(
        self, message: str, *, registry: str, retry_at: float, reference: str | None = None
    ) -> None:
        super().__init__(message, registry=registry, reference=reference)
        self.retry_at = retry_at


class PullBudgetHeld(RegistryError):
    """A pull was not sent: it would leave less than the reserve for the kubelet. The message
    is the budget's own reason (the account named by its pull secret, never a username)."""


class RegistryAuthError(RegistryError):
    """The registry refused us: credentials are missing, wrong, or lack pull rights."""


class ManifestNotFound(RegistryError):
    """The repository or tag does not exist at this registry."""


class RegistryProtocolError(RegistryError):
    """The registry answered something we cannot trust."""


class RegistryInternalError(RegistryError):
    """Resolving one reference raised something unforeseen; only that reference is affected."""
