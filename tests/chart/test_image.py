"""The operator's image, run by podman exactly as the chart's pod runs it, on the local cluster.

The chart is rendered and installed (its ServiceAccount, RBAC and CRD are real); the operator
container's args, env, user, read-only root, dropped capabilities, no-new-privileges, memory
and cpu limits and writable mounts are taken from the rendered Deployment and turned into
`podman run` options one for one. The container gets what a pod gets — a ServiceAccount token
(`kubectl create token`), the cluster's CA and its namespace under
/var/run/secrets/kubernetes.io/serviceaccount/, and KUBERNETES_SERVICE_HOST/_PORT — and no
kubeconfig. With the host's network (podman has no pod network here) the service address is
the API server's own, 127.0.0.1, which its serving certificate names. Through a full refresh
it must pass its startup and liveness endpoints, tick, patch, write status and serve /metrics
within the chart's memory limit. A second run without --read-only shows with `podman diff`
that it writes nothing outside what the chart mounts writable.

The namespace enforces Pod Security Admission's `restricted` level, so the chart's own pod
(scheduled on kwok) and the target's are admitted under it. The chart names no user: podman
runs the image's own USER, as the kubelet would, and then runs it once more as an arbitrary
user with group 0 — what OpenShift's restricted-v2 assigns (`--user 1000650000:0`), a user the
image has never heard of — which must tick too.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from support.cluster_env import Cluster, eventually
from support.helm_env import (
    CHART,
    CRD_FROM_THE_TESTS,
    KWOK_SCHEDULING,
    helm,
    only,
    operator_container,
    render,
)
from support.operator_env import Operator
from support.podman_env import PODMAN_RUN, podman
from support.registry_env import ImagePusher, free_port
from support.scenario import deployment

# Two start-ups at the chart's 100m cpu limit, a helm install and a rollout: on a loaded
# 2-core machine this outgrows the suite's 300 s default, which stays for every other test.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("crd_installed"),
]

RELEASE = "img"
FULLNAME = f"{RELEASE}-imagerefresh"
POLICY = "control-plane"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
UNITS = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}


def quantity(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text))
    assert match, text
    return float(match.group(1)) * UNITS.get(match.group(2), 1)


@dataclass
class PodSettings:
    """The rendered operator pod, as `podman run` options."""

    options: list[str]
    args: list[str]
    memory_limit: int
    startup_budget: float  # seconds the startup probe allows
    liveness_port: int
    metrics_port: int
    writable: list[str] = field(default_factory=list)  # mount paths the pod may write


def pod_settings(
    objects: list[dict[str, Any]], api_host: str, api_port: int, token_dir: Path, pod_id: str
) -> PodSettings:
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    container = operator_container(objects)
    security = {**pod.get("securityContext", {}), **container["securityContext"]}
    limits = container["resources"]["limits"]
    ports = {p["name"]: int(p["containerPort"]) for p in container["ports"]}
    # The chart names a user only when the values do; else the image's USER runs, as it would
    # under the kubelet.
    user = security.get("runAsUser")
    options = [
        *PODMAN_RUN,
        "--network=host",
        *([f"--user={user}:{security.get('runAsGroup', 0)}"] if user is not None else []),
        f"--memory={int(quantity(limits['memory']))}",
        f"--memory-swap={int(quantity(limits['memory']))}",  # no swap beyond the limit
        f"--cpus={quantity(limits['cpu'])}",
    ]
    assert security["runAsNonRoot"] is True
    assert int(security.get("runAsUser", 1)) != 0
    if security.get("readOnlyRootFilesystem"):
        options.append("--read-only")
    options += [f"--cap-drop={cap}" for cap in security["capabilities"]["drop"]]
    options += [f"--cap-add={cap}" for cap in security["capabilities"].get("add", [])]
    if security.get("allowPrivilegeEscalation") is False:
        options.append("--security-opt=no-new-privileges")
    assert security["seccompProfile"]["type"] == "RuntimeDefault"  # podman's default profile
    assert not security.get("privileged")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    writable = []
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        assert "emptyDir" in volume, f"unhandled volume {volume}"
        size = int(quantity(volume["emptyDir"].get("sizeLimit", "64Mi")))
        options.append(f"--tmpfs={mount['mountPath']}:rw,size={size},mode=1777")
        writable.append(mount["mountPath"])
    for env in container.get("env", []):
        if "value" in env:
            options.append(f"--env={env['name']}={env['value']}")
        else:
            assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", env
            options.append(f"--env={env['name']}={pod_id}")
    # What the kubelet adds to every pod: the in-cluster address and the ServiceAccount files.
    assert pod["automountServiceAccountToken"] is True
    options += [
        f"--env=KUBERNETES_SERVICE_HOST={api_host}",
        f"--env=KUBERNETES_SERVICE_PORT={api_port}",
        f"--volume={token_dir}:{SERVICE_ACCOUNT_DIR}:ro",
    ]
    probe = container["startupProbe"]
    assert probe["httpGet"]["port"] == "healthz"
    return PodSettings(
        options=options,
        args=list(container["args"]),
        memory_limit=int(quantity(limits["memory"])),
        startup_budget=float(probe["periodSeconds"] * probe["failureThreshold"]),
        liveness_port=ports["healthz"],
        metrics_port=ports["metrics"],
        writable=writable,
    )


def api_server(cluster: Cluster) -> tuple[str, int, bytes]:
    """The API server's host, port and CA as the test's kubeconfig names them."""
    view = cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout
    server = json.loads(view)["clusters"][0]["cluster"]
    url = urlsplit(server["server"])
    assert url.hostname is not None
    assert url.port is not None
    return url.hostname, url.port, base64.b64decode(server["certificate-authority-data"])


def assert_serving_cert_names(host: str, port: int, ca: bytes) -> None:
    """A client that trusts only ``ca`` and checks the name ``host`` (as the in-cluster
    client does) completes a TLS handshake with the API server: its SANs cover ``host``."""
    context = ssl.create_default_context(cadata=ca.decode())
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        names = [value for _, value in tls.getpeercert().get("subjectAltName", ())]
    assert host in names, names


def service_account_files(cluster: Cluster, namespace: str, ca: bytes, directory: Path) -> Path:
    """token, ca.crt and namespace, readable by the pod's user, as the kubelet projects them."""
    directory.mkdir(mode=0o755)
    token = cluster.kubectl(
        "create", "token", FULLNAME, "-n", namespace, "--duration", "1h"
    ).stdout.strip()
    for name, content in (("token", token.encode()), ("ca.crt", ca), ("namespace", namespace)):
        path = directory / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        path.chmod(0o644)
    directory.chmod(0o755)
    return directory


