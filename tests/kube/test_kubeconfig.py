"""Kubeconfigs read as kubectl reads them, without the official client: merging, relative
paths, refusals, and an exec plugin whose token the real API server accepts."""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import requires
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeUnavailable, UnusableConfig
from imagerefresh.kube.kubeconfig import from_kubeconfig
from imagerefresh.kube.transport import Connection

from support.cluster_env import Cluster

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path: Path, **document: Any) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", **document}))
    return path


def config(
    cluster: dict[str, Any], user: dict[str, Any], *, name: str = "c", current: str | None = "c"
) -> dict[str, Any]:
    return {
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        **({"current-context": current} if current else {}),
    }


def test_a_token_and_inline_ca_are_what_a_request_carries(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        **config(
            {
                "server": "https://api:6443/",
                "certificate-authority-data": base64.b64encode(CA).decode(),
            },
            {"token": "abc"},
        ),
    )
    login = from_kubeconfig(str(path))
    assert login.server == "https://api:6443"
    assert login.info().ca_data == CA
    assert login.headers() == {"Authorization": "Bearer abc"}


def test_relative_paths_are_relative_to_the_file_that_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "elsewhere"
    home.mkdir()
    (home / "ca.crt").write_bytes(CA)
    (home / "token").write_text("from-file\n")
    path = write(
        home / "config",
        **config(
            {"server": "https://api", "certificate-authority": "ca.crt"}, {"tokenFile": "token"}
        ),
    )
    monkeypatch.chdir(tmp_path)
    login = from_kubeconfig(str(path))
    assert login.info().ca_data == CA
    assert login.headers() == {"Authorization": "Bearer from-file"}


def test_several_files_merge_as_kubectl_merges_them_the_first_to_name_a_thing_wins(
    tmp_path: Path,
) -> None:
    first = write(
        tmp_path / "a",
        clusters=[{"name": "c", "cluster": {"server": "https://first"}}],
        users=[{"name": "u", "user": {"token": "first"}}],
    )
    second = write(
        tmp_path / "b",
        clusters=[
            {"name": "c", "cluster": {"server": "https://second"}},
            {"name": "d", "cluster": {"server": "https://d"}},
        ],
        users=[{"name": "u", "user": {"token": "second"}}],
        contexts=[
            {"name": "x", "context": {"cluster": "c", "user": "u"}},
            {"name": "y", "context": {"cluster": "d", "user": "u", "namespace": "ops"}},
        ],
        **{"current-context": "x"},
    )
    missing = tmp_path / "absent"
    paths = os.pathsep.join(map(str, (missing, first, second)))
    login = from_kubeconfig(paths)
    assert (login.server, login.headers()["Authorization"]) == ("https://first", "Bearer first")
    other = from_kubeconfig(paths, "y")
    assert (other.server, other.info().default_namespace) == ("https://d", "ops")


def test_kubeconfig_in_the_environment_is_read_when_none_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "config", **config({"server": "https://env"}, {}))
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert from_kubeconfig().server == "https://env"


@pytest.mark.parametrize(
    ("cluster", "user", "context", "refusal"),
    [
        ({"server": "https://a", "tls-server-name": "x"}, {}, None, "tls-server-name"),
        ({"server": "https://a", "proxy-url": "http://p"}, {}, None, "proxy-url"),
        ({"server": "https://a"}, {"auth-provider": {"name": "oidc"}}, None, "exec credential"),
        ({"server": "https://a"}, {"as": "admin"}, None, "impersonated account"),
        ({"server": "https://a"}, {}, "nope", "no context 'nope'"),
        ({}, {}, None, "names no server"),
        ({"server": "https://a", "certificate-authority-data": "!!"}, {}, None, "not base64"),
        ({"server": "https://a", "certificate-authority": "/absent/ca"}, {}, None, "unreadable"),
        ({"server": "https://a"}, {"exec": {"command": "x", "apiVersion": "v0"}}, None, "speaks"),
        (
            {"server": "https://a"},
            {
                "exec": {
                    "command": "x",
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "interactiveMode": "Always",
                }
            },
            None,
            "needs a terminal",
        ),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_it(
    tmp_path: Path,
    cluster: dict[str, Any],
    user: dict[str, Any],
    context: str | None,
    refusal: str,
) -> None:
    path = write(tmp_path / "config", **config(cluster, user))
    with pytest.raises(UnusableConfig, match=refusal):
        from_kubeconfig(str(path), context)


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("[a, b]", "not a mapping"),
        ("clusters: {c: 1}", "not a list of named entries"),
        ("clusters: [", "not YAML"),
        ("current-context: ''", "no current-context"),
    ],
)
def test_a_malformed_kubeconfig_is_refused(tmp_path: Path, text: str, refusal: str) -> None:
    (tmp_path / "config").write_text(text)
    with pytest.raises(UnusableConfig, match=refusal):
        from_kubeconfig(str(tmp_path / "config"))


def test_no_kubeconfig_at_all_is_refused_naming_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(UnusableConfig, match=f"no kubeconfig at {tmp_path}/absent"):
        from_kubeconfig(str(tmp_path / "absent"))


