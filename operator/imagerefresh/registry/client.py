"""Resolve a tag to its digest at the registry the image names.

One resolution is one ``HEAD /v2/<path>/manifests/<tag>`` with the four manifest media types
(OCI index, Docker manifest list, OCI manifest, Docker manifest v2) so that a multi-platform tag
answers with its index digest — the digest the kubelet reports and the one worth pinning. The
answer is the ``Docker-Content-Digest`` header. Only a registry that omits the header gets a GET,
whose body is hashed; that GET is a pull and is counted as one.

The digest always comes from the image's own registry: a mirror's digest is the mirror's, so a
pin can never point at content the mirror does not hold. ``docker.io`` is served by
``registry-1.docker.io``. Plain HTTP is used only for hosts on the operator's insecure list.

The registry is hostile until proven otherwise. Each resolution has a total deadline (retries
and token requests included), not only a per-read timeout, so a registry dripping its answer
cannot hold a tick; bodies are read up to a cap (manifests 4 MiB, token answers 64 KiB) and
never decompressed (``Accept-Encoding: identity``; any other ``Content-Encoding`` is refused);
a redirect is followed only to HTTPS (or between hosts on the insecure list), at most
:data:`MAX_REDIRECTS` times, and credentials never follow it to another origin; a GET fallback
must answer 200 with a manifest media type and a JSON body; ``Retry-After`` is read strictly
(ASCII delay-seconds or an HTTP-date) and clamped to :data:`MAX_RETRY_AFTER`.

Transport exceptions, refusals and HTTP statuses become :mod:`imagerefresh.registry.errors` in
one place, :func:`translate`; unavailability (connection failures, timeouts, 5xx) is retried
with exponential backoff, a 429 pauses the registry for its ``Retry-After``. Every response's
rate-limit headers feed the :class:`~imagerefresh.ratelimit.RateLimitLedger`, under the
account of the credentials used (:attr:`~imagerefresh.credentials.Credentials.account`).
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import json
import re
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

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

__all__ = [
    "DEFAULT_CONCURRENCY_PER_REGISTRY",
    "DEFAULT_DEADLINE",
    "INDEX_MEDIA_TYPES",
    "MANIFEST_MEDIA_TYPES",
    "MAX_MANIFEST_BYTES",
    "MAX_REDIRECTS",
    "MAX_RETRY_AFTER",
    "MAX_TOKEN_BYTES",
    "Answer",
    "RegistryClient",
    "RequestObserver",
    "Resolution",
    "retry_after_seconds",
    "translate",
]

log = structlog.get_logger(__name__)
T = TypeVar("T")

MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
# The multi-platform kinds among them: their ``manifests`` are the platform manifests.
INDEX_MEDIA_TYPES = frozenset(MANIFEST_MEDIA_TYPES[:2])
# Digest algorithms a body is checked against (the OCI image spec registers these two).
_DIGEST_ALGORITHMS = frozenset({"sha256", "sha512"})
# distribution refuses manifests over 4 MiB; nothing a registry legitimately sends is larger.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# A token answer is a few KiB of JSON (Docker Hub's: about 1.5 KiB).
MAX_TOKEN_BYTES = 64 * 1024
# A whole resolution (token request, HEAD, GET fallback, retries and their backoff) ends by
# then, however slowly the registry answers: a stalled registry never holds a tick for long.
DEFAULT_DEADLINE = 20.0
DEFAULT_CONCURRENCY_PER_REGISTRY = 4
# Redirects followed per request (manifests and tokens are rarely redirected at all).
MAX_REDIRECTS = 3
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
DEFAULT_RETRY_AFTER = 60.0
# A 429 pauses a registry at most this long, whatever its Retry-After says (an hour is longer
# than any pull-limit window is granular; a later tick simply asks again and learns more).
MAX_RETRY_AFTER = 3600.0
# A token is kept at most this long, whatever its expires_in claims.
MAX_TOKEN_LIFETIME = 3600.0
# One token request asks for at most this many repository scopes (its URL stays a few KiB).
MAX_SCOPES_PER_TOKEN = 32
# A scope not resolved for this long is no longer renewed along with the others.
SCOPE_MEMORY_SECONDS = 24 * 3600.0

# RFC 9110 §10.2.3: delay-seconds = 1*DIGIT, ASCII digits only (str.isdigit takes "²").
_DELAY_SECONDS_RE = re.compile(r"[0-9]+", re.ASCII)

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
    media_type: str = ""  # the manifest's Content-Type as the registry sent it ("" if none)

    @property
    def may_be_index(self) -> bool:
        """Whether the digest may name a multi-platform index (a single-platform manifest
        has no children to read)."""
        return self.media_type not in MANIFEST_MEDIA_TYPES[2:]


@dataclass(frozen=True, slots=True)
class Answer:
    """A registry's answer, its body read up to a cap (empty when not read)."""

    status_code: int
    headers: httpx.Headers
    content: bytes = b""


