"""One repository at its registry, read as one account: manifests, blobs and referrers.

Where a thing may simply not be there — a signature tag, a referrer, a blob — a 404 is an
answer, ``None``, never an error; every other failure is a
:class:`~imagerefresh.registry.errors.RegistryError` (see
:func:`~imagerefresh.registry.transport.translate`). Each request goes through the
authentication flow (:class:`~imagerefresh.registry.authflow.Authenticator`) with the
repository's pull scope, is refused while a 429 pauses the registry, and is counted under its
kind: a manifest HEAD is free, a manifest or referrers GET is a pull, a blob GET is counted but
not charged (Docker Hub counts only manifest GETs). A reader given a ``reserve`` sends a pull
only while the account's budget keeps that reserve after it, and raises
:class:`~imagerefresh.registry.errors.PullBudgetHeld` instead. A manifest asked for by digest
must hash to it: a registry cannot pass other content off as what was named.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

from imagerefresh.credentials import ANONYMOUS, Credentials
from imagerefresh.ratelimit import RequestKind
from imagerefresh.reference import ImageReference, InvalidReference, parse_digest
from imagerefresh.registry.authflow import Authenticator
from imagerefresh.registry.errors import PullBudgetHeld, RegistryProtocolError
from imagerefresh.registry.transport import Answer, account_of

__all__ = ["MANIFEST_MEDIA_TYPES", "OCI_INDEX", "RepositoryReader"]

MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
OCI_INDEX = MANIFEST_MEDIA_TYPES[0]
_ABSENT = frozenset({404})


class RepositoryReader:
    """Requests to one repository of one registry, as one account."""

    def __init__(
        self,
        auth: Authenticator,
        tracked: ImageReference,
        host: str,
        credentials: Credentials | None,
        reserve: int | None = None,
    ) -> None:
        self._auth = auth
        self.host = host
        self.credentials = credentials
        self.reserve = reserve  # pulls left to the kubelet: none is sent below it (None: any)
        self._base = f"{auth.sender.base_url(tracked.domain)}/v2/{tracked.path}"
        self._scope = f"repository:{tracked.path}:pull"

    async def tagged_manifest(self, tag: str, *, limit: int) -> bytes | None:
        """The manifest ``tag`` names, None when there is no such tag.

        A HEAD first, so that an absent tag costs no pull; then a GET by the digest the HEAD
        answered, whose body must hash to it (by the tag only when the registry sent no digest).
        """
        head = await self._request("HEAD", f"manifests/{tag}", RequestKind.HEAD)
        if head.status_code == 404:
            return None
        named = head.headers.get("docker-content-digest")
        digest = self._validated_digest(named) if named else None
        return await self.manifest(digest or tag, limit=limit)

    async def manifest(self, reference: str, *, limit: int) -> bytes | None:
        """The manifest ``reference`` (a tag or a digest) names, up to ``limit`` bytes; None
        when there is none. A pull."""
        digest = self._validated_digest(reference) if ":" in reference else None
        answer = await self._request("GET", f"manifests/{reference}", RequestKind.GET, limit=limit)
        if answer.status_code == 404:
            return None
        if digest is not None:
            self._check_hash(answer.content, digest)
        return answer.content

    async def blob(self, digest: str, *, limit: int) -> bytes | None:
        """The blob ``digest`` names, up to ``limit`` bytes; None when there is none. Its hash
        is not checked here: the caller judges what it was handed."""
        self._validated_digest(digest)
        answer = await self._request("GET", f"blobs/{digest}", RequestKind.BLOB, limit=limit)
        return None if answer.status_code == 404 else answer.content

    async def referrers(self, digest: str, *, limit: int, handled: Collection[int]) -> Answer:
        """The referrers API's answer for ``digest`` (a pull); ``handled``: the statuses that
        are answers, not errors."""
        return await self._request(
            "GET", f"referrers/{digest}", RequestKind.GET, limit=limit, handled=handled,
            accept=OCI_INDEX,
        )  # fmt: skip

    async def _request(
        self,
        method: str,
        path: str,
        kind: RequestKind,
        *,
        limit: int = 0,
        handled: Collection[int] = _ABSENT,
        accept: str = ", ".join(MANIFEST_MEDIA_TYPES),
    ) -> Answer:
        self._auth.sender.check_paused(self.host)
        if kind.is_pull:
            self._hold_to_reserve()
        answer = await self._auth.authorized(
            method, f"{self._base}/{path}", self.host, self._scope, self.credentials,
            kind=kind, accept=accept, limit=limit, handled=handled,
        )  # fmt: skip
        if answer.status_code == 200 and path.startswith("manifests/"):
            # Manifest answers carry the pull budget (Docker Hub's headers); a blob's, often
            # from a CDN, carries none, which would read as "not limited".
            self._auth.sender.record_report(answer, self.host, account_of(self.credentials))
        return answer

    def _hold_to_reserve(self) -> None:
        """Refuse a pull the account's budget cannot spend and keep the reserve."""
        if self.reserve is None:
            return
        sender = self._auth.sender
        name = self.credentials.identity if self.credentials is not None else ANONYMOUS
        budget = sender.ledger.snapshot(
            self.host, account_of(self.credentials), sender.clock(), label=name
        )
        answer = budget.can_afford(1, self.reserve, needs="a signature lookup needs")
        if not answer.allowed:
            raise PullBudgetHeld(answer.reason, registry=self.host)

    def _validated_digest(self, value: str) -> str:
        try:
            return parse_digest(value.strip())
        except InvalidReference as error:
            raise RegistryProtocolError(
                f"{self.host} sent a malformed digest {value[:80]!r} (expected algorithm:hex); "
                "nothing is read on it — fix the registry or the proxy in front of it",
                registry=self.host,
            ) from error

    def _check_hash(self, content: bytes, digest: str) -> None:
        algorithm, _, expected = digest.partition(":")
        if hashlib.new(algorithm, content).hexdigest() != expected:
            raise RegistryProtocolError(
                f"{self.host} answered the manifest {digest} with content that does not hash to "
                "it; nothing is read from it — fix the registry or the proxy in front of it",
                registry=self.host,
            )
