"""imagerefresh.reference against distribution's reference grammar.

The tables follow the rules of ``github.com/distribution/reference`` (regexp.go, normalize.go)
and the cases its own normalize_test.go / reference_test.go exercise.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagerefresh.reference import (
    ImageReference,
    InvalidReference,
    parse,
    parse_digest,
    registry_host,
    tracked_reference,
)


@pytest.fixture(autouse=True)
def _parsed_afresh() -> None:
    """Each test exercises the parser, not an answer remembered from an earlier test (the
    memo outlives a test, and a mutation run forks its mutants from a process that filled it)."""
    parse.cache_clear()
    tracked_reference.cache_clear()


HEX64 = "86e0e091d0da6bde2456dbb48306f3956bbeb2eae1b5b9a43045843f69fe4aaa"
DIGEST = f"sha256:{HEX64}"


@pytest.mark.parametrize(
    ("text", "domain", "path", "tag", "digest"),
    [
        ("nginx", "docker.io", "library/nginx", None, None),
        ("nginx:1.27", "docker.io", "library/nginx", "1.27", None),
        ("docker.io/nginx", "docker.io", "library/nginx", None, None),
        ("index.docker.io/nginx", "docker.io", "library/nginx", None, None),
        ("index.docker.io/docker/docker", "docker.io", "docker/docker", None, None),
        ("docker.io/library/foo/bar", "docker.io", "library/foo/bar", None, None),
        ("tracebloc/jobs-manager:prod", "docker.io", "tracebloc/jobs-manager", "prod", None),
        ("test_com/foo", "docker.io", "test_com/foo", None, None),
        ("test.com/foo", "test.com", "foo", None, None),
        ("test.com:8080/foo", "test.com:8080", "foo", None, None),
        ("test-com:8080/foo", "test-com:8080", "foo", None, None),
        ("xn--n3h.com:18080/foo", "xn--n3h.com:18080", "foo", None, None),
        ("localhost/foo", "localhost", "foo", None, None),
        ("localhost:5000/a/b:t", "localhost:5000", "a/b", "t", None),
        ("LOCALDOMAIN/debian", "LOCALDOMAIN", "debian", None, None),
        ("127.0.0.1:5000/library/debian", "127.0.0.1:5000", "library/debian", None, None),
        ("[fc00::1]:5000/docker/docker", "[fc00::1]:5000", "docker/docker", None, None),
        # A lone host:port is an official image with a tag, exactly as docker reads it.
        ("localhost:5000", "docker.io", "library/localhost", "5000", None),
        ("192.168.0.1:80", "docker.io", "library/192.168.0.1", "80", None),
        # A digest-looking name alone is the image library/sha256.
        (DIGEST, "docker.io", "library/sha256", HEX64, None),
        (f"busybox:latest@{DIGEST}", "docker.io", "library/busybox", "latest", DIGEST),
        (f"ghcr.io/a/b@{DIGEST}", "ghcr.io", "a/b", None, DIGEST),
        ("docker---rules/docker", "docker.io", "docker---rules/docker", None, None),
        ("dock__er/docker", "docker.io", "dock__er/docker", None, None),
        ("d/docker:_tag-1.2", "docker.io", "d/docker", "_tag-1.2", None),
        (f"docker.io/{HEX64}", "docker.io", f"library/{HEX64}", None, None),
        ("foo:UPPER_tag", "docker.io", "library/foo", "UPPER_tag", None),
    ],
)
def test_parse_normalises_like_distribution(
    text: str, domain: str, path: str, tag: str | None, digest: str | None
) -> None:
    ref = parse(text)
    assert (ref.domain, ref.path, ref.tag, ref.digest) == (domain, path, tag, digest)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        (HEX64, "image ID"),
        ("docker/Docker", "lowercase"),
        ("docker.io/docker/Docker", "lowercase"),
        ("Docker/Docker", "lowercase"),
        ("https://github.com/docker/docker", "URL scheme"),
        ("-docker", "expected"),
        ("-docker/docker", "expected"),
        ("docker-/docker", "expected"),
        ("docker///docker", "expected"),
        ("docker/", "expected"),
        ("____/____", "expected"),
        ("dock..er/docker", "expected"),
        ("dock_.er/docker", "expected"),
        ("dock-.er/docker", "expected"),
        ("[fc00::1]:5000", "expected"),
        ("fc00::1:5000/debian", "expected"),
        ("[fe80::1%eth0]:5000/debian", "expected"),
        ("foo:-tag", "expected"),
        ("foo:" + "t" * 129, "expected"),
        ("foo@sha256:abc", "expected"),
        (f"foo@sha256:{HEX64.upper()}", "lowercase hex"),
        (f"foo@sha256:{HEX64}00", "exactly 64"),
        (f"foo@md5:{HEX64}", "unsupported algorithm"),
        ("a/" + "b" * 254, "limit is 255"),
        ("my_host.example/foo", "not a valid host name"),
    ],
)
def test_parse_rejects_invalid_references_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidReference, match=reason):
        parse(text)


def test_invalid_reference_is_a_value_error() -> None:
    assert issubclass(InvalidReference, ValueError)


def test_repository_path_of_exactly_255_characters_is_allowed() -> None:
    path = "a/" + "b" * 253
    assert parse(f"example.com/{path}").path == path


def test_parse_never_invents_latest_but_tracking_does() -> None:
    ref = parse("nginx")
    assert ref.tag is None
    assert ref.tracked_tag == "latest"
    assert str(ref.tracked()) == "docker.io/library/nginx:latest"


@pytest.mark.parametrize(
    ("text", "full", "familiar"),
    [
        ("nginx:1.27", "docker.io/library/nginx:1.27", "nginx:1.27"),
        ("docker.io/library/nginx", "docker.io/library/nginx", "nginx"),
        ("library/foo/bar", "docker.io/library/foo/bar", "library/foo/bar"),
        (
            "tracebloc/pods-monitor:prod",
            "docker.io/tracebloc/pods-monitor:prod",
            "tracebloc/pods-monitor:prod",
        ),
        ("127.0.0.1:5000/x/y:t", "127.0.0.1:5000/x/y:t", "127.0.0.1:5000/x/y:t"),
        (
            f"busybox:latest@{DIGEST}",
            f"docker.io/library/busybox:latest@{DIGEST}",
            f"busybox:latest@{DIGEST}",
        ),
    ],
)
def test_str_is_fully_qualified_and_familiar_is_the_short_form(
    text: str, full: str, familiar: str
) -> None:
    ref = parse(text)
    assert str(ref) == full
    assert ref.familiar == familiar


def test_pinned_drops_the_tag_and_keeps_the_repository() -> None:
    pinned = parse("tracebloc/jobs-manager:prod").pinned(DIGEST)
    assert str(pinned) == f"docker.io/tracebloc/jobs-manager@{DIGEST}"
    assert pinned.repository == "docker.io/tracebloc/jobs-manager"


@pytest.mark.parametrize(
    "digest",
    [f"sha256:{HEX64}", "sha512:" + "a" * 128, "sha384:" + "0" * 96],
)
def test_parse_digest_accepts_registered_algorithms(digest: str) -> None:
    assert parse_digest(digest) == digest


@pytest.mark.parametrize(
    "digest", ["", "sha256", f"sha256{HEX64}", "sha256:xyz", f"SHA256:{HEX64}", f" {DIGEST}"]
)
def test_parse_digest_rejects_what_is_not_algorithm_colon_hex(digest: str) -> None:
    with pytest.raises(InvalidReference, match="invalid digest"):
        parse_digest(digest)


# --- properties -------------------------------------------------------------------------

_component = st.from_regex(r"[a-z0-9]{1,6}(?:(?:[._]|__|-{1,2})[a-z0-9]{1,6}){0,2}", fullmatch=True)
# A first element with a '.' reads as a registry host (its own table rows cover that), and
# docker's familiar form of docker.io/foo.bar/x is ambiguous for the same reason.
_first_component = _component.filter(lambda c: "." not in c)
_path = st.tuples(_first_component, st.lists(_component, max_size=3)).map(
    lambda parts: "/".join([parts[0], *parts[1]])
)
_domain = st.sampled_from(
    [
        "docker.io",
        "index.docker.io",
        "ghcr.io",
        "localhost",
        "localhost:5000",
        "127.0.0.1:5000",
        "registry.example.com:443",
        "[::1]:5000",
        "Upper.Example",
    ]
)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_digest = st.from_regex(r"[a-f0-9]{64}", fullmatch=True).map(lambda h: f"sha256:{h}")


@st.composite
def reference_texts(draw: st.DrawFn) -> str:
    text = draw(_path)
    if draw(st.booleans()):
        text = f"{draw(_domain)}/{text}"
    if draw(st.booleans()):
        text += f":{draw(_tag)}"
    if draw(st.booleans()):
        text += f"@{draw(_digest)}"
    return text


@given(reference_texts())
def test_str_round_trips_through_parse(text: str) -> None:
    ref = parse(text)
    assert parse(str(ref)) == ref


@given(reference_texts())
def test_familiar_form_normalises_to_the_same_reference(text: str) -> None:
    ref = parse(text)
    assert parse(ref.familiar) == ref


@given(reference_texts())
def test_normalisation_is_idempotent_and_keeps_tag_and_digest(text: str) -> None:
    ref = parse(text)
    again = parse(str(parse(str(ref))))
    assert again == ref
    assert isinstance(ref, ImageReference)
    assert (ref.tag is None) == (":" not in text.split("/")[-1].split("@")[0])
    assert (ref.digest is None) == ("@" not in text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid reference: it is empty; write an image like nginx:1.27"),
        (
            HEX64,
            f"invalid reference {HEX64!r}: a bare 64-character hex string is an image ID, "
            "not a repository name",
        ),
        # The name is quoted, so the user sees which part to lowercase.
        (
            "docker/Docker",
            "invalid reference 'docker/Docker': repository name 'docker/Docker' must be lowercase",
        ),
        (
            f"team/app@{HEX64[:8]}:x",
            f"invalid reference 'team/app@{HEX64[:8]}:x': expected "
            "[registry[:port]/]path[:tag][@algorithm:hex] with lowercase path components "
            "separated by '/'",
        ),
        # Uppercase in what reads as a host that is not one: distribution says "uppercase" when
        # lowering the text would make it valid (ErrNameContainsUppercase)…
        ("Foo_Bar/app", "invalid reference 'Foo_Bar/app': repository name must be lowercase"),
        # …and not when lowering would not help.
        (
            "foo:-Tag",
            "invalid reference 'foo:-Tag': expected [registry[:port]/]path[:tag][@algorithm:hex] "
            "with lowercase path components separated by '/'",
        ),
        (
            "my_host.example/team/app",
            "invalid reference 'my_host.example/team/app': 'my_host.example' looks like a "
            "registry host but is not a valid host name",
        ),
        # An uppercase digest algorithm is a digest problem, not a repository name problem.
        (
            f"foo@SHA256:{HEX64}",
            f"invalid digest 'SHA256:{HEX64}': unsupported algorithm 'SHA256' "
            "(supported: sha256, sha384, sha512)",
        ),
        (
            f"foo@sha256:{HEX64.upper()}",
            f"invalid digest 'sha256:{HEX64.upper()}': sha256 needs exactly 64 lowercase hex "
            "characters",
        ),
    ],
    ids=[
        "empty",
        "image-id",
        "uppercase-path",
        "bad-shape",
        "uppercase-host-like",
        "uppercase-tag-not-the-problem",
        "bad-host",
        "uppercase-algorithm",
        "uppercase-hex",
    ],
)
def test_each_rejection_says_exactly_what_is_wrong_and_what_to_write(
    text: str, message: str
) -> None:
    with pytest.raises(InvalidReference) as error:
        parse(text)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("domain", "host"),
    [
        ("docker.io", "registry-1.docker.io"),
        ("ghcr.io", "ghcr.io"),
        ("127.0.0.1:5000", "127.0.0.1:5000"),
        ("registry-1.docker.io", "registry-1.docker.io"),
    ],
)
def test_only_docker_io_is_served_by_another_host(domain: str, host: str) -> None:
    assert registry_host(domain) == host
