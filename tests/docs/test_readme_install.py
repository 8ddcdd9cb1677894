"""The README's shell blocks, run as written, on the local cluster, in the order a user runs them:
publish a release (`make release`'s dist/) to a registry, install the operator from it, apply the
one policy an edge needs, then the command line from the release's wheel.

Only the ``REGISTRY=`` line changes: it names a registry of the test's own, over TLS with a
certificate of 127.0.0.1 that podman and helm trust through ``SSL_CERT_FILE`` (as a private CA
is trusted), since the README's commands carry no plain-HTTP flags. What the README assumes and
a test cluster lacks is set up around the blocks, never inside them:

- the edge itself (the edge chart's workloads in ``tracebloc`` and ``tracebloc-node-agents``,
  on kwok's nodes), which the policy names;
- a node the chart's pods may land on without tolerations (every other node here is tainted): a
  kwok node of the test's own, Ready and untainted, removed afterwards;
- the session's CRD, applied by the ``crd_installed`` fixture and owned by no release, marked
  as this release's the way docs/upgrading.md adopts one, and restored afterwards.
"""

from __future__ import annotations

import re
import ssl
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.certificates import loopback_certificate
from support.cluster_env import Cluster, eventually
from support.docs import REPO
from support.edge import Edge
from support.helm_env import helm_env
from support.podman_env import podman
from support.registry_env import RegistryServer, free_port

sys.path.insert(0, str(REPO / "release"))
import release

README = REPO / "README.md"
VERSION = release.project_version()
RUN = ["Install", "The one policy an edge needs", "The command line"]
NOT_RUN = {"Try it locally": "`make demo` and `make test` themselves"}
NAMESPACES = ("tracebloc", "tracebloc-node-agents")
NODE = "readme-edge-node"
CRD_NAME = "imagerefreshpolicies.images.tracebloc.io"
CRD_SOURCE = REPO / "crds" / f"{CRD_NAME}.yaml"
PREFIX = "platform"


def shell_blocks() -> dict[str, list[str]]:
    """Each ``##`` section of the README with the ```sh blocks in it, in order."""
    sections: dict[str, list[str]] = {}
    heading = ""
    for part in re.split(r"^(## .+)$", README.read_text(), flags=re.M):
        if part.startswith("## "):
            heading = part[3:].strip()
            continue
        blocks = re.findall(r"^```sh\n(.*?)^```$", part, flags=re.M | re.S)
        if blocks:
            sections[heading] = blocks
    return sections


def as_run_here(block: str, registry: str) -> str:
    """The block with its ``REGISTRY=`` line naming ``registry`` (the only change)."""
    lines = block.splitlines()
    assignments = [i for i, line in enumerate(lines) if line.startswith("REGISTRY=")]
    if "$REGISTRY" in block:
        assert len(assignments) == 1, f"a block using $REGISTRY sets it once:\n{block}"
        lines[assignments[0]] = f"REGISTRY={registry}"
    return "\n".join(lines) + "\n"


def test_every_shell_block_of_the_readme_is_run_here_or_said_why_not() -> None:
    sections = shell_blocks()
    assert set(sections) == set(RUN) | set(NOT_RUN), sorted(sections)
    # The release's version, as the blocks say it.
    for block in sections["Install"]:
        assert f"\nVERSION={VERSION}\n" in f"\n{block}"
    (cli,) = sections["The command line"]
    assert f"dist/{release.artifact_names(VERSION)['wheel']}" in cli


def test_the_registry_line_is_the_only_line_changed() -> None:
    block = "REGISTRY=registry.example.com/platform\nVERSION=1\npodman push $REGISTRY/x\n"
    assert (
        as_run_here(block, "127.0.0.1:1/p")
        == "REGISTRY=127.0.0.1:1/p\nVERSION=1\npodman push $REGISTRY/x\n"
    )


# --- the cluster's side --------------------------------------------------------------------------


