"""`make demo`: the operator's main job, narrated, on the local cluster and registry.

It brings up the bundled environment (or uses the cluster in KUBECONFIG and a registry of its
own), installs the CRD, creates the three control-plane workloads of the edge this operator was
written for, pushes their images, runs `imagerefresh run`, pushes a new jobs-manager digest and
tells what happens, step by step. It leaves nothing running.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.registry_env import ImagePusher, RegistryServer, free_port  # noqa: E402

IMAGEREFRESH = Path(sys.executable).with_name("imagerefresh")
CP, AGENTS = "tracebloc", "tracebloc-node-agents"


def say(text: str) -> None:
    print(f"\n▶ {text}", flush=True)


def detail(text: str) -> None:
    print(f"    {text}", flush=True)


class Demo:
    def __init__(self) -> None:
        self.env = dict(os.environ)
        bin_dir = subprocess.run(
            [str(REPO / "e2e" / "build-binaries"), "--print-bin-dir"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}"  # pinned kubectl
        self.cleanups: list[Callable[[], None]] = []

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            ["kubectl", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def environment(self) -> str:
        if self.env.get("KUBECONFIG"):
            say(f"Using the cluster in KUBECONFIG ({self.env['KUBECONFIG']})")
            server = RegistryServer(Path(tempfile.mkdtemp(prefix="demo-registry-")), free_port())
            server.start()
            self.cleanups.append(server.stop)
            return server.host
        say(
            "Bringing up the local cluster (etcd, kube-apiserver, controllers, kwok) and a registry"
        )
        state = str(REPO / ".e2e-demo")
        self.env["IMAGEREFRESH_E2E_STATE"] = state
        up = subprocess.run(
            [str(REPO / "e2e" / "local"), "up"],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=600,
        )
        if up.returncode != 0:
            raise RuntimeError(f"e2e/local up failed:\n{up.stderr[-2000:]}")
        self.cleanups.append(
            lambda: subprocess.run(
                [str(REPO / "e2e" / "local"), "down"],
                env=self.env,
                capture_output=True,
                timeout=120,
            )
        )
        for line in up.stdout.splitlines():
            if line.startswith("export "):
                key, _, value = line.removeprefix("export ").partition("=")
                (value,) = shlex.split(value)
                self.env[key] = value.replace("$PATH", self.env.get("PATH", ""))
        detail(self.kubectl("get", "nodes", "--no-headers").strip().replace("\n", "\n    "))
        return self.env["IMAGEREFRESH_TEST_REGISTRY"]

    def workloads(self, registry: str, digests: dict[str, str]) -> None:
        def template(app: str, containers: dict[str, str]) -> dict[str, Any]:
            # The kubelet would report the digest each tag resolved to; kwok reports what the
            # annotation says (see e2e/README.md).
            ids = {
                f"imagerefresh.test/image-id.{name}": f"{image.rsplit(':', 1)[0]}@{digests[image]}"
                for name, image in containers.items()
            }
            return {
                "metadata": {"labels": {"app": app}, "annotations": ids},
                "spec": {
                    "containers": [
                        {"name": n, "image": i, "imagePullPolicy": "IfNotPresent"}
                        for n, i in containers.items()
                    ],
                    "nodeSelector": {"type": "kwok"},
                    "tolerations": [
                        {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            }

        jm, pm, rm = (
            f"{registry}/tracebloc/{n}:prod"
            for n in ("jobs-manager", "pods-monitor", "resource-monitor")
        )
        for ns in (CP, AGENTS):
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

        def deployment(name: str, containers: dict[str, str]) -> dict[str, Any]:
            return {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": CP},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": template(name, containers),
                },
            }

        self.apply(
            deployment("jobs-manager", {"api": jm, "pods-monitor-container": pm}),
            deployment("requests-proxy", {"proxy": jm}),
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "resource-monitor", "namespace": AGENTS},
                "spec": {
                    "selector": {"matchLabels": {"app": "resource-monitor"}},
                    "template": template("resource-monitor", {"tracebloc-resource-monitor": rm}),
                },
            },
        )
        for kind, ns, name in (
            ("deployment", CP, "jobs-manager"),
            ("deployment", CP, "requests-proxy"),
            ("daemonset", AGENTS, "resource-monitor"),
        ):
            self.kubectl("rollout", "status", "-n", ns, f"{kind}/{name}", "--timeout=120s")
        detail(
            "jobs-manager (api + pods-monitor-container), requests-proxy (same image), "
            "resource-monitor (DaemonSet on every node) — all on :prod tags"
        )

    def policy(self, registry: str) -> dict[str, Any]:
        tag = f"{registry}/tracebloc"
        return {
            "apiVersion": "images.tracebloc.io/v1alpha1",
            "kind": "ImageRefreshPolicy",
            "metadata": {"name": "control-plane", "namespace": CP},
            "spec": {
                "interval": "15m",
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "jobs-manager",
                        "containers": [
                            {"name": "api", "image": f"{tag}/jobs-manager:prod"},
                            {"name": "pods-monitor-container", "image": f"{tag}/pods-monitor:prod"},
                        ],
                    },
                    {
                        "kind": "Deployment",
                        "name": "requests-proxy",
                        "containers": [{"name": "proxy", "image": f"{tag}/jobs-manager:prod"}],
                    },
                    {
                        "kind": "DaemonSet",
                        "name": "resource-monitor",
                        "namespace": AGENTS,
                        "containers": [
                            {
                                "name": "tracebloc-resource-monitor",
                                "image": f"{tag}/resource-monitor:prod",
                            }
                        ],
                    },
                ],
            },
        }

    def status(self) -> dict[str, Any]:
        return self.get("irp", "-n", CP, "control-plane").get("status") or {}

    def wait(
        self, what: str, check: Callable[[dict[str, Any]], bool], timeout: float = 90
    ) -> dict[str, Any]:
        """Wait for the operator — never poking it: it follows rollouts by itself."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status and check(status):
                return status
            time.sleep(1)
        raise RuntimeError(f"timed out waiting for {what}")

    def refresh_now(self) -> None:
        """Ask for one tick now (what a release pipeline does after pushing a build),
        instead of waiting out the 15m interval."""
        self.kubectl(
            "annotate",
            "--overwrite",
            "-n",
            CP,
            "irp",
            "control-plane",
            f"images.tracebloc.io/refresh-now=demo-{time.time():.0f}",
        )

    def show_irp(self) -> None:
        detail(self.kubectl("get", "irp", "-n", CP).rstrip().replace("\n", "\n    "))

    def run(self) -> None:
        registry = self.environment()
        pusher = ImagePusher(registry)
        say(f"Pushing the control-plane images to the registry at {registry}")
        digests = {}
        for name in ("jobs-manager", "pods-monitor", "resource-monitor"):
            pushed = pusher.push(f"tracebloc/{name}", "prod", seed=f"{name}-1", kind="oci-index")
            digests[pushed.reference] = pushed.digest
            detail(f"{pushed.reference} → {pushed.digest[:19]}…")
        say("Creating the CRD and the three control-plane workloads")
        self.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
        self.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/imagerefreshpolicies.images.tracebloc.io",
        )
        self.workloads(registry, digests)

        say("Starting the operator: imagerefresh run")
        log = open(REPO / ".demo-operator.log", "w")  # noqa: SIM115 - closed in cleanup
        operator = subprocess.Popen(
            [
                str(IMAGEREFRESH),
                "--log-format",
                "json",
                "run",
                "--namespace",
                CP,
                "--namespace",
                AGENTS,
                "--allow-namespace-pair",
                f"{CP}={AGENTS}",
                "--insecure-registry",
                registry,
                "--metrics-port",
                str(free_port()),
                "--liveness-port",
                str(free_port()),
                "--bind-address",
                "127.0.0.1",
            ],
            stdout=log,
            stderr=log,
            env=self.env,
        )
        self.cleanups.append(lambda: (operator.terminate(), operator.wait(20), log.close()))
        detail(f"its structured log: {log.name}")

        say("Applying the ImageRefreshPolicy (the README's policy, pointed at the local registry)")
        self.apply(self.policy(registry))
        status = self.wait("the first tick", lambda s: s.get("phase") == "Current")
        detail(
            "first tick: every tag's digest resolved (one request for the shared jobs-manager "
            "image); every pod already runs it, so the workloads were adopted with no rollout"
        )
        for target in status["targets"]:
            for container in target["containers"]:
                detail(
                    f"{target['name']}/{container['name']}: desired {container['desired'][:19]}… "
                    f"running {[d[:19] + '…' for d in container.get('running', [])]}"
                )
        self.show_irp()

        say("A new jobs-manager build is pushed to :prod")
        fresh = pusher.push(
            "tracebloc/jobs-manager", "prod", seed="jobs-manager-2", kind="oci-index"
        )
        detail(f"{fresh.reference} → {fresh.digest[:19]}…")
        detail("annotating the policy refresh-now, as a release pipeline would (else: next tick)")
        self.refresh_now()
        # Pinned by the tick just asked for; the rollout may even be judged already.
        status = self.wait(
            "the refresh to start",
            lambda s: any(
                fresh.digest in (c.get("live") or "")
                for t in s.get("targets") or ()
                for c in t.get("containers") or ()
            ),
        )
        for target in status["targets"]:
            if target.get("pending") or target["phase"] == "Refreshing":
                detail(f"tick: {target['name']}: {target['message']}")
        say(
            "Following the rollouts as they happen (settled exactly as `kubectl rollout status` "
            "judges it), with no further tick asked for"
        )
        status = self.wait("the rollouts to settle", lambda s: s.get("phase") == "Current")
        images = self.get("deployment", "-n", CP, "jobs-manager")["spec"]["template"]["spec"][
            "containers"
        ]
        for container in images:
            detail(f"jobs-manager/{container['name']}: {container['image']}")
        events = self.get(
            "events", "-n", CP, "--field-selector", "involvedObject.name=jobs-manager"
        )
        for event in events["items"]:
            if (
                event.get("source", {}).get("component") == "imagerefresh"
                or event.get("reportingComponent") == "imagerefresh"
            ):
                detail(f"event {event['type']} {event['reason']}: {event['message']}")
        self.show_irp()
        say(
            "Done: jobs-manager and requests-proxy now pin the new digest (one registry request "
            "served both), resource-monitor stayed put; nothing is left running."
        )

    def close(self) -> None:
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as error:
                print(f"cleanup: {error}", file=sys.stderr)


def main() -> int:
    demo = Demo()
    try:
        demo.run()
        return 0
    except Exception as error:
        print(f"\ndemo failed: {error}", file=sys.stderr)
        return 1
    finally:
        demo.close()


if __name__ == "__main__":
    sys.exit(main())
