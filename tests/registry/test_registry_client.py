"""The registry client against the real distribution registry and a Docker-Hub-like front.

Assertions read what the registry computed at push time and what the front actually served,
never values the client believes.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
import respx

from imagerefresh.credentials import Credentials
from imagerefresh.ratelimit import RequestKind
from imagerefresh.reference import parse
from imagerefresh.registry import (
    ManifestNotFound,
    RegistryAuthError,
    RegistryClient,
    RegistryProtocolError,
    RegistryServerError,
    RegistryThrottled,
    RegistryTimeout,
    RegistryUnreachable,
)

from support.hub_front import HubFront
from support.registry_env import FakeClock, ImagePusher, client_for, free_port

pytestmark = pytest.mark.registry


def ref_at(front_or_host: HubFront | str, path: str, tag: str = "prod") -> str:
    host = front_or_host.host if isinstance(front_or_host, HubFront) else front_or_host
    return f"{host}/{path}:{tag}"


@pytest.mark.parametrize("kind", ["oci-manifest", "oci-index", "docker-list"])
async def test_head_returns_the_digest_the_registry_computed_at_push(
    registry: str, pusher: ImagePusher, kind: str
) -> None:
    pushed = pusher.push(f"digest/{kind}", "prod", seed=kind, kind=kind)
    async with client_for(registry) as client:
        resolution = await client.resolve(parse(pushed.reference))
    assert resolution.digest == pushed.digest
    assert resolution.method is RequestKind.HEAD
    assert resolution.registry == registry
    assert str(resolution.reference) == pushed.reference


async def test_a_new_push_to_the_tag_resolves_to_the_new_digest(
    registry: str, pusher: ImagePusher
) -> None:
    first = pusher.push("moving/tag", "prod", seed="one", kind="oci-index")
    second = pusher.push("moving/tag", "prod", seed="two", kind="oci-index")
    assert first.digest != second.digest
    async with client_for(registry) as client:
        assert (await client.resolve(parse(second.reference))).digest == second.digest


async def test_steady_state_costs_one_head_and_no_manifest_get(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    pushed = pusher.push("hub/steady", "prod", seed="s", kind="oci-index")
    async with client_for(hub_front.host) as client:
        for _ in range(5):
            resolution = await client.resolve(parse(ref_at(hub_front, "hub/steady")))
            assert resolution.digest == pushed.digest
    counts = hub_front.counts()
    assert counts[("manifest", "GET")] == 0
    assert counts[("token", "GET")] == 1
    # The first HEAD meets the challenge; every later one carries the cached token.
    assert counts[("manifest", "HEAD")] == 6
    assert [r.status for r in hub_front.served if r.kind == "manifest"] == [401] + [200] * 5


async def test_requests_meeting_the_challenge_together_share_one_token(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    """The second request's 401 is read after the first one's token is cached and used: it
    drew that 401 for want of a token, not because the token is bad, so it takes that token."""
    hub_front.late_second_challenge = True
    pushed = pusher.push("hub/together", "prod", seed="t")
    async with client_for(hub_front.host) as client:
        ref = parse(ref_at(hub_front, "hub/together"))
        both = await asyncio.gather(client.resolve(ref), client.resolve(ref))
    assert [r.digest for r in both] == [pushed.digest] * 2
    assert hub_front.counts()[("token", "GET")] == 1
    statuses = [r.status for r in hub_front.served if r.kind == "manifest"]
    assert sorted(statuses) == [200, 200, 401, 401]


async def test_one_token_per_scope_per_lifetime(hub_front: HubFront, pusher: ImagePusher) -> None:
    hub_front.token_lifetime = 300
    pusher.push("hub/a", "prod", seed="a")
    pusher.push("hub/b", "prod", seed="b")
    clock = FakeClock()
    async with client_for(hub_front.host, clock=clock) as client:
        for _ in range(3):
            await client.resolve(parse(ref_at(hub_front, "hub/a")))
            await client.resolve(parse(ref_at(hub_front, "hub/b")))
        assert hub_front.counts()[("token", "GET")] == 2  # one per repository scope
        clock.now += 301  # past the lifetime: one fresh token, fetched before the HEAD
        await client.resolve(parse(ref_at(hub_front, "hub/a")))
        await client.resolve(parse(ref_at(hub_front, "hub/b")))  # renewed along with hub/a
    assert hub_front.counts()[("token", "GET")] == 3
    unauthorized = [r for r in hub_front.served if r.status == 401]
    assert len(unauthorized) == 1  # the challenge is remembered: no 401 per new scope


async def test_scopes_that_lapse_together_are_renewed_in_one_token_request(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    paths = ["hub/one", "hub/two", "hub/three"]
    pushed = {path: pusher.push(path, "prod", seed=path) for path in paths}
    clock = FakeClock()
    async with client_for(hub_front.host, clock=clock) as client:
        for path in paths:
            await client.resolve(parse(ref_at(hub_front, path)))
        clock.now += 301  # every token lapsed, as between two ticks an interval apart
        mark = len(hub_front.served)
        found = await asyncio.gather(
            *(client.resolve(parse(ref_at(hub_front, path))) for path in paths)
        )
    assert [r.digest for r in found] == [pushed[path].digest for path in paths]
    tick = hub_front.served[mark:]
    tokens = [r for r in tick if r.kind == "token"]
    assert len(tokens) == 1
    assert set(tokens[0].scopes) == {f"repository:{path}:pull" for path in paths}
    assert [(r.method, r.status) for r in tick if r.kind == "manifest"] == [("HEAD", 200)] * 3


async def test_a_token_service_refusing_several_scopes_is_asked_for_one(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.single_scope_tokens = True
    paths = ["strict/one", "strict/two"]
    pushed = {path: pusher.push(path, "prod", seed=path) for path in paths}
    clock = FakeClock()
    async with client_for(hub_front.host, clock=clock) as client:
        for path in paths:
            await client.resolve(parse(ref_at(hub_front, path)))
        clock.now += 301
        mark = len(hub_front.served)
        for path in paths:
            resolution = await client.resolve(parse(ref_at(hub_front, path)))
            assert resolution.digest == pushed[path].digest
    tokens = [(len(r.scopes), r.status) for r in hub_front.served[mark:] if r.kind == "token"]
    # hub/one's renewal names both scopes and is refused, then asks for its own; hub/two's
    # token was not renewed with it, so it asks for its own.
    assert tokens == [(2, 403), (1, 200), (1, 200)]


async def test_budget_read_back_equals_what_the_front_reported(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.limit, hub_front.remaining, hub_front.window_seconds = 100, 76, 21600
    pusher.push("hub/budget", "prod", seed="b")
    async with client_for(hub_front.host) as client:
        resolution = await client.resolve(parse(ref_at(hub_front, "hub/budget")))
        budget = client.ledger.budget(hub_front.host, "anonymous")
    assert resolution.ratelimit.limit == 100
    assert resolution.ratelimit.remaining == hub_front.remaining_for("anonymous") == 76
    assert resolution.ratelimit.window_seconds == 21600
    assert resolution.ratelimit.source == "127.0.0.1"
    assert budget.report == resolution.ratelimit
    assert budget.requests[RequestKind.HEAD] == 2
    assert budget.requests[RequestKind.TOKEN] == 1


async def test_missing_digest_header_falls_back_to_get_and_counts_a_pull(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.omit_digest = True
    pushed = pusher.push("hub/nodigest", "prod", seed="n", kind="docker-list")
    async with client_for(hub_front.host) as client:
        resolution = await client.resolve(parse(ref_at(hub_front, "hub/nodigest")))
        budget = client.ledger.budget(hub_front.host, "anonymous")
    assert resolution.method is RequestKind.GET
    assert resolution.digest == pushed.digest
    assert hub_front.counts()[("manifest", "GET")] == 1
    assert hub_front.remaining_for("anonymous") == 99
    assert budget.requests[RequestKind.GET] == 1
    assert resolution.ratelimit.remaining == 99


async def test_429_pauses_the_registry_and_says_until_when(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.remaining, hub_front.retry_after = 0, 120
    pusher.push("hub/limited", "prod", seed="l")
    clock = FakeClock()
    async with client_for(hub_front.host, clock=clock) as client:
        with pytest.raises(RegistryThrottled, match="paused until 2027-01-15T08:02:00Z") as caught:
            await client.resolve(parse(ref_at(hub_front, "hub/limited")))
        assert caught.value.retry_at == clock.now + 120
        served = len(hub_front.served)
        with pytest.raises(RegistryThrottled, match="nothing is asked"):
            await client.resolve(parse(ref_at(hub_front, "hub/limited")))
        assert len(hub_front.served) == served  # paused: no request left the client
        affordable = client.ledger.can_afford(hub_front.host, "anonymous", 1, 0, clock.now)
        assert not affordable.allowed
        assert "429" in affordable.reason
        clock.now += 121
        hub_front.remaining = 50
        hub_front._remaining_by_identity.clear()
        await client.resolve(parse(ref_at(hub_front, "hub/limited")))


async def test_credentials_go_to_the_token_service_and_key_the_budget_by_account(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.users = {"alice": "s3cret"}
    pusher.push("hub/private", "prod", seed="p")
    credentials = Credentials("alice", "s3cret", "team/regcred")
    async with client_for(hub_front.host) as client:
        await client.resolve(parse(ref_at(hub_front, "hub/private")), credentials)
        assert client.ledger.budget(hub_front.host, credentials.account).report is not None
        # The ledger knows the account by its key alone: never by the username.
        assert {account for _, account in client.ledger.budgets} == {credentials.account}
        assert "alice" not in credentials.account
    assert {r.identity for r in hub_front.served if r.kind == "token"} == {"alice"}


async def test_a_wrong_password_never_reuses_the_token_issued_to_the_right_one(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    """Two pull secrets with one username: the wrong password is refused by the registry
    itself, however recently the right one was granted a token for the same scope."""
    hub_front.users = {"alice": "right"}
    pushed = pusher.push("hub/tenant", "prod", seed="t")
    right = Credentials("alice", "right", "team-a/regcred")
    wrong = Credentials("alice", "wrong", "team-b/regcred")
    reference = parse(ref_at(hub_front, "hub/tenant"))
    async with client_for(hub_front.host) as client:
        assert (await client.resolve(reference, right)).digest == pushed.digest
        mark = len(hub_front.served)
        with pytest.raises(RegistryAuthError, match="pull secret team-b/regcred") as caught:
            await client.resolve(reference, wrong)
        assert (await client.resolve(reference, right)).digest == pushed.digest
    # The wrong credentials met the challenge and the token service's refusal; no manifest
    # was ever served to them.
    wrong_requests, right_again = hub_front.served[mark:-1], hub_front.served[-1]
    assert [(r.kind, r.status, r.identity) for r in wrong_requests] == [
        ("manifest", 401, "?"),
        ("token", 401, "?"),
    ]
    assert (right_again.kind, right_again.status, right_again.identity) == (
        "manifest",
        200,
        "alice",
    )
    for secret in ("alice", "wrong", "right"):
        assert secret not in str(caught.value)


async def test_a_registry_off_the_insecure_list_is_spoken_to_over_https(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    pusher.push("hub/tls", "prod", seed="t")
    async with RegistryClient(retries=0) as client:
        with pytest.raises(RegistryUnreachable, match="insecure"):
            await client.resolve(parse(ref_at(hub_front, "hub/tls")))
    assert hub_front.served == []


# --- failures: each a clear error, nothing cached as a success -----------------------------


async def test_registry_down_is_unreachable_after_retries() -> None:
    host = f"127.0.0.1:{free_port()}"
    async with client_for(host, retries=2) as client:
        with pytest.raises(RegistryUnreachable, match=f"cannot reach {host}") as caught:
            await client.resolve(parse(f"{host}/x/y:prod"))
        assert caught.value.reference == f"{host}/x/y:prod"
        budget = client.ledger.budget(host, "anonymous")
        assert budget.requests[RequestKind.HEAD] == 3
        assert budget.report is None


async def test_slow_registry_times_out(hub_front: HubFront, pusher: ImagePusher) -> None:
    pusher.push("hub/slow", "prod", seed="s")
    async with client_for(hub_front.host, retries=0) as client:
        await client.resolve(parse(ref_at(hub_front, "hub/slow")))  # token while fast
        hub_front.delay_seconds = 1.0
    async with client_for(hub_front.host, retries=0, timeout=0.2) as client:
        with pytest.raises(RegistryTimeout, match="did not answer"):
            await client.resolve(parse(ref_at(hub_front, "hub/slow")))


async def test_server_errors_are_retried_with_backoff_then_reported(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    pusher.push("hub/5xx", "prod", seed="5")
    hub_front.fail_status = 503
    async with client_for(hub_front.host, retries=2) as client:
        with pytest.raises(RegistryServerError, match="503"):
            await client.resolve(parse(ref_at(hub_front, "hub/5xx")))
    assert [r.status for r in hub_front.served if r.kind == "manifest"] == [401, 503, 503, 503]


async def test_unknown_tag_is_not_found(registry: str, pusher: ImagePusher) -> None:
    pusher.push("exists/repo", "prod", seed="e")
    async with client_for(registry) as client:
        with pytest.raises(ManifestNotFound, match="404"):
            await client.resolve(parse(f"{registry}/exists/repo:nope"))


async def test_bad_credentials_are_refused_with_advice(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.users = {"alice": "s3cret"}
    pusher.push("hub/auth", "prod", seed="a")
    async with client_for(hub_front.host) as client:
        with pytest.raises(
            RegistryAuthError, match="pull secret team/regcred; fix that secret"
        ) as caught:
            await client.resolve(
                parse(ref_at(hub_front, "hub/auth")), Credentials("alice", "wrong", "team/regcred")
            )
        assert "wrong" not in str(caught.value)
        assert "alice" not in str(caught.value)
        assert len(client.tokens) == 0


async def test_malformed_digest_header_is_a_protocol_error(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.malformed_digest = True
    pusher.push("hub/malformed", "prod", seed="m")
    async with client_for(hub_front.host) as client:
        with pytest.raises(RegistryProtocolError, match="malformed digest"):
            await client.resolve(parse(ref_at(hub_front, "hub/malformed")))


async def test_non_json_token_answer_is_a_protocol_error(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    hub_front.token_not_json = True
    pusher.push("hub/token", "prod", seed="t")
    async with client_for(hub_front.host) as client:
        with pytest.raises(RegistryProtocolError, match="did not answer JSON"):
            await client.resolve(parse(ref_at(hub_front, "hub/token")))
        assert len(client.tokens) == 0


# --- narrow protocol details, pinned with a mock ------------------------------------------

DIGEST = "sha256:" + "ab" * 32


@respx.mock
async def test_basic_challenge_sends_credentials_on_the_request_itself() -> None:
    route = respx.head("https://basic.example/v2/team/app/manifests/v1")
    route.side_effect = [
        httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'}),
        httpx.Response(200, headers={"Docker-Content-Digest": DIGEST}),
    ]
    async with RegistryClient() as client:
        resolution = await client.resolve(
            parse("basic.example/team/app:v1"), Credentials("bob", "pw")
        )
    assert resolution.digest == DIGEST
    assert route.calls[1].request.headers["Authorization"] == "Basic Ym9iOnB3"


@respx.mock
async def test_docker_hub_references_go_to_registry_1_with_all_manifest_types() -> None:
    route = respx.head("https://registry-1.docker.io/v2/library/nginx/manifests/latest").mock(
        return_value=httpx.Response(200, headers={"Docker-Content-Digest": DIGEST})
    )
    async with RegistryClient() as client:
        resolution = await client.resolve(parse("nginx"))
    assert resolution.registry == "registry-1.docker.io"
    accept = route.calls[0].request.headers["Accept"]
    for media_type in (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ):
        assert media_type in accept


@respx.mock
async def test_plain_http_token_realm_is_refused_for_a_tls_registry() -> None:
    respx.head("https://tls.example/v2/a/manifests/v1").mock(
        return_value=httpx.Response(
            401, headers={"WWW-Authenticate": 'Bearer realm="http://tls.example/token"'}
        )
    )
    async with RegistryClient() as client:
        with pytest.raises(RegistryProtocolError, match="plain-HTTP token service"):
            await client.resolve(parse("tls.example/a:v1"), Credentials("bob", "pw"))


@respx.mock
async def test_a_token_realm_that_is_no_usable_address_is_a_protocol_error() -> None:
    respx.head("https://odd.example/v2/a/manifests/v1").mock(
        return_value=httpx.Response(
            401, headers={"WWW-Authenticate": 'Bearer realm="https://odd.example:port/token"'}
        )
    )
    async with RegistryClient() as client:
        with pytest.raises(RegistryProtocolError, match="an address that cannot be used"):
            await client.resolve(parse("odd.example/a:v1"))
