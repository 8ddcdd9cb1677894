"""The chart installed with `helm install` on the local cluster (a real API server with RBAC).

- Per value profile, the operator pod's QoS class is the one the API server computes
  (`status.qosClass` of the live pod), never one derived from the values (context documents
  000 and 001): it must be Guaranteed.
- The operator, run as `imagerefresh run` with the chart's own arguments and the chart's
  ServiceAccount token, refreshes the declared targets end to end, and the API server refuses
  that identity a workload it did not declare and a namespace outside the allow-list.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, KubectlError, eventually
from support.helm_env import CHART, CRD_FROM_THE_TESTS, KWOK_SCHEDULING, helm
from support.operator_env import IMAGEREFRESH, Operator, kwok_pod_template
from support.registry_env import ImagePusher, free_port

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crd_installed")]

RELEASE = "ir"
FULLNAME = f"{RELEASE}-imagerefresh"
DIGEST = "sha256:" + "5e" * 32
POLICY = "control-plane"
INSTALL_TIMEOUT = "90s"


def _quantity(text: str) -> float:
    """A Kubernetes quantity as a number (enough of the grammar for cpu and memory)."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text))
    assert match, text
    return float(match.group(1)) * units.get(match.group(2), 1)


@dataclass
class Release:
    cluster: Cluster
    namespace: str
    name: str = RELEASE

    def install(self, values: dict[str, Any]) -> None:
        result = helm(
            "install",
            self.name,
            str(CHART),
            "--namespace",
            self.namespace,
            "--wait",
            "--timeout",
            INSTALL_TIMEOUT,
            values={**KWOK_SCHEDULING, **CRD_FROM_THE_TESTS, **values},
            env=self.cluster.env,
        )
        assert result.returncode == 0, f"helm install failed:\n{result.stderr}"

    def uninstall(self) -> None:
        helm("uninstall", self.name, "--namespace", self.namespace, env=self.cluster.env)

    def pod(self) -> dict[str, Any]:
        def one() -> dict[str, Any] | None:
            pods = self.cluster.get(
                "pods", "-n", self.namespace, "-l", f"app.kubernetes.io/instance={self.name}"
            )["items"]
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return live[0] if len(live) == 1 and live[0]["status"].get("qosClass") else None

        return eventually(one, timeout=60, what=f"the operator pod in {self.namespace}")


@pytest.fixture
def release(cluster: Cluster, namespace: str) -> Iterator[Release]:
    installed = Release(cluster, namespace)
    yield installed
    installed.uninstall()


@pytest.fixture
def extra_namespaces(cluster: Cluster, namespace: str) -> Iterator[dict[str, str]]:
    """Two more namespaces beside `namespace`: an allowed target, and one outside the allow-list."""
    names = {"agents": f"{namespace[:54]}-agents", "outside": f"{namespace[:53]}-outside"}
    for name in names.values():
        cluster.kubectl("create", "namespace", name)
        eventually(
            lambda n=name: cluster.get("serviceaccount", "default", "-n", n),
            timeout=30,
            what=f"ServiceAccount default in {name}",
        )
    yield names
    for name in names.values():
        cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def assert_guaranteed(pod: dict[str, Any]) -> None:
    """The API server's verdict first; then why, container by container (init ones included)."""
    spec = pod["spec"]
    resources = {
        c["name"]: c.get("resources")
        for c in [*spec.get("initContainers", []), *spec["containers"]]
    }
    assert pod["status"]["qosClass"] == "Guaranteed", f"{pod['status']['qosClass']}: {resources}"
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        for dimension in ("cpu", "memory"):
            requested = _quantity(c["resources"]["requests"][dimension])
            assert requested == _quantity(c["resources"]["limits"][dimension])


