"""A release as a user gets it: `make release PUSH=…` pushes the image and the chart to a
registry (the local one, plain HTTP), the chart is installed from ``oci://`` (not ./chart) with
only the image's repository changed, and the real node's containerd pulls the released image
from the registry and runs it under the chart: the pod is Ready, /healthz answers and
/metrics names the release's version.

The image is the one `make image` built (the ``operator_image`` fixture builds it warm first;
the release reuses that build). The chart runs in its host-network mode, the one the real node
supports, on the node's taint and label. dist/ is the test's own directory.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster_env import Cluster
from support.helm_env import CRD_FROM_THE_TESTS, helm, helm_env
from support.podman_env import podman
from support.realnode_env import RealNode
from support.registry_env import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "release"))
import release

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
import realnode

# A release (a warm image build, a save and a push of ~330 MiB), a pull by the real node and a
# start-up at the chart's 100m cpu: more than the suite's 300 s default on 2 loaded cores.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

VERSION = release.project_version()
RELEASE = "released"
OCI_MANIFESTS = (
    "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.docker.distribution.manifest.v2+json"
)


def api_port(cluster: Cluster) -> int:
    server = cluster.kubectl(
        "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
    ).stdout.strip()
    return int(server.rsplit(":", 1)[1])


def make_release(dist: Path, push: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "release", f"DIST={dist}", f"PUSH={push}", "PUSH_PLAIN_HTTP=true"],
        cwd=release.REPO, capture_output=True, text=True, timeout=600, check=False,
        env=helm_env(),  # helm push keeps its registry config and cache out of the user's
    )  # fmt: skip


def archive_manifest(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A docker-archive's manifest.json entry and its image config."""
    with tarfile.open(archive) as tar:
        listed = tar.extractfile("manifest.json")
        assert listed is not None
        (entry,) = json.load(listed)
        config = tar.extractfile(entry["Config"])
        assert config is not None
        return entry, json.load(config)


def values(cluster: Cluster, repository: str) -> dict[str, Any]:
    api_server = {"host": "127.0.0.1", "port": api_port(cluster)}
    return {
        "image": {"repository": repository},  # tag: the chart's appVersion, the release's
        "nodeSelector": {realnode.LABEL: realnode.LABEL_VALUE},
        "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "hostNetwork": {"enabled": True, "apiServer": api_server},
        "ports": {"metrics": free_port(), "liveness": free_port()},
        **CRD_FROM_THE_TESTS,  # the session's CRD is the fixture's, which no release owns
    }


def test_a_release_pushed_to_a_registry_installs_from_oci_and_its_image_runs_on_the_real_node(
    cluster: Cluster,
    real_node: RealNode,
    registry: str,
    namespace: str,
    operator_image: str,
    tmp_path: Path,
) -> None:
    real_node.trust(registry)
    dist = tmp_path / "dist"
    prefix = f"{registry}/{namespace}"
    done = make_release(dist, prefix)
    assert done.returncode == 0, done.stderr[-4000:]

    # dist/: the agreed names, checksums that check, the image under its published name.
    names = release.artifact_names(VERSION)
    assert sorted(p.name for p in dist.iterdir()) == sorted([*names.values(), "SHA256SUMS"])
    checked = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=dist, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    entry, config = archive_manifest(dist / names["image"])
    assert entry["RepoTags"] == [f"docker.io/tracebloc/imagerefresh:{VERSION}"]
    # `make image`'s build, not another: the same layers (a warm build re-commits the image,
    # so its ID, which covers the config's timestamp, may differ).
    built = podman("image", "inspect", "--format", "{{json .RootFS.Layers}}", operator_image)
    assert config["rootfs"]["diff_ids"] == json.loads(built.stdout)
    assert config["config"]["Entrypoint"] == ["imagerefresh", "run"]

    # The registry has what the release says it pushed.
    image = f"{prefix}/imagerefresh:{VERSION}"
    pushed = dict(re.findall(r"^pushed (\S+)  (\S+)$", done.stdout, re.MULTILINE))
    head = httpx.head(
        f"http://{registry}/v2/{namespace}/imagerefresh/manifests/{VERSION}",
        headers={"Accept": OCI_MANIFESTS},
    )
    assert head.status_code == 200
    digest = head.headers["docker-content-digest"]
    assert pushed[image] == digest
    charts = f"oci://{prefix}/charts/imagerefresh"
    shown = helm("show", "chart", charts, "--version", VERSION, "--plain-http")
    assert shown.returncode == 0, shown.stderr
    assert f"version: {VERSION}" in shown.stdout.splitlines()
    assert f"appVersion: {VERSION}" in shown.stdout.splitlines()

    # Installed from the registry; the node pulls the image (nothing loaded it there before).
    settings = values(cluster, f"{prefix}/imagerefresh")
    installed = helm(
        "install", RELEASE, charts, "--version", VERSION, "--plain-http", "--namespace",
        namespace, "--wait", "--timeout", "400s", values=settings, env=cluster.env, timeout=450,
    )  # fmt: skip
    pods = cluster.get("pods", "-n", namespace, "-l", "app.kubernetes.io/name=imagerefresh")
    try:
        assert installed.returncode == 0, f"{installed.stderr}\n{json.dumps(pods)[-3000:]}"
        (pod,) = pods["items"]
        assert pod["spec"]["nodeName"] == real_node.name
        (container,) = pod["status"]["containerStatuses"]
        assert container["ready"] is True
        assert container["image"].endswith(f"{namespace}/imagerefresh:{VERSION}")
        assert container["imageID"].endswith(f"{namespace}/imagerefresh@{digest}")
        assert container["restartCount"] == 0
        ports = settings["ports"]
        healthz = httpx.get(f"http://127.0.0.1:{ports['liveness']}/healthz", timeout=5)
        assert healthz.status_code == 200
        metrics = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5).text
        assert f'imagerefresh_build_info{{version="{VERSION}"}} 1.0' in metrics
    finally:
        helm("uninstall", RELEASE, "--namespace", namespace, "--wait", env=cluster.env)
