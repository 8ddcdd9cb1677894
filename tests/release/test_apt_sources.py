"""The image base's mirrors come from the machine's apt sources (e2e/aptsources.py), in both of
apt's formats, and a machine whose apt names none for the suite gets a message saying what to
add — never a mirror the repository names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
import aptsources
from aptsources import Mirrors, NoMirror, mirrors, parse_deb822, parse_one_line, read_sources

REPO = Path(__file__).resolve().parents[2]

DEB822 = """\
Types: deb deb-src
# a comment between fields
URIs: http://mirror.example/debian/ http://other.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_paragraphs_give_one_source_per_type_and_uri_with_their_suites() -> None:
    sources = parse_deb822(DEB822, "debian.sources")
    assert [(s.kind, s.uri) for s in sources] == [
        ("deb", "http://mirror.example/debian/"),
        ("deb", "http://other.example/debian"),
        ("deb-src", "http://mirror.example/debian/"),
        ("deb-src", "http://other.example/debian"),
        ("deb", "http://mirror.example/debian-security"),
    ]
    assert sources[0].suites == ("bookworm", "bookworm-updates")
    assert sources[0].components == ("main", "contrib")
    assert sources[0].origin == "debian.sources:1"
    assert sources[-1].origin == "debian.sources:11"


def test_a_disabled_deb822_paragraph_is_no_source() -> None:
    text = "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n"
    assert parse_deb822(text + "Components: main\n") == []


def test_one_line_sources_with_options_and_comments() -> None:
    text = """\
# the main archive
deb [arch=amd64 signed-by=/usr/share/keyrings/debian.gpg] http://mirror.example/debian bookworm main
deb-src http://mirror.example/debian bookworm main
deb http://mirror.example/debian-security bookworm-security main contrib # trailing comment
not a source line
"""
    sources = parse_one_line(text, "sources.list")
    assert [(s.kind, s.uri, s.suites, s.components) for s in sources] == [
        ("deb", "http://mirror.example/debian", ("bookworm",), ("main",)),
        ("deb-src", "http://mirror.example/debian", ("bookworm",), ("main",)),
        ("deb", "http://mirror.example/debian-security", ("bookworm-security",),
         ("main", "contrib")),
    ]  # fmt: skip
    assert sources[2].origin == "sources.list:4"


def test_the_first_deb_source_with_main_serves_each_of_the_suites_mirrors() -> None:
    sources = [
        *parse_one_line("deb-src http://src-only.example/debian bookworm main\n"),
        *parse_one_line("deb http://contrib-only.example/debian bookworm contrib\n"),
        *parse_deb822(DEB822),
    ]
    found = mirrors("bookworm", sources, environ={})
    assert found == Mirrors(
        "bookworm", "http://mirror.example/debian", "http://mirror.example/debian-security",
        "bookworm-security",
    )  # fmt: skip
    assert found.lines() == [
        "deb http://mirror.example/debian bookworm main",
        "deb http://mirror.example/debian-security bookworm-security main",
    ]


def test_an_old_suites_security_updates_keep_their_own_suite_name() -> None:
    sources = parse_one_line(
        "deb http://m.example/debian bullseye main\n"
        "deb http://m.example/debian-security bullseye-security main\n"
        "deb http://old.example/debian-security buster/updates main\n"
        "deb http://old.example/debian buster main\n"
    )
    assert mirrors("buster", sources, environ={}).lines() == [
        "deb http://old.example/debian buster main",
        "deb http://old.example/debian-security buster/updates main",
    ]


def test_no_source_for_the_suite_is_an_error_naming_what_to_add_and_where_it_looked() -> None:
    sources = parse_deb822(DEB822, "/etc/apt/sources.list.d/debian.sources")
    with pytest.raises(NoMirror) as raised:
        mirrors("trixie", sources, environ={})
    message = str(raised.value)
    assert "/etc/apt/sources.list.d/debian.sources" in message
    assert "`deb <mirror> trixie main`" in message
    assert "trixie-security" in message
    assert "IMAGE_BASE_MIRROR" in message


def test_the_environment_overrides_what_apt_says() -> None:
    environ = {
        "IMAGE_BASE_MIRROR": "http://given.example/debian/",
        "IMAGE_BASE_SECURITY_MIRROR": "http://given.example/security",
    }
    assert mirrors("trixie", [], environ=environ).lines() == [
        "deb http://given.example/debian trixie main",
        "deb http://given.example/security trixie-security main",
    ]


def test_sources_are_read_as_apt_reads_them_and_other_file_names_ignored(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://first.example/debian bookworm main\n")
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "b.sources").write_text(DEB822)
    (parts / "a.list").write_text("deb http://second.example/debian bookworm-updates main\n")
    (parts / "c.list.disabled").write_text("deb http://never.example/debian bookworm main\n")
    (parts / "d.list.save").write_text("deb http://never.example/debian bookworm main\n")
    uris = [s.uri for s in read_sources(tmp_path)]
    assert uris[:2] == ["http://first.example/debian", "http://second.example/debian"]
    assert "http://mirror.example/debian-security" in uris
    assert not [u for u in uris if "never" in u]


def test_the_script_prints_this_machines_mirrors_as_mmdebstrap_takes_them() -> None:
    """On this machine (Debian, with apt configured) the script finds both mirrors."""
    done = subprocess.run(
        [sys.executable, aptsources.__file__, "bookworm"],
        capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    main, security = done.stdout.splitlines()
    assert re.fullmatch(r"deb \S+ bookworm main", main), main
    assert re.fullmatch(r"deb \S+ bookworm-security main", security), security


def test_build_image_takes_its_mirrors_from_the_script_and_keys_the_base_on_them() -> None:
    script = (REPO / "e2e" / "build-image").read_text()
    assert 'aptsources.py" "${check[@]}" "$IMAGE_BASE_SUITE"' in script
    assert '"${args[@]}" "${mirrors[@]}" | sha256sum' in script
    versions = (REPO / "e2e" / "versions.env").read_text()
    assert "MIRROR=" not in versions
