"""The chart's pod against Pod Security Admission on the real API server, as docs/install.md
says: the default rendering is admitted under `restricted` with no warning, for any release
namespace; the host-network mode is refused by `baseline` (and so by `restricted`) and admitted
under `privileged` only. Server-side dry runs of the rendered pod: the admission runs in full,
nothing is created. (The chart installed and run under `restricted`: tests/chart/test_image.py.)
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from support.cluster_env import Cluster, eventually
from support.helm_env import KWOK_SCHEDULING, only, render

pytestmark = pytest.mark.cluster

LEVELS = ("restricted", "baseline", "privileged")


@pytest.fixture(scope="module")
def namespaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    """One namespace enforcing each level (and warning at it), by level."""
    suffix = secrets.token_hex(3)
    made = {level: f"t-psa-{level}-{suffix}" for level in LEVELS}
    for level, name in made.items():
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "labels": {
                        "pod-security.kubernetes.io/enforce": level,
                        "pod-security.kubernetes.io/warn": level,
                    },
                },
            }
        )
    try:
        yield made
    finally:
        for name in made.values():
            cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def operator_pod(values: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod the chart's Deployment would create in ``namespace``."""
    template = only(render({**KWOK_SCHEDULING, **values}, namespace=namespace), "Deployment")[
        "spec"
    ]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator", "labels": template["metadata"]["labels"]},
        "spec": {**template["spec"], "serviceAccountName": "default"},
    }


def dry_run(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> tuple[int, str]:
    done = cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(pod),
        check=False,
    )  # fmt: skip
    return done.returncode, done.stderr


def enforced(cluster: Cluster, namespace: str) -> bool | None:
    """Whether admission sees the namespace's label yet (it reads namespaces from a cache)."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "example.test/c:1"}]},
    }
    return "violates PodSecurity" in dry_run(cluster, namespace, probe)[1] or None


@pytest.mark.parametrize(
    "values",
    [{}, {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}, {"prePull": {"enabled": True}}],
    ids=["defaults", "a-fixed-user", "pre-pull"],
)
def test_the_operators_pod_is_admitted_under_restricted_without_a_warning(
    cluster: Cluster, namespaces: dict[str, str], values: dict[str, Any]
) -> None:
    namespace = namespaces["restricted"]
    eventually(lambda: enforced(cluster, namespace), timeout=30, what="restricted enforced")
    code, said = dry_run(cluster, namespace, operator_pod(values, namespace))
    assert code == 0, said
    assert "Warning" not in said, said


@pytest.mark.parametrize(("level", "admitted"), [("baseline", False), ("privileged", True)])
def test_the_host_network_mode_needs_a_privileged_namespace(
    cluster: Cluster, namespaces: dict[str, str], level: str, admitted: bool
) -> None:
    namespace = namespaces[level]
    if level != "privileged":
        eventually(lambda: enforced(cluster, namespace), timeout=30, what=f"{level} enforced")
    pod = operator_pod({"hostNetwork": {"enabled": True}}, namespace)
    assert pod["spec"]["hostNetwork"] is True
    code, said = dry_run(cluster, namespace, pod)
    assert (code == 0) is admitted, said
    if not admitted:
        assert f'violates PodSecurity "{level}:latest": host namespaces (hostNetwork=true)' in said