def exec_plugin(tmp_path: Path, token: str, expires_in: float | None) -> Path:
    """A plugin that prints ``token`` (expiring after ``expires_in`` s) and counts its runs."""
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    expiry = (
        None
        if expires_in is None
        else (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_in))
        .isoformat()
        .replace("+00:00", "Z")
    )
    plugin.write_text(
        textwrap.dedent(f"""
        import json, os, sys
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        assert info["spec"]["interactive"] is False, info
        assert os.environ["PLUGIN_ENV"] == "set", "the kubeconfig's env is passed"
        with open({str(runs)!r}, "a") as runs:
            runs.write("run\\n")
        status = {{"token": {token!r}}}
        if {expiry!r} is not None:
            status["expirationTimestamp"] = {expiry!r}
        print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                          "status": status}}))
        """)
    )
    return plugin


def exec_user(plugin: Path) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "env": [{"name": "PLUGIN_ENV", "value": "set"}],
            "interactiveMode": "Never",
        }
    }


def runs(tmp_path: Path) -> int:
    return len((tmp_path / "runs").read_text().splitlines())


@pytest.mark.cluster
def test_an_exec_plugins_token_is_accepted_by_the_api_server_and_asked_for_once_while_valid(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    cluster.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "plugged"}},
        namespace=namespace,
    )
    token = cluster.kubectl("create", "token", "plugged", "-n", namespace).stdout.strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    server = admin["clusters"][0]["cluster"]
    plugin = exec_plugin(tmp_path, token, expires_in=3600)
    path = write(tmp_path / "config", **config(server, exec_user(plugin)))
    api = KubeApi.from_environment(str(path))
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    for _ in range(2):
        answer = api._request(
            "who am I",
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body=review,
            gated=False,
        )
        assert answer["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{namespace}:plugged"
        )
    assert runs(tmp_path) == 1
    api.close()


def test_an_exec_plugin_runs_again_once_its_token_has_expired(tmp_path: Path) -> None:
    plugin = exec_plugin(tmp_path, "short-lived", expires_in=5)  # inside the renewal margin
    path = write(tmp_path / "config", **config({"server": "https://a"}, exec_user(plugin)))
    login = from_kubeconfig(str(path))
    for _ in range(2):
        assert login.headers() == {"Authorization": "Bearer short-lived"}
    assert runs(tmp_path) == 2


def test_an_exec_plugin_without_an_expiry_runs_once(tmp_path: Path) -> None:
    plugin = exec_plugin(tmp_path, "forever", expires_in=None)
    path = write(tmp_path / "config", **config({"server": "https://a"}, exec_user(plugin)))
    login = from_kubeconfig(str(path))
    for _ in range(3):
        assert login.headers() == {"Authorization": "Bearer forever"}
    assert runs(tmp_path) == 1


@pytest.mark.parametrize(
    ("script", "refusal"),
    [
        ("import sys; sys.stderr.write('login expired'); sys.exit(3)", "exit 3\\): login expired"),
        ("print('not json')", "printed no ExecCredential status"),
        (
            "import json; print(json.dumps({'status': {'clientCertificateData': 'x'}}))",
            "printed no token",
        ),
    ],
)
def test_a_failing_exec_plugin_is_refused_with_what_it_said(
    tmp_path: Path, script: str, refusal: str
) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(script)
    path = write(tmp_path / "config", **config({"server": "https://a"}, exec_user(plugin)))
    with pytest.raises(UnusableConfig, match=refusal):
        from_kubeconfig(str(path)).info()


def test_the_operator_runs_without_the_kubernetes_client_installed() -> None:
    # kopf imports the official client at start whenever it is installed (a quarter of a
    # CPU-second of every start): the operator neither depends on it nor imports it.
    needs = [r for r in requires("imagerefresh") or () if "extra ==" not in r]
    assert not [r for r in needs if r.startswith("kubernetes")], needs
    blocked = textwrap.dedent("""
        import sys
        class Absent:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("kubernetes", "kubernetes_asyncio"):
                    raise ModuleNotFoundError(name)
        sys.meta_path.insert(0, Absent())
        import imagerefresh.cli, imagerefresh.handlers, imagerefresh.kube.kubeconfig
        print(sorted(m for m in sys.modules if m.startswith("kubernetes")))
    """)
    done = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.cluster
def test_a_connection_to_a_server_whose_ca_is_not_the_kubeconfigs_fails_as_a_tls_failure(
    cluster: Cluster, tmp_path: Path
) -> None:
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    server = admin["clusters"][0]["cluster"]["server"]
    # Any CA but the cluster's: the system's store, which never signed a test cluster's server.
    path = write(tmp_path / "config", **config({"server": server}, {"token": "x"}))
    api = KubeApi(Connection(from_kubeconfig(str(path))), timeout=(2.0, 2.0))
    with pytest.raises(KubeUnavailable, match="the CA in the kubeconfig"):
        api.read_workload("Deployment", "default", "web")
    api.close()
