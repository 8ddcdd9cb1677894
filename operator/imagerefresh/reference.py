"""Image references, parsed and normalised exactly as the container ecosystem does.

The grammar is distribution's (``github.com/distribution/reference``), which docker, containerd
and the kubelet all share; deviating from it would make the operator disagree with the node about
which repository an image names, and the repository check (never swap one image for another)
rests on that agreement. Normalisation follows ``ParseNormalizedNamed``:

* a name without ``/`` is an official Docker Hub image: ``nginx`` → ``docker.io/library/nginx``;
* the first element is a registry domain only if it contains ``.`` or ``:``, is ``localhost``, or
  is not lowercase; ``index.docker.io`` is an alias of ``docker.io``;
* on ``docker.io`` a one-element path gains ``library/``.

Parsing never invents a tag: a reference without one has ``tag=None``; whoever *tracks* it reads
:attr:`ImageReference.tracked_tag`, which is ``latest`` then, as ``docker pull`` would.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_DOMAIN",
    "DOCKER_HUB_REGISTRY",
    "ImageReference",
    "InvalidReference",
    "parse",
    "parse_digest",
    "registry_host",
    "tracked_reference",
]

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
DEFAULT_TAG = "latest"
# docker.io is a name; the registry API behind it is served here.
DOCKER_HUB_REGISTRY = "registry-1.docker.io"
REPOSITORY_PATH_MAX = 255

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_AND_PORT = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_ALGORITHM = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*"
_ENCODED = r"[0-9a-fA-F]{32,}"
_DIGEST = rf"{_ALGORITHM}[:]{_ENCODED}"

# ASCII-only \w, as Go's RE2 means it.
_REFERENCE_RE = re.compile(
    rf"(?P<name>(?:{_DOMAIN_AND_PORT}/)?{_REMOTE_NAME})"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
_NAME_RE = re.compile(rf"(?:(?P<domain>{_DOMAIN_AND_PORT})/)?(?P<path>{_REMOTE_NAME})", re.ASCII)
_IDENTIFIER_RE = re.compile(r"[a-f0-9]{64}")

# The algorithms go-digest registers, with the length of their lowercase hex encoding.
_DIGEST_HEX_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}
_DIGEST_SHAPE_RE = re.compile(rf"(?P<algorithm>{_ALGORITHM})[:](?P<encoded>{_ENCODED})", re.ASCII)


class InvalidReference(ValueError):
    """An image reference (or digest) that the reference grammar rejects; the message says why."""


@dataclass(frozen=True, slots=True)
class ImageReference:
    """A fully normalised image reference.

    ``domain`` and ``path`` name the repository (``docker.io`` + ``library/nginx``); ``tag`` and
    ``digest`` are ``None`` when the text carried none.
    """

    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def repository(self) -> str:
        """The fully qualified repository name, ``docker.io/library/nginx``."""
        return f"{self.domain}/{self.path}"

    @property
    def familiar_name(self) -> str:
        """The repository as docker prints it: ``nginx``, ``tracebloc/jobs-manager``."""
        if self.domain != DEFAULT_DOMAIN:
            return self.repository
        if self.path.startswith(OFFICIAL_REPO_PREFIX):
            rest = self.path.removeprefix(OFFICIAL_REPO_PREFIX)
            if "/" not in rest:
                return rest
        return self.path

    @property
    def familiar(self) -> str:
        """The short form docker prints, e.g. ``nginx:1.27``."""
        return self.familiar_name + self._suffix()

    @property
    def tracked_tag(self) -> str:
        """The tag a puller resolves: the explicit one, else ``latest``."""
        return self.tag or DEFAULT_TAG

    def pinned(self, digest: str) -> ImageReference:
        """This repository at ``digest``, without a tag: the form written into workloads."""
        return ImageReference(self.domain, self.path, None, parse_digest(digest))

    def tracked(self) -> ImageReference:
        """This repository at its tracked tag, without a digest."""
        return ImageReference(self.domain, self.path, self.tracked_tag)

    def _suffix(self) -> str:
        tag = f":{self.tag}" if self.tag is not None else ""
        digest = f"@{self.digest}" if self.digest is not None else ""
        return tag + digest

    def __str__(self) -> str:
        return self.repository + self._suffix()


def registry_host(domain: str) -> str:
    """The host whose registry API serves a reference's domain (docker.io → registry-1)."""
    return DOCKER_HUB_REGISTRY if domain == DEFAULT_DOMAIN else domain