class _Refused(Exception):
    """An answer the client will not read any further; :func:`translate` words it."""


class _DeadlineExpired(Exception):
    """The resolution's total deadline passed; :func:`translate` words it."""

    def __init__(self, deadline: float) -> None:
        super().__init__(f"{deadline:g}s")
        self.deadline = deadline


def retry_after_seconds(value: str | None, now: float) -> float:
    """``Retry-After`` (RFC 9110: ASCII delay-seconds or an HTTP-date) in seconds from ``now``.

    Anything else is the default pause, never a crash; the result is clamped to
    ``[0, MAX_RETRY_AFTER]`` so no answer can pause a registry for years (or overflow a date).
    """
    if value is None or not value.strip():
        return DEFAULT_RETRY_AFTER
    text = value.strip()
    if _DELAY_SECONDS_RE.fullmatch(text):
        # Compare the digits, never convert them all: a header of a million digits is valid
        # delay-seconds, and int() refuses strings that long.
        digits = text.lstrip("0") or "0"
        return MAX_RETRY_AFTER if len(digits) > 9 else min(float(digits), MAX_RETRY_AFTER)
    if not text.isascii():
        return DEFAULT_RETRY_AFTER
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return DEFAULT_RETRY_AFTER
    if when.tzinfo is None:  # "-0000": the date is UTC with no zone stated
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - now), MAX_RETRY_AFTER)


def _format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _basic_authorization(credentials: Credentials) -> str:
    pair = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(pair).decode()


def _media_type(headers: httpx.Headers) -> str:
    return str(headers.get("content-type", "")).split(";", 1)[0].strip().lower()


