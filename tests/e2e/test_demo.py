"""`make demo` runs where it is told to, never where `$KUBECONFIG` happens to point.

By default it runs on the bundled cluster it starts itself: the choice reads nothing from the
environment, every process it starts gets an environment without the caller's cluster, and its
kubectl, with `$KUBECONFIG` naming a listening server, never connects to it. Asked by name
(`DEMO_KUBECONFIG`), it runs on that cluster — here the test cluster — only in namespaces of
its own, touches nothing else (an edge's `tracebloc/jobs-manager` stays as it was), removes what
it made and says what it left (the CRD, installed before it).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from support.cluster_env import REPO, Cluster
from support.scenario import deployment

DEMO = REPO / "e2e" / "demo.py"


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("e2e_demo", DEMO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_without_a_kubeconfig_named_it_chooses_the_bundled_cluster(
    demo: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/home/sre/.kube/production")
    where = demo.choose(None, "c0ffee")
    assert where.bundled
    assert where.kubeconfig is None


def test_a_named_cluster_gets_namespaces_of_the_demos_own(demo: ModuleType) -> None:
    where = demo.choose("some/kubeconfig", "c0ffee")
    assert not where.bundled
    assert where.kubeconfig == Path("some/kubeconfig").resolve()
    assert (where.control_plane, where.agents) == (
        "imagerefresh-demo-c0ffee",
        "imagerefresh-demo-c0ffee-agents",
    )


def test_its_processes_see_no_cluster_but_the_chosen_one(demo: ModuleType) -> None:
    caller = {
        "KUBECONFIG": "/home/sre/.kube/production",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "PATH": "/usr/bin",
    }
    assert demo.subprocess_env(demo.choose(None, "x"), caller) == {"PATH": "/usr/bin"}
    named = demo.choose("/tmp/demo-kc", "x")
    assert demo.subprocess_env(named, caller) == {
        "PATH": "/usr/bin",
        "KUBECONFIG": str(Path("/tmp/demo-kc").resolve()),
    }


@pytest.fixture
def listening_server() -> Iterator[tuple[str, list[object]]]:
    """A TCP server on loopback that records every connection made to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    connections: list[object] = []

    def accept() -> None:
        while True:
            try:
                peer, address = server.accept()
            except OSError:
                return
            connections.append(address)
            peer.close()

    threading.Thread(target=accept, daemon=True).start()
    yield f"https://127.0.0.1:{server.getsockname()[1]}", connections
    server.close()


def test_by_default_its_kubectl_never_talks_to_the_cluster_kubeconfig_names(
    demo: ModuleType,
    listening_server: tuple[str, list[object]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, connections = listening_server
    production = tmp_path / "production"
    production.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "prod", "cluster": {"server": server}}],
                "users": [{"name": "sre", "user": {"token": "t"}}],
                "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "sre"}}],
                "current-context": "prod",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(production))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config either
    # The check is only as good as the server: kubectl does connect to it when told to.
    told = demo.Demo(demo.choose(str(production), "x"))
    told.kubectl("get", "--raw", "/readyz", "--request-timeout=2s", check=False)
    assert connections
    connections.clear()

    bundled = demo.Demo(demo.choose(None, "x"))
    assert "KUBECONFIG" not in bundled.env
    view = bundled.kubectl("config", "view", "-o", "jsonpath={.clusters[*].cluster.server}")
    assert server not in view
    bundled.kubectl("get", "--raw", "/readyz", "--request-timeout=2s", check=False)
    assert connections == []


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"KUBECONFIG": "/home/sre/.kube/production"}, "e2e/demo.py"),
        ({"DEMO_KUBECONFIG": "/tmp/demo kc"}, "e2e/demo.py --kubeconfig '/tmp/demo kc'"),
    ],
)
def test_make_demo_passes_a_cluster_only_when_named_by_demo_kubeconfig(
    variables: dict[str, str], expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "DEMO_KUBECONFIG")}
    dry = subprocess.run(
        ["make", "-n", "demo"],
        cwd=REPO,
        env={**env, **variables},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (line,) = [line for line in dry.stdout.splitlines() if "e2e/demo.py" in line]
    assert line.split("python ", 1)[1].strip() == expected


# --- on a cluster asked for by name: the test cluster --------------------------------------------


@pytest.fixture
def an_edge_already_there(crd_installed: Cluster) -> Iterator[str]:
    """What an SRE's cluster holds: an edge's jobs-manager in `tracebloc`."""
    crd_installed.kubectl("create", "namespace", "tracebloc", check=False)
    crd_installed.apply(
        deployment("jobs-manager", {"api": "tracebloc/jobs-manager:prod"}, replicas=0),
        namespace="tracebloc",
    )
    found = crd_installed.get("deployment", "jobs-manager", "-n", "tracebloc")
    yield found["metadata"]["resourceVersion"]
    crd_installed.kubectl("delete", "namespace", "tracebloc", "--wait=false", check=False)


def test_on_a_named_cluster_it_keeps_to_its_own_namespaces_and_removes_them(
    cluster: Cluster, an_edge_already_there: str
) -> None:
    env = {**os.environ, "PATH": cluster.env["PATH"]}
    env.pop("KUBECONFIG", None)
    run = subprocess.run(
        [sys.executable, str(DEMO), "--kubeconfig", cluster.kubeconfig],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Using the cluster named by --kubeconfig" in run.stdout
    lines = run.stdout.splitlines()
    assert any(line.startswith("    its own namespaces, new: imagerefresh-demo-") for line in lines)
    assert (
        "    left: the CRD imagerefreshpolicies.images.tracebloc.io: it was installed before the "
        "demo"
    ) in lines
    # Nothing of the edge's changed; the CRD it found is still there; its namespaces are gone.
    edge = cluster.get("deployment", "jobs-manager", "-n", "tracebloc")
    assert edge["metadata"]["resourceVersion"] == an_edge_already_there
    assert cluster.get("crd", "imagerefreshpolicies.images.tracebloc.io")
    leftovers = cluster.get("namespaces", "-l", "app.kubernetes.io/managed-by=imagerefresh-demo")[
        "items"
    ]
    assert leftovers == []
