"""Resolve a tag to its digest at the registry the image names, and read what signs a digest.

One resolution is one ``HEAD /v2/<path>/manifests/<tag>`` with the four manifest media types
(OCI index, Docker manifest list, OCI manifest, Docker manifest v2) so that a multi-platform tag
answers with its index digest — the digest the kubelet reports and the one worth pinning. The
answer is the ``Docker-Content-Digest`` header. Only a registry that omits the header gets a GET,
whose body is hashed; that GET is a pull and is counted as one.

The digest always comes from the image's own registry: a mirror's digest is the mirror's, so a
pin can never point at content the mirror does not hold. ``docker.io`` is served by
``registry-1.docker.io``. Plain HTTP is used only for hosts on the operator's insecure list.

The registry is hostile until proven otherwise. Each lookup — a resolution, an index's
children, a digest's signatures — has a total deadline (retries and token requests included),
not only a per-read timeout, so a registry dripping its answer cannot hold a tick, and waits
for its turn at the registry's concurrency gate within it. Manifests are read up to 4 MiB; a
GET fallback must answer 200 with a manifest media type and a JSON body. The rest is in the
modules the client is made of:

* :mod:`.transport` — one request: retries, redirects only to HTTPS, size caps, identity
  encoding only, ``Retry-After``, counting, and :func:`~.transport.translate`, the one place
  failures become :mod:`.errors`;
* :mod:`.authflow` — the challenge and token flow, tokens cached per credential and scope;
* :mod:`.repository` and :mod:`.signatures` — reading one repository's manifests and blobs,
  and what cosign stored for a digest.

Every response's rate-limit headers feed the :class:`~imagerefresh.ratelimit.RateLimitLedger`,
under the account of the credentials used
(:attr:`~imagerefresh.credentials.Credentials.account`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import TypeVar

import httpx
import structlog

from imagerefresh.credentials import Credentials
from imagerefresh.ratelimit import RateLimitLedger, RateLimitReport, RequestKind
from imagerefresh.reference import ImageReference, InvalidReference, parse_digest, registry_host
from imagerefresh.registry.authflow import MAX_TOKEN_BYTES, Authenticator
from imagerefresh.registry.errors import RegistryError, RegistryProtocolError
from imagerefresh.registry.repository import MANIFEST_MEDIA_TYPES, RepositoryReader
from imagerefresh.registry.signatures import NoReferrersApi, read_bundles, read_legacy
from imagerefresh.registry.transport import (
    MAX_REDIRECTS,
    MAX_RETRY_AFTER,
    Answer,
    DeadlineExpired,
    Refused,
    RequestObserver,
    Sender,
    account_of,
    media_type_of,
    retry_after_seconds,
    translate,
)
from imagerefresh.signatures import BundleEvidence, LegacyEvidence

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

# The multi-platform kinds among them: their ``manifests`` are the platform manifests.
INDEX_MEDIA_TYPES = frozenset(MANIFEST_MEDIA_TYPES[:2])
# Digest algorithms a body is checked against (the OCI image spec registers these two).
_DIGEST_ALGORITHMS = frozenset({"sha256", "sha512"})
# distribution refuses manifests over 4 MiB; nothing a registry legitimately sends is larger.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# A whole lookup (token request, HEAD, GETs, retries and their backoff) ends by then, however
# slowly the registry answers: a stalled registry never holds a tick for long.
DEFAULT_DEADLINE = 20.0
DEFAULT_CONCURRENCY_PER_REGISTRY = 4
# A lookup whose turn at the registry comes with less of its deadline left does not start.
_LAST_MOMENT = 0.05


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


class RegistryClient:
    """An async client that resolves image tags to digests and reads their signatures, with
    auth and rate accounting."""

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
        self.ledger = ledger if ledger is not None else RateLimitLedger()
        self.deadline = deadline
        self.concurrency_per_registry = concurrency_per_registry
        # Per registry host, at most this many lookups at once, so many targets never burst
        # one registry; waiting for a turn counts against the lookup's deadline.
        self._gates: dict[str, asyncio.Semaphore] = {}
        self.clock = clock
        self._sender = Sender(
            insecure_registries=insecure_registries,
            ledger=self.ledger,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            clock=clock,
            observer=observer,
            transport=transport,
        )
        self._auth = Authenticator(self._sender, clock)
        self.tokens = self._auth.tokens
        # Registries found without the referrers API are not asked for it again for a while.
        self.no_referrers_api = NoReferrersApi(clock)

    @property
    def insecure_registries(self) -> frozenset[str]:
        return self._sender.insecure_registries

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._sender.aclose()

    def base_url(self, domain: str) -> str:
        return self._sender.base_url(domain)

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

    async def legacy_signature(
        self,
        reference: ImageReference,
        digest: str,
        credentials: Credentials | None = None,
        *,
        reserve: int | None = None,
    ) -> LegacyEvidence | None:
        """What the legacy ``sha256-<hex>.sig`` tag of ``digest`` holds in ``reference``'s
        repository, for :func:`imagerefresh.signatures.verify`; None when there is no such tag.

        A HEAD of the tag (no pull) — all an unsigned digest costs; then a GET of its manifest
        by the digest the HEAD answered (a pull), and a blob GET per simple-signing layer (not
        a pull). With ``reserve``, no pull is sent that would leave the account fewer
        (:class:`~imagerefresh.registry.errors.PullBudgetHeld`). Every failure other than
        absence is a :class:`RegistryError`, at the latest when the deadline passes.
        """
        tracked = reference.tracked()
        host = registry_host(tracked.domain)
        return await self._bounded(
            read_legacy(self._reader(tracked, host, credentials, reserve), parse_digest(digest)),
            host,
            tracked,
            f"reading the legacy signature of {digest} in {tracked.repository}",
        )

    async def bundle_signatures(
        self,
        reference: ImageReference,
        digest: str,
        credentials: Credentials | None = None,
        *,
        reserve: int | None = None,
    ) -> tuple[BundleEvidence, ...]:
        """The referrers of ``digest`` in ``reference``'s repository that may be Sigstore
        bundles, each with its bundle blob, for :func:`imagerefresh.signatures.verify`; empty
        when it has none.

        The referrers API (a pull), or on a registry without it the fallback tag
        ``sha256-<hex>`` (a HEAD; a GET, a pull, only when it exists); then per referrer a GET
        of its manifest (a pull) and a blob GET (not a pull). ``reserve`` as for
        :meth:`legacy_signature`. Every failure other than absence is a
        :class:`RegistryError`, at the latest when the deadline passes.
        """
        tracked = reference.tracked()
        host = registry_host(tracked.domain)
        return await self._bounded(
            read_bundles(
                self._reader(tracked, host, credentials, reserve),
                parse_digest(digest),
                self.no_referrers_api,
            ),
            host,
            tracked,
            f"reading the referrers of {digest} in {tracked.repository}",
        )

    def _reader(
        self,
        tracked: ImageReference,
        host: str,
        credentials: Credentials | None,
        reserve: int | None = None,
    ) -> RepositoryReader:
        return RepositoryReader(self._auth, tracked, host, credentials, reserve)

    async def _bounded(
        self, work: Coroutine[object, object, T], host: str, tracked: ImageReference, what: str
    ) -> T:
        """``work`` in its turn at ``host`` and within the deadline — the wait for a turn
        included, so that a registry that never answers holds each caller for the deadline at
        most, however many queue for it; its errors name the reference they were about."""
        gate = self._gates.setdefault(host, asyncio.Semaphore(self.concurrency_per_registry))
        loop = asyncio.get_running_loop()
        try:
            try:
                async with asyncio.timeout(self.deadline) as deadline:
                    async with gate:
                        # A turn freed by lookups that just timed out comes to the lookups
                        # queued with them, a moment before their own deadline: too late to
                        # send anything that could be answered.
                        left = (deadline.when() or 0) - loop.time()
                        if left < min(_LAST_MOMENT, self.deadline / 20):
                            raise TimeoutError
                        return await work
            except TimeoutError:
                work.close()  # never started when the deadline passed in the queue
                expired = translate(DeadlineExpired(self.deadline), registry=host, what=what)
                assert expired is not None
                raise expired from None
        except RegistryError as error:
            error.reference = str(tracked)
            raise

    async def _children(
        self, tracked: ImageReference, host: str, digest: str, credentials: Credentials | None
    ) -> frozenset[str]:
        self._sender.check_paused(host)
        url = f"{self.base_url(tracked.domain)}/v2/{tracked.path}/manifests/{digest}"
        scope = f"repository:{tracked.path}:pull"
        answer = await self._authorized("GET", url, host, scope, credentials)
        self._sender.record_report(answer, host, account_of(credentials))
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
        if media_type_of(answer.headers) not in INDEX_MEDIA_TYPES:
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
        self._sender.check_paused(host)
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
        report = self._sender.record_report(answer, host, account_of(credentials))
        log.debug("resolved", reference=str(tracked), digest=digest, registry=host, via=method)
        return Resolution(tracked, digest, host, report, method, media_type_of(answer.headers))

    def _manifest_digest(self, answer: Answer, host: str) -> str:
        """The sha256 of a GET fallback's body — only if it is a manifest at all."""
        self._manifest_document(answer, host)
        return "sha256:" + hashlib.sha256(answer.content).hexdigest()

    def _manifest_document(self, answer: Answer, host: str) -> dict[str, object]:
        """A manifest GET's body as JSON — only if it is a manifest at all."""
        media_type = media_type_of(answer.headers)
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
            error = translate(Refused(refusal), registry=host, what="a manifest GET")
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

    async def _authorized(
        self, method: str, url: str, host: str, scope: str, credentials: Credentials | None
    ) -> Answer:
        """A manifest request (HEAD or GET, a GET charged as a pull) through the auth flow."""
        return await self._auth.authorized(
            method,
            url,
            host,
            scope,
            credentials,
            kind=RequestKind(method),
            accept=", ".join(MANIFEST_MEDIA_TYPES),
            limit=MAX_MANIFEST_BYTES,
        )
