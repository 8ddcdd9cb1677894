"""The operator under test, as its real entry point: ``imagerefresh run`` in a subprocess.

One operator per test module watches every namespace matching ``irp-*`` (the
``policy_namespace`` fixture makes such namespaces), with the test registry on its insecure
list. Tests never sleep through an interval: :meth:`Operator.tick` bumps the policy's
``images.tracebloc.io/refresh-now`` annotation, which asks for a tick of that policy at once,
and waits until the tick that answers that very ask has ended — one that *started* after the
operator saw it, never one already in flight — as the operator's metrics say
(``imagerefresh_ticks_asked_total`` / ``imagerefresh_ticks_answered_total``, reason
``refresh_now``). Only these helpers write the annotation, one ask at a time, so the n-th ask
the operator counted is the n-th bump.
``IMAGEREFRESH_TEST_LOG_LEVEL=DEBUG`` logs kopf's watch streams and every API request.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster_env import Cluster
from support.hub_front import HubFront
from support.registry_env import free_port

__all__ = ["Operator"]

CRD = Path(__file__).resolve().parents[2] / "crds" / "imagerefreshpolicies.images.tracebloc.io.yaml"
IMAGEREFRESH = Path(sys.executable).with_name("imagerefresh")
REFRESH_NOW = "images.tracebloc.io/refresh-now"


@dataclass
class Operator:
    cluster: Cluster
    registry: str
    metrics_port: int
    log_path: Path
    front: HubFront | None = None  # a Docker-Hub-like front before the registry
    process: subprocess.Popen[bytes] | None = None
    extra_args: tuple[str, ...] = ()
    liveness_port: int = field(default_factory=free_port)
    _bumps: int = field(default=0)
    _log_offset: int = field(default=0)
    executable: Path = IMAGEREFRESH  # the bench runs the one of a runtime-only virtualenv
    # Put the interval grid a whole interval after each start, so that a test shorter than the
    # interval knows no interval tick falls inside it (the grid's phase is random otherwise).
    grid_from_start: bool = False

    def start(self) -> None:
        # Each process's log starts here: a SIGKILLed predecessor may have left half a line.
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                str(self.executable),
                "--log-level",
                os.environ.get("IMAGEREFRESH_TEST_LOG_LEVEL", "INFO"),
                "--log-format",
                "json",
                "run",
                "--namespace",
                "irp-*",
                "--metrics-port",
                str(self.metrics_port),
                "--liveness-port",
                str(self.liveness_port),
                "--bind-address",
                "127.0.0.1",
                "--insecure-registry",
                self.registry,
                "--resolution-window",
                "0",
                *self._front_args(),
                *(("--tick-grid-phase", str(time.time())) if self.grid_from_start else ()),
                *self.extra_args,
            ],
            stdout=log,
            stderr=log,
            env=self.cluster.env,
        )
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

    def _front_args(self) -> tuple[str, ...]:
        return ("--insecure-registry", self.front.host) if self.front is not None else ()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as a crashed or evicted pod."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(5)

    def log(self) -> str:
        """What the current process has logged."""
        with self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")

    def log_entries(self) -> list[dict[str, Any]]:
        """The current process's JSON log lines, parsed (a line being written is skipped)."""
        entries = []
        for line in self.log().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                entries.append(entry)
        return entries

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and line.split(" ")[0] != name:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def series(self, **labels: str) -> list[str]:
        """The /metrics samples, of any family, whose labels include ``labels``."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        return [
            line
            for line in text.splitlines()
            if not line.startswith("#")
            and labels.items() <= dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])).items()
        ]

    def ticks(self, namespace: str, policy: str) -> float:
        return self.metric("imagerefresh_ticks_total", namespace=namespace, policy=policy)

    def asks(self, namespace: str, policy: str, reason: str = "refresh_now") -> float:
        """The asks for a tick of the policy the operator has seen (``reason``: what asked)."""
        return self.metric(
            "imagerefresh_ticks_asked_total", namespace=namespace, policy=policy, reason=reason
        )

    def answered(self, namespace: str, policy: str, reason: str = "refresh_now") -> float:
        """The asks answered: a tick that started after each has ended."""
        return self.metric(
            "imagerefresh_ticks_answered_total", namespace=namespace, policy=policy, reason=reason
        )

    def _until(self, check: Callable[[], bool], deadline: float, what: str) -> None:
        """Poll ``check`` (a precondition or the tick asked for) until ``deadline``."""
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} in time; log tail:\n{self.log()[-3000:]}")
            if self.process is not None and self.process.poll() is not None:
                pytest.fail(f"imagerefresh run died; log tail:\n{self.log()[-3000:]}")
            time.sleep(0.1)

    def bump(self, namespace: str, policy: str, timeout: float = 30) -> int:
        """Ask for a prompt tick (a new refresh-now value) and wait until the operator has seen
        the ask, not for the tick; the ask's number, for :meth:`wait_answered`.

        The policy must have been noticed first (its first sighting, with whatever annotation
        it carries then, is an ask of its own), and each bump is seen before the next is made:
        the operator then counts each bump as one ask, in order."""
        deadline = time.monotonic() + timeout
        self._until(
            lambda: self.asks(namespace, policy, "noticed") >= 1,
            deadline,
            f"sighting of {namespace}/{policy} by the operator",
        )
        ask = int(self.asks(namespace, policy)) + 1
        self._bumps += 1
        self.cluster.kubectl(
            "annotate",
            "--overwrite",
            "-n",
            namespace,
            "irp",
            policy,
            f"{REFRESH_NOW}={self._bumps}-{secrets.token_hex(3)}",
        )
        self._until(
            lambda: self.asks(namespace, policy) >= ask,
            deadline,
            f"refresh-now of {namespace}/{policy} seen by the operator",
        )
        return ask

    def wait_answered(self, namespace: str, policy: str, ask: int, timeout: float = 30) -> None:
        """Wait until the tick that answers refresh-now ask number ``ask`` has ended."""
        self._until(
            lambda: self.answered(namespace, policy) >= ask,
            time.monotonic() + timeout,
            f"tick of {namespace}/{policy} answering ask {ask} within {timeout}s",
        )

    def tick(self, namespace: str, policy: str, timeout: float = 30) -> None:
        """Ask for a prompt tick and wait until the tick that answers it has ended: a whole
        tick that started after the ask (what it found is in the cluster and the metrics)."""
        started = time.monotonic()
        ask = self.bump(namespace, policy, timeout)
        self.wait_answered(namespace, policy, ask, timeout - (time.monotonic() - started))

    def wait_first_tick(self, namespace: str, policy: str, timeout: float = 60) -> None:
        # A precondition, not a verdict. On failure the log says whether the policy was
        # noticed ("policy noticed") and then stuck in the operator, or never delivered by kopf.
        deadline = time.monotonic() + timeout
        while self.ticks(namespace, policy) < 1:
            if time.monotonic() > deadline:
                log = self.log()
                mine = [line for line in log.splitlines() if namespace in line]
                pytest.fail(
                    f"{namespace}/{policy} never ticked; its log lines:\n"
                    + "\n".join(mine[-20:])
                    + f"\nlog tail:\n{log[-3000:]}"
                )
            time.sleep(0.1)


@pytest.fixture(scope="module")
def crd_installed(cluster: Cluster) -> Cluster:
    # Forced: a chart test's helm release may own the CRD by now; this fixture installs ours.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/imagerefreshpolicies.images.tracebloc.io",
    )
    return cluster


_RUNNING: list[Operator] = []  # the operators running_operator started and has not stopped


@contextlib.contextmanager
def running_operator(
    cluster: Cluster,
    registry: str,
    log: Path,
    *,
    grid_from_start: bool = False,
    extra_args: tuple[str, ...] = (),
) -> Iterator[Operator]:
    """``imagerefresh run`` against the test cluster and registry, behind a Docker-Hub front.

    One at a time: every test operator watches the same namespaces (irp-*), so a second one
    would tick the same policies and overwrite the first one's status. A module-scoped operator
    lives until its module ends; a test that needs an operator of its own belongs elsewhere.
    """
    if _RUNNING:
        raise RuntimeError(
            f"an operator is already running (log {_RUNNING[0].log_path}): two would tick the "
            "same policies; move the test to a module without a module-wide operator"
        )
    front = HubFront(registry).start()
    running = Operator(
        cluster,
        registry,
        free_port(),
        log,
        front,
        extra_args=extra_args,
        grid_from_start=grid_from_start,
    )
    running.start()
    _RUNNING.append(running)
    try:
        yield running
    finally:
        _RUNNING.remove(running)
        running.stop()
        front.stop()
        if os.environ.get("IMAGEREFRESH_SHOW_OPERATOR_LOG"):
            print(running.log())


@pytest.fixture(scope="module")
def operator(
    crd_installed: Cluster, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """``imagerefresh run`` against the test cluster and registry, for one test module."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(crd_installed, registry, log) as running:
        yield running


