"""The registry's ``WWW-Authenticate`` challenge and the token cache, without a registry.

The token flow itself runs against the real registry in test_registry_client.py; these tests
pin the two rules it rests on: which challenges are understood, and that a token is never
sent in the seconds before it lapses (the registry would answer 401 and cost a round trip).
"""

from __future__ import annotations

import pytest

from imagerefresh.registry.auth import Challenge, TokenCache, parse_challenge

KEY = ("https://auth.example/token", "registry.example", "repository:team/app:pull", "anon")


def test_a_docker_hub_bearer_challenge_gives_its_realm_and_service() -> None:
    header = (
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:tracebloc/jobs-manager:pull"'
    )
    assert parse_challenge(header) == Challenge(
        scheme="bearer", realm="https://auth.docker.io/token", service="registry.docker.io"
    )


def test_scheme_and_parameter_names_are_case_insensitive_and_values_may_be_bare() -> None:
    header = "  BEARER Realm=https://auth.example/token, Service=registry.example "
    assert parse_challenge(header) == Challenge(
        scheme="bearer", realm="https://auth.example/token", service="registry.example"
    )


def test_a_basic_challenge_is_understood() -> None:
    assert parse_challenge('Basic realm="Registry Realm"') == Challenge(
        scheme="basic", realm="Registry Realm", service=None
    )


@pytest.mark.parametrize("header", ["", "Negotiate", 'Digest realm="r"', "Bearerrealm=x"])
def test_an_unknown_challenge_is_not_guessed(header: str) -> None:
    assert parse_challenge(header) is None


def test_a_token_is_served_until_five_seconds_before_it_expires() -> None:
    cache = TokenCache()
    cache.put(KEY, "token", lifetime=300, now=1000)
    assert cache.get(KEY, now=1294.9) == "token"
    assert cache.get(KEY, now=1295) is None
    assert len(cache) == 0  # a lapsed token is dropped, not kept


def test_a_short_lived_token_lapses_a_tenth_of_its_lifetime_early() -> None:
    cache = TokenCache()
    cache.put(KEY, "token", lifetime=10, now=0)
    assert cache.get(KEY, now=8.9) == "token"
    assert cache.get(KEY, now=9) is None


def test_a_token_is_served_only_for_its_own_scope_and_account() -> None:
    cache = TokenCache()
    cache.put(KEY, "token", lifetime=300, now=0)
    other_account = (*KEY[:3], "keyed-sha256-of-other-credentials")
    other_scope = (KEY[0], KEY[1], "repository:team/other:pull", KEY[3])
    assert cache.get(other_account, now=1) is None
    assert cache.get(other_scope, now=1) is None
    assert cache.get(KEY, now=1) == "token"


def test_a_discarded_token_is_not_served_again() -> None:
    cache = TokenCache()
    cache.put(KEY, "token", lifetime=300, now=0)
    cache.discard(KEY, "token")
    assert cache.get(KEY, now=1) is None
    assert len(cache) == 0


def test_discarding_a_token_never_cached_is_harmless() -> None:
    cache = TokenCache()
    cache.discard(KEY, "token")
    cache.put(KEY, "token", lifetime=300, now=0)
    assert cache.get(KEY, now=1) == "token"


def test_discarding_a_token_keeps_the_newer_one_cached_since_it_was_sent() -> None:
    # A request that drew a 401 with an old token must not throw away the fresh one a
    # concurrent request fetched meanwhile.
    cache = TokenCache()
    cache.put(KEY, "fresh", lifetime=300, now=0)
    cache.discard(KEY, "old")
    assert cache.get(KEY, now=1) == "fresh"
