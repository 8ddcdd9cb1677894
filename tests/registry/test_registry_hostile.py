"""The registry client against a hostile registry: it trusts nothing it reads.

Each test puts :class:`~support.hostile_registry.HostileRegistry` (or the Docker-Hub-like front)
in one misbehaviour before the real distribution registry and asserts two things: the outcome
(a :class:`RegistryError` of the documented kind, with a message saying what to do — never a
digest pinned on a lie, never a crash) and what the front received.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from imagerefresh.credentials import Credentials
from imagerefresh.ratelimit import RequestKind
from imagerefresh.reference import parse
from imagerefresh.registry import (
    RegistryClient,
    RegistryProtocolError,
    RegistryThrottled,
    RegistryTimeout,
    RegistryUnreachable,
)
from imagerefresh.registry.client import MAX_RETRY_AFTER, retry_after_seconds

from support.cluster_env import eventually
from support.hostile_registry import HostileRegistry, tls_contexts
from support.hub_front import HubFront
from support.registry_env import FakeClock, ImagePusher, PushedImage, client_for

pytestmark = pytest.mark.registry

# Generous against a loaded machine: a per-read timeout far above the drip interval (so only
# the total deadline can end a dripped answer), a drip far longer than the deadline.
READ_TIMEOUT = 10.0
DEADLINE = 1.0


def pushed_to(pusher: ImagePusher, front: HostileRegistry, path: str) -> tuple[PushedImage, str]:
    """An image pushed to the registry, and its reference through the front."""
    image = pusher.push(path, "prod", seed=path)
    return image, f"{front.host}/{path}:prod"


def hung_up_early(front: HostileRegistry) -> bool:
    """Whether the client hung up before the front's last answer was written."""
    return front.received[-1].completed is False


# --- the total deadline ---------------------------------------------------------------------


