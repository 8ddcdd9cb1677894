"""imagerefresh.credentials: pull secrets matched to registries the way the kubelet does."""

from __future__ import annotations

import base64
import json

import pytest

from imagerefresh.credentials import (
    Credentials,
    InvalidDockerConfig,
    credentials_for,
    parse_docker_config,
    registry_key,
)


def config(**auths: dict[str, str]) -> str:
    return json.dumps({"auths": auths})


def auth(user: str, password: str) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize(
    "key", ["docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/"]
)
@pytest.mark.parametrize("domain", ["docker.io", "registry-1.docker.io", "index.docker.io"])
def test_docker_hub_aliases_all_match_each_other(key: str, domain: str) -> None:
    parsed = parse_docker_config(json.dumps({"auths": {key: auth("alice", "pw")}}))
    assert credentials_for(domain, [parsed]) == Credentials("alice", "pw")


def test_hosts_with_ports_and_schemes_match_by_host() -> None:
    parsed = parse_docker_config(
        config(**{"http://127.0.0.1:5000": auth("a", "1"), "ghcr.io": auth("b", "2")})
    )
    assert credentials_for("127.0.0.1:5000", [parsed]) == Credentials("a", "1")
    assert credentials_for("ghcr.io", [parsed]) == Credentials("b", "2")
    assert credentials_for("quay.io", [parsed]) is None


def test_username_password_fields_and_password_with_colons() -> None:
    parsed = parse_docker_config(
        config(**{"a.example": {"username": "u", "password": "p"}, "b.example": auth("v", "x:y")})
    )
    assert parsed["a.example"] == Credentials("u", "p")
    assert parsed["b.example"] == Credentials("v", "x:y")


def test_first_secret_in_order_wins() -> None:
    first = parse_docker_config(config(**{"docker.io": auth("first", "1")}))
    second = parse_docker_config(config(**{"docker.io": auth("second", "2")}))
    assert credentials_for("docker.io", [first, second]) == Credentials("first", "1")


def test_legacy_dockercfg_without_auths_is_read() -> None:
    parsed = parse_docker_config(json.dumps({"quay.io": auth("q", "w")}))
    assert parsed["quay.io"] == Credentials("q", "w")


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        json.dumps({"auths": {"x.io": {"auth": "%%%"}}}),
        json.dumps({"auths": {"x.io": {"auth": base64.b64encode(b"nocolon").decode()}}}),
    ],
)
def test_unreadable_pull_secrets_are_errors_that_say_recreate(raw: str) -> None:
    with pytest.raises(InvalidDockerConfig, match="recreate"):
        parse_docker_config(raw)


def test_neither_username_nor_password_appears_in_repr_str_or_identity() -> None:
    creds = Credentials("alice", "hunter2", "team/regcred")
    for shown in (repr(creds), str(creds), creds.identity, creds.account):
        assert "hunter2" not in shown
        assert "alice" not in shown
    assert creds.identity == "team/regcred"


def test_the_account_is_the_whole_credential_never_the_username_alone() -> None:
    right = Credentials("alice", "right", "team-a/regcred")
    assert Credentials("alice", "wrong", "team-a/regcred").account != right.account
    assert Credentials("alic", "eright").account != Credentials("alice", "right").account
    # The same credential in another secret is the same account (the registry's budget).
    assert Credentials("alice", "right", "team-b/other").account == right.account


def test_each_credential_carries_the_pull_secret_it_came_from() -> None:
    parsed = parse_docker_config(
        config(**{"docker.io": auth("alice", "pw"), "ghcr.io": auth("bob", "pw")}),
        source="team/regcred",
    )
    assert {creds.identity for creds in parsed.values()} == {"team/regcred"}


@pytest.mark.parametrize(
    ("server", "key"),
    [
        ("https://index.docker.io/v1/", "docker.io"),
        ("registry-1.docker.io", "docker.io"),
        ("Registry.Hub.Docker.com", "docker.io"),
        ("http://127.0.0.1:5000/v2/", "127.0.0.1:5000"),
        ("GHCR.io", "ghcr.io"),
    ],
)
def test_a_pull_secret_is_filed_under_the_host_the_kubelet_matches(server: str, key: str) -> None:
    assert registry_key(server) == key
    assert list(parse_docker_config(config(**{server: auth("alice", "pw")}))) == [key]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        # username without a password, or an empty username: the auth field is what counts.
        ({"username": "u", **auth("a", "b")}, Credentials("a", "b")),
        ({"username": "", "password": "p", **auth("a", "b")}, Credentials("a", "b")),
        ({"username": "u", "password": "p", **auth("a", "b")}, Credentials("u", "p")),
        # Nothing the operator could send: skipped, not an error.
        ({"auth": ""}, None),
        ({"auth": 12345}, None),
        ({"identitytoken": "opaque"}, None),
    ],
    ids=["username-only", "empty-username", "both", "empty-auth", "auth-not-text", "token-only"],
)
def test_which_fields_of_an_entry_are_used(entry: dict[str, object], expected: object) -> None:
    parsed = parse_docker_config(json.dumps({"auths": {"x.io": entry}}))
    assert parsed.get("x.io") == expected


def test_a_username_password_entry_carries_its_pull_secret_too() -> None:
    parsed = parse_docker_config(
        config(**{"x.io": {"username": "u", "password": "p"}}), source="team/regcred"
    )
    assert parsed["x.io"].identity == "team/regcred"


def test_an_entry_that_is_not_an_object_is_skipped_and_the_rest_still_read() -> None:
    raw = json.dumps({"auths": {"a.io": "junk", "b.io": auth("bob", "pw")}})
    assert parse_docker_config(raw) == {"b.io": Credentials("bob", "pw")}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "the pull secret is not valid JSON; recreate it"),
        ("[]", "the pull secret is not a JSON object; recreate it"),
        (json.dumps({"auths": []}), "the pull secret's 'auths' is not an object; recreate it"),
        (
            json.dumps({"auths": {"x.io": {"auth": "%%%"}}}),
            "the 'auth' of 'x.io' is not base64 of user:password; recreate the secret",
        ),
        # Go's base64 (the kubelet's) rejects stray characters; so do we, never skipping them.
        (
            json.dumps({"auths": {"x.io": {"auth": auth("a", "b")["auth"] + "!"}}}),
            "the 'auth' of 'x.io' is not base64 of user:password; recreate the secret",
        ),
        (
            json.dumps({"auths": {"x.io": {"auth": base64.b64encode(b"nocolon").decode()}}}),
            "the 'auth' of 'x.io' does not decode to user:password; recreate the secret",
        ),
    ],
    ids=["not-json", "not-object", "auths-not-object", "not-base64", "stray-char", "no-colon"],
)
def test_an_unreadable_pull_secret_says_what_is_wrong_and_to_recreate_it(
    raw: str, message: str
) -> None:
    with pytest.raises(InvalidDockerConfig) as error:
        parse_docker_config(raw)
    assert str(error.value) == message
