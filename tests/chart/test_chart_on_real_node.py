"""The chart's own operator pod on the real node, in the chart's host-network mode.

The image `make image` built is pushed to the test registry and pulled by the node's kubelet,
as an edge's would be (an image loaded into containerd by hand would be pulled anyway once the
kubelet has pulled its ID under another name: e2e/README.md "What the real node reports"). The
chart is installed with ``hostNetwork.enabled`` and the API server's loopback address, and the
pod the kubelet starts must pass its probes (which dial 127.0.0.1 only), tick and pin a
workload on the same node.

The edge's telemetry: the edge chart's log collector reads files by a glob of the kubelet's log
path (tests/chart/fixtures/edge-collector.yaml, from the edge chart's source). Rendered for the
release namespace the operator runs in, the operator's container name and the node's log
directory, it must match the operator pod's real log file on the real node — and nothing else —
whose lines, in the kubelet's CRI format, carry the operator's JSON decisions about the target.
"""

from __future__ import annotations

import glob
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cluster_env import Cluster, eventually
from support.helm_env import CHART, CRD_FROM_THE_TESTS, helm
from support.operator_env import Operator
from support.podman_env import podman
from support.realnode_env import SLEEP, RealNode
from support.registry_env import ImagePusher, free_port
from support.scenario import images

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
import realnode

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crd_installed")]

EDGE_COLLECTOR = yaml.safe_load(
    (Path(__file__).parent / "fixtures" / "edge-collector.yaml").read_text()
)
# The kubelet's CRI log format: <time> <stream> <P(artial)|F(ull)> <text>.
CRI_LINE = re.compile(r"^(?P<time>\S+) (?P<stream>stdout|stderr) (?P<tag>[PF]) (?P<text>.*)$")

RELEASE = "node"
POLICY = "edge"


def push_for_the_node(image: str, registry: str, namespace: str) -> str:
    """``podman push`` the image to the test registry (plain HTTP); the reference pushed."""
    name = image.rsplit("/", 1)[-1]  # imagerefresh:<version>
    pushed = f"{registry}/{namespace}/{name}"
    podman("push", "--quiet", "--tls-verify=false", image, pushed, timeout=300)
    return pushed


def api_port(cluster: Cluster) -> int:
    server = cluster.kubectl(
        "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
    ).stdout.strip()
    return int(server.rsplit(":", 1)[1])


def chart_values(node: RealNode, image: str, registry: str, port: int, tag: str) -> dict[str, Any]:
    repository, _, image_tag = image.rpartition(":")
    placement = {
        "nodeSelector": {"type": "real"},
        "tolerations": [
            {"key": "imagerefresh.test/real-node", "operator": "Exists", "effect": "NoSchedule"}
        ],
    }
    return {
        **placement,
        **CRD_FROM_THE_TESTS,
        "image": {"repository": repository, "tag": image_tag, "digest": ""},
        "hostNetwork": {"enabled": True, "apiServer": {"host": "127.0.0.1", "port": port}},
        "insecureRegistries": [registry],
        "resolutionWindow": 0,
        "ports": {"metrics": free_port(), "liveness": free_port()},
        "policies": [
            {
                "name": POLICY,
                "spec": {
                    "interval": "1h",
                    "targets": [
                        {
                            "kind": "Deployment",
                            "name": "app",
                            "containers": [{"name": "app", "image": tag}],
                        }
                    ],
                },
            }
        ],
    }


def test_the_charts_pod_in_host_network_mode_runs_on_the_real_node_and_pins(
    cluster: Cluster,
    real_node: RealNode,
    registry: str,
    pusher: ImagePusher,
    namespace: str,
    operator_image: str,
    tmp_path: Path,
) -> None:
    real_node.trust(registry)
    image = push_for_the_node(operator_image, registry, namespace)
    pusher.push(f"{namespace}/app", "prod", seed="chart-node", entrypoint=SLEEP)
    tag = f"{registry}/{namespace}/app:prod"
    cluster.apply(real_node.deployment("app", tag), namespace=namespace)
    values = chart_values(real_node, image, registry, api_port(cluster), tag)
    installed = helm(
        "install", RELEASE, str(CHART), "--namespace", namespace, "--wait", "--timeout", "180s",
        values=values, env=cluster.env,
    )  # fmt: skip
    pods = cluster.get("pods", "-n", namespace, "-l", "app.kubernetes.io/name=imagerefresh")
    assert installed.returncode == 0, f"{installed.stderr}\n{pods}"
    (pod,) = pods["items"]
    assert pod["spec"]["nodeName"] == real_node.name
    assert pod["spec"]["hostNetwork"] is True
    ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"  # the kubelet's probes, on 127.0.0.1, passed
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    operator = Operator(cluster, registry, values["ports"]["metrics"], tmp_path / "unused.log")
    operator.wait_first_tick(namespace, POLICY, timeout=90)
    assert images(cluster, namespace, "app") == {"app": tag}  # adopted, nothing patched
    newer = pusher.push(f"{namespace}/app", "prod", seed="chart-node-2", entrypoint=SLEEP)
    pinned = f"{registry}/{namespace}/app@{newer.digest}"

    def patched() -> bool:
        operator.tick(namespace, POLICY, timeout=60)
        return images(cluster, namespace, "app") == {"app": pinned}

    eventually(patched, timeout=120, what="the chart's operator pinning the new push", interval=1)
    assert real_node.running(namespace, "app")[0]["status"]["containerStatuses"][0][
        "imageID"
    ].endswith(f"@{newer.digest}")

    def refreshed() -> list[dict[str, Any]] | None:
        operator.tick(namespace, POLICY, timeout=60)
        found = [
            d for d in decisions(collected(real_node, namespace, pod)) if d["reason"] == "Refreshed"
        ]
        return found or None

    (decision, *_) = eventually(
        refreshed, timeout=120, what="a Refreshed decision in the log", interval=1
    )
    assert decision["policy"] == f"{namespace}/{POLICY}"
    assert decision["target"] == f"Deployment {namespace}/app"
    assert decision["phase"] == "Current"
    assert decision["digests"] == {"app": newer.digest}
    assert decision["level"] == "info"
    helm("uninstall", RELEASE, "--namespace", namespace, "--wait", env=cluster.env)


def collected(node: RealNode, namespace: str, pod: dict[str, Any]) -> list[str]:
    """The lines the edge's collector would read for the operator: its include glob rendered
    for the release namespace, the operator's container and the node's log directory, matched
    on the node's filesystem — exactly the operator pod's log file, and nothing else."""
    (container,) = [c["name"] for c in pod["spec"]["containers"]]
    include = EDGE_COLLECTOR["include"].format(
        hostLogsPath=str(realnode.pod_logs(node.state)).rstrip("/"),
        releaseNamespace=namespace,
        container=container,
    )
    matched = glob.glob(include)
    metadata = pod["metadata"]
    directory = f"{namespace}_{metadata['name']}_{metadata['uid']}"
    assert matched == [str(realnode.pod_logs(node.state) / directory / container / "0.log")], (
        include,
        matched,
    )
    return Path(matched[0]).read_text().splitlines()


def decisions(lines: list[str]) -> list[dict[str, Any]]:
    """The operator's decision lines, parsed as the collector's container parser does (the
    CRI envelope off, partial lines joined), then as JSON."""
    found, partial = [], ""
    for line in lines:
        match = CRI_LINE.match(line)
        assert match, line
        partial += match["text"]
        if match["tag"] == "P":
            continue
        text, partial = partial, ""
        record = json.loads(text)  # every line the operator writes is one JSON object
        if record.get("event") == "decision":
            found.append(record)
    return found