async def test_a_head_whose_headers_drip_in_byte_by_byte_ends_at_the_total_deadline(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour = "drip-head"
    _, reference = pushed_to(pusher, hostile, "hostile/drip-head")
    async with client_for(hostile.host, timeout=READ_TIMEOUT, deadline=DEADLINE) as client:
        with pytest.raises(RegistryTimeout, match="within the 1s deadline") as caught:
            await client.resolve(parse(reference))
    assert caught.value.reference == reference
    assert [r.method for r in hostile.received] == ["HEAD"]
    eventually(lambda: hung_up_early(hostile), timeout=30, what="the client to hang up")


async def test_a_manifest_body_dripped_byte_by_byte_ends_at_the_total_deadline(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour = "drip-body"
    _, reference = pushed_to(pusher, hostile, "hostile/drip-body")
    async with client_for(hostile.host, timeout=READ_TIMEOUT, deadline=DEADLINE) as client:
        with pytest.raises(RegistryTimeout, match="deadline"):
            await client.resolve(parse(reference))
    assert [r.method for r in hostile.received] == ["HEAD", "GET"]
    eventually(lambda: hung_up_early(hostile), timeout=30, what="the client to hang up")


async def test_retries_of_a_failing_registry_end_at_the_total_deadline(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    pusher.push("hostile/5xx", "prod", seed="5xx")
    hub_front.fail_status = 503
    # Eight retries back off for 0.05 * (2**8 - 1), about 13 s in all: far past the deadline.
    async with RegistryClient(
        insecure_registries=[hub_front.host], retries=8, backoff=0.05, deadline=DEADLINE
    ) as client:
        with pytest.raises(RegistryTimeout, match="deadline"):
            await client.resolve(parse(f"{hub_front.host}/hostile/5xx:prod"))
    failed = [r for r in hub_front.served if r.status == 503]
    assert 1 <= len(failed) < 9  # cut short: never all nine attempts


async def test_waiting_for_a_turn_at_a_registry_that_never_answers_counts_in_the_deadline(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    """Two requests at a time, and the registry answers none: the six that queue behind them
    end at the same deadline, never sent — no queue grows behind a registry that hangs."""
    hostile.behaviour = "silent"
    references = [pushed_to(pusher, hostile, f"hostile/silent{i}")[1] for i in range(8)]
    async with client_for(
        hostile.host, timeout=READ_TIMEOUT, deadline=DEADLINE, concurrency_per_registry=2
    ) as client:
        outcomes = await asyncio.gather(
            *(client.resolve(parse(r)) for r in references), return_exceptions=True
        )
    assert all(isinstance(outcome, RegistryTimeout) for outcome in outcomes), outcomes
    assert all("within the 1s deadline" in str(outcome) for outcome in outcomes)
    assert len(hostile.received) == 2  # the queued six were never sent


# --- size caps and encodings ------------------------------------------------------------------


async def test_a_manifest_body_over_4_mib_is_refused_while_it_streams(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour = "oversized-body"
    _, reference = pushed_to(pusher, hostile, "hostile/oversized")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError, match="over the 4194304-byte cap"):
            await client.resolve(parse(reference))
    # The body came chunked, without a length to refuse it by: the cap held while reading.
    assert [(r.method, r.status) for r in hostile.received] == [("HEAD", 200), ("GET", 200)]


async def test_a_token_answer_over_64_kib_is_refused(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour = "oversized-token"
    _, reference = pushed_to(pusher, hostile, "hostile/token")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError, match="over the 65536-byte cap"):
            await client.resolve(parse(reference))
        assert len(client.tokens) == 0
    assert [r.target.split("?")[0] for r in hostile.received] == [
        "/v2/hostile/token/manifests/prod",
        "/token",
    ]


async def test_a_gzip_encoded_manifest_is_refused_and_only_identity_was_accepted(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour = "gzip-body"
    _, reference = pushed_to(pusher, hostile, "hostile/gzip")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError, match="'gzip'-encoded answer"):
            await client.resolve(parse(reference))
    assert [r.method for r in hostile.received] == ["HEAD", "GET"]
    assert {r.headers.get("accept-encoding") for r in hostile.received} == {"identity"}


# --- a GET fallback must be a manifest -------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "refusal"),
    [
        ("empty-204", "with 204 instead of 200"),
        ("html-200", "content type 'text/html'"),
        ("octet-stream-200", "content type 'application/octet-stream'"),
        ("not-json-200", "not a JSON manifest"),
    ],
)
async def test_a_get_fallback_must_answer_200_with_a_manifest_type_and_a_json_body(
    hostile: HostileRegistry, pusher: ImagePusher, behaviour: str, refusal: str
) -> None:
    hostile.behaviour = behaviour
    _, reference = pushed_to(pusher, hostile, f"hostile/{behaviour}")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError, match=refusal) as caught:
            await client.resolve(parse(reference))
        budget = client.ledger.budget(hostile.host, "anonymous")
    assert "nothing is pinned" in str(caught.value)
    assert [r.method for r in hostile.received] == ["HEAD", "GET"]
    assert budget.requests[RequestKind.GET] == 1  # the refused GET still counts as a pull


# --- redirects --------------------------------------------------------------------------------


@pytest.fixture
def tls_pair(tmp_path: Path) -> tuple[object, object]:
    return tls_contexts(tmp_path)


@pytest.fixture
def tls_front(registry: str, tls_pair: tuple[object, object]) -> Iterator[HostileRegistry]:
    """A hostile front serving HTTPS (its certificate trusted by :func:`tls_client`)."""
    server, _ = tls_pair
    front = HostileRegistry(registry, tls=server).start()  # type: ignore[arg-type]
    yield front
    front.stop()


def tls_client(tls_pair: tuple[object, object], **kwargs: object) -> RegistryClient:
    _, trusted = tls_pair
    transport = httpx.AsyncHTTPTransport(verify=trusted)  # type: ignore[arg-type]
    return RegistryClient(transport=transport, backoff=0.01, **kwargs)  # type: ignore[arg-type]


async def test_a_redirect_from_https_to_plain_http_is_refused(
    tls_front: HostileRegistry, tls_pair: tuple[object, object], registry: str, pusher: ImagePusher
) -> None:
    # The redirect leads to the real registry, which would answer the right digest: only the
    # rule can refuse it.
    tls_front.behaviour, tls_front.redirect_to = "redirect", f"http://{registry}"
    _, reference = pushed_to(pusher, tls_front, "hostile/downgrade")
    async with tls_client(tls_pair) as client:
        with pytest.raises(RegistryProtocolError, match="never leaves HTTPS"):
            await client.resolve(parse(reference))
    assert [(r.method, r.status) for r in tls_front.received] == [("HEAD", 302)]


async def test_a_redirect_to_a_plain_http_host_off_the_insecure_list_is_refused(
    hostile: HostileRegistry, registry: str, pusher: ImagePusher
) -> None:
    hostile.behaviour, hostile.redirect_to = "redirect", f"http://{registry}"
    _, reference = pushed_to(pusher, hostile, "hostile/unlisted")
    async with client_for(hostile.host) as client:  # the registry itself is not listed
        with pytest.raises(RegistryProtocolError, match="not listed as insecure"):
            await client.resolve(parse(reference))
    assert [(r.method, r.status) for r in hostile.received] == [("HEAD", 302)]


async def test_a_redirect_to_an_unusable_address_is_a_registry_error_never_a_crash(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour, hostile.redirect_to = "redirect", "https://127.0.0.1:port"
    _, reference = pushed_to(pusher, hostile, "hostile/unusable")
    async with client_for(hostile.host, retries=1) as client:
        with pytest.raises(RegistryUnreachable, match=r"garbled its answer .*Invalid URL"):
            await client.resolve(parse(reference))
    assert [r.status for r in hostile.received] == [302, 302]  # retried once, as unavailable


async def test_a_redirect_loop_is_refused_after_three_hops(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    # Location /again/v2/…, then /again/again/v2/…: every hop is a new address.
    hostile.behaviour, hostile.redirect_to = "redirect", f"{hostile.url}/again"
    _, reference = pushed_to(pusher, hostile, "hostile/loop")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError, match="redirected more than 3 times"):
            await client.resolve(parse(reference))
    assert [r.status for r in hostile.received] == [302] * 4


async def test_an_https_redirect_is_followed_and_credentials_stay_with_their_origin(
    tls_front: HostileRegistry, tls_pair: tuple[object, object], registry: str, pusher: ImagePusher
) -> None:
    server, _ = tls_pair
    elsewhere = HostileRegistry(registry, tls=server).start()  # type: ignore[arg-type]
    try:
        tls_front.behaviour, tls_front.redirect_to = "redirect", elsewhere.url
        tls_front.require_basic = True
        pushed, reference = pushed_to(pusher, tls_front, "hostile/elsewhere")
        async with tls_client(tls_pair) as client:
            resolution = await client.resolve(
                parse(reference), Credentials("bob", "pw", "team/regcred")
            )
    finally:
        elsewhere.stop()
    assert resolution.digest == pushed.digest
    assert resolution.registry == tls_front.host
    # The registry got the credentials it asked for; the origin it redirected to did not.
    assert [(r.status, "authorization" in r.headers) for r in tls_front.received] == [
        (401, False),
        (302, True),
    ]
    assert [(r.status, "authorization" in r.headers) for r in elsewhere.received] == [(200, False)]


# --- Retry-After ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "pause"),
    [
        ("999999999999", MAX_RETRY_AFTER),  # once raised on every later resolve
        ("9" * 5000, MAX_RETRY_AFTER),  # more digits than int() converts
        ("²", 60.0),  # str.isdigit() says yes; float() crashed the tick
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER),
        ("soon", 60.0),
    ],
)
async def test_absurd_retry_after_values_pause_within_an_hour_and_never_crash(
    hostile: HostileRegistry, pusher: ImagePusher, retry_after: str, pause: float
) -> None:
    hostile.behaviour, hostile.retry_after = "throttle", retry_after
    _, reference = pushed_to(pusher, hostile, "hostile/throttle")
    clock = FakeClock()
    async with client_for(hostile.host, clock=clock) as client:
        with pytest.raises(RegistryThrottled, match="paused until") as caught:
            await client.resolve(parse(reference))
        assert caught.value.retry_at == clock.now + pause
        with pytest.raises(RegistryThrottled, match="nothing is asked of it"):
            await client.resolve(parse(reference))
    assert [(r.method, r.status) for r in hostile.received] == [("HEAD", 429)]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("00000000000000000000007", 7.0),
        ("3601", MAX_RETRY_AFTER),
        ("1.5", 60.0),
        ("-5", 60.0),
        ("+5", 60.0),
        ("٣", 60.0),  # an Arabic-Indic three: a digit to Python, not to RFC 9110
        ("", 60.0),
        (None, 60.0),
        ("Thu, 15 Jan 2027 08:02:00 GMT", 120.0),  # clock: 08:00:00
        ("Thursday, 15-Jan-27 08:02:00 GMT", 120.0),  # RFC 850, still an HTTP-date
        ("Thu, 15 Jan 2027 07:00:00 GMT", 0.0),  # already past
    ],
)
def test_retry_after_is_delay_seconds_in_ascii_or_an_http_date_clamped_to_an_hour(
    value: str | None, seconds: float
) -> None:
    assert retry_after_seconds(value, now=1_800_000_000.0) == seconds
