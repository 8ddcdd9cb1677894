"""Registry authentication: the ``WWW-Authenticate`` challenge and a token cache.

The distribution token flow: a request answered 401 with ``Bearer realm=…,service=…`` is
repeated with a token fetched from ``realm`` for ``service`` and ``repository:<path>:pull``;
a ``Basic`` challenge takes the credentials on the request itself. Tokens are cached per
(realm, service, scope, account) until shortly before they expire — the account is the whole
credential (:attr:`~imagerefresh.credentials.Credentials.account`), never the username alone,
so wrong credentials never reuse a token issued to right ones — and the challenge is kept per
(registry, account) so that a fresh token is fetched *before* the next request instead of
after a wasted 401 — in steady state a resolution costs one HEAD, plus one token request per
lifetime.
Scopes whose tokens lapsed together are renewed together, in one token request naming them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Challenge", "TokenCache", "parse_challenge"]

# Tokens are dropped this long before they expire, so one is never sent as it lapses.
EXPIRY_MARGIN_SECONDS = 5.0
# The distribution token spec: a token without expires_in lives 60 seconds.
DEFAULT_TOKEN_LIFETIME = 60.0

_PARAM_RE = re.compile(r'(?P<key>[A-Za-z_]+)\s*=\s*(?:"(?P<quoted>[^"]*)"|(?P<bare>[^,\s]*))')


@dataclass(frozen=True, slots=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header."""

    scheme: str  # "bearer" or "basic", lowercased
    realm: str | None = None
    service: str | None = None


def parse_challenge(header: str) -> Challenge | None:
    """Parse ``Bearer realm="…",service="…"`` / ``Basic realm="…"``; None when unrecognised."""
    scheme, _, params = header.strip().partition(" ")
    scheme = scheme.lower()
    if scheme not in ("bearer", "basic"):
        return None
    values = {
        match["key"].lower(): match["quoted"] if match["quoted"] is not None else match["bare"]
        for match in _PARAM_RE.finditer(params)
    }
    return Challenge(scheme=scheme, realm=values.get("realm"), service=values.get("service"))


@dataclass(frozen=True, slots=True)
class _Entry:
    token: str
    expires_at: float


class TokenCache:
    """Bearer tokens by (realm, service, scope, account), valid until they expire."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str, str], _Entry] = {}

    def get(self, key: tuple[str, str, str, str], now: float) -> str | None:
        entry = self._entries.get(key)
        if entry is None or now >= entry.expires_at:
            self._entries.pop(key, None)
            return None
        return entry.token

    def put(self, key: tuple[str, str, str, str], token: str, lifetime: float, now: float) -> None:
        margin = min(EXPIRY_MARGIN_SECONDS, lifetime / 10)
        self._entries[key] = _Entry(token, now + lifetime - margin)

    def discard(self, key: tuple[str, str, str, str], token: str) -> None:
        """Forget ``token`` for ``key``; a newer token cached since it was sent is kept."""
        entry = self._entries.get(key)
        if entry is not None and entry.token == token:
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