def assert_hardened(pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert c["imagePullPolicy"] == "IfNotPresent"


# -- QoS per value profile ----------------------------------------------------------------------


def profile_values(profile: str, namespace: str, agents: str) -> dict[str, Any]:
    pair = {"policyNamespace": namespace, "targetNamespace": agents}
    tracked = {"containers": [{"name": "app", "image": "example.test/app:prod"}]}
    return {
        "defaults": {},
        "policies-cross-namespace-digest": {
            "image": {"repository": "example.test/ops/imagerefresh", "digest": DIGEST},
            "allowNamespacePairs": [pair],
            "rbac": {"pullSecrets": {"names": ["regcred"]}},
            "policies": [
                {
                    "name": POLICY,
                    "spec": {
                        "targets": [
                            {"kind": "Deployment", "name": "jobs-manager", **tracked},
                            {"kind": "DaemonSet", "name": "agent", "namespace": agents, **tracked},
                        ]
                    },
                }
            ],
        },
        "all-namespaces-metrics-service": {
            "watch": {"allNamespaces": True},
            "metrics": {"service": {"enabled": True}},
            "resources": {"cpu": "250m", "memory": "256Mi"},
        },
    }[profile]


@pytest.mark.parametrize(
    "profile", ["defaults", "policies-cross-namespace-digest", "all-namespaces-metrics-service"]
)
def test_installed_operator_pod_is_guaranteed_qos_as_computed_by_the_api_server(
    profile: str,
    cluster: Cluster,
    namespace: str,
    extra_namespaces: dict[str, str],
    release: Release,
) -> None:
    release.install(profile_values(profile, namespace, extra_namespaces["agents"]))
    pod = release.pod()
    assert pod["spec"]["nodeName"].startswith("kwok-node-")
    assert_guaranteed(pod)
    assert_hardened(pod)


def test_a_namespace_pattern_installs_with_cluster_wide_policy_rights_and_no_secret_read(
    cluster: Cluster, namespace: str, extra_namespaces: dict[str, str], release: Release
) -> None:
    """The operator watches policies cluster-wide for a pattern: the API server must grant its
    ServiceAccount that watch and the status writes, and still no Secret anywhere."""
    agents, outside = extra_namespaces["agents"], extra_namespaces["outside"]
    release.install({"watch": {"namespaces": [f"{namespace}-ag*"]}})
    identity = f"system:serviceaccount:{namespace}:{FULLNAME}"

    def allowed(*request: str) -> bool:
        answer = cluster.kubectl("auth", "can-i", *request, "--as", identity, check=False)
        assert answer.stdout.strip() in {"yes", "no"}, answer.stdout + answer.stderr
        return answer.stdout.strip() == "yes"

    policies = "imagerefreshpolicies.images.tracebloc.io"
    assert allowed("watch", policies, "--all-namespaces")
    assert allowed("update", policies, "--subresource=status", "-n", agents)
    assert can_i(cluster, identity, "create", "events", agents)
    assert not can_i(cluster, identity, "patch", "imagerefreshpolicies", agents)
    assert not can_i(cluster, identity, "get", "secrets", outside)
    args = release.pod()["spec"]["containers"][0]["args"]
    assert f"--namespace={namespace}-ag*" in args


def test_nodes_are_readable_by_the_operator_only_once_the_values_ask_for_it(
    cluster: Cluster, namespace: str, release: Release
) -> None:
    """The API server's own verdict on the chart's RBAC: no node access by default; with
    offline.readNodes, get and list on nodes (cluster-wide) and nothing more on them."""
    identity = f"system:serviceaccount:{namespace}:{FULLNAME}"

    def allowed(*request: str) -> bool:
        answer = cluster.kubectl("auth", "can-i", *request, "--as", identity, check=False)
        assert answer.stdout.strip() in {"yes", "no"}, answer.stdout + answer.stderr
        return answer.stdout.strip() == "yes"

    release.install({})
    assert not allowed("list", "nodes")
    assert not allowed("get", "nodes")
    upgraded = helm(
        "upgrade", release.name, str(CHART), "--namespace", namespace, "--wait",
        "--timeout", INSTALL_TIMEOUT,
        values={**KWOK_SCHEDULING, **CRD_FROM_THE_TESTS, "offline": {"readNodes": True}},
        env=cluster.env,
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    assert allowed("list", "nodes")
    assert allowed("get", "nodes/kwok-node-0")
    for verb in ("watch", "update", "patch", "delete"):
        assert not allowed(verb, "nodes"), verb
    assert not allowed("patch", "nodes", "--subresource=status")
    args = release.pod()["spec"]["containers"][0]["args"]
    assert {"--read-nodes", "--node-status-max-images=50"} <= set(args)


# -- the operator as the chart's ServiceAccount --------------------------------------------------


@dataclass
class ChartOperator(Operator):
    """`imagerefresh run` with the chart's arguments and environment, as a given identity."""

    argv: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.argv, stdout=log, stderr=log, env=self.environment)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"imagerefresh run exited; log:\n{self.log()[-3000:]}")
            try:
                httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("imagerefresh run did not serve metrics")

    def peak_rss_bytes(self) -> int:
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        (kib,) = re.findall(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
        return int(kib) * 1024


def workload(kind: str, name: str, image: str, **template_spec: Any) -> dict[str, Any]:
    template = kwok_pod_template({"app": image}, labels={"app": name})
    template["spec"].update(template_spec)
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}, "template": template}
    if kind == "Deployment":
        spec["replicas"] = 1
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def pull_secret(name: str, registry: str) -> dict[str, Any]:
    auth = base64.b64encode(b"edge:not-a-real-password").decode()
    config = json.dumps({"auths": {registry: {"auth": auth}}}).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config).decode()},
    }


