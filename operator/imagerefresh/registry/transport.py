"""One registry request on the wire: sent, retried, redirected with care, capped and counted.

The registry is hostile until proven otherwise. A body is read up to a cap given by the caller
and never decompressed (``Accept-Encoding: identity``; any other ``Content-Encoding`` is
refused); a redirect is followed only to HTTPS (or between hosts on the insecure list), at most
:data:`MAX_REDIRECTS` times, and credentials never follow it to another origin;
``Retry-After`` is read strictly (ASCII delay-seconds or an HTTP-date) and clamped to
:data:`MAX_RETRY_AFTER`.

Transport exceptions, refusals and HTTP statuses become :mod:`imagerefresh.registry.errors` in
one place, :func:`translate`; unavailability (connection failures, timeouts, 5xx) is retried
with exponential backoff, a 429 pauses the registry for its ``Retry-After``. Every request is
counted in the :class:`~imagerefresh.ratelimit.RateLimitLedger` under its
:class:`~imagerefresh.ratelimit.RequestKind` (only a manifest GET is charged as a pull) and
reported to the request observer (the metrics), whatever its outcome.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
from collections.abc import Callable, Collection, Iterable
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
from imagerefresh.reference import registry_host
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
    "DEFAULT_RETRY_AFTER",
    "MAX_REDIRECTS",
    "MAX_RETRY_AFTER",
    "Answer",
    "DeadlineExpired",
    "Refused",
    "RequestObserver",
    "Sender",
    "account_of",
    "format_time",
    "media_type_of",
    "retry_after_seconds",
    "translate",
]

log = structlog.get_logger(__name__)

# Redirects followed per request (manifests and tokens are rarely redirected at all).
MAX_REDIRECTS = 3
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
DEFAULT_RETRY_AFTER = 60.0
# A 429 pauses a registry at most this long, whatever its Retry-After says (an hour is longer
# than any pull-limit window is granular; a later tick simply asks again and learns more).
MAX_RETRY_AFTER = 3600.0

# RFC 9110 §10.2.3: delay-seconds = 1*DIGIT, ASCII digits only (str.isdigit takes "²").
_DELAY_SECONDS_RE = re.compile(r"[0-9]+", re.ASCII)

# (registry host, request kind, outcome) → None; the metrics module plugs in here.
RequestObserver = Callable[[str, RequestKind, str], None]


@dataclass(frozen=True, slots=True)
class Answer:
    """A registry's answer, its body read up to a cap (empty when not read)."""

    status_code: int
    headers: httpx.Headers
    content: bytes = b""


class Refused(Exception):
    """An answer the client will not read any further; :func:`translate` words it."""


class DeadlineExpired(Exception):
    """A lookup's total deadline passed; :func:`translate` words it."""

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


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def media_type_of(headers: httpx.Headers) -> str:
    """An answer's Content-Type without parameters, lowercased ("" when none)."""
    return str(headers.get("content-type", "")).split(";", 1)[0].strip().lower()


def account_of(credentials: Credentials | None) -> str:
    return credentials.account if credentials is not None else ANONYMOUS


def translate(
    outcome: Answer | BaseException,
    *,
    registry: str,
    what: str,
    handled: Collection[int] = (),
) -> RegistryError | None:
    """The one place transport failures, refusals and HTTP statuses become registry errors.

    Returns None for an answer the caller handles itself: 200, 401 (which starts the
    authentication flow), and the statuses in ``handled`` — a 404 where absence is an answer
    (no signature), not an error. 429 is translated by the caller, which knows the pause.
    """
    if isinstance(outcome, DeadlineExpired):
        return RegistryTimeout(
            f"{registry} did not finish {what} within the {outcome.deadline:g}s deadline of a "
            "registry lookup; check its health, or if it is only slow raise the deadline "
            "(run --registry-deadline, resolve --deadline)",
            registry=registry,
        )
    if isinstance(outcome, httpx.TimeoutException):
        return RegistryTimeout(
            f"{registry} did not answer {what} in time; check its health or raise the timeout",
            registry=registry,
        )
    if isinstance(outcome, Refused):
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
    return _translate_status(outcome.status_code, registry, what, handled)


def _translate_status(
    status: int, registry: str, what: str, handled: Collection[int]
) -> RegistryError | None:
    if status in (200, 401, 429) or status in handled:
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


class Sender:
    """Sends registry requests: counted, retried, redirected only where safe, bodies capped."""

    def __init__(
        self,
        *,
        insecure_registries: Iterable[str],
        ledger: RateLimitLedger,
        timeout: float,
        retries: int,
        backoff: float,
        clock: Callable[[], float],
        observer: RequestObserver | None,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.insecure_registries = frozenset(host.lower() for host in insecure_registries)
        self.ledger = ledger
        self.retries = retries
        self.backoff = backoff
        self.clock = clock
        self._observer = observer
        # Redirects are followed by _exchange, which checks each hop; nothing is decompressed.
        self._http = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            headers={"Accept-Encoding": "identity"},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def base_url(self, domain: str) -> str:
        host = registry_host(domain)
        scheme = "http" if host.lower() in self.insecure_registries else "https"
        return f"{scheme}://{host}"

    def record_report(self, answer: Answer, host: str, account: str) -> RateLimitReport:
        """Feed the rate-limit headers of ``answer`` to the account's budget."""
        report = parse_ratelimit_headers(answer.headers)
        self.ledger.budget(host, account).record_report(report, self.clock())
        return report

    def check_paused(self, host: str) -> None:
        """Refuse to ask ``host`` anything while a 429 pauses it."""
        paused = self.ledger.pause_remaining(host, self.clock())
        if paused > 0:
            raise RegistryThrottled(
                f"{host} is paused after a 429 until {format_time(self.clock() + paused)}; "
                "nothing is asked of it before then",
                registry=host,
                retry_at=self.clock() + paused,
            )

    async def send(
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
        handled: Collection[int] = (),
    ) -> Answer:
        """One request with retries on unavailability; every failure leaves as a RegistryError
        (``handled``: statuses returned as answers, see :func:`translate`)."""
        budget = self.ledger.budget(host, account_of(credentials))
        what = f"{kind} {httpx.URL(url).path}" if kind is not RequestKind.TOKEN else "a token"
        attempt = 0
        while True:
            budget.record_request(kind, self.clock())
            outcome: Answer | BaseException
            try:
                outcome = await self._exchange(
                    method, httpx.URL(url, params=params), headers or {}, auth, limit
                )
            except (httpx.HTTPError, httpx.InvalidURL, Refused) as failure:
                outcome = failure
            except asyncio.CancelledError:
                # The deadline (or shutdown) cut this request short: it still counts.
                if self._observer is not None:
                    self._observer(host, kind, "Cancelled")
                raise
            error = translate(outcome, registry=host, what=what, handled=handled)
            self._observe(host, kind, outcome, error)
            if isinstance(outcome, Answer) and outcome.status_code == 429:
                raise self._throttled(outcome, host, account_of(credentials))
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
                        raise Refused(
                            f"sent a {encoding[:40]!r}-encoded answer although only identity "
                            "was accepted"
                        )
                    if method != "HEAD":
                        content = await self._read_capped(response, limit)
                return Answer(response.status_code, response.headers, content)
            finally:
                await response.aclose()
        raise Refused(f"redirected more than {MAX_REDIRECTS} times")

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
        raise Refused(
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
                raise Refused(f"sent a body over the {limit}-byte cap")
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
            f"{host} answered 429 Too Many Requests; it is paused until {format_time(until)} "
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
