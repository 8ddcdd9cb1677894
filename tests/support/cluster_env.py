"""A real Kubernetes API for the tests marked `cluster`: the `cluster` and `namespace` fixtures.

`cluster` (session scope) uses the cluster in `KUBECONFIG` when the caller set one (and the
registry in `IMAGEREFRESH_TEST_REGISTRY`, when set); otherwise it runs `e2e/local up` once per
session (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as local
processes, plus a registry) and `e2e/local down` at the end if this session started it.

There are no skips: a cluster that cannot be started or reached makes every test that needs it
an error, in CI (`CI=true`) and locally alike. Tests that use `cluster` or `namespace` are marked
`cluster` automatically (so `-m 'not cluster'` leaves them out), and tests marked `cluster` get
the `cluster` fixture even when they do not ask for it.

A caller-provided KUBECONFIG must point at a loopback API server unless
`IMAGEREFRESH_E2E_ALLOW_REMOTE=1`: these tests create namespaces and cluster-scoped CRDs.
`IMAGEREFRESH_E2E_KEEP=1` leaves an environment this session started running (for debugging).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCAL = REPO / "e2e" / "local"
BUILD_BINARIES = REPO / "e2e" / "build-binaries"
# Bounded below pytest's per-test timeout (300 s), which also covers fixture set-up: a warm
# `up` takes seconds; a cold binary build does not fit and is reported as such.
UP_TIMEOUT = 240.0
DOWN_TIMEOUT = 60.0
CLUSTER_FIXTURES = frozenset({"cluster", "namespace"})
# e2e/local's API server audits the requests of ServiceAccounts in this namespace, only.
AUDITED_NAMESPACE = "imagerefresh-audited"

T = TypeVar("T")


class KubectlError(subprocess.CalledProcessError):
    """A kubectl call that failed; its message carries the command and kubectl's stderr."""

    def __str__(self) -> str:
        return (
            f"{shlex.join(self.cmd)} exited {self.returncode}\n"
            f"stderr: {(self.stderr or '').strip()}\nstdout: {(self.stdout or '').strip()}"
        )


@dataclass(frozen=True)
class Cluster:
    """How to reach the test cluster, and kubectl (the pinned build) pointed at it."""

    kubeconfig: str  # as for $KUBECONFIG (may list several files)
    bin_dir: Path
    registry: str | None  # host:port of a plain-HTTP distribution registry, when there is one
    started_here: bool  # this session ran `e2e/local up` and will run `e2e/local down`
    kubectl_cache: Path
    # The API server's audit log (requests of ServiceAccounts in AUDITED_NAMESPACE only).
    audit_log: Path | None = None
    # e2e/local's state dir and the name of its real node (kubelet and containerd), when known.
    e2e_state: Path | None = None
    node: str | None = None

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses: our binaries first in PATH, this cluster's KUBECONFIG."""
        return {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECACHEDIR": str(self.kubectl_cache),
        }

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 90.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl; with `check` a non-zero exit raises KubectlError (stderr included)."""
        argv = [str(self.bin_dir / "kubectl"), *args]
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def get(self, *args: str) -> Any:
        """`kubectl get ARGS -o json`, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, *objects: Mapping[str, Any], namespace: str | None = None) -> None:
        """`kubectl apply` the given objects (as one List)."""
        ns = ["--namespace", namespace] if namespace else []
        doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        self.kubectl("apply", *ns, "-f", "-", input=json.dumps(doc))


