"""The authentication flow around every registry request: challenge, token, retry once.

A request answered 401 carries a ``WWW-Authenticate`` challenge (:mod:`.auth` parses it): a
``Basic`` one takes the credentials on the request itself, a ``Bearer`` one a token from the
challenge's realm for ``repository:<path>:pull``. The challenge is kept per (registry, account)
so that later requests carry a token *before* they are sent instead of after a wasted 401 — in
steady state a resolution, or a signature lookup, costs no token request until its token
expires.

Everything granted to a credential is keyed by its account (the whole credential, never the
username alone, :attr:`~imagerefresh.credentials.Credentials.account`): wrong credentials never
reuse a token issued to right ones. A token answer is capped at :data:`MAX_TOKEN_BYTES` and
lives at most :data:`MAX_TOKEN_LIFETIME`; a token realm in plain HTTP is refused unless its host
is listed as insecure. Scopes whose tokens lapsed together are renewed together, in one token
request naming them all.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Collection

import httpx

from imagerefresh.credentials import Credentials
from imagerefresh.ratelimit import RequestKind
from imagerefresh.registry.auth import (
    DEFAULT_TOKEN_LIFETIME,
    Challenge,
    TokenCache,
    parse_challenge,
)
from imagerefresh.registry.errors import RegistryAuthError, RegistryProtocolError
from imagerefresh.registry.transport import Answer, Sender, account_of, translate

__all__ = [
    "MAX_SCOPES_PER_TOKEN",
    "MAX_TOKEN_BYTES",
    "MAX_TOKEN_LIFETIME",
    "SCOPE_MEMORY_SECONDS",
    "Authenticator",
]

# A token answer is a few KiB of JSON (Docker Hub's: about 1.5 KiB).
MAX_TOKEN_BYTES = 64 * 1024
# A token is kept at most this long, whatever its expires_in claims.
MAX_TOKEN_LIFETIME = 3600.0
# One token request asks for at most this many repository scopes (its URL stays a few KiB).
MAX_SCOPES_PER_TOKEN = 32
# A scope not asked for this long is no longer renewed along with the others.
SCOPE_MEMORY_SECONDS = 24 * 3600.0

TokenKey = tuple[str, str, str, str]  # (realm, service, scope, account)


def _basic_authorization(credentials: Credentials) -> str:
    pair = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(pair).decode()


class Authenticator:
    """Sends requests through the authentication flow, caching challenges and tokens."""

    def __init__(self, sender: Sender, clock: Callable[[], float]) -> None:
        self.sender = sender
        self.clock = clock
        self.tokens = TokenCache()
        # The challenge a registry sent an account, and per (realm, service, account) one
        # token request at a time and when each scope was last asked for (the scopes renewed
        # together with the one that lapsed).
        self._challenges: dict[tuple[str, str], Challenge] = {}
        self._token_locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._scopes_used: dict[tuple[str, str, str], dict[str, float]] = {}

    async def authorized(
        self,
        method: str,
        url: str,
        host: str,
        scope: str,
        credentials: Credentials | None,
        *,
        kind: RequestKind,
        accept: str,
        limit: int,
        handled: Collection[int] = (),
    ) -> Answer:
        """Send a request, answering one authentication challenge if it comes."""
        headers = {"Accept": accept}
        known = self._challenges.get((host, account_of(credentials)))
        if known is not None:
            headers.update(await self._auth_headers(known, host, scope, credentials))
        answer = await self.sender.send(
            method, url, host, kind, credentials, headers=headers, limit=limit, handled=handled
        )
        if answer.status_code == 401:
            challenge = parse_challenge(answer.headers.get("www-authenticate", ""))
            if challenge is None:
                raise RegistryAuthError(
                    f"{host} requires authentication with a scheme this operator does not "
                    "support; use a registry offering Bearer or Basic auth",
                    registry=host,
                )
            self._challenges[(host, account_of(credentials))] = challenge
            # A token that drew a 401 is no good (expired early, or revoked): fetch afresh once.
            # A request that carried none drew it for want of one, and leaves alone the token a
            # concurrent request fetched meanwhile (one token request per account, not per
            # request racing it).
            sent = headers.get("Authorization", "")
            if sent.startswith("Bearer "):
                key = self._token_key(challenge, scope, credentials)
                self.tokens.discard(key, sent.removeprefix("Bearer "))
            headers.update(await self._auth_headers(challenge, host, scope, credentials))
            answer = await self.sender.send(
                method, url, host, kind, credentials, headers=headers, limit=limit, handled=handled
            )
            if answer.status_code == 401:
                raise self._refused(host, credentials)
        return answer

    def _refused(self, host: str, credentials: Credentials | None) -> RegistryAuthError:
        if credentials is None:
            advice = "add an imagePullSecret with credentials for it to the workload"
        else:
            advice = f"check the credentials for {host} in pull secret {credentials.identity}"
        return RegistryAuthError(f"{host} refused our credentials (401); {advice}", registry=host)

    async def _auth_headers(
        self, challenge: Challenge, host: str, scope: str, credentials: Credentials | None
    ) -> dict[str, str]:
        if challenge.scheme == "basic":
            if credentials is None:
                raise RegistryAuthError(
                    f"{host} requires Basic credentials; add an imagePullSecret for it to the "
                    "workload",
                    registry=host,
                )
            return {"Authorization": _basic_authorization(credentials)}
        token = await self._token(challenge, host, scope, credentials)
        return {"Authorization": f"Bearer {token}"}

    async def _token(
        self, challenge: Challenge, host: str, scope: str, credentials: Credentials | None
    ) -> str:
        if not challenge.realm:
            raise RegistryProtocolError(
                f"{host} sent a Bearer challenge without a realm", registry=host
            )
        key = self._token_key(challenge, scope, credentials)
        account = (key[0], key[1], key[3])
        used = self._scopes_used.setdefault(account, {})
        used[scope] = self.clock()
        lock = self._token_locks.setdefault(account, asyncio.Lock())
        # One token request at a time per account: a request whose scope lapsed together with
        # others finds it renewed by the first one's request.
        async with lock:
            cached = self.tokens.get(key, self.clock())
            if cached is not None:
                return cached
            scopes = self._lapsed_scopes(challenge, scope, credentials)
            try:
                token, lifetime = await self._fetch_token(challenge, host, scopes, credentials)
            except RegistryAuthError:
                if len(scopes) == 1:
                    raise
                # A token service may refuse a request naming a scope it will not grant: the
                # scope in hand alone then says whether it is ours that is refused.
                scopes = [scope]
                token, lifetime = await self._fetch_token(challenge, host, scopes, credentials)
            for granted in scopes:
                self.tokens.put(
                    self._token_key(challenge, granted, credentials), token, lifetime, self.clock()
                )
            return token

    def _lapsed_scopes(
        self, challenge: Challenge, scope: str, credentials: Credentials | None
    ) -> list[str]:
        """``scope`` and the account's other recently used scopes that have no valid token.

        Tokens of scopes used together lapse together (a tick asks for them all, an interval
        later): renewing them in one request (the token spec allows several ``scope``
        parameters) makes a tick cost one token request per registry, not one per repository.
        """
        now = self.clock()
        key = self._token_key(challenge, scope, credentials)
        used = self._scopes_used[(key[0], key[1], key[3])]
        for stale in [s for s, at in used.items() if now - at > SCOPE_MEMORY_SECONDS]:
            del used[stale]
        others = sorted((s for s in used if s != scope), key=used.__getitem__, reverse=True)
        lapsed = [
            other
            for other in others
            if self.tokens.get(self._token_key(challenge, other, credentials), now) is None
        ]
        return [scope, *lapsed[: MAX_SCOPES_PER_TOKEN - 1]]

    @staticmethod
    def _token_key(challenge: Challenge, scope: str, credentials: Credentials | None) -> TokenKey:
        return (challenge.realm or "", challenge.service or "", scope, account_of(credentials))

    async def _fetch_token(
        self, challenge: Challenge, host: str, scopes: list[str], credentials: Credentials | None
    ) -> tuple[str, float]:
        assert challenge.realm is not None
        try:
            realm = httpx.URL(challenge.realm)
        except httpx.InvalidURL as invalid:
            error = translate(invalid, registry=host, what="a token")
            assert error is not None
            raise error from invalid
        realm_host = realm.netloc.decode().lower()
        if realm.scheme != "https" and realm_host not in self.sender.insecure_registries:
            raise RegistryProtocolError(
                f"{host} names a plain-HTTP token service {challenge.realm[:200]!r}; list it as "
                "an insecure registry only if that is intended",
                registry=host,
            )
        params = [("scope", scope) for scope in scopes]
        if challenge.service:
            params.append(("service", challenge.service))
        auth = httpx.BasicAuth(credentials.username, credentials.password) if credentials else None
        answer = await self.sender.send(
            "GET",
            str(realm),
            host,
            RequestKind.TOKEN,
            credentials,
            params=params,
            auth=auth,
            limit=MAX_TOKEN_BYTES,
        )
        if answer.status_code in (401, 403):
            raise RegistryAuthError(
                f"the token service of {host} refused "
                + (
                    f"the credentials of pull secret {credentials.identity}; fix that secret"
                    if credentials
                    else "anonymous access; add an imagePullSecret for it"
                ),
                registry=host,
            )
        return self._token_of(answer, host, challenge)

    @staticmethod
    def _token_of(answer: Answer, host: str, challenge: Challenge) -> tuple[str, float]:
        """The token of a token answer and how long to keep it."""
        try:
            body = json.loads(answer.content)
        except (ValueError, RecursionError) as error:
            raise RegistryProtocolError(
                f"the token service of {host} did not answer JSON; check the realm "
                f"{(challenge.realm or '')[:200]!r}",
                registry=host,
            ) from error
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryProtocolError(
                f"the token service of {host} answered without a token", registry=host
            )
        expires_in = body.get("expires_in")
        lifetime = (
            float(min(expires_in, MAX_TOKEN_LIFETIME))
            if isinstance(expires_in, int | float)
            and not isinstance(expires_in, bool)
            and expires_in > 0
            else DEFAULT_TOKEN_LIFETIME
        )
        return token, lifetime