def image_of(cluster: Cluster, kind: str, namespace: str, name: str) -> str:
    obj = cluster.get(kind.lower(), name, "-n", namespace)
    (container,) = obj["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def phases(cluster: Cluster, namespace: str, policy: str) -> dict[str, str]:
    status = cluster.get("irp", policy, "-n", namespace).get("status") or {}
    return {t["name"]: t["phase"] for t in status.get("targets", [])}


def can_i(cluster: Cluster, identity: str, verb: str, resource: str, namespace: str) -> bool:
    proc = cluster.kubectl(
        "auth", "can-i", verb, resource, "-n", namespace, "--as", identity, check=False
    )
    assert proc.stdout.strip() in {"yes", "no"}, proc.stdout + proc.stderr
    return proc.stdout.strip() == "yes"


def patch_as(cluster: Cluster, identity: str, namespace: str, name: str, image: str) -> str:
    """Try the operator's own kind of write (a JSON Patch of the image) as `identity`."""
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}]
    with pytest.raises(KubectlError) as refused:
        cluster.kubectl(
            "patch", "deployment", name, "-n", namespace, "--as", identity,
            "--type", "json", "-p", json.dumps(patch),
        )  # fmt: skip
    return refused.value.stderr


def test_operator_as_the_charts_service_account_refreshes_declared_targets_and_nothing_else(
    cluster: Cluster,
    registry: str,
    pusher: ImagePusher,
    namespace: str,
    extra_namespaces: dict[str, str],
    release: Release,
    tmp_path: Path,
) -> None:
    home, agents, outside = namespace, extra_namespaces["agents"], extra_namespaces["outside"]
    manager = pusher.push(f"{home}/jobs-manager", "prod", seed="jm-1", kind="oci-index")
    monitor = pusher.push(f"{home}/resource-monitor", "prod", seed="rm-1")
    manager_tag = f"{registry}/{home}/jobs-manager:prod"
    monitor_tag = f"{registry}/{home}/resource-monitor:prod"
    cluster.apply(pull_secret("regcred", registry), namespace=home)
    cluster.apply(
        workload("Deployment", "jobs-manager", manager_tag, imagePullSecrets=[{"name": "regcred"}]),
        workload("Deployment", "undeclared", manager_tag),
        namespace=home,
    )
    cluster.apply(workload("DaemonSet", "resource-monitor", monitor_tag), namespace=agents)
    cluster.apply(workload("Deployment", "outside", manager_tag), namespace=outside)

    release.install(
        {
            "insecureRegistries": [registry],
            "allowNamespacePairs": [{"policyNamespace": home, "targetNamespace": agents}],
            "rbac": {"pullSecrets": {"names": ["regcred"]}},
            "resolutionWindow": 0,
            "policies": [
                {
                    "name": POLICY,
                    "spec": {
                        "interval": "1h",  # ticks come from the test, never from the clock
                        "healthyFor": "2s",  # Current seconds after its rollout settled
                        "targets": [
                            {
                                "kind": "Deployment",
                                "name": "jobs-manager",
                                "containers": [{"name": "app", "image": manager_tag}],
                            },
                            {
                                "kind": "DaemonSet",
                                "name": "resource-monitor",
                                "namespace": agents,
                                "containers": [{"name": "app", "image": monitor_tag}],
                            },
                        ],
                    },
                }
            ],
        }
    )
    assert_guaranteed(release.pod())
    identity = f"system:serviceaccount:{home}:{FULLNAME}"

    # The chart's own command line for the operator, with ports free on this machine.
    deployed = cluster.get("deployment", FULLNAME, "-n", home)
    (spec,) = deployed["spec"]["template"]["spec"]["containers"]
    metrics_port = free_port()
    args = [a for a in spec["args"] if not a.startswith(("--metrics-port=", "--liveness-port="))]
    args += [
        f"--metrics-port={metrics_port}",
        f"--liveness-port={free_port()}",
        "--bind-address=127.0.0.1",
    ]
    environment = {
        **cluster.env,
        **{e["name"]: e["value"] for e in spec["env"] if "value" in e},
        "POD_NAME": "chart-test",  # the chart sets it from the pod's name
        "KUBECONFIG": str(
            service_account_kubeconfig(cluster, home, FULLNAME, tmp_path / "sa.kubeconfig")
        ),
    }
    environment.pop("KUBERNETES_SERVICE_HOST", None)
    operator = ChartOperator(
        cluster,
        registry,
        metrics_port,
        tmp_path / "operator.log",
        argv=(str(IMAGEREFRESH), "run", *args),
        environment=environment,
    )
    operator.start()
    try:
        operator.wait_first_tick(home, POLICY)

        def settled() -> dict[str, str] | None:
            operator.tick(home, POLICY)
            found = phases(cluster, home, POLICY)
            return found if set(found.values()) == {"Current"} else None

        eventually(settled, timeout=90, what="both declared targets Current", interval=0.5)
        assert image_of(cluster, "Deployment", home, "jobs-manager") == (
            f"{registry}/{home}/jobs-manager@{manager.digest}"
        )
        assert image_of(cluster, "DaemonSet", agents, "resource-monitor") == (
            f"{registry}/{home}/resource-monitor@{monitor.digest}"
        )
        # Nothing else was touched, and the chart's RBAC was enough for kopf and the operator.
        assert image_of(cluster, "Deployment", home, "undeclared") == manager_tag
        assert image_of(cluster, "Deployment", outside, "outside") == manager_tag
        log = operator.log()
        assert not re.search(r"forbidden|\b403\b|permission", log, re.IGNORECASE), log[-3000:]
        # The measured footprint fits the chart's default memory limit with room to spare.
        limit = _quantity(
            yaml.safe_load((CHART / "values.yaml").read_text())["resources"]["memory"]
        )
        peak = operator.peak_rss_bytes()
        print(f"operator peak RSS: {peak / 2**20:.1f} MiB of a {limit / 2**20:.0f} MiB limit")
        assert peak < 0.75 * limit

        # What the API server allows this identity: declared names only, allowed namespaces only.
        assert can_i(cluster, identity, "patch", "deployments/jobs-manager", home)
        assert can_i(cluster, identity, "patch", "daemonsets/resource-monitor", agents)
        assert not can_i(cluster, identity, "patch", "deployments/undeclared", home)
        assert not can_i(cluster, identity, "get", "deployments/undeclared", home)
        assert not can_i(cluster, identity, "patch", "deployments/outside", outside)
        assert not can_i(cluster, identity, "list", "pods", outside)
        assert can_i(cluster, identity, "get", "secrets/regcred", home)
        assert not can_i(cluster, identity, "get", "secrets/other", home)
        assert not can_i(cluster, identity, "list", "secrets", home)
        assert not can_i(cluster, identity, "list", "customresourcedefinitions", "default")
        # Leader election (on by default): it took its Lease, the only one it may touch.
        lease = cluster.get("lease", "imagerefresh", "-n", home)["spec"]
        assert lease["holderIdentity"].startswith("chart-test_")
        assert operator.metric("imagerefresh_leader") == 1
        for verb in ("get", "update", "watch"):
            assert can_i(cluster, identity, verb, "leases.coordination.k8s.io/imagerefresh", home)
            assert not can_i(cluster, identity, verb, "leases.coordination.k8s.io/other", home)
        assert can_i(cluster, identity, "create", "leases.coordination.k8s.io", home)
        assert not can_i(cluster, identity, "list", "leases.coordination.k8s.io", home)
        assert not can_i(
            cluster, identity, "update", "leases.coordination.k8s.io/imagerefresh", agents
        )
        pinned = f"{registry}/{home}/jobs-manager@{manager.digest}"
        for ns, name in ((home, "undeclared"), (outside, "outside")):
            error = patch_as(cluster, identity, ns, name, pinned)
            assert "forbidden" in error.lower(), error
            assert image_of(cluster, "Deployment", ns, name) == manager_tag

        # And the operator itself, asked by a policy to refresh the undeclared workload, is
        # refused by the API server: the target errs, the workload is untouched.
        cluster.apply(
            {
                "apiVersion": "images.tracebloc.io/v1alpha1",
                "kind": "ImageRefreshPolicy",
                "metadata": {"name": "stray"},
                "spec": {
                    "interval": "1h",
                    "targets": [
                        {
                            "kind": "Deployment",
                            "name": "undeclared",
                            "containers": [{"name": "app", "image": manager_tag}],
                        }
                    ],
                },
            },
            namespace=home,
        )
        operator.wait_first_tick(home, "stray")
        stray = cluster.get("irp", "stray", "-n", home)["status"]["targets"][0]
        assert stray["phase"] == "Error"
        assert "forbidden" in stray["message"].lower()
        assert image_of(cluster, "Deployment", home, "undeclared") == manager_tag
    finally:
        # kopf's finalizer is on the policies: delete them while the operator still runs.
        cluster.kubectl("delete", "irp", "--all", "-n", home, "--timeout=30s", check=False)
        operator.stop()
