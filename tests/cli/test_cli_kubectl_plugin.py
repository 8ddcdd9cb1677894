"""`kubectl imagerefresh …`: the package installs the console script kubectl-imagerefresh, and
the pinned kubectl finds it on $PATH through its plugin mechanism and runs it with the rest of
the command line — the same commands as `imagerefresh`, answering the same on the real API
server, its usage named as the user typed it."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

from imagerefresh.entry import kubectl_plugin

from support.cluster_env import Cluster, local_bin_dir
from support.registry_env import ImagePusher
from support.scenario import deployment, policy, target

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(sys.executable).parent  # where the package's console scripts are installed


def kubectl(cluster_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The pinned kubectl, with only the package's scripts and the system's tools on $PATH."""
    env = {**cluster_env, "PATH": f"{SCRIPTS}{os.pathsep}/usr/bin:/bin"}
    return subprocess.run(
        [str(local_bin_dir() / "kubectl"), *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_the_package_declares_and_installs_the_kubectl_plugin() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert declared["kubectl-imagerefresh"] == "imagerefresh.entry:kubectl_plugin"
    (installed,) = entry_points(group="console_scripts", name="kubectl-imagerefresh")
    assert installed.load() is kubectl_plugin
    assert (SCRIPTS / "kubectl-imagerefresh").is_file()


def test_kubectl_lists_the_plugin_and_runs_it_under_its_own_name(cluster: Cluster) -> None:
    listed = kubectl(cluster.env, "plugin", "list", "--name-only")
    assert "kubectl-imagerefresh" in listed.stdout.split(), listed.stdout + listed.stderr
    shown = kubectl(cluster.env, "imagerefresh", "--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"imagerefresh {version('imagerefresh')}"
    helped = kubectl(cluster.env, "imagerefresh", "plan", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: kubectl imagerefresh plan [OPTIONS] NAMESPACE/NAME")


def test_kubectl_imagerefresh_plan_answers_as_imagerefresh_plan_does(
    cluster: Cluster, registry: str, pusher: ImagePusher, namespace: str
) -> None:
    pushed = pusher.push(f"{namespace}/app", "prod", seed="kubectl-plugin")
    tag = f"{registry}/{namespace}/app:prod"
    cluster.apply(
        deployment("app", {"app": tag}, replicas=1),
        policy("control-plane", target("app", "Deployment", app=tag)),
        namespace=namespace,
    )
    args = ("plan", f"{namespace}/control-plane", "--insecure-registry", registry)
    through_kubectl = kubectl(cluster.env, "imagerefresh", *args)
    assert through_kubectl.returncode == 0, through_kubectl.stderr
    direct = subprocess.run(
        [str(SCRIPTS / "imagerefresh"), *args],
        capture_output=True, text=True, env=cluster.env, timeout=120, check=False,
    )  # fmt: skip
    assert direct.returncode == 0, direct.stderr
    assert through_kubectl.stdout == direct.stdout
    assert pushed.digest[:19] in through_kubectl.stdout  # the plan names the tag's digest