# Parsing is pure and a tick asks about the same few references again and again (every
# container's live, pending and tracked image, each several times); the answers are immutable.
_PARSED_CACHE = 4096


@functools.lru_cache(maxsize=_PARSED_CACHE)
def parse(text: str) -> ImageReference:
    """Parse and normalise ``text`` as ``docker pull`` would; raise :class:`InvalidReference`."""
    if not text:
        raise InvalidReference("invalid reference: it is empty; write an image like nginx:1.27")
    if _IDENTIFIER_RE.fullmatch(text):
        raise InvalidReference(
            f"invalid reference {text!r}: a bare 64-character hex string is an image ID, "
            "not a repository name"
        )
    domain, remainder = _split_domain(text)
    repository_path = remainder.partition(":")[0].partition("@")[0]
    if repository_path.lower() != repository_path:
        raise InvalidReference(
            f"invalid reference {text!r}: repository name {repository_path!r} must be lowercase"
        )
    return _parse_canonical(text, f"{domain}/{remainder}")


@functools.lru_cache(maxsize=_PARSED_CACHE)
def tracked_reference(text: str) -> ImageReference:
    """``parse(text).tracked()``: the repository at its tracked tag (``latest`` when none)."""
    return parse(text).tracked()


def parse_digest(text: str) -> str:
    """Validate a content digest (``sha256:<64 lowercase hex>``) and return it unchanged."""
    shape = _DIGEST_SHAPE_RE.fullmatch(text)
    if shape is None:
        raise InvalidReference(f"invalid digest {text!r}: expected algorithm:hex, e.g. sha256:…")
    algorithm, encoded = shape["algorithm"], shape["encoded"]
    expected_length = _DIGEST_HEX_LENGTH.get(algorithm)
    if expected_length is None:
        raise InvalidReference(
            f"invalid digest {text!r}: unsupported algorithm {algorithm!r} "
            f"(supported: {', '.join(_DIGEST_HEX_LENGTH)})"
        )
    if len(encoded) != expected_length or encoded.lower() != encoded:
        raise InvalidReference(
            f"invalid digest {text!r}: {algorithm} needs exactly {expected_length} "
            "lowercase hex characters"
        )
    return text


def _split_domain(name: str) -> tuple[str, str]:
    """Split a familiar name into (domain, remainder) the way ``splitDockerDomain`` does."""
    first, slash, rest = name.partition("/")
    if not slash:
        return DEFAULT_DOMAIN, OFFICIAL_REPO_PREFIX + name
    if first == LEGACY_DEFAULT_DOMAIN:
        domain, remainder = DEFAULT_DOMAIN, rest
    elif first == "localhost" or "." in first or ":" in first or first.lower() != first:
        domain, remainder = first, rest
    else:
        domain, remainder = DEFAULT_DOMAIN, name
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_REPO_PREFIX + remainder
    return domain, remainder


def _parse_canonical(original: str, text: str) -> ImageReference:
    match = _REFERENCE_RE.fullmatch(text)
    if match is None:
        raise InvalidReference(_explain_mismatch(original, text))
    name = _NAME_RE.fullmatch(match["name"])
    assert name is not None  # the reference pattern embeds the name pattern
    domain, path = name["domain"], name["path"]
    if domain is None:
        # The first element looked like a host (it has a '.' or ':') but is not a valid one, so
        # the grammar can only read the whole name as a path. docker would then name no registry.
        raise InvalidReference(
            f"invalid reference {original!r}: {original.partition('/')[0]!r} looks like a "
            "registry host but is not a valid host name"
        )
    if len(path) > REPOSITORY_PATH_MAX:
        raise InvalidReference(
            f"invalid reference {original!r}: repository path is {len(path)} characters, "
            f"the limit is {REPOSITORY_PATH_MAX}"
        )
    digest = parse_digest(match["digest"]) if match["digest"] is not None else None
    return ImageReference(domain=domain, path=path, tag=match["tag"], digest=digest)


def _explain_mismatch(original: str, text: str) -> str:
    lowered = text.lower()
    if lowered != text and _REFERENCE_RE.fullmatch(lowered):
        return f"invalid reference {original!r}: repository name must be lowercase"
    if "://" in original:
        return f"invalid reference {original!r}: write the image without a URL scheme"
    return (
        f"invalid reference {original!r}: expected [registry[:port]/]path[:tag][@algorithm:hex] "
        "with lowercase path components separated by '/'"
    )
