"""Every file in examples/ is what it claims to be: a policy the real API server admits under the
CRD, and chart values that `helm template` renders against values.schema.json.

The policies are applied server-side (a dry run: nothing is stored, but admission — the CRD's
schema, its CEL rules, the defaults — runs in full) into the test's namespace; so are the
policies the example values render, so the values' `policies` are held to the same schema.
The examples name the edge chart's objects for release `tracebloc`, as a user copies them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cluster_env import Cluster
from support.docs import REPO
from support.helm_env import CHART, KUBE_VERSION, helm, of_kind

EXAMPLES = REPO / "examples"
POLICIES = sorted((EXAMPLES / "policies").glob("*.yaml"))
VALUES = sorted((EXAMPLES / "values").glob("*.yaml"))
# Values files meant to be given together, in this order (the first alone is an install).
LAYERED = [
    [EXAMPLES / "values" / "edge.yaml"],
    [EXAMPLES / "values" / "edge.yaml", EXAMPLES / "values" / "edge-ha-monitoring.yaml"],
]
EDGE_WORKLOADS = {
    "tracebloc-jobs-manager",
    "tracebloc-requests-proxy",
    "tracebloc-resource-monitor",
}


def _name(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


def _template(files: list[Path]) -> list[dict[str, Any]]:
    args = [arg for file in files for arg in ("--values", str(file))]
    result = helm(
        "template",
        "imagerefresh",
        str(CHART),
        "--namespace",
        "tracebloc",
        "--kube-version",
        KUBE_VERSION,
        *args,
    )
    assert result.returncode == 0, f"helm template {args} failed:\n{result.stderr}"
    return result.objects


def test_the_examples_are_all_layered_or_applied_somewhere() -> None:
    assert POLICIES, "examples/policies is empty"
    assert {file for files in LAYERED for file in files} == set(VALUES)


@pytest.mark.parametrize("files", LAYERED, ids=lambda fs: "+".join(f.stem for f in fs))
def test_example_values_render_against_the_values_schema(files: list[Path]) -> None:
    objects = _template(files)
    assert of_kind(objects, "Deployment")


@pytest.mark.parametrize("path", POLICIES, ids=_name)
def test_example_policies_name_the_edge_charts_workloads(path: Path) -> None:
    policy = yaml.safe_load(path.read_text())
    assert (policy["metadata"]["namespace"], policy["kind"]) == ("tracebloc", "ImageRefreshPolicy")
    assert {t["name"] for t in policy["spec"]["targets"]} == EDGE_WORKLOADS


def _dry_run_apply(cluster: Cluster, policy: dict[str, Any], namespace: str) -> dict[str, Any]:
    policy = {**policy, "metadata": {**policy["metadata"], "namespace": namespace}}
    proc = cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=imagerefresh-examples",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(policy),
        check=False,
    )
    assert proc.returncode == 0, f"the API server refused it:\n{proc.stderr}"
    return dict(json.loads(proc.stdout))


@pytest.mark.cluster
@pytest.mark.parametrize("path", POLICIES, ids=_name)
def test_example_policies_are_admitted_by_the_crd_on_the_real_api_server(
    crd_installed: Cluster, namespace: str, path: Path
) -> None:
    stored = _dry_run_apply(crd_installed, yaml.safe_load(path.read_text()), namespace)
    # Admission ran in full: the defaults the CRD fills are there.
    assert stored["spec"]["pullBudget"]["reserve"] >= 0
    assert stored["spec"]["interval"]


@pytest.mark.cluster
@pytest.mark.parametrize("files", LAYERED, ids=lambda fs: "+".join(f.stem for f in fs))
def test_the_policies_example_values_render_are_admitted_on_the_real_api_server(
    crd_installed: Cluster, namespace: str, files: list[Path]
) -> None:
    policies = of_kind(_template(files), "ImageRefreshPolicy")
    assert policies
    for policy in policies:
        _dry_run_apply(crd_installed, policy, namespace)
