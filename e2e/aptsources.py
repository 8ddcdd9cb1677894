"""The Debian mirrors this machine's apt is configured with, for the image base's suite.

e2e/build-image makes the image's base with mmdebstrap, and the repository names no package
mirror: the mirrors are the ones the machine's own apt uses. This reads apt's sources the way
apt does — ``sources.list`` and ``sources.list.d/*.list`` (one-line ``deb [options] URI suite
component...``) and ``sources.list.d/*.sources`` (deb822 paragraphs: ``Types``, ``URIs``,
``Suites``, ``Components``, ``Enabled``) — and picks, for a suite such as ``bookworm``, the
first ``deb`` source serving ``<suite> main`` and the first serving its security updates
(``<suite>-security``, or ``<suite>/updates`` before bookworm). Other file names (``*.disabled``,
``*.save``) are ignored, as apt ignores them.

``IMAGE_BASE_MIRROR`` / ``IMAGE_BASE_SECURITY_MIRROR`` in the environment override what apt
says (a machine whose apt is for another distribution).

A base for another architecture (the release's linux/arm64 image) needs mirrors that serve it:
many local mirrors and caches carry only the machine's own. ``--arch ARCH`` checks first that
each mirror has ``dists/<suite>/main/binary-<ARCH>/Release`` and fails naming the one that
does not, rather than letting mmdebstrap fail minutes later with apt's less direct words.

    python3 e2e/aptsources.py [--arch ARCH] SUITE   # the two mirrors as mmdebstrap takes them:
    deb http://<mirror>/debian SUITE main
    deb http://<mirror>/debian-security SUITE-security main
"""

from __future__ import annotations

import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Mirrors",
    "NoMirror",
    "Source",
    "mirrors",
    "missing_architecture",
    "parse_deb822",
    "parse_one_line",
]

APT_ETC = Path("/etc/apt")
OVERRIDES = ("IMAGE_BASE_MIRROR", "IMAGE_BASE_SECURITY_MIRROR")


class NoMirror(Exception):
    """apt's sources name no mirror for the suite; the message says what to add."""


@dataclass(frozen=True)
class Source:
    """One (type, URI) of apt's sources with the suites and components it serves."""

    kind: str  # deb | deb-src
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    origin: str  # file:line, for messages


@dataclass(frozen=True)
class Mirrors:
    suite: str
    main: str
    security: str
    security_suite: str  # <suite>-security, or <suite>/updates as the sources name it

    def lines(self) -> list[str]:
        """The one-line sources mmdebstrap takes as its mirrors."""
        return [
            f"deb {self.main} {self.suite} main",
            f"deb {self.security} {self.security_suite} main",
        ]

    def indexes(self, arch: str) -> list[str]:
        """The Release file of each mirror's ``main`` packages for ``arch``."""
        return [
            f"{self.main}/dists/{self.suite}/main/binary-{arch}/Release",
            f"{self.security}/dists/{self.security_suite}/main/binary-{arch}/Release",
        ]