@dataclass
class Container:
    """One `podman run -d` of the image; removed at the end."""

    name: str
    started: float = 0.0

    def run(
        self, image: str, settings: PodSettings, *, read_only: bool = True, user: str = ""
    ) -> None:
        options = [o for o in settings.options if read_only or o != "--read-only"]
        if user:
            options = [o for o in options if not o.startswith("--user=")] + [f"--user={user}"]
        self.started = time.monotonic()
        podman("run", "--detach", f"--name={self.name}", *options, image, *settings.args)

    def identity(self) -> str:
        """``uid:gid`` of the container's main process, as the kernel reports it."""
        status = Path(f"/proc/{self.pid()}/status").read_text()
        (uid,) = re.findall(r"^Uid:\s+(\d+)", status, re.MULTILINE)
        (gid,) = re.findall(r"^Gid:\s+(\d+)", status, re.MULTILINE)
        return f"{uid}:{gid}"

    def logs(self) -> str:
        proc = podman("logs", self.name, check=False)
        return (proc.stdout + proc.stderr)[-4000:]

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return state.stdout.strip() == "true"

    def pid(self) -> int:
        return int(podman("inspect", "--format", "{{.State.Pid}}", self.name).stdout)

    def peak_rss(self) -> int:
        status = Path(f"/proc/{self.pid()}/status").read_text()
        (kib,) = re.findall(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
        return int(kib) * 1024

    def wait_healthy(self, port: int, budget: float) -> float:
        """Seconds from `podman run` until /healthz answers 200, within ``budget``."""
        deadline = self.started + budget
        while time.monotonic() < deadline:
            if not self.running():
                pytest.fail(f"the container exited; its log:\n{self.logs()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        pytest.fail(f"/healthz did not answer within the startup probe's {budget:.0f}s:\n"
                    f"{self.logs()}")  # fmt: skip

    def changes(self) -> set[str]:
        """`podman diff`: the paths added, changed or deleted in the container's own layer."""
        lines = podman("diff", self.name).stdout.splitlines()
        return {line.split(None, 1)[1] for line in lines if line.strip()}

    def remove(self) -> None:
        podman("rm", "--force", "--time=10", self.name, check=False)


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    made: list[Container] = []
    yield made
    for container in made:
        container.remove()


def values(registry: str, namespace: str, tag: str) -> dict[str, Any]:
    return {
        **KWOK_SCHEDULING,
        **CRD_FROM_THE_TESTS,
        "insecureRegistries": [registry],
        "resolutionWindow": 0,
        "ports": {"metrics": free_port(), "liveness": free_port()},
        "policies": [
            {
                "name": POLICY,
                "spec": {
                    "interval": "1h",  # ticks come from the test, never from the clock
                    "healthyFor": "2s",  # Current seconds after its rollout settled
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


def template_image(cluster: Cluster, namespace: str) -> str:
    obj = cluster.get("deployment", "app", "-n", namespace)
    return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])


def target_phase(cluster: Cluster, namespace: str) -> str | None:
    status = cluster.get("irp", POLICY, "-n", namespace).get("status") or {}
    return next((t["phase"] for t in status.get("targets", [])), None)


RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
# What OpenShift's restricted-v2 runs a pod as when it names no user: the first user of the
# namespace's range (openshift.io/sa.scc.uid-range), with group 0.
OPENSHIFT_USER = "1000650000:0"


def restricted_app(tag: str) -> dict[str, Any]:
    """The target: a Deployment whose pods `restricted` admits."""
    app = deployment("app", {"app": tag}, replicas=1)
    pod = app["spec"]["template"]["spec"]
    pod["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    pod["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": 1000,
    }
    return app


def test_the_image_runs_the_operator_under_the_charts_pod_settings_through_a_full_refresh(
    cluster: Cluster,
    registry: str,
    pusher: ImagePusher,
    namespace: str,
    operator_image: str,
    containers: list[Container],
    tmp_path: Path,
) -> None:
    cluster.kubectl("label", "namespace", namespace, *(f"{k}={v}" for k, v in RESTRICTED.items()))
    pushed = pusher.push(f"{namespace}/app", "prod", seed="image-run", kind="oci-index")
    tag = f"{registry}/{namespace}/app:prod"
    chart_values = values(registry, namespace, tag)
    objects = render(chart_values, namespace=namespace, release=RELEASE)
    installed = helm(
        "install", RELEASE, str(CHART), "--namespace", namespace, "--wait", "--timeout", "90s",
        values=chart_values, env=cluster.env,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    try:
        host, port, ca = api_server(cluster)
        assert_serving_cert_names(host, port, ca)
        tokens = service_account_files(cluster, namespace, ca, tmp_path / "serviceaccount")
        settings = pod_settings(objects, host, port, tokens, pod_id=f"{FULLNAME}-podman")
        assert not any("kubeconfig" in a.lower() for a in settings.args + settings.options)
        # The chart's pod was admitted under `restricted` (helm --wait saw it Ready), as it is.
        labels = cluster.get("namespace", namespace)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        (pod,) = cluster.get(
            "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={RELEASE}"
        )["items"]
        assert "runAsUser" not in pod["spec"]["securityContext"]
        assert not any("--user=" in o for o in settings.options)
        cluster.apply(restricted_app(tag), namespace=namespace)

        run = Container(f"imagerefresh-test-{secrets.token_hex(3)}")
        containers.append(run)
        run.run(operator_image, settings)
        startup = run.wait_healthy(settings.liveness_port, settings.startup_budget)
        assert run.identity() == "65532:65532"  # the image's USER
        operator = Operator(cluster, registry, settings.metrics_port, tmp_path / "unused.log")
        operator.wait_first_tick(namespace, POLICY, timeout=60)

        pinned = f"{registry}/{namespace}/app@{pushed.digest}"
        eventually(
            lambda: template_image(cluster, namespace) == pinned,
            timeout=60,
            what="the operator's patch pinning the index digest",
        )

        def current() -> bool:
            operator.tick(namespace, POLICY, timeout=60)
            return target_phase(cluster, namespace) == "Current"

        eventually(current, timeout=120, what="the target Current", interval=0.5)
        assert operator.metric("imagerefresh_refreshes_total", outcome="succeeded") >= 1, httpx.get(
            f"http://127.0.0.1:{settings.metrics_port}/metrics"
        ).text[-2000:]
        healthz = httpx.get(f"http://127.0.0.1:{settings.liveness_port}/healthz", timeout=5)
        assert healthz.status_code == 200
        assert run.running()
        peak = run.peak_rss()
        log = run.logs()
        assert not re.search(r"forbidden|\b403\b|permission denied|read-only", log, re.I), log
        print(
            f"image {operator_image}: start-up to /healthz {startup:.1f} s; peak RSS "
            f"{peak / 2**20:.1f} MiB of the chart's {settings.memory_limit / 2**20:.0f} MiB limit"
        )
        assert peak < settings.memory_limit

        # Without --read-only, the same run writes nothing but where the chart mounts writable.
        # The baseline is what podman itself puts in a container's layer (its mount points).
        run.remove()
        baseline = Container(f"imagerefresh-baseline-{secrets.token_hex(3)}")
        writer = Container(f"imagerefresh-writable-{secrets.token_hex(3)}")
        containers += [baseline, writer]
        inert = PodSettings(**{**settings.__dict__, "args": ["--help"]})
        baseline.run(operator_image, inert, read_only=False)
        writer.run(operator_image, settings, read_only=False)
        writer.wait_healthy(settings.liveness_port, settings.startup_budget)
        operator.tick(namespace, POLICY, timeout=60)
        written = writer.changes() - baseline.changes()
        print(f"podman diff beyond podman's own mount points: {sorted(written)}")
        stray = {p for p in written if not any(p.startswith(w) for w in settings.writable)}
        assert not stray, f"written outside the chart's writable mounts: {sorted(stray)}"

        # As a user the image does not know, with group 0 (OpenShift's restricted-v2), it ticks.
        writer.remove()
        arbitrary = Container(f"imagerefresh-openshift-{secrets.token_hex(3)}")
        containers.append(arbitrary)
        arbitrary.run(operator_image, settings, user=OPENSHIFT_USER)
        arbitrary.wait_healthy(settings.liveness_port, settings.startup_budget)
        assert arbitrary.identity() == OPENSHIFT_USER
        operator.tick(namespace, POLICY, timeout=60)  # a whole tick of this process
        assert target_phase(cluster, namespace) == "Current"
        log = arbitrary.logs()
        assert not re.search(r"forbidden|permission denied|read-only|KeyError", log, re.I), log
    finally:
        # kopf's finalizer is on the policy: delete it while an operator still runs.
        cluster.kubectl("delete", "irp", "--all", "-n", namespace, "--timeout=30s", check=False)
        helm("uninstall", RELEASE, "--namespace", namespace, env=cluster.env)
