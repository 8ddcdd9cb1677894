"""One version: pyproject.toml's. The installed package (``imagerefresh --version``), the chart's
``version`` and ``appVersion`` (hence its default image tag), the image `make image` builds and
the names of the release artifacts all carry it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version as installed_version
from pathlib import Path

import yaml
from click.testing import CliRunner

from imagerefresh.cli import main

REPO = Path(__file__).resolve().parents[2]
IMAGEREFRESH = Path(sys.executable).with_name("imagerefresh")


def project_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def test_the_cli_prints_the_installed_version_which_is_pyprojects() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"imagerefresh {project_version()}\n"
    assert installed_version("imagerefresh") == project_version()


def test_the_console_script_answers_version_without_a_kubeconfig() -> None:
    done = subprocess.run(
        [str(IMAGEREFRESH), "--version"], capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent"},
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, f"imagerefresh {project_version()}\n")


def test_the_charts_version_and_app_version_are_pyprojects() -> None:
    chart = yaml.safe_load((REPO / "chart" / "Chart.yaml").read_text())
    assert chart["version"] == project_version()
    assert chart["appVersion"] == project_version()


def test_make_image_tags_the_image_with_the_version() -> None:
    environ = {k: v for k, v in os.environ.items() if k != "IMAGEREFRESH_IMAGE_NAME"}
    done = subprocess.run(
        [str(REPO / "e2e" / "build-image"), "--print-tag"],
        capture_output=True, text=True, check=True, env=environ,
    )  # fmt: skip
    assert done.stdout.strip() == f"localhost/imagerefresh:{project_version()}"
    environ["IMAGEREFRESH_IMAGE_NAME"] = "localhost/elsewhere"
    renamed = subprocess.run(
        [str(REPO / "e2e" / "build-image"), "--print-tag"],
        capture_output=True, text=True, check=True, env=environ,
    )  # fmt: skip
    assert renamed.stdout.strip() == f"localhost/elsewhere:{project_version()}"


def test_the_changelog_has_notes_for_this_version_or_unreleased_ones() -> None:
    """Keep a Changelog: `## [X.Y.Z] - YYYY-MM-DD` per release, `## [Unreleased]` on top."""
    headings = re.findall(r"^## \[([^\]]+)\](.*)$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert headings, "CHANGELOG.md has no release sections"
    assert headings[0][0] == "Unreleased"
    for name, rest in headings[1:]:
        assert re.fullmatch(r"\d+\.\d+\.\d+\S*", name), name
        assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), f"{name}: {rest!r}"
    released = [name for name, _ in headings[1:]]
    assert project_version() in released or released == [], (
        f"{project_version()} is neither released in CHANGELOG.md nor the first release"
    )
