"""No file of the repository names a package registry's host: builds take their mirrors and
indexes from the machine's own configuration (apt sources, pip's and Go's settings).

The hosts are apt's (Debian's and Ubuntu's archives), pip's, Go's, npm's, crates', Maven's and
a few more; each pattern below is a regular expression whose escaped dots keep this file from
matching itself. ``docker.io`` is not among them: it is the product's subject (the registry
the operator talks to), not where a build takes packages from.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

HOSTS = [
    r"(?:deb|ftp|security|httpredir|snapshot|cdn-fastly|ftp\.[a-z]{2})\.debian\.org",
    r"(?:[a-z]{2}\.)?(?:archive|security|ports)\.ubuntu\.com",
    r"(?:upload\.|test\.)?pypi\.(?:org|python\.org)",
    r"files\.pythonhosted\.org",
    r"(?:proxy|sum|index)\.golang\.org",
    r"goproxy\.(?:io|cn)",
    r"registry\.(?:npmjs\.org|yarnpkg\.com)",
    r"(?:static\.|index\.)?crates\.io",
    r"repo1?\.maven\.(?:org|apache\.org)",
    r"central\.sonatype\.com",
    r"plugins\.gradle\.org",
    r"(?:api\.)?nuget\.org",
    r"rubygems\.org",
    r"dl-cdn\.alpinelinux\.org",
    r"(?:deb\.nodesource\.com|packages\.cloud\.google\.com)",
]
PATTERN = re.compile(r"(?<![\w.-])(?:" + "|".join(HOSTS) + r")(?![\w-])", re.IGNORECASE)


def repository_files() -> list[Path]:
    """Tracked files and new ones not ignored (what a commit would take)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return [REPO / name for name in listed.decode().split("\0") if name]


def test_the_patterns_catch_the_hosts_in_the_forms_they_are_written() -> None:
    dot = "."
    for text in (
        f"http://deb{dot}debian{dot}org/debian",
        f"https://files{dot}pythonhosted{dot}org/packages/x.whl",
        f"GOPROXY=https://proxy{dot}golang{dot}org,direct",
        f"index-url = https://pypi{dot}org/simple",
        f"registry=https://registry{dot}npmjs{dot}org/",
        f"https://repo1{dot}maven{dot}org/maven2",
        f"https://index{dot}crates{dot}io",
    ):
        assert PATTERN.search(text), text
    for text in ("docker.io/tracebloc/imagerefresh", "PyPI", "the Go module proxy",
                 "http://mirror.example/debian", "wiki.debian.org"):  # fmt: skip
        assert not PATTERN.search(text), text


def test_no_repository_file_names_a_package_registry_host() -> None:
    found = []
    for path in repository_files():
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            for match in PATTERN.finditer(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)}")
    assert not found, "package registry hosts named in the repository:\n" + "\n".join(found)
