"""imagerefresh.resolver: one registry request per unique (reference, credentials) pair."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from imagerefresh.credentials import Credentials
from imagerefresh.ratelimit import RateLimitReport, RequestKind
from imagerefresh.reference import ImageReference, parse
from imagerefresh.registry import (
    ManifestNotFound,
    RegistryAuthError,
    RegistryClient,
    RegistryInternalError,
    Resolution,
)
from imagerefresh.resolver import ROUND_HORIZON, ResolutionKey, SharedResolver, resolve_all

from support.hub_front import HubFront
from support.registry_env import ImagePusher

pytestmark = pytest.mark.registry


async def test_duplicates_share_one_request_and_failures_stay_values(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.users = {"alice": "pw"}
    pushed = {name: pusher.push(f"fan/{name}", "prod", seed=name) for name in ("a", "b", "c")}
    keys = [
        ResolutionKey.of(parse(f"{hub_front.host}/fan/{name}:prod"))
        for name in ("a", "b", "c", "a", "b", "a")
    ]
    keys.append(ResolutionKey.of(parse(f"{hub_front.host}/fan/a:prod"), Credentials("alice", "pw")))
    keys.append(ResolutionKey.of(parse(f"{hub_front.host}/fan/missing:prod")))
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        results = await resolve_all(client, keys)
    assert len(results) == 5  # a, b, c anonymously, a as alice, and the missing one
    for key, result in results.items():
        name = key.reference.path.split("/")[-1]
        if name == "missing":
            assert isinstance(result, ManifestNotFound)
        else:
            assert isinstance(result, Resolution)
            assert result.digest == pushed[name].digest
    authorized_heads = [
        r
        for r in hub_front.served
        if r.kind == "manifest" and r.method == "HEAD" and r.status != 401
    ]
    assert len(authorized_heads) == 5


async def test_secrets_sharing_a_username_are_separate_requests_and_the_wrong_one_is_refused(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.users = {"alice": "right"}
    pushed = pusher.push("fan/tenant", "prod", seed="tenant")
    reference = parse(f"{hub_front.host}/fan/tenant:prod")
    right = ResolutionKey.of(reference, Credentials("alice", "right", "team-a/regcred"))
    wrong = ResolutionKey.of(reference, Credentials("alice", "wrong", "team-b/regcred"))
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        results = await resolve_all(client, [right, wrong])
    assert isinstance(results[right], Resolution)
    assert results[right].digest == pushed.digest
    assert isinstance(results[wrong], RegistryAuthError)
    assert "team-b/regcred" in str(results[wrong])
    tokens = sorted((r.identity, r.status) for r in hub_front.served if r.kind == "token")
    assert tokens == [("?", 401), ("alice", 200)]
    served = [r for r in hub_front.served if r.kind == "manifest" and r.status == 200]
    assert [r.identity for r in served] == ["alice"]  # one manifest answer: the right one's


async def test_an_unexpected_failure_resolving_one_reference_never_fails_another(
    registry: str, hub_front: HubFront, pusher: ImagePusher
) -> None:
    """Whatever one resolution raises is that reference's outcome alone, logged.

    The fault is a request observer (the metrics module's seam) that breaks on one registry:
    an exception the client does not foresee, raised from inside a real resolution.
    """
    pushed = {name: pusher.push(f"isolated/{name}", "prod", seed=name) for name in ("a", "b")}

    def observer(host: str, kind: RequestKind, outcome: str) -> None:
        if host == hub_front.host:
            raise RuntimeError("observer broke")

    broken = [ResolutionKey.of(parse(f"{hub_front.host}/isolated/{n}:prod")) for n in ("a", "b")]
    healthy = [ResolutionKey.of(parse(f"{registry}/isolated/{n}:prod")) for n in ("a", "b")]
    async with RegistryClient(
        insecure_registries=[registry, hub_front.host], observer=observer
    ) as client:
        with structlog.testing.capture_logs() as logs:
            results = await resolve_all(client, [*broken, *healthy])
    for key in healthy:
        outcome = results[key]
        assert isinstance(outcome, Resolution)
        assert outcome.digest == pushed[key.reference.path.split("/")[-1]].digest
    for key in broken:
        outcome = results[key]
        assert isinstance(outcome, RegistryInternalError)
        assert outcome.reference == str(key.reference)
        assert f"resolving {key.reference} failed unexpectedly (RuntimeError)" in str(outcome)
        assert "other references are unaffected" in str(outcome)
    logged = [entry for entry in logs if entry["log_level"] == "error"]
    assert sorted(entry["reference"] for entry in logged) == sorted(
        str(k.reference) for k in broken
    )


async def test_concurrency_per_registry_is_bounded(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    for index in range(8):
        pusher.push(f"bound/r{index}", "prod", seed=str(index))
    async with RegistryClient(
        insecure_registries=[hub_front.host], concurrency_per_registry=2
    ) as client:
        # Warm the token cache so the bound is measured on manifest requests alone.
        await resolve_all(
            client, [ResolutionKey.of(parse(f"{hub_front.host}/bound/r{i}:prod")) for i in range(8)]
        )
        hub_front.max_in_flight = 0
        hub_front.delay_seconds = 0.2
        await resolve_all(
            client,
            [ResolutionKey.of(parse(f"{hub_front.host}/bound/r{i}:prod")) for i in range(8)],
        )
    assert hub_front.max_in_flight == 2


def test_a_key_is_the_tracked_reference_so_an_implicit_latest_matches_an_explicit_one() -> None:
    assert ResolutionKey.of(parse("nginx")) == ResolutionKey.of(
        parse("docker.io/library/nginx:latest")
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_policies_ticking_within_the_window_share_one_request_and_join_in_flight_ones(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    pusher.push("window/app", "prod", seed="w")
    key = ResolutionKey.of(parse(f"{hub_front.host}/window/app:prod"))
    clock = Clock()
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        shared = SharedResolver(client, window=10, clock=clock)
        hub_front.delay_seconds = 0.2
        # Two policies ask at the same moment: the second joins the first's request.
        first, second = await asyncio.gather(shared.resolve([key]), shared.resolve([key]))
        assert first[key] == second[key]
        clock.now = 9.9
        await shared.resolve([key])
        heads = [r for r in hub_front.served if r.method == "HEAD" and r.status == 200]
        assert len(heads) == 1
        clock.now = 10.1  # the window has passed: the registry is asked again
        await shared.resolve([key])
        heads = [r for r in hub_front.served if r.method == "HEAD" and r.status == 200]
        assert len(heads) == 2


async def test_a_tick_asked_for_takes_no_answer_from_before_it_and_later_ticks_share_its_own(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    old = pusher.push("asked/app", "prod", seed="a1")
    key = ResolutionKey.of(parse(f"{hub_front.host}/asked/app:prod"))

    def heads() -> int:
        return len([r for r in hub_front.served if r.method == "HEAD" and r.status == 200])

    clock = Clock()
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        shared = SharedResolver(client, window=10, clock=clock)
        await shared.resolve([key])  # the grid's tick
        new = pusher.push("asked/app", "prod", seed="a2")  # a release pipeline pushes...
        clock.now = 1.0
        asked = await shared.resolve([key], since=0.5)  # ...and asks for a tick (refresh-now)
        assert heads() == 2
        assert isinstance(asked[key], Resolution)
        assert asked[key].digest == new.digest != old.digest
        clock.now = 2.0
        others = await shared.resolve([key])  # a policy ticking on the grid meanwhile
        also_asked = await shared.resolve([key], since=0.9)  # another asked for with the first
        assert heads() == 2
        assert others[key] == also_asked[key] == asked[key]


async def test_a_follow_up_takes_the_last_answer_whatever_its_age_and_asks_only_new_keys(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    first = pusher.push("remember/app", "prod", seed="r1")
    pusher.push("remember/new", "prod", seed="r-new")
    key = ResolutionKey.of(parse(f"{hub_front.host}/remember/app:prod"))
    new = ResolutionKey.of(parse(f"{hub_front.host}/remember/new:prod"))
    missing = ResolutionKey.of(parse(f"{hub_front.host}/remember/missing:prod"))

    def heads() -> int:
        return len([r for r in hub_front.served if r.method == "HEAD" and r.status != 401])

    clock = Clock()
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        shared = SharedResolver(client, window=0, clock=clock)
        await shared.resolve([key, missing])  # an interval tick
        assert heads() == 2
        pusher.push("remember/app", "prod", seed="r2")  # the tag moves meanwhile
        clock.now = 600.0
        remembered = await shared.resolve([key, missing, new], remembered=True)
        assert heads() == 3  # only the key never asked went to the registry
        answer = remembered[key]
        assert isinstance(answer, Resolution)
        assert answer.digest == first.digest  # the answer of the interval tick, as it was
        assert isinstance(remembered[missing], ManifestNotFound)
        # An interval tick asks afresh and sees the moved tag.
        fresh = await shared.resolve([key])
        assert heads() == 4
        assert isinstance(fresh[key], Resolution)
        assert fresh[key].digest != first.digest
        # Past a day, a remembered answer is forgotten: the registry is asked again.
        clock.now = 600.0 + 86_401
        await shared.resolve([missing], remembered=True)
        assert heads() == 5


class CountingClient:
    """A registry that answers every request with a new digest and counts the requests."""

    def __init__(self) -> None:
        self.requests = 0

    async def resolve(
        self, reference: ImageReference, credentials: Credentials | None = None
    ) -> Resolution:
        self.requests += 1
        return Resolution(
            reference, f"sha256:{self.requests:064x}", "r.test", RateLimitReport(), RequestKind.HEAD
        )


ROUND = 1_000.0  # a round's grid instant, on the resolver's clock
APP = ResolutionKey.of(parse("r.test/round/app:prod"))


def anchored_resolver() -> tuple[SharedResolver, CountingClient, Clock]:
    client, clock = CountingClient(), Clock()
    return SharedResolver(client, window=10, clock=clock), client, clock  # type: ignore[arg-type]


async def test_a_slow_round_s_late_ticks_share_its_answers_and_the_next_round_asks_again() -> None:
    shared, client, clock = anchored_resolver()
    clock.now = ROUND + 1  # the round's first tick asks
    first = await shared.resolve([APP], round_at=ROUND)
    clock.now = ROUND + 25  # a late tick of the same round, long past the window from now
    late = await shared.resolve([APP], round_at=ROUND)
    assert client.requests == 1
    assert late[APP] == first[APP]
    clock.now = ROUND + 30  # the next round (a 30 s interval) asks afresh
    await shared.resolve([APP], round_at=ROUND + 30)
    assert client.requests == 2


async def test_a_tick_asked_for_in_a_round_still_takes_no_answer_from_before_it() -> None:
    shared, client, clock = anchored_resolver()
    clock.now = ROUND + 1
    await shared.resolve([APP], round_at=ROUND)
    clock.now = ROUND + 5
    await shared.resolve([APP], since=ROUND + 4, round_at=ROUND)  # since wins over the round
    assert client.requests == 2


async def test_an_answer_from_before_the_round_s_window_is_not_the_round_s() -> None:
    shared, client, clock = anchored_resolver()
    clock.now = ROUND - 11  # a prompt tick, more than a window before the grid instant
    await shared.resolve([APP])
    clock.now = ROUND
    await shared.resolve([APP], round_at=ROUND)
    assert client.requests == 2
    clock.now = ROUND + 20  # one within the window before the instant is the round's
    await shared.resolve([APP], round_at=ROUND + 5)
    assert client.requests == 2


async def test_a_tick_without_a_round_measures_the_window_from_now() -> None:
    shared, client, clock = anchored_resolver()
    clock.now = ROUND + 1
    await shared.resolve([APP], round_at=ROUND)
    clock.now = ROUND + 10.9
    await shared.resolve([APP])
    assert client.requests == 1
    clock.now = ROUND + 11.1
    await shared.resolve([APP])
    assert client.requests == 2


async def test_a_round_shares_no_answer_older_than_the_horizon_and_memory_stays_bounded() -> None:
    shared, client, clock = anchored_resolver()
    clock.now = ROUND + 1
    await shared.resolve([APP], round_at=ROUND)
    clock.now = ROUND + 1 + ROUND_HORIZON + 1  # a round still running, far behind
    await shared.resolve([APP], round_at=ROUND)
    assert client.requests == 2
    for index in range(20):
        await shared.resolve([ResolutionKey.of(parse(f"r.test/round/a{index}:prod"))])
    clock.now += ROUND_HORIZON + 1
    await shared.resolve([APP], round_at=clock.now)
    assert len(shared._recent) == 1  # one entry per reference asked within the horizon