@pytest.fixture
def tls_registry(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """host:port of a registry of the test's own over TLS, and the certificate that trusts it."""
    certs = tmp_path / "certs"
    certs.mkdir()
    _, certificate = loopback_certificate(certs)
    server = RegistryServer(tmp_path / "registry", free_port(), tls=certs)
    (tmp_path / "registry").mkdir()
    server.start()
    try:
        yield server.host, certificate
    finally:
        server.stop()


def untainted_node(cluster: Cluster) -> None:
    """A Ready kwok node with no taint, the only place pods without tolerations can land."""
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"},
            },
        }
    )

    def schedulable() -> bool:
        node = cluster.get("node", NODE)
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )
        return ready and not node["spec"].get("taints")

    eventually(schedulable, timeout=60, what=f"node {NODE} Ready and untainted")


def adopt_crd(cluster: Cluster, release_name: str, namespace: str) -> None:
    """The shared CRD marked as this release's (docs/upgrading.md's one-time step)."""
    crd = f"crd/{CRD_NAME}"
    cluster.kubectl("label", crd, "--overwrite", "app.kubernetes.io/managed-by=Helm")
    cluster.kubectl(
        "annotate", crd, "--overwrite",
        f"meta.helm.sh/release-name={release_name}", f"meta.helm.sh/release-namespace={namespace}",
    )  # fmt: skip


def namespaces_gone(cluster: Cluster) -> None:
    for name in NAMESPACES:
        cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")

    def gone() -> bool:
        listed = cluster.kubectl("get", "namespaces", "-o", "name").stdout.split()
        return not {f"namespace/{n}" for n in NAMESPACES} & set(listed)

    eventually(gone, timeout=120, what=f"namespaces {', '.join(NAMESPACES)} deleted")


def the_edge(cluster: Cluster) -> None:
    """The edge chart's workloads for release ``tracebloc``, as the policy names them."""
    for name in NAMESPACES:
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    edge = Edge(release="tracebloc", namespace=NAMESPACES[0], node_agents=NAMESPACES[1])
    for workload in edge.workloads().values():
        cluster.apply(workload)


