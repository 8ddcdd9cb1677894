"""`make demo`: the operator's main job, narrated, on the local cluster and registry.

It brings up the bundled environment, installs the CRD, creates the three control-plane
workloads of the edge this operator was written for, pushes their images, runs `imagerefresh
run`, pushes a new jobs-manager digest and tells what happens, step by step. It leaves nothing
running.

Where it runs is chosen by :func:`choose`, and never by ``$KUBECONFIG``: an SRE's shell usually
points at a real cluster, and a demo must not write Deployments named like production's into
it. By default it runs on the bundled cluster (``e2e/local``, its own state in ``.e2e-demo/``)
and ignores ``$KUBECONFIG`` altogether (:func:`subprocess_env` drops it). Another cluster only
when named (``make demo DEMO_KUBECONFIG=FILE``, i.e. ``e2e/demo.py --kubeconfig FILE``), and
there it keeps to what it made itself: two namespaces of its own, created with fresh names
(never ``tracebloc``), and everything else inside them; the CRD only when it is absent. It
refuses to start where it would have to touch anything else, and on the way out deletes its
policy and its namespaces, and the CRD only if it installed it and no policy elsewhere uses it;
it says what it leaves. (Its pods run on kwok's fake nodes, since its images live in a registry
on this machine's loopback: such a cluster needs kwok nodes, as ``e2e/local`` has.)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.registry_env import ImagePusher, RegistryServer, free_port  # noqa: E402

IMAGEREFRESH = Path(sys.executable).with_name("imagerefresh")
CRD_NAME = "imagerefreshpolicies.images.tracebloc.io"
POLICY = "control-plane"
MANAGED_BY = {"app.kubernetes.io/managed-by": "imagerefresh-demo"}
# Variables that would point a kubectl, a client or the operator at some cluster.
CLUSTER_VARIABLES = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


@dataclass(frozen=True)
class Where:
    """The cluster the demo runs on and the namespaces it uses there."""

    kubeconfig: Path | None  # None: the bundled local cluster, which the demo starts itself
    control_plane: str
    agents: str

    @property
    def bundled(self) -> bool:
        return self.kubeconfig is None


def choose(kubeconfig: str | None, suffix: str) -> Where:
    """Where the demo runs: the bundled cluster unless a kubeconfig is named. Nothing from the
    environment is read here, on purpose."""
    if kubeconfig is None:
        # The bundled cluster is the demo's own: the edge's real namespace names read best.
        return Where(None, "tracebloc", "tracebloc-node-agents")
    own = f"imagerefresh-demo-{suffix}"
    return Where(Path(kubeconfig).resolve(), own, f"{own}-agents")


def subprocess_env(where: Where, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of every process the demo starts: no cluster but the chosen one."""
    env = {k: v for k, v in environ.items() if k not in CLUSTER_VARIABLES}
    if where.kubeconfig is not None:
        env["KUBECONFIG"] = str(where.kubeconfig)
    return env


def say(text: str) -> None:
    print(f"\n▶ {text}", flush=True)


def detail(text: str) -> None:
    print(f"    {text}", flush=True)


