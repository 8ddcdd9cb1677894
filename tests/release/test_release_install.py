"""A release as a user gets it: `make release PUSH=…` writes the image for linux/amd64 and
linux/arm64 (one OCI archive of their index, one loadable archive each) and pushes the index
and the chart to a registry (the local one, plain HTTP); the chart is installed from ``oci://``
(not ./chart) with only the image's repository changed — its default image is pinned to the
index digest, which the push kept — and the real node's containerd pulls the released image by
that digest and runs its own platform's under the chart: the pod is Ready, /healthz answers and
/metrics names the release's version.

dist/ is inspected as a user would: the index names both platforms, each image's config names
its architecture, and the arm64 image, loaded from its archive, answers `--version` and
/healthz under emulation (Debian's qemu-user-static, registered by e2e/binfmt).

The amd64 image is the one `make image` built (the ``operator_image`` fixture builds it warm
first; the release reuses that build), the arm64 one is `make test`'s warm build too. The chart
runs in its host-network mode, the one the real node supports, on the node's taint and label.
dist/ is the test's own directory.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster_env import Cluster
from support.helm_env import CRD_FROM_THE_TESTS, helm, helm_env
from support.podman_env import PODMAN_RUN, podman
from support.realnode_env import RealNode
from support.registry_env import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "release"))
import release

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
import realnode

# A release (a warm image build, a save and a push of ~330 MiB), a pull by the real node and a
# start-up at the chart's 100m cpu: more than the suite's 300 s default on 2 loaded cores.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(900),
    pytest.mark.usefixtures("crd_installed"),
]

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


def oci_blob(tar: tarfile.TarFile, digest: str) -> dict[str, Any]:
    member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    assert member is not None, digest
    return dict(json.load(member))


def index_of(archive: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """An OCI archive's one image index: its digest, and per architecture the image's config."""
    with tarfile.open(archive) as tar:
        listed = tar.extractfile("index.json")
        assert listed is not None
        (entry,) = json.load(listed)["manifests"]
        assert entry["mediaType"] == "application/vnd.oci.image.index.v1+json"
        index = oci_blob(tar, entry["digest"])
        configs = {}
        for manifest in index["manifests"]:
            platform = manifest["platform"]
            assert platform["os"] == "linux"
            image = oci_blob(tar, manifest["digest"])
            configs[platform["architecture"]] = oci_blob(tar, image["config"]["digest"])
        return entry["digest"], configs


def answers_under_emulation(archive: Path, cluster: Cluster, tmp_path: Path) -> tuple[str, str]:
    """Load a platform's archive and run it (emulated when it is not this machine's): what
    `--version` prints, and what /healthz answers once `imagerefresh run` is up. The name the
    archive carries is given back to what it named before (or removed) afterwards."""
    name = f"docker.io/tracebloc/imagerefresh:{VERSION}"
    before = podman("image", "inspect", "--format", "{{.Id}}", name, check=False).stdout.strip()
    loaded = podman("load", "--quiet", "--input", str(archive), timeout=300).stdout
    try:
        assert name in loaded, loaded
        return _run_loaded(archive, cluster, tmp_path)
    finally:
        if before:
            podman("tag", before, name, check=False)
        else:
            podman("untag", name, name, check=False)


def _run_loaded(archive: Path, cluster: Cluster, tmp_path: Path) -> tuple[str, str]:
    with tarfile.open(archive) as tar:
        listed = tar.extractfile("manifest.json")
        assert listed is not None
        image = json.load(listed)[0]["Config"].removesuffix(".json")  # the image's ID
    version = podman("run", "--rm", *PODMAN_RUN, "--entrypoint", "imagerefresh", image,
                     "--version", timeout=300).stdout  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        cluster.kubectl("config", "view", "--raw", "--minify", "--flatten").stdout
    )
    kubeconfig.chmod(0o644)
    port, name = free_port(), f"imagerefresh-arm64-{secrets.token_hex(3)}"
    podman(
        "run", "--detach", f"--name={name}", *PODMAN_RUN, "--network=host",
        f"--volume={kubeconfig}:/kubeconfig:ro", image, "--kubeconfig=/kubeconfig",
        "--namespace=default", f"--liveness-port={port}", f"--metrics-port={free_port()}",
        "--bind-address=127.0.0.1", "--no-scanning",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240  # start-up emulated: ~10x the native CPU
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                if answer.status_code == 200:
                    return version.strip(), answer.text
            except httpx.HTTPError:
                pass
            state = podman("inspect", "--format", "{{.State.Running}}", name, check=False)
            assert state.stdout.strip() == "true", podman("logs", name, check=False).stderr
            time.sleep(1)
        pytest.fail(f"/healthz never answered:\n{podman('logs', name, check=False).stderr[-3000:]}")
    finally:
        podman("rm", "--force", "--time=5", name, check=False)


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

    # dist/: the agreed names, checksums that check.
    names = release.artifact_names(VERSION)
    assert sorted(p.name for p in dist.iterdir()) == sorted([*names.values(), "SHA256SUMS"])
    checked = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=dist, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # One index over both platforms, each image's config naming its architecture; the chart
    # pins that index.
    digest, configs = index_of(dist / names["index"])
    assert sorted(configs) == ["amd64", "arm64"]
    assert {arch: c["architecture"] for arch, c in configs.items()} == {
        "amd64": "amd64", "arm64": "arm64"
    }  # fmt: skip
    assert all(c["os"] == "linux" for c in configs.values())
    assert f"image index {digest} (linux/amd64, linux/arm64)" in done.stdout
    with tarfile.open(dist / names["chart"]) as chart:
        values_file = chart.extractfile("imagerefresh/values.yaml")
        assert values_file is not None
        assert f'  digest: "{digest}"' in values_file.read().decode().splitlines()
    # Each platform's loadable archive: the image under its published name, of its
    # architecture — the index's own images (the same config).
    for arch in ("amd64", "arm64"):
        entry, config = archive_manifest(dist / names[f"image-{arch}"])
        assert entry["RepoTags"] == [f"docker.io/tracebloc/imagerefresh:{VERSION}"]
        assert config["architecture"] == arch
        assert config["rootfs"] == configs[arch]["rootfs"]
        assert config["config"]["Entrypoint"] == ["imagerefresh", "run"]
        assert config["config"]["User"] == "65532:65532"
    # `make image`'s build, not another: the same layers (a warm build re-commits the image,
    # so its ID, which covers the config's timestamp, may differ).
    built = podman("image", "inspect", "--format", "{{json .RootFS.Layers}}", operator_image)
    assert configs["amd64"]["rootfs"]["diff_ids"] == json.loads(built.stdout)
    # The arm64 image runs, emulated.
    shown, healthz = answers_under_emulation(dist / names["image-arm64"], cluster, tmp_path)
    assert shown == f"imagerefresh {VERSION}"
    assert "role" in json.loads(healthz), healthz

    # The registry has what the release says it pushed: the index, its digest kept.
    image = f"{prefix}/imagerefresh:{VERSION}"
    pushed = dict(re.findall(r"^pushed (\S+)  (\S+)$", done.stdout, re.MULTILINE))
    head = httpx.head(
        f"http://{registry}/v2/{namespace}/imagerefresh/manifests/{VERSION}",
        headers={"Accept": OCI_MANIFESTS},
    )
    assert head.status_code == 200
    assert head.headers["content-type"] == "application/vnd.oci.image.index.v1+json"
    assert head.headers["docker-content-digest"] == digest
    assert pushed[image] == digest
    charts = f"oci://{prefix}/charts/imagerefresh"
    shown = helm("show", "chart", charts, "--version", VERSION, "--plain-http")
    assert shown.returncode == 0, shown.stderr
    assert f"version: {VERSION}" in shown.stdout.splitlines()
    assert f"appVersion: {VERSION}" in shown.stdout.splitlines()

    # Installed from the registry, by the pinned index digest; the node pulls the image
    # (nothing loaded it there before) and runs its own platform's.
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
        assert pod["spec"]["containers"][0]["image"] == f"{prefix}/imagerefresh@{digest}"
        assert container["imageID"].endswith(f"{namespace}/imagerefresh@{digest}")
        assert container["restartCount"] == 0
        ports = settings["ports"]
        healthz = httpx.get(f"http://127.0.0.1:{ports['liveness']}/healthz", timeout=5)
        assert healthz.status_code == 200
        metrics = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5).text
        assert f'imagerefresh_build_info{{version="{VERSION}"}} 1.0' in metrics
    finally:
        helm("uninstall", RELEASE, "--namespace", namespace, "--wait", env=cluster.env)