def parse_one_line(text: str, origin: str = "sources.list") -> list[Source]:
    """``deb [ key=value ... ] URI suite [component ...]`` lines; comments and blanks skipped."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        line = re.sub(r"\[[^\]]*\]", " ", line, count=1)  # the options, if any
        words = line.split()
        if len(words) < 3 or words[0] not in ("deb", "deb-src"):
            continue
        kind, uri, suite, *components = words
        found.append(Source(kind, uri, (suite,), tuple(components), f"{origin}:{number}"))
    return found


def _paragraphs(text: str) -> Iterable[tuple[int, dict[str, str]]]:
    fields: dict[str, str] = {}
    start, last = 0, ""
    for number, raw in enumerate([*text.splitlines(), ""], 1):
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield start, fields
            fields, last = {}, ""
            continue
        if raw[0] in " \t" and last:  # a continuation line (e.g. an inline Signed-By key)
            fields[last] += "\n" + raw.strip()
            continue
        name, colon, value = raw.partition(":")
        if not colon:
            continue
        if not fields:
            start = number
        last = name.strip().lower()
        fields[last] = value.strip()


def parse_deb822(text: str, origin: str = "debian.sources") -> list[Source]:
    """deb822 paragraphs; each type x URI is one source. ``Enabled: no`` ones are skipped."""
    found = []
    for number, fields in _paragraphs(text):
        if fields.get("enabled", "yes").strip().lower() == "no":
            continue
        suites = tuple(fields.get("suites", "").split())
        components = tuple(fields.get("components", "").split())
        for kind in fields.get("types", "").split():
            for uri in fields.get("uris", "").split():
                found.append(Source(kind, uri, suites, components, f"{origin}:{number}"))
    return found


def read_sources(etc: Path = APT_ETC) -> list[Source]:
    """Every source of apt's configuration under ``etc``, in apt's order."""
    found = []
    main_list = etc / "sources.list"
    if main_list.is_file():
        found += parse_one_line(main_list.read_text(errors="replace"), str(main_list))
    parts = etc / "sources.list.d"
    for path in sorted(parts.iterdir()) if parts.is_dir() else []:
        if path.suffix == ".list":
            found += parse_one_line(path.read_text(errors="replace"), str(path))
        elif path.suffix == ".sources":
            found += parse_deb822(path.read_text(errors="replace"), str(path))
    return found


def _serving(sources: Iterable[Source], suites: Iterable[str]) -> tuple[str, str] | None:
    """The first deb source serving one of ``suites`` with ``main``: (URI, that suite)."""
    for source in sources:
        if source.kind != "deb" or "main" not in source.components:
            continue
        for suite in suites:
            if suite in source.suites:
                return source.uri.rstrip("/"), suite
    return None


def mirrors(suite: str, sources: list[Source], environ: Mapping[str, str] | None = None) -> Mirrors:
    """The main and security mirrors for ``suite``; :class:`NoMirror` when apt names none."""
    env = os.environ if environ is None else environ
    given_main, given_security = (env.get(name, "").rstrip("/") for name in OVERRIDES)
    main = (given_main, suite) if given_main else _serving(sources, [suite])
    security = (
        (given_security, f"{suite}-security")
        if given_security
        else _serving(sources, [f"{suite}-security", f"{suite}/updates"])
    )
    missing = [
        f"`deb <mirror> {name} main` ({variable})"
        for name, variable, uri in (
            (suite, OVERRIDES[0], main),
            (f"{suite}-security", OVERRIDES[1], security),
        )
        if not uri
    ]
    if missing:
        read = sorted({s.origin.rsplit(":", 1)[0] for s in sources}) or ["no sources at all"]
        raise NoMirror(
            f"apt's sources ({', '.join(read)}) name no mirror for {' nor '.join(missing)}: "
            f"add one to /etc/apt/sources.list.d/, or set the variable in brackets"
        )
    assert main is not None
    assert security is not None
    return Mirrors(suite, main[0], security[0], security[1])


def missing_architecture(found: Mirrors, arch: str, timeout: float = 30.0) -> str | None:
    """Why the mirrors cannot serve ``arch``, or None when each has its package index."""
    for url in found.indexes(arch):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                answer.read(65_536)
        except urllib.error.HTTPError as error:
            return (
                f"{url} answered {error.code}: that mirror does not serve {arch}; point apt "
                f"(or IMAGE_BASE_MIRROR / IMAGE_BASE_SECURITY_MIRROR) at one that does"
            )
        except (urllib.error.URLError, OSError) as error:
            return f"{url} could not be read ({error}): is the mirror reachable from here?"
    return None


def main(argv: list[str]) -> int:
    arch = None
    if len(argv) == 3 and argv[0] == "--arch":
        arch, argv = argv[1], argv[2:]
    if len(argv) != 1:
        print("usage: aptsources.py [--arch ARCH] SUITE", file=sys.stderr)
        return 2
    try:
        found = mirrors(argv[0], read_sources())
    except NoMirror as error:
        print(f"aptsources: {error}", file=sys.stderr)
        return 1
    if arch is not None:
        why = missing_architecture(found, arch)
        if why is not None:
            print(f"aptsources: {why}", file=sys.stderr)
            return 1
    print("\n".join(found.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
