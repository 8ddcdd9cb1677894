"""An upgrade from the previous chart upgrades the CRD, after the one-time step
docs/upgrading.md documents (run here as written); uninstalling keeps the CRD and the policies.

The previous chart is the one at PREVIOUS, taken from git: it shipped the CRD in crds/, which
Helm installs once and never upgrades. The test cluster's CRD is shared by every test, so this
test puts the previous CRD in its place, as a cluster that installed the previous chart has it,
and leaves the current CRD, owned by no release, as the `crd_installed` fixture makes it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cluster_env import Cluster
from support.helm_env import CHART, KWOK_SCHEDULING, REPO, HelmResult, helm

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crd_installed")]

# The last commit whose chart ships the CRD in crds/.
PREVIOUS = "29c0c50"
CRD_NAME = "imagerefreshpolicies.images.tracebloc.io"
CRD_SOURCE = REPO / "crds" / f"{CRD_NAME}.yaml"
DOC = REPO / "docs" / "upgrading.md"
DOC_MARKER = "<!-- tests/chart/test_chart_upgrade.py runs this block as written. -->"
RELEASE = "irp-upgrade"
TIMEOUT = "90s"


def previous_chart(destination: Path) -> Path:
    """The chart at PREVIOUS, with the crds/ its link points into."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS, "chart", "crds"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.fail(f"git archive {PREVIOUS}: {archive.stderr.decode()}", pytrace=False)
    subprocess.run(["tar", "-x", "-C", str(destination)], input=archive.stdout, check=True)
    return destination / "chart"


def documented_adoption() -> str:
    """The shell block of docs/upgrading.md that marks the CRD as the release's."""
    _, marker, after = DOC.read_text().partition(DOC_MARKER)
    block = re.match(r"\s*```sh\n(.*?)\n```", after, re.S)
    assert marker, f"{DOC} lost its marker"
    assert block, f"{DOC} lost the block after its marker"
    return block.group(1)


def policy(name: str, namespace: str | None = None) -> dict[str, Any]:
    spec = {
        "targets": [
            {
                "kind": "Deployment",
                "name": "jobs-manager",
                "containers": [{"name": "api", "image": "tracebloc/jobs-manager:prod"}],
            }
        ]
    }
    if namespace is None:  # as a values entry
        return {"name": name, "spec": spec}
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def stored_crd(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.get("crd", CRD_NAME))


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_an_upgrade_from_the_previous_chart_stores_the_new_crd_and_uninstall_keeps_it(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    old_chart = previous_chart(tmp_path)
    values = {**KWOK_SCHEDULING, "policies": [policy("from-values")]}
    source = yaml.safe_load(CRD_SOURCE.read_text())
    try:
        # The cluster as the previous chart left it: its CRD, owned by no release.
        cluster.kubectl("replace", "-f", str(old_chart / "crds" / f"{CRD_NAME}.yaml"))
        installed = helm(
            "install", RELEASE, str(old_chart), "--namespace", namespace, "--wait",
            "--timeout", TIMEOUT, values=values, env=cluster.env,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        old = schema_of(stored_crd(cluster))
        assert "description" not in old["properties"]["status"]  # what the upgrade changes
        cluster.apply(policy("by-hand", namespace))
        kept_uid = cluster.get("irp", "from-values", "-n", namespace)["metadata"]["uid"]

        def upgrade() -> HelmResult:
            return helm(
                "upgrade", RELEASE, str(CHART), "--namespace", namespace, "--wait",
                "--timeout", TIMEOUT, values=values, env=cluster.env,
            )  # fmt: skip

        refused = upgrade()
        assert refused.returncode != 0
        assert "invalid ownership metadata" in refused.stderr  # as docs/upgrading.md quotes

        subprocess.run(
            ["bash", "-euo", "pipefail", "-c", documented_adoption()],
            env={**cluster.env, "RELEASE": RELEASE, "NAMESPACE": namespace},
            check=True,
        )
        upgraded = upgrade()
        assert upgraded.returncode == 0, upgraded.stderr

        crd = stored_crd(cluster)
        assert schema_of(crd) == schema_of(source)  # every description and enum stored
        annotations = crd["metadata"]["annotations"]
        assert annotations["helm.sh/resource-policy"] == "keep"
        assert annotations["meta.helm.sh/release-name"] == RELEASE
        # The policies came through: the same objects, not recreated.
        assert cluster.get("irp", "from-values", "-n", namespace)["metadata"]["uid"] == kept_uid
        assert cluster.get("irp", "by-hand", "-n", namespace)

        uninstalled = helm("uninstall", RELEASE, "--namespace", namespace, env=cluster.env)
        assert uninstalled.returncode == 0, uninstalled.stderr
        assert schema_of(stored_crd(cluster)) == schema_of(source)  # kept
        assert cluster.get("irp", "by-hand", "-n", namespace)  # and so the policies in it
        gone = cluster.kubectl("get", "irp", "from-values", "-n", namespace, check=False)
        assert gone.returncode != 0  # the release's own policy goes with the release
    finally:
        helm("uninstall", RELEASE, "--namespace", namespace, env=cluster.env)
        # The shared CRD as the fixture makes it: the current one, with no Helm ownership.
        cluster.kubectl("replace", "-f", str(CRD_SOURCE))