def translate(outcome: Answer | BaseException, *, registry: str, what: str) -> RegistryError | None:
    """The one place transport failures, refusals and HTTP statuses become registry errors.

    Returns None for an answer the caller handles itself (200, and 401 which starts the
    authentication flow); 429 is translated by the caller, which knows the pause.
    """
    if isinstance(outcome, _DeadlineExpired):
        return RegistryTimeout(
            f"{registry} did not finish {what} within the {outcome.deadline:g}s deadline of a "
            "resolution; check its health, or if it is only slow raise the deadline "
            "(run --registry-deadline, resolve --deadline)",
            registry=registry,
        )
    if isinstance(outcome, httpx.TimeoutException):
        return RegistryTimeout(
            f"{registry} did not answer {what} in time; check its health or raise the timeout",
            registry=registry,
        )
    if isinstance(outcome, _Refused):
        return RegistryProtocolError(
            f"{registry}: {outcome}; nothing is pinned on it — fix the registry or the proxy "
            "in front of it",
            registry=registry,
        )
    if isinstance(outcome, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return RegistryProtocolError(
            f"{registry} sent an address that cannot be used for {what} ({outcome}); fix the "
            "registry's configuration",
            registry=registry,
        )
    if isinstance(outcome, httpx.RemoteProtocolError):
        # A broken answer (a dropped connection, an unusable Location…): retried as unavailable.
        return RegistryUnreachable(
            f"{registry} broke off or garbled its answer to {what} ({str(outcome)[:160]}); "
            "check the registry and any proxy in front of it",
            registry=registry,
        )
    if isinstance(outcome, httpx.HTTPError):
        return RegistryUnreachable(
            f"cannot reach {registry} for {what} ({type(outcome).__name__}); check the "
            "address, DNS and network policy, or list it as insecure if it serves plain HTTP",
            registry=registry,
        )
    if isinstance(outcome, BaseException):
        raise TypeError(f"translate cannot word {type(outcome).__name__}") from outcome
    status = outcome.status_code
    if status in (200, 401, 429):
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
    if 200 < status < 300:
        return RegistryProtocolError(
            f"{registry} answered {what} with {status} instead of 200; nothing is pinned on "
            "such an answer — fix the registry or the proxy in front of it",
            registry=registry,
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
        deadline: float = DEFAULT_DEADLINE,
        concurrency_per_registry: int = DEFAULT_CONCURRENCY_PER_REGISTRY,
        retries: int = 2,
        backoff: float = 0.5,
        clock: Callable[[], float] = time.time,
        observer: RequestObserver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if deadline <= 0:
            raise ValueError(f"the registry deadline must be positive, not {deadline}")
        self.insecure_registries = frozenset(host.lower() for host in insecure_registries)
        self.ledger = ledger if ledger is not None else RateLimitLedger()
        self.deadline = deadline
        self.concurrency_per_registry = concurrency_per_registry
        # Per registry host, at most this many resolutions at once, so many targets never
        # burst one registry; waiting for a turn counts against the resolution's deadline.
        self._gates: dict[str, asyncio.Semaphore] = {}
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
        # Redirects are followed by _exchange, which checks each hop; nothing is decompressed.
        self._http = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            headers={"Accept-Encoding": "identity"},
        )

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
        """The digest ``reference``'s tracked tag points at now, from its own registry.

        Every failure is a :class:`RegistryError`, at the latest when the deadline passes.
        """
        tracked = reference.tracked()
        host = registry_host(tracked.domain)
        return await self._bounded(
            self._resolve(tracked, host, credentials), host, tracked, f"resolving {tracked}"
        )

    async def children(
        self, reference: ImageReference, digest: str, credentials: Credentials | None = None
    ) -> frozenset[str]:
        """The platform manifests' digests of the index ``digest`` in ``reference``'s
        repository (empty when ``digest`` is a single-platform manifest).

        One GET of the manifest by digest — a pull, counted and charged like the GET fallback
        — whose body must hash to ``digest``. An index's content never changes, so callers
        remember the answer (:class:`~imagerefresh.resolver.SharedResolver` does). Every
        failure is a :class:`RegistryError`, at the latest when the deadline passes.
        """
        tracked = reference.tracked()
        host = registry_host(tracked.domain)
        return await self._bounded(
            self._children(tracked, host, parse_digest(digest), credentials),
            host,
            tracked,
            f"reading the index {digest} of {tracked.repository}",
        )

    async def _bounded(
        self, work: Coroutine[object, object, T], host: str, tracked: ImageReference, what: str
    ) -> T:
        """``work`` in its turn at ``host`` and within the deadline — the wait for a turn
        included, so that a registry that never answers holds each caller for the deadline at
        most, however many queue for it; its errors name the reference they were about."""
        gate = self._gates.setdefault(host, asyncio.Semaphore(self.concurrency_per_registry))
        try:
            try:
                async with asyncio.timeout(self.deadline):
                    async with gate:
                        return await work
            except TimeoutError:
                work.close()  # never started when the deadline passed in the queue
                expired = translate(_DeadlineExpired(self.deadline), registry=host, what=what)
                assert expired is not None
                raise expired from None
        except RegistryError as error:
            error.reference = str(tracked)
            raise

    def _check_paused(self, host: str) -> None:
        paused = self.ledger.pause_remaining(host, self.clock())
        if paused > 0:
            raise RegistryThrottled(
                f"{host} is paused after a 429 until {_format_time(self.clock() + paused)}; "
                "nothing is asked of it before then",
                registry=host,
                retry_at=self.clock() + paused,
            )

    async def _children(
        self, tracked: ImageReference, host: str, digest: str, credentials: Credentials | None
    ) -> frozenset[str]:
        self._check_paused(host)
        url = f"{self.base_url(tracked.domain)}/v2/{tracked.path}/manifests/{digest}"
        scope = f"repository:{tracked.path}:pull"
        answer = await self._authorized("GET", url, host, scope, credentials)
        self._record_report(answer, host, _account(credentials))
        document = self._manifest_document(answer, host)
        algorithm, _, expected = digest.partition(":")
        if algorithm not in _DIGEST_ALGORITHMS or (
            hashlib.new(algorithm, answer.content).hexdigest() != expected
        ):
            raise RegistryProtocolError(
                f"{host} answered the manifest {digest} with content that does not hash to it; "
                "nothing is recognised from it",
                registry=host,
            )
        if _media_type(answer.headers) not in INDEX_MEDIA_TYPES:
            return frozenset()
        entries = document.get("manifests")
        found = set()
        for entry in entries if isinstance(entries, list) else ():
            value = entry.get("digest") if isinstance(entry, dict) else None
            found.add(self._validated_digest(value if isinstance(value, str) else "", host))
        log.info("read an index's platform manifests", index=digest, children=len(found))
        return frozenset(found)

    async def _resolve(
        self, tracked: ImageReference, host: str, credentials: Credentials | None
    ) -> Resolution:
        self._check_paused(host)
        url = f"{self.base_url(tracked.domain)}/v2/{tracked.path}/manifests/{tracked.tracked_tag}"
        scope = f"repository:{tracked.path}:pull"
        answer = await self._authorized("HEAD", url, host, scope, credentials)
        digest_header = answer.headers.get("docker-content-digest")
        method = RequestKind.HEAD
        if not digest_header:
            # Only a registry that omits the header costs a pull: hash the manifest body.
            answer = await self._authorized("GET", url, host, scope, credentials)
            digest_header = self._manifest_digest(answer, host)
            method = RequestKind.GET
        digest = self._validated_digest(digest_header, host)
        report = self._record_report(answer, host, _account(credentials))
        log.debug("resolved", reference=str(tracked), digest=digest, registry=host, via=method)
        return Resolution(tracked, digest, host, report, method, _media_type(answer.headers))

    def _manifest_digest(self, answer: Answer, host: str) -> str:
        """The sha256 of a GET fallback's body — only if it is a manifest at all."""
        self._manifest_document(answer, host)
        return "sha256:" + hashlib.sha256(answer.content).hexdigest()

    def _manifest_document(self, answer: Answer, host: str) -> dict[str, object]:
        """A manifest GET's body as JSON — only if it is a manifest at all."""
        media_type = _media_type(answer.headers)
        refusal = None
        document: object = None
        if media_type not in MANIFEST_MEDIA_TYPES:
            refusal = f"answered a manifest GET with content type {media_type[:80]!r}"
        else:
            try:
                document = json.loads(answer.content)
            except (ValueError, RecursionError):
                document = None
            if not isinstance(document, dict):
                refusal = "answered a manifest GET with a body that is not a JSON manifest"
        if refusal is not None:
            error = translate(_Refused(refusal), registry=host, what="a manifest GET")
            assert error is not None
            raise error
        assert isinstance(document, dict)
        return document

    def _validated_digest(self, value: str, host: str) -> str:
        try:
            return parse_digest(value.strip())
        except InvalidReference as error:
            raise RegistryProtocolError(
                f"{host} sent a malformed digest {value[:80]!r} (expected algorithm:hex); "
                "nothing is pinned on it",
                registry=host,
            ) from error

    def _record_report(self, answer: Answer, host: str, account: str) -> RateLimitReport:
        report = parse_ratelimit_headers(answer.headers)
        self.ledger.budget(host, account).record_report(report, self.clock())
        return report

    async def _authorized(
        self, method: str, url: str, host: str, scope: str, credentials: Credentials | None
    ) -> Answer:
        """Send a manifest request, answering one authentication challenge if it comes."""
        kind = RequestKind(method)
        headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
        known = self._challenges.get((host, _account(credentials)))
        if known is not None:
            headers.update(await self._auth_headers(known, host, scope, credentials))
        answer = await self._send(
            method, url, host, kind, credentials, headers=headers, limit=MAX_MANIFEST_BYTES
        )
        if answer.status_code == 401:
            challenge = parse_challenge(answer.headers.get("www-authenticate", ""))
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
            answer = await self._send(
                method, url, host, kind, credentials, headers=headers, limit=MAX_MANIFEST_BYTES
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
        try:
            realm = httpx.URL(challenge.realm)
        except httpx.InvalidURL as invalid:
            error = translate(invalid, registry=host, what="a token")
            assert error is not None
            raise error from invalid
        realm_host = realm.netloc.decode().lower()
        if realm.scheme != "https" and realm_host not in self.insecure_registries:
            raise RegistryProtocolError(
                f"{host} names a plain-HTTP token service {challenge.realm[:200]!r}; list it as "
                "an insecure registry only if that is intended",
                registry=host,
            )
        params = [("scope", scope) for scope in scopes]
        if challenge.service:
            params.append(("service", challenge.service))
        auth = httpx.BasicAuth(credentials.username, credentials.password) if credentials else None
        answer = await self._send(
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
        try:
            body = json.loads(answer.content)
        except (ValueError, RecursionError) as error:
            raise RegistryProtocolError(
                f"the token service of {host} did not answer JSON; check the realm "
                f"{challenge.realm[:200]!r}",
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

    async def _send(
        self,
        method: str,
        url: str,
        host: str,
        kind: RequestKind,
        credentials: Credentials | None,
        *,
        limit: int,
        headers: dict[str, str] | None = None,
        params: list[tuple[str, str]] | None = None,
        auth: httpx.Auth | None = None,
    ) -> Answer:
        """One request with retries on unavailability; every failure leaves as a RegistryError."""
        budget = self.ledger.budget(host, _account(credentials))
        what = f"{kind} {httpx.URL(url).path}" if kind is not RequestKind.TOKEN else "a token"
        attempt = 0
        while True:
            budget.record_request(kind, self.clock())
            outcome: Answer | BaseException
            try:
                outcome = await self._exchange(
                    method, httpx.URL(url, params=params), headers or {}, auth, limit
                )
            except (httpx.HTTPError, httpx.InvalidURL, _Refused) as failure:
                outcome = failure
            except asyncio.CancelledError:
                # The deadline (or shutdown) cut this request short: it still counts.
                if self._observer is not None:
                    self._observer(host, kind, "Cancelled")
                raise
            error = translate(outcome, registry=host, what=what)
            self._observe(host, kind, outcome, error)
            if isinstance(outcome, Answer) and outcome.status_code == 429:
                raise self._throttled(outcome, host, _account(credentials))
            if error is None:
                assert isinstance(outcome, Answer)
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

    async def _exchange(
        self,
        method: str,
        url: httpx.URL,
        headers: dict[str, str],
        auth: httpx.Auth | None,
        limit: int,
    ) -> Answer:
        """One request and its answer, redirects followed only where safe, body capped."""
        for _hop in range(MAX_REDIRECTS + 1):
            request = self._http.build_request(method, url, headers=headers)
            response = await self._http.send(request, auth=auth, stream=True)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECT_STATUSES and location is not None:
                    target = self._redirect_target(url, location)
                    if (target.scheme, target.host, target.port) != (
                        url.scheme,
                        url.host,
                        url.port,
                    ):
                        # Credentials never follow a redirect to another origin (as curl's and
                        # Go's clients): the registry named where they go, the redirect did not.
                        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                        auth = None
                    url = target
                    continue
                content = b""
                if response.status_code == 200:
                    encoding = response.headers.get("content-encoding", "identity")
                    if encoding.strip().lower() != "identity":
                        raise _Refused(
                            f"sent a {encoding[:40]!r}-encoded answer although only identity "
                            "was accepted"
                        )
                    if method != "HEAD":
                        content = await self._read_capped(response, limit)
                return Answer(response.status_code, response.headers, content)
            finally:
                await response.aclose()
        raise _Refused(f"redirected more than {MAX_REDIRECTS} times")

    def _redirect_target(self, current: httpx.URL, location: str) -> httpx.URL:
        """Where a redirect leads — only to HTTPS, or between hosts on the insecure list."""
        target = current.join(location)
        if target.scheme == "https":
            return target
        if (
            target.scheme == "http"
            and current.scheme == "http"
            and target.netloc.decode().lower() in self.insecure_registries
        ):
            return target
        # Only the origins are shown: a redirect's query may carry a signature.
        raise _Refused(
            f"redirected {current.scheme}://{current.netloc.decode()} to "
            f"{target.scheme}://{target.netloc.decode()[:100]}; a redirect never leaves HTTPS "
            "or goes to a plain-HTTP host that is not listed as insecure"
        )

    @staticmethod
    async def _read_capped(response: httpx.Response, limit: int) -> bytes:
        """The body, refused as soon as it exceeds ``limit`` bytes (whatever its headers say)."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_raw():
            size += len(chunk)
            if size > limit:
                raise _Refused(f"sent a body over the {limit}-byte cap")
            chunks.append(chunk)
        return b"".join(chunks)

    def _throttled(self, answer: Answer, host: str, account: str) -> RegistryThrottled:
        now = self.clock()
        self.ledger.budget(host, account).record_report(
            parse_ratelimit_headers(answer.headers), now
        )
        until = self.ledger.pause(
            host, retry_after_seconds(answer.headers.get("retry-after"), now), now
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
        outcome: Answer | BaseException,
        error: RegistryError | None,
    ) -> None:
        if self._observer is None:
            return
        if isinstance(outcome, Answer):
            label = str(outcome.status_code)
        else:
            label = error.reason if error is not None else "error"
        self._observer(host, kind, label)