def run(block: str, workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=workdir, env=env, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip


def block_env(cluster: Cluster, certificate: Path, venv: Path) -> dict[str, str]:
    env = helm_env(cluster.env)
    env["SSL_CERT_FILE"] = str(certificate)
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env.pop("VIRTUAL_ENV", None)
    return env


def manifest_exists(registry: str, path: str, certificate: Path) -> bool:
    accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"
    head = httpx.head(
        f"https://{registry}/v2/{path}/manifests/{VERSION}",
        headers={"Accept": accept},
        verify=ssl.create_default_context(cafile=certificate),
    )
    return head.status_code == 200


def can_i(cluster: Cluster, *args: str) -> bool:
    asked = cluster.kubectl(
        "auth", "can-i", *args, "--as=system:serviceaccount:tracebloc:imagerefresh", check=False
    )
    return asked.stdout.strip() == "yes"


def pinned_digest(dist: Path) -> str:
    """The image index's digest, which the release's chart pins."""
    with tarfile.open(dist / release.artifact_names(VERSION)["chart"]) as chart:
        values = chart.extractfile("imagerefresh/values.yaml")
        assert values is not None
        (digest,) = re.findall(r'^  digest: "(sha256:[0-9a-f]{64})"$', values.read().decode(), re.M)
    return digest


def check_installed(cluster: Cluster, registry: str, certificate: Path, digest: str) -> None:
    assert manifest_exists(registry, f"{PREFIX}/imagerefresh", certificate)
    assert manifest_exists(registry, f"{PREFIX}/charts/imagerefresh", certificate)
    deployment = cluster.get("deployment", "imagerefresh", "-n", "tracebloc")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    # The chart's pinned index digest, which the copy kept: the registry answers it.
    assert container["image"] == f"{registry}/{PREFIX}/imagerefresh@{digest}"
    head = httpx.head(
        f"https://{registry}/v2/{PREFIX}/imagerefresh/manifests/{digest}",
        headers={"Accept": "application/vnd.oci.image.index.v1+json"},
        verify=ssl.create_default_context(cafile=certificate),
    )
    assert head.status_code == 200
    assert head.headers["docker-content-digest"] == digest
    pods = cluster.get("pods", "-n", "tracebloc", "-l", "app.kubernetes.io/instance=imagerefresh")
    assert [p["spec"]["nodeName"] for p in pods["items"]] == [NODE]
    # The values took: the node-agents pair and the one pull secret, as the API server authorizes.
    assert can_i(cluster, "patch", "daemonsets", "-n", "tracebloc-node-agents")
    assert can_i(cluster, "get", "secrets/tracebloc-regcred", "-n", "tracebloc")
    assert not can_i(cluster, "get", "secrets/another", "-n", "tracebloc")


def check_policy_listed(listed: str) -> None:
    (console,) = re.findall(
        r"```console\n\$ kubectl get irp -n tracebloc\n(.*?)\n", README.read_text()
    )
    header, row = listed.strip().splitlines()[-2:]
    assert header.split() == console.split()
    # The rest of the row is the status a running operator writes: none runs on a kwok node.
    assert row.split()[0] == "control-plane"


def check_cli(cluster: Cluster, planned: str) -> None:
    for target in (
        "tracebloc-jobs-manager",
        "tracebloc-requests-proxy",
        "tracebloc-resource-monitor",
    ):
        assert target in planned
    policy = cluster.get("irp", "control-plane", "-n", "tracebloc")
    assert "images.tracebloc.io/reset" in policy["metadata"]["annotations"]


def make_release(dist: Path) -> None:
    done = subprocess.run(
        ["make", "-s", "release", f"DIST={dist}"], cwd=REPO, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]


def venv_without_imagerefresh(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    return path


def cleanup(cluster: Cluster, env: dict[str, str], registry: str, tagged_before: bool) -> None:
    subprocess.run(
        ["helm", "uninstall", "imagerefresh", "--namespace", "tracebloc", "--wait"], env=env,
        capture_output=True, check=False, timeout=180,
    )  # fmt: skip
    namespaces_gone(cluster)
    cluster.kubectl("delete", "node", NODE, "--ignore-not-found")
    # The shared CRD as the fixture makes it: no Helm ownership.
    cluster.kubectl("replace", "-f", str(CRD_SOURCE))
    podman("rmi", "--ignore", f"{registry}/{PREFIX}/imagerefresh:{VERSION}", check=False)
    if not tagged_before:
        podman("rmi", "--ignore", f"docker.io/tracebloc/imagerefresh:{VERSION}", check=False)


@pytest.mark.cluster
@pytest.mark.timeout(
    1500
)  # a release (two platforms, ~900 MiB written), its push, a wheel's install
@pytest.mark.usefixtures("crd_installed", "operator_image")
def test_the_readmes_blocks_publish_install_and_use_a_release_as_written(
    cluster: Cluster, tls_registry: tuple[str, Path], tmp_path: Path
) -> None:
    registry, certificate = tls_registry
    sections = shell_blocks()
    publish, install = (as_run_here(b, f"{registry}/{PREFIX}") for b in sections["Install"])
    (apply_policy,) = sections["The one policy an edge needs"]
    (cli,) = sections["The command line"]
    make_release(tmp_path / "dist")
    env = block_env(cluster, certificate, venv_without_imagerefresh(tmp_path / "venv"))
    image = f"docker.io/tracebloc/imagerefresh:{VERSION}"
    tagged_before = podman("image", "exists", image, check=False).returncode == 0
    namespaces_gone(cluster)  # what an earlier run on a kept cluster may have left
    try:
        untainted_node(cluster)
        the_edge(cluster)
        adopt_crd(cluster, "imagerefresh", "tracebloc")
        for block in (publish, install):
            done = run(block, tmp_path, env)
            assert done.returncode == 0, f"{block}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        check_installed(cluster, registry, certificate, pinned_digest(tmp_path / "dist"))
        listed = run(apply_policy, tmp_path, env)
        assert listed.returncode == 0, listed.stderr
        check_policy_listed(listed.stdout)
        used = run(cli, tmp_path, env)
        assert used.returncode == 0, f"{used.stdout[-3000:]}\n{used.stderr[-3000:]}"
        check_cli(cluster, used.stdout)
    finally:
        cleanup(cluster, env, registry, tagged_before)