def eventually(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
) -> T:
    """Poll `check` until it returns something other than None/False; fail after `timeout`.

    Exceptions from `check` count as "not yet"; the last one is shown on timeout.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
        except (KubectlError, AssertionError, KeyError, IndexError) as err:
            result, last = None, err
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def wait_until_versions_expire(cluster: Cluster, path: str, timeout: float = 60) -> None:
    """Wait until a watch of ``path`` resumed from version "1" is answered 410 Gone.

    A precondition of the tests that provoke a 410. A watch cache that listed its resource at
    revision 1 (a fresh etcd) replays the history to such a watch instead, until its buffer has
    evicted an event (as many changes of that resource as the buffer holds: it depends on what
    ran before, not on time). e2e/local moves etcd past revision 1 before the API server
    starts, so there this holds at once; on another cluster, a young one may not get there."""

    def expired() -> bool:
        answer = cluster.kubectl(
            "get", "--raw", f"{path}?watch=true&resourceVersion=1&timeoutSeconds=1", check=False
        )
        return '"code":410' in answer.stdout

    eventually(expired, timeout=timeout, what=f"a watch of {path} from version 1 to be 410 Gone")


# ---------------------------------------------------------------------------------------------
# Hooks


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names: list[str] = getattr(item, "fixturenames", [])
        marked = item.get_closest_marker("cluster") is not None
        if CLUSTER_FIXTURES.intersection(names) and not marked:
            item.add_marker(pytest.mark.cluster)
        elif marked and "cluster" not in names and hasattr(item, "fixturenames"):
            names.append("cluster")  # set up like a requested fixture, failing the same way


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    bin_dir = local_bin_dir()
    given = os.environ.get("KUBECONFIG")
    if given:
        env_cluster = Cluster(
            kubeconfig=given,
            bin_dir=bin_dir,
            registry=os.environ.get("IMAGEREFRESH_TEST_REGISTRY") or None,
            started_here=False,
            kubectl_cache=cache,
            audit_log=_audit_log(os.environ.get("IMAGEREFRESH_TEST_AUDIT_LOG")),
            e2e_state=_audit_log(os.environ.get("IMAGEREFRESH_E2E_STATE")),
            node=os.environ.get("IMAGEREFRESH_TEST_NODE") or None,
        )
        _check_loopback(env_cluster)
        _check_reachable(env_cluster)
        yield env_cluster
        return

    already_up = _run_local("status", timeout=30).returncode == 0
    try:
        up = _run_local("up", timeout=UP_TIMEOUT)
    except BaseException:
        # Interrupted or timed out half-way: leave no processes behind.
        if not already_up:
            _run_local("down", timeout=DOWN_TIMEOUT)
        raise
    if up.returncode != 0:
        if not already_up:
            _run_local("down", timeout=DOWN_TIMEOUT)
        pytest.fail(
            f"`e2e/local up` failed (exit {up.returncode}):\n{_tail(up.stderr)}", pytrace=False
        )
    exported = parse_exports(up.stdout)
    local = Cluster(
        kubeconfig=exported["KUBECONFIG"],
        bin_dir=bin_dir,
        registry=exported["IMAGEREFRESH_TEST_REGISTRY"],
        started_here=not already_up,
        kubectl_cache=cache,
        audit_log=_audit_log(exported.get("IMAGEREFRESH_TEST_AUDIT_LOG")),
        e2e_state=_audit_log(exported.get("IMAGEREFRESH_E2E_STATE")),
        node=exported.get("IMAGEREFRESH_TEST_NODE"),
    )
    try:
        _check_reachable(local)
        yield local
    finally:
        if local.started_here and os.environ.get("IMAGEREFRESH_E2E_KEEP") != "1":
            down = _run_local("down", timeout=DOWN_TIMEOUT)
            if down.returncode != 0:
                pytest.fail(f"`e2e/local down` failed:\n{_tail(down.stderr)}", pytrace=False)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (without waiting for finalization) afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"imagerefresh.test/e2e": "true"}},
        }
    )
    # Pods are refused until the ServiceAccount controller has made `default` here.
    eventually(
        lambda: cluster.get("serviceaccount", "default", "--namespace", name),
        timeout=30,
        what=f"ServiceAccount default in namespace {name}",
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


# ---------------------------------------------------------------------------------------------
# Helpers


def local_bin_dir() -> Path:
    """Where `e2e/build-binaries` keeps the pinned binaries (all present, else a failure)."""
    out = subprocess.run(
        [str(BUILD_BINARIES), "--print-bin-dir"], capture_output=True, text=True, check=True
    )
    bin_dir = Path(out.stdout.strip())
    missing = [
        name
        for name in ("kubectl", "kube-apiserver", "etcd", "kwok")
        if not (bin_dir / name).exists()
    ]
    if missing:
        pytest.fail(
            f"binaries missing from {bin_dir}: {', '.join(missing)}; run `make binaries` "
            "(e2e/build-binaries) first: a cold build takes far longer than a test may",
            pytrace=False,
        )
    return bin_dir


def _run_local(command: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [str(LOCAL), command], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as err:
        stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else ""
        pytest.fail(
            f"`e2e/local {command}` did not finish within {timeout:.0f}s:\n{_tail(stderr)}",
            pytrace=False,
        )


def parse_exports(stdout: str) -> dict[str, str]:
    """The `export NAME=VALUE` lines `e2e/local up` ends with, as a dict (PATH left out)."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            if name != "PATH":
                found[name] = value
    missing = {"KUBECONFIG", "IMAGEREFRESH_TEST_REGISTRY"} - found.keys()
    if missing:
        pytest.fail(f"`e2e/local up` printed no {sorted(missing)}:\n{stdout}", pytrace=False)
    return found


def _audit_log(path: str | None) -> Path | None:
    return Path(path) if path else None


def _check_loopback(c: Cluster) -> None:
    view = c.kubectl(
        "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}", check=False
    )
    if view.returncode != 0:
        pytest.fail(f"KUBECONFIG={c.kubeconfig} is unusable: {view.stderr.strip()}", pytrace=False)
    server = view.stdout.strip()
    host = urlsplit(server).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and os.environ.get("IMAGEREFRESH_E2E_ALLOW_REMOTE") != "1":
        pytest.fail(
            f"KUBECONFIG points at {server}, not a loopback API server; these tests create "
            "namespaces and CRDs there. Unset KUBECONFIG to use e2e/local, or set "
            "IMAGEREFRESH_E2E_ALLOW_REMOTE=1 if that cluster is disposable.",
            pytrace=False,
        )


def _check_reachable(c: Cluster) -> None:
    proc = c.kubectl("get", "--raw", "/readyz", check=False, timeout=30)
    if proc.returncode != 0 or proc.stdout.strip() != "ok":
        pytest.fail(
            f"the cluster in KUBECONFIG={c.kubeconfig} is not ready: "
            f"{proc.stderr.strip() or proc.stdout.strip()}",
            pytrace=False,
        )


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])
