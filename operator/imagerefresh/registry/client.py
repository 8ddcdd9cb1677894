"""Resolve a tag to its digest at the registry the image names.

One resolution is one ``HEAD /v2/<path>/manifests/<tag>`` with the four manifest media types
(OCI index, Docker manifest list, OCI manifest, Docker manifest v2) so that a multi-platform tag
answers with its index digest — the digest the kubelet reports and the one worth pinning. The
answer is the ``Docker-Content-Digest`` header. Only a registry that omits the header gets a GET,
whose body is hashed; that GET is a pull and is counted as one.

The digest always comes from the image's own registry: a mirror's digest is the mirror's, so a
pin can never point at content the mirror does not hold. ``docker.io`` is served by
``registry-1.docker.io``. Plain HTTP is used only for hosts on the operator's insecure list.

Transport exceptions and HTTP statuses become :mod:`imagerefresh.registry.errors` in one place,
:func:`translate`; unavailability (connection failures, timeouts, 5xx) is retried with
exponential backoff, a 429 pauses the registry for its ``Retry-After``. Every response's
rate-limit headers feed the :class:`~imagerefresh.ratelimit.RateLimitLedger`, under the
account of the credentials used (:attr:`~imagerefresh.credentials.Credentials.account`).
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import structlog

from imagerefresh.credentials import ANONYMOUS, Credentials
from imagerefresh.ratelimit import (
    RateLimitLedger,
    RateLimitReport,
    RequestKind,
    parse_ratelimit_headers,
)
from imagerefresh.reference import ImageReference, InvalidReference, parse_digest, registry_host
from imagerefresh.registry.auth import (
    DEFAULT_TOKEN_LIFETIME,
    Challenge,
    TokenCache,
    parse_challenge,
)
from imagerefresh.registry.errors import (
    ManifestNotFound,
    RegistryAuthError,
    RegistryError,
    RegistryProtocolError,
    RegistryServerError,
    RegistryThrottled,
    RegistryTimeout,
    RegistryUnavailable,
    RegistryUnreachable,
)

__all__ = ["MANIFEST_MEDIA_TYPES", "RegistryClient", "RequestObserver", "Resolution", "translate"]

log = structlog.get_logger(__name__)

MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DEFAULT_RETRY_AFTER = 60.0
# One token request asks for at most this many repository scopes (its URL stays a few KiB).
MAX_SCOPES_PER_TOKEN = 32
# A scope not resolved for this long is no longer renewed along with the others.
SCOPE_MEMORY_SECONDS = 24 * 3600.0

# (registry host, request kind, outcome) → None; the metrics module plugs in here.
RequestObserver = Callable[[str, RequestKind, str], None]


@dataclass(frozen=True, slots=True)
class Resolution:
    """A tag's digest and how it was learnt."""

    reference: ImageReference  # the tracked reference (repository and tag)
    digest: str
    registry: str  # the host the request went to
    ratelimit: RateLimitReport
    method: RequestKind  # HEAD, or GET when the registry omitted the digest header


def _retry_after_seconds(value: str | None, now: float) -> float:
    if not value:
        return DEFAULT_RETRY_AFTER
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return DEFAULT_RETRY_AFTER
    return max(0.0, when.timestamp() - now)


def _format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _basic_authorization(credentials: Credentials) -> str:
    pair = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(pair).decode()


def translate(
    outcome: httpx.Response | httpx.HTTPError, *, registry: str, what: str
) -> RegistryError | None:
    """The one place transport failures and HTTP statuses become registry errors.

    Returns None for a response the caller handles itself (2xx, and 401 which starts the
    authentication flow); 429 is translated by the caller, which knows the pause.
    """
    if isinstance(outcome, httpx.TimeoutException):
        return RegistryTimeout(
            f"{registry} did not answer {what} in time; check its health or raise the timeout",
            registry=registry,
        )
    if isinstance(outcome, httpx.HTTPError):
        return RegistryUnreachable(
            f"cannot reach {registry} for {what} ({type(outcome).__name__}); check the "
            "address, DNS and network policy, or list it as insecure if it serves plain HTTP",
            registry=registry,
        )
    status = outcome.status_code
    if status < 300 or status in (401, 429):
        return None
    if status == 403:
        return RegistryAuthError(
            f"{registry} refused {what} (403 Forbidden); give the pull secret's account read "
            "access to the repository",
            registry=registry,
        )
    if status == 404:
        return ManifestNotFound(
            f"{registry} has no {what} (404); check the repository and tag in the policy",
            registry=registry,
        )
    if status >= 500:
        return RegistryServerError(
            f"{registry} failed {what} with {status}; it is retried next tick", registry=registry
        )
    return RegistryProtocolError(
        f"{registry} answered {what} with an unexpected {status}", registry=registry
    )