@pytest.fixture
def operator_without_interval_ticks(
    crd_installed: Cluster, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """An operator of one test's own, whose interval grid starts a whole interval after it
    does: no interval tick of a 15m policy can fall inside a test shorter than that, so "no
    interval tick ran" is a fact the tick counter can assert, not a bet on a random grid."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(crd_installed, registry, log, grid_from_start=True) as running:
        yield running


@contextlib.contextmanager
def watched_namespace(cluster: Cluster, what: str) -> Iterator[str]:
    """A fresh namespace the operator watches (irp-*), named after ``what``; deleted after."""
    name = f"irp-{what}-{secrets.token_hex(2)}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def policy_namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace the module's operator watches (irp-*)."""
    with watched_namespace(
        cluster, re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    ) as name:
        yield name


def front_of(operator: Operator) -> HubFront:
    """The Docker-Hub front the operator reads the registry through (every fixture's has one)."""
    assert operator.front is not None
    return operator.front


def kwok_pod_template(
    containers: dict[str, str],
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod template that lands on kwok's fake nodes."""
    return {
        "metadata": {"labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "containers": [{"name": n, "image": i} for n, i in containers.items()],
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "nodeSelector": {"type": "kwok"},
        },
    }


def deployment_with_policy(
    cluster: Cluster, namespace: str, image: str, *, tracked: str | None = None, **spec: Any
) -> None:
    """One Deployment ``app`` on ``image``, rolled out, and a policy ``control-plane`` tracking
    it (or the tag ``tracked``, when the Deployment starts pinned); ``spec``: more of its spec.

    The rollout is waited for so that a tick planned right after sees a settled Deployment
    (an unsettled one is a skip, not the drift the callers test)."""
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "app"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "app"}},
                "template": kwok_pod_template({"app": image}, labels={"app": "app"}),
            },
        },
        {
            "apiVersion": "images.tracebloc.io/v1alpha1",
            "kind": "ImageRefreshPolicy",
            "metadata": {"name": "control-plane"},
            "spec": {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "app",
                        "containers": [{"name": "app", "image": tracked or image}],
                    }
                ],
                **spec,
            },
        },
        namespace=namespace,
    )
    cluster.kubectl("rollout", "status", "-n", namespace, "deployment/app", "--timeout=60s")


def pull_secret(name: str, auths: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """A ``kubernetes.io/dockerconfigjson`` Secret: registry → (username, password)."""
    entries = {
        server: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
        for server, (user, password) in auths.items()
    }
    config = json.dumps({"auths": entries}).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config).decode()},
    }
