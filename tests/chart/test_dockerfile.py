"""The operator image's Dockerfile, read statically: hadolint, and that its entrypoint is the
console script the package installs. (tests/chart/test_image.py builds and runs the image.)"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

import click
import yaml

from imagerefresh import entry
from imagerefresh.cli import main

from support.helm_env import CHART, REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
HADOLINT = Path(sys.executable).with_name("hadolint")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def stages() -> list[Stage]:
    """The Dockerfile's stages: each FROM (its base with the global ARGs' defaults filled in)
    and the instructions after it (continuations joined)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    found: list[Stage] = []
    defaults: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]  # --platform=…
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            base = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], words[0])
            found.append(Stage(base, name))
        elif not found and keyword == "ARG":
            variable, _, default = args.partition("=")
            defaults[variable.strip()] = default.strip().strip('"')
        elif not found:
            raise AssertionError(f"{keyword} before the first FROM")
        else:
            found[-1].instructions.append((keyword, args.strip()))
    return found


def test_hadolint_passes_on_the_dockerfile() -> None:
    proc = subprocess.run(
        [str(HADOLINT), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_entrypoint_is_the_console_script_the_package_installs_running_the_operator() -> None:
    final = stages()[-1]
    (entrypoint,) = final.all("ENTRYPOINT")
    command = json.loads(entrypoint)  # exec form: no shell between the signal and the process
    assert command == ["imagerefresh", "run"]
    assert not final.all("CMD")
    script, subcommand = command
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert script in declared
    (installed,) = entry_points(group="console_scripts", name=script)
    assert installed.value == declared[script]
    # The script starts the command line through the entry point, which imports it first.
    assert installed.load() is entry.main
    assert isinstance(main, click.Group)
    assert subcommand in main.commands


def test_the_image_is_multi_stage_slim_python_with_only_the_venv_in_the_final_stage() -> None:
    builder, final = stages()
    assert builder.base == final.base == "python:3.11-slim"
    assert builder.name is not None
    builder_runs = " ".join(builder.all("RUN"))
    assert "pip wheel" in builder_runs
    assert "pip install" in builder_runs
    copies = final.all("COPY")
    assert copies == [f"--from={builder.name} /opt/venv /opt/venv"]
    final_runs = " ".join(final.all("RUN"))
    for tool in ("apt-get", "apk", "gcc", "build-essential", "pip install", "make"):
        assert tool not in final_runs


def test_the_image_runs_as_a_numeric_non_root_user_which_the_chart_leaves_in_place() -> None:
    """runAsNonRoot needs the image's USER numeric; the chart names no user by default, so
    that one serves (or the platform's: OpenShift assigns its own)."""
    (user,) = stages()[-1].all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert gid.isdigit()
    assert int(uid) != 0
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert (values["runAsUser"], values["runAsGroup"], values["fsGroup"]) == (None, None, None)


def test_dockerignore_admits_exactly_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        verdict = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            bare = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, bare) or path.startswith(bare + "/"):
                verdict = not negated
        return verdict

    sources = []
    for stage in stages():
        for args in stage.all("COPY"):
            if not args.startswith("--from"):
                sources.extend(args.split()[:-1])
    assert sources
    for source in sources:
        assert not ignored(source.rstrip("/")), source
        assert (REPO / source).exists(), source
    for unwanted in ("tests", "chart", ".venv", ".git", "e2e", "operator/imagerefresh.egg-info"):
        assert ignored(unwanted), unwanted