def _account(credentials: Credentials | None) -> str:
    return credentials.account if credentials is not None else ANONYMOUS


class RegistryClient:
    """An async client that resolves image tags to digests, with auth and rate accounting."""

    def __init__(
        self,
        *,
        insecure_registries: Iterable[str] = (),
        ledger: RateLimitLedger | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
        clock: Callable[[], float] = time.time,
        observer: RequestObserver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.insecure_registries = frozenset(host.lower() for host in insecure_registries)
        self.ledger = ledger if ledger is not None else RateLimitLedger()
        self.retries = retries
        self.backoff = backoff
        self.clock = clock
        self.tokens = TokenCache()
        self._observer = observer
        # Everything granted to a credential is keyed by its account (the whole credential,
        # never the username alone): the challenge a registry sent it, and per (realm,
        # service, account) one token request at a time and when each scope was last asked
        # for (the scopes renewed together with the one that lapsed).
        self._challenges: dict[tuple[str, str], Challenge] = {}
        self._token_locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._scopes_used: dict[tuple[str, str, str], dict[str, float]] = {}
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport, follow_redirects=True)

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def base_url(self, domain: str) -> str:
        host = registry_host(domain)
        scheme = "http" if host.lower() in self.insecure_registries else "https"
        return f"{scheme}://{host}"

    async def resolve(
        self, reference: ImageReference, credentials: Credentials | None = None
    ) -> Resolution:
        """The digest ``reference``'s tracked tag points at now, from its own registry."""
        tracked = reference.tracked()
        host = registry_host(tracked.domain)
        paused = self.ledger.pause_remaining(host, self.clock())
        if paused > 0:
            raise RegistryThrottled(
                f"{host} is paused after a 429 until {_format_time(self.clock() + paused)}; "
                "nothing is asked of it before then",
                registry=host,
                retry_at=self.clock() + paused,
                reference=str(tracked),
            )
        url = f"{self.base_url(tracked.domain)}/v2/{tracked.path}/manifests/{tracked.tracked_tag}"
        scope = f"repository:{tracked.path}:pull"
        try:
            response = await self._authorized("HEAD", url, host, scope, credentials)
            digest_header = response.headers.get("docker-content-digest")
            method = RequestKind.HEAD
            if not digest_header:
                # Only a registry that omits the header costs a pull: hash the manifest body.
                response = await self._authorized("GET", url, host, scope, credentials)
                digest_header = "sha256:" + hashlib.sha256(response.content).hexdigest()
                method = RequestKind.GET
            digest = self._validated_digest(digest_header, host)
        except RegistryError as error:
            error.reference = str(tracked)
            raise
        report = self._record_report(response, host, _account(credentials))
        log.debug("resolved", reference=str(tracked), digest=digest, registry=host, via=method)
        return Resolution(tracked, digest, host, report, method)

    def _validated_digest(self, value: str, host: str) -> str:
        try:
            return parse_digest(value.strip())
        except InvalidReference as error:
            raise RegistryProtocolError(
                f"{host} sent a malformed digest {value[:80]!r} (expected algorithm:hex); "
                "nothing is pinned on it",
                registry=host,
            ) from error

    def _record_report(self, response: httpx.Response, host: str, account: str) -> RateLimitReport:
        report = parse_ratelimit_headers(response.headers)
        self.ledger.budget(host, account).record_report(report, self.clock())
        return report

    async def _authorized(
        self, method: str, url: str, host: str, scope: str, credentials: Credentials | None
    ) -> httpx.Response:
        """Send a manifest request, answering one authentication challenge if it comes."""
        kind = RequestKind(method)
        headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
        known = self._challenges.get((host, _account(credentials)))
        if known is not None:
            headers.update(await self._auth_headers(known, host, scope, credentials))
        response = await self._send(method, url, host, kind, credentials, headers=headers)
        if response.status_code == 401:
            challenge = parse_challenge(response.headers.get("www-authenticate", ""))
            if challenge is None:
                raise RegistryAuthError(
                    f"{host} requires authentication with a scheme this operator does not "
                    "support; use a registry offering Bearer or Basic auth",
                    registry=host,
                )
            self._challenges[(host, _account(credentials))] = challenge
            # A token that drew a 401 is no good (expired early, or revoked): fetch afresh once.
            self.tokens.discard(self._token_key(challenge, scope, credentials))
            headers.update(await self._auth_headers(challenge, host, scope, credentials))
            response = await self._send(method, url, host, kind, credentials, headers=headers)
            if response.status_code == 401:
                raise self._refused(host, credentials)
        return response

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
        # One token request at a time per account: a resolution whose scope lapsed together
        # with others finds it renewed by the first one's request.
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
    def _token_key(
        challenge: Challenge, scope: str, credentials: Credentials | None
    ) -> tuple[str, str, str, str]:
        return (challenge.realm or "", challenge.service or "", scope, _account(credentials))

    async def _fetch_token(
        self, challenge: Challenge, host: str, scopes: list[str], credentials: Credentials | None
    ) -> tuple[str, float]:
        assert challenge.realm is not None
        realm = httpx.URL(challenge.realm)
        realm_host = realm.netloc.decode().lower()
        if realm.scheme != "https" and realm_host not in self.insecure_registries:
            raise RegistryProtocolError(
                f"{host} names a plain-HTTP token service {challenge.realm!r}; list it as an "
                "insecure registry only if that is intended",
                registry=host,
            )
        params = [("scope", scope) for scope in scopes]
        if challenge.service:
            params.append(("service", challenge.service))
        auth = httpx.BasicAuth(credentials.username, credentials.password) if credentials else None
        response = await self._send(
            "GET", str(realm), host, RequestKind.TOKEN, credentials, params=params, auth=auth
        )
        if response.status_code in (401, 403):
            raise RegistryAuthError(
                f"the token service of {host} refused "
                + (
                    f"the credentials of pull secret {credentials.identity}; fix that secret"
                    if credentials
                    else "anonymous access; add an imagePullSecret for it"
                ),
                registry=host,
            )
        try:
            body = response.json()
        except ValueError as error:
            raise RegistryProtocolError(
                f"the token service of {host} did not answer JSON; check the realm "
                f"{challenge.realm!r}",
                registry=host,
            ) from error
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryProtocolError(
                f"the token service of {host} answered without a token", registry=host
            )
        expires_in = body.get("expires_in")
        lifetime = (
            float(expires_in)
            if isinstance(expires_in, int | float) and expires_in > 0
            else DEFAULT_TOKEN_LIFETIME
        )
        return token, lifetime

    async def _send(
        self,
        method: str,
        url: str,
        host: str,
        kind: RequestKind,
        credentials: Credentials | None,
        **kwargs: object,
    ) -> httpx.Response:
        """One request with retries on unavailability; every failure leaves as a RegistryError."""
        budget = self.ledger.budget(host, _account(credentials))
        what = f"{kind} {httpx.URL(url).path}" if kind is not RequestKind.TOKEN else "a token"
        attempt = 0
        while True:
            budget.record_request(kind, self.clock())
            outcome: httpx.Response | httpx.HTTPError
            try:
                outcome = await self._http.request(method, url, **kwargs)  # type: ignore[arg-type]
            except httpx.HTTPError as transport_error:
                outcome = transport_error
            error = translate(outcome, registry=host, what=what)
            self._observe(host, kind, outcome, error)
            if isinstance(outcome, httpx.Response) and outcome.status_code == 429:
                raise self._throttled(outcome, host, _account(credentials))
            if error is None:
                assert isinstance(outcome, httpx.Response)
                return outcome
            if not isinstance(error, RegistryUnavailable) or attempt >= self.retries:
                raise error
            delay = self.backoff * 2**attempt
            attempt += 1
            log.info(
                "registry unavailable, retrying",
                registry=host,
                error=str(error),
                attempt=attempt,
                delay=delay,
            )
            await asyncio.sleep(delay)

    def _throttled(self, response: httpx.Response, host: str, account: str) -> RegistryThrottled:
        now = self.clock()
        self.ledger.budget(host, account).record_report(
            parse_ratelimit_headers(response.headers), now
        )
        until = self.ledger.pause(
            host, _retry_after_seconds(response.headers.get("retry-after"), now), now
        )
        return RegistryThrottled(
            f"{host} answered 429 Too Many Requests; it is paused until {_format_time(until)} "
            "and asked again after that",
            registry=host,
            retry_at=until,
        )

    def _observe(
        self,
        host: str,
        kind: RequestKind,
        outcome: httpx.Response | httpx.HTTPError,
        error: RegistryError | None,
    ) -> None:
        if self._observer is None:
            return
        if isinstance(outcome, httpx.Response):
            label = str(outcome.status_code)
        else:
            label = error.reason if error is not None else "error"
        self._observer(host, kind, label)
