"""The Helm chart under test: render it with the pinned `helm`, or install it on the test cluster.

`helm` is the build pinned in `e2e/versions.env`, in the same bin dir as kubectl
(`e2e/build-binaries --print-bin-dir`). Every call runs with its own Helm home (config, cache,
data) so nothing is read from or written to the user's.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
BUILD_BINARIES = REPO / "e2e" / "build-binaries"
# The server version the chart is rendered for offline (helm template defaults to v1.20).
KUBE_VERSION = "1.37.2"
RELEASE = "r"
RELEASE_NAMESPACE = "tracebloc"

# The test cluster's CRD is the one the `crd_installed` fixture applies (kubectl, no Helm
# ownership), shared by every test: a release rendering it too could not adopt it ("invalid
# ownership metadata"), and one CRD can belong to one release only. Only the upgrade test
# (tests/chart/test_chart_upgrade.py) lets a release own it, as a user's release does.
CRD_FROM_THE_TESTS: dict[str, Any] = {"crds": {"enabled": False}}

# kwok's fake nodes take pods that tolerate their taint and select their label.
KWOK_SCHEDULING: dict[str, Any] = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
}


@cache
def helm_binary() -> Path:
    out = subprocess.run(
        [str(BUILD_BINARIES), "--print-bin-dir"], capture_output=True, text=True, check=True
    )
    helm = Path(out.stdout.strip()) / "helm"
    if not helm.exists():
        pytest.fail(f"{helm} is missing: run `make binaries` (e2e/build-binaries)", pytrace=False)
    return helm


@cache
def _helm_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="imagerefresh-helm-home-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def helm_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    home = _helm_home()
    return {
        **(base if base is not None else os.environ),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }


@dataclass(frozen=True)
class HelmResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [doc for doc in yaml.safe_load_all(self.stdout) if doc]


def helm(
    *args: str,
    values: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> HelmResult:
    """Run helm, with `values` as a values file when given; never raises on a non-zero exit."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(dict(values or {}), handle)
        values_file = handle.name
    values_args = ["--values", values_file] if values is not None else []
    try:
        proc = subprocess.run(
            [str(helm_binary()), *args, *values_args],
            capture_output=True,
            text=True,
            env=helm_env(env),
            timeout=timeout,
            check=False,
        )
    finally:
        os.unlink(values_file)
    # helm warns on stderr that it followed chart/files' symlink; that is expected, not an error.
    return HelmResult(proc.returncode, proc.stdout, proc.stderr)


def render(
    values: Mapping[str, Any] | None = None,
    *,
    namespace: str = RELEASE_NAMESPACE,
    release: str = RELEASE,
) -> list[dict[str, Any]]:
    """`helm template` the chart; its objects, parsed. A failed render fails the test."""
    result = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        values=values,
    )
    if result.returncode != 0:
        pytest.fail(f"helm template failed:\n{result.stderr}", pytrace=False)
    return result.objects


def render_error(values: Mapping[str, Any], *, namespace: str = RELEASE_NAMESPACE) -> str:
    """`helm template` that must fail; its error output."""
    result = helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        values=values,
    )
    assert result.returncode != 0, f"helm template accepted {values}:\n{result.stdout[:2000]}"
    return result.stderr


def only(objects: list[dict[str, Any]], kind: str, namespace: str | None = None) -> dict[str, Any]:
    found = of_kind(objects, kind, namespace)
    assert len(found) == 1, f"expected one {kind} in {namespace}, got {len(found)}"
    return found[0]


def of_kind(
    objects: list[dict[str, Any]], kind: str, namespace: str | None = None
) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o["kind"] == kind and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return dict(container)