class Demo:
    def __init__(self, where: Where) -> None:
        self.where = where
        self.env = subprocess_env(where, os.environ)
        bin_dir = subprocess.run(
            [str(REPO / "e2e" / "build-binaries"), "--print-bin-dir"],
            capture_output=True,
            text=True,
            check=True,
            env=self.env,
        ).stdout.strip()
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}"  # pinned kubectl
        self.cleanups: list[Callable[[], None]] = []
        self.left: list[str] = []  # what it leaves behind on purpose, said at the end
        self.crd_was_installed = False

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            ["kubectl", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=180,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def create(self, *objects: dict[str, Any]) -> None:
        """Create the objects; on a cluster not the demo's own, only ever new ones (`kubectl
        create` refuses what exists, so nothing of anyone else's is changed)."""
        verb = ["apply"] if self.where.bundled else ["create"]
        self.kubectl(
            *verb,
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def environment(self) -> str:
        if not self.where.bundled:
            return self.other_cluster()
        given = os.environ.get("KUBECONFIG")
        say(
            "Bringing up the local cluster (etcd, kube-apiserver, controllers, kwok) and a registry"
        )
        if given:
            detail(
                f"$KUBECONFIG ({given}) is not used: the demo runs on a cluster of its own. "
                "To run it on another cluster, name it: make demo DEMO_KUBECONFIG=FILE"
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

    def other_cluster(self) -> str:
        """The named cluster, checked before anything is written; its own namespaces made."""
        where = self.where
        say(f"Using the cluster named by --kubeconfig ({where.kubeconfig})")
        self.kubectl("get", "--raw", "/readyz")
        if not self.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").strip():
            raise RuntimeError(
                "that cluster has no kwok node (label type=kwok): the demo's pods run only on "
                "kwok's fake nodes, since its images live in a registry on this machine's "
                "loopback. Nothing was changed; run `make demo` for the bundled cluster"
            )
        found = self.kubectl("get", "crd", CRD_NAME, "--ignore-not-found", "-o", "name")
        self.crd_was_installed = bool(found.strip())
        for namespace in (where.control_plane, where.agents):
            self.create(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": MANAGED_BY},
                }
            )
            self.cleanups.append(functools.partial(self.delete_namespace, namespace))
        detail(f"its own namespaces, new: {where.control_plane}, {where.agents}")
        server = RegistryServer(Path(tempfile.mkdtemp(prefix="demo-registry-")), free_port())
        server.start()
        self.cleanups.append(server.stop)
        return server.host

    def delete_namespace(self, namespace: str) -> None:
        self.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--timeout=120s")

    def install_crd(self) -> None:
        crd = str(REPO / "crds")
        if self.where.bundled:
            self.kubectl("apply", "--server-side", "-f", crd)
        elif self.crd_was_installed:
            self.left.append(f"the CRD {CRD_NAME}: it was installed before the demo")
            detail(f"the CRD {CRD_NAME} is installed already: used as it is, and left")
        else:
            self.kubectl("create", "-f", crd)
            self.cleanups.append(self.uninstall_crd)
            detail(f"the CRD {CRD_NAME} was not installed: installed (and removed afterwards)")
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")

    def uninstall_crd(self) -> None:
        """The CRD the demo installed, unless someone made a policy outside its namespaces
        meanwhile (deleting a CRD deletes every object of it)."""
        policies = self.get("irp", "--all-namespaces").get("items") or []
        others = sorted(
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in policies
            if p["metadata"]["namespace"] not in (self.where.control_plane, self.where.agents)
        )
        if others:
            self.left.append(f"the CRD {CRD_NAME}, which policies of others use now: {others}")
            return
        self.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--timeout=120s")

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
        cp, agents = self.where.control_plane, self.where.agents
        if self.where.bundled:  # elsewhere they were made, new, before anything else
            for ns in (cp, agents):
                self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

        def deployment(name: str, containers: dict[str, str]) -> dict[str, Any]:
            return {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": cp},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": template(name, containers),
                },
            }

        self.create(
            deployment("jobs-manager", {"api": jm, "pods-monitor-container": pm}),
            deployment("requests-proxy", {"proxy": jm}),
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "resource-monitor", "namespace": agents},
                "spec": {
                    "selector": {"matchLabels": {"app": "resource-monitor"}},
                    "template": template("resource-monitor", {"tracebloc-resource-monitor": rm}),
                },
            },
        )
        for kind, ns, name in (
            ("deployment", cp, "jobs-manager"),
            ("deployment", cp, "requests-proxy"),
            ("daemonset", agents, "resource-monitor"),
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
            "metadata": {"name": POLICY, "namespace": self.where.control_plane},
            "spec": {
                "interval": "15m",
                # A refresh counts once its pods stayed up this long after settling (60s by
                # default, for edges): short here, so the demo does not wait a minute.
                "healthyFor": "10s",
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
                        "namespace": self.where.agents,
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
        return self.get("irp", "-n", self.where.control_plane, POLICY).get("status") or {}

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
            self.where.control_plane,
            "irp",
            POLICY,
            f"images.tracebloc.io/refresh-now=demo-{time.time():.0f}",
        )

    def show_irp(self) -> None:
        irp = self.kubectl("get", "irp", "-n", self.where.control_plane)
        detail(irp.rstrip().replace("\n", "\n    "))

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
        self.install_crd()
        self.workloads(registry, digests)

        say("Starting the operator: imagerefresh run")
        if not self.where.bundled:  # cleanups run last first: the operator stops before this
            self.cleanups.append(self.delete_policy)
        log = open(REPO / ".demo-operator.log", "w")  # noqa: SIM115 - closed in cleanup
        operator = subprocess.Popen(
            [
                str(IMAGEREFRESH),
                "--log-format",
                "json",
                "run",
                "--namespace",
                self.where.control_plane,
                "--namespace",
                self.where.agents,
                "--allow-namespace-pair",
                f"{self.where.control_plane}={self.where.agents}",
                # Nothing cluster-wide: the CRD exists, the namespaces are named.
                "--no-scanning",
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

        say("Applying the ImageRefreshPolicy (the README's, for the demo's workloads and registry)")
        self.create(self.policy(registry))
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
        status = self.wait(
            "the rollouts to settle",
            lambda s: (
                any(
                    "watching its pods until" in t.get("message", "")
                    for t in s.get("targets") or ()
                )
                or s.get("phase") == "Current"
            ),
        )
        for target in status["targets"]:
            if "watching its pods until" in target.get("message", ""):
                detail(f"settled: {target['name']}: {target['message']}")
        say(
            "Watching the new pods for healthyFor (10s here): a build that crashes after its "
            "rollout settled is rolled back and barred, one that stays up counts as refreshed"
        )
        status = self.wait("the health windows to end", lambda s: s.get("phase") == "Current")
        images = self.get("deployment", "-n", self.where.control_plane, "jobs-manager")["spec"][
            "template"
        ]["spec"]["containers"]
        for container in images:
            detail(f"jobs-manager/{container['name']}: {container['image']}")
        events = self.get(
            "events",
            "-n",
            self.where.control_plane,
            "--field-selector",
            "involvedObject.name=jobs-manager",
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

    def delete_policy(self) -> None:
        self.kubectl("delete", "irp", POLICY, "-n", self.where.control_plane, "--ignore-not-found")

    def close(self) -> None:
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as error:
                print(f"cleanup: {error}", file=sys.stderr)
                self.left.append(f"what that cleanup step would have removed ({error})")
        if self.where.bundled:
            return
        where = f"{self.where.control_plane} and {self.where.agents}"
        say(f"Cleaned up: the policy and the namespaces {where} are deleted")
        for what in self.left:
            detail(f"left: {what}")
        if not self.left:
            detail("left: nothing")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="Run on this cluster instead of the bundled one (never taken from $KUBECONFIG), "
        "in two namespaces of its own, removed afterwards; it needs kwok nodes",
    )
    args = parser.parse_args(argv)
    demo = Demo(choose(args.kubeconfig, secrets.token_hex(3)))
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
