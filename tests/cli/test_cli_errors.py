"""How every command fails: one line, `Error: …`, saying what went wrong and what to do, and an
exit status its --help (and docs/cli.md) lists — never a traceback, never "retried next tick"
from a command nothing retries. Run as the installed console script; where the failure comes
from the API server, against the real local one (an unknown context, a caller without rights,
no such policy), or a real closed port (no API server)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from imagerefresh.cli import (
    AUDIT_UNREADABLE_EXIT,
    LEADERSHIP_LOST_EXIT,
    CommandFailed,
    CouldNotAudit,
    main,
)

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster
from support.docs import cli_exit_tables
from support.registry_env import free_port
from support.scenario import policy, target

IMAGEREFRESH = Path(sys.executable).with_name("imagerefresh")
JM = "tracebloc/jobs-manager:prod"

# Every command that talks to the API server, with what it exits when it cannot.
CLUSTER_COMMANDS = [
    pytest.param(["plan", "tracebloc/control-plane"], 1, id="plan"),
    pytest.param(["reset", "tracebloc/control-plane"], 1, id="reset"),
    pytest.param(["refresh-now", "tracebloc/control-plane"], 1, id="refresh-now"),
    pytest.param(["audit", "--namespace", "tracebloc"], AUDIT_UNREADABLE_EXIT, id="audit"),
    pytest.param(["migrate-cronjob", "tracebloc/tb-image-refresh"], 1, id="migrate-cronjob"),
]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(IMAGEREFRESH), *args],
        capture_output=True,
        text=True,
        env=env if env is not None else dict(os.environ),
        timeout=60,
        check=False,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command wrote (no traceback, nothing on stdout)."""
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ")
    return line


@pytest.fixture
def nowhere(tmp_path: Path) -> dict[str, str]:
    """An environment with no kubeconfig anywhere and no pod around it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    env["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")
    env["HOME"] = str(tmp_path)
    return env


# --- the command line itself ----------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["run", "--namespace", "tracebloc"], ["plan", "tracebloc/control-plane"], ["audit"]],
    ids=["run", "plan", "audit"],
)
def test_a_malformed_namespace_pair_is_a_usage_error_on_every_command_that_takes_one(
    command: list[str], nowhere: dict[str, str]
) -> None:
    result = cli(*command, "--allow-namespace-pair", "bad", env=nowhere)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "Error: Invalid value for '--allow-namespace-pair': invalid namespace pair 'bad': "
        "write POLICY_NAMESPACE=TARGET_NAMESPACE"
    )


def test_apply_and_revert_together_are_refused_not_settled_by_their_order() -> None:
    result = CliRunner().invoke(main, ["migrate-cronjob", "ns/cj", "--apply", "--revert"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: --apply and --revert undo each other: give one of them (or neither, to look first)"
    )


@pytest.mark.parametrize("value", ["tracebloc", "/x", "a/b/c", "a/"])
def test_a_policy_that_is_not_namespace_slash_name_is_a_usage_error(value: str) -> None:
    result = CliRunner().invoke(main, ["reset", value])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        f"Error: Invalid value for 'NAMESPACE/NAME': {value!r}: write NAMESPACE/NAME"
    )


@pytest.fixture
def root_level() -> Iterator[None]:
    before = logging.getLogger().level
    yield
    logging.getLogger().setLevel(before)


def test_the_log_options_work_after_the_command_as_before_it_and_the_last_one_wins(
    root_level: None, tmp_path: Path
) -> None:
    missing = str(tmp_path / "none")
    after = ["reset", "ns/p", "--kubeconfig", missing, "--log-level", "error"]
    assert CliRunner().invoke(main, after).exit_code == 1  # it ran (and found no kubeconfig)
    assert logging.getLogger().level == logging.ERROR
    both = ["--log-level", "DEBUG", "reset", "ns/p", "--kubeconfig", missing, "--log-level", "INFO"]
    assert CliRunner().invoke(main, both).exit_code == 1
    assert logging.getLogger().level == logging.INFO
    before = ["--log-level", "DEBUG", "reset", "ns/p", "--kubeconfig", missing]
    assert CliRunner().invoke(main, before).exit_code == 1
    assert logging.getLogger().level == logging.DEBUG


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_unknown_log_level_is_a_usage_error_wherever_it_is_given(where: str) -> None:
    args = ["--log-level", "LOUD", "reset", "ns/p"]
    if where == "after":
        args = ["reset", "ns/p", "--log-level", "LOUD"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "'LOUD' is not one of" in result.output.splitlines()[-1]


# --- exit statuses: listed, and never one status for two things ---------------------------------


def test_every_command_lists_its_exit_statuses_at_the_end_of_its_help() -> None:
    for name, command in main.commands.items():
        result = CliRunner().invoke(main, [name, "--help"], terminal_width=200)
        assert result.exit_code == 0
        listed = result.output.split("\nExit status:\n", 1)[1]
        codes = [int(line.split()[0]) for line in listed.splitlines() if line.strip()[:1].isdigit()]
        assert codes == [code for code, _ in command.exits], name  # type: ignore[attr-defined]


def test_no_exit_status_means_two_things() -> None:
    meanings: dict[int, set[str]] = {}
    for name, command in main.commands.items():
        codes = [code for code, _ in command.exits]  # type: ignore[attr-defined]
        assert codes == sorted(set(codes)), name  # within a command, each status once
        assert codes[:3] == [0, 1, 2] or name == "audit", name
        for code in codes:
            meanings.setdefault(code, set()).add(name)
    # 3 and 4 are each one command's own: could not audit, lost leadership.
    assert meanings[AUDIT_UNREADABLE_EXIT] == {"audit"}
    assert meanings[LEADERSHIP_LOST_EXIT] == {"run"}


def test_the_cli_reference_lists_each_commands_exit_statuses_as_its_help_does() -> None:
    assert cli_exit_tables() == {
        name: list(command.exits)  # type: ignore[attr-defined]
        for name, command in main.commands.items()
    }


# --- no kubeconfig, no API server ---------------------------------------------------------------


@pytest.mark.parametrize(("command", "code"), CLUSTER_COMMANDS)
def test_without_a_kubeconfig_each_command_says_how_to_give_one_in_one_line(
    command: list[str], code: int, nowhere: dict[str, str]
) -> None:
    result = cli(*command, env=nowhere)
    assert result.returncode == code
    line = error_line(result)
    assert line.startswith(
        "Error: configure the Kubernetes client: no usable Kubernetes client configuration ("
    )
    assert line.endswith(
        "pass --kubeconfig FILE (and --context NAME) or set KUBECONFIG; without either, "
        "~/.kube/config is read"
    )


def test_run_without_a_kubeconfig_fails_in_one_line(nowhere: dict[str, str]) -> None:
    port = str(free_port())
    result = cli("run", "--namespace", "tracebloc", "--metrics-port", port, env=nowhere)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "Error: configure the Kubernetes client: no usable Kubernetes client configuration"
    )


def test_run_names_the_port_it_cannot_serve_on(nowhere: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(
            "run", "--namespace", "tracebloc", "--bind-address", "127.0.0.1",
            "--metrics-port", str(port), env=nowhere,
        )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"Error: cannot serve /metrics on 127.0.0.1:{port} (Address already in use); give "
        "another --metrics-port, or stop what listens there"
    )


@pytest.fixture
def unreachable(tmp_path: Path, nowhere: dict[str, str]) -> dict[str, str]:
    """A kubeconfig whose API server is a closed port on loopback (nothing listens)."""
    path = tmp_path / "unreachable"
    path.write_text(yaml.safe_dump(kubeconfig_for(f"https://127.0.0.1:{free_port()}", "down")))
    return {**nowhere, "KUBECONFIG": str(path)}


def kubeconfig_for(server: str, name: str, **cluster: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, **cluster}}],
        "users": [{"name": name, "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


@pytest.mark.parametrize(("command", "code"), CLUSTER_COMMANDS)
def test_with_no_api_server_a_one_shot_command_says_to_check_and_run_it_again_not_next_tick(
    command: list[str], code: int, unreachable: dict[str, str]
) -> None:
    result = cli(*command, env=unreachable)
    assert result.returncode == code
    line = error_line(result)
    assert "the Kubernetes API server could not be reached" in line
    assert (
        "that your kubeconfig names it (--kubeconfig, --context), then run the command again"
        in (line)
    )
    assert "tick" not in line
    assert "the operator" not in line


# --- against the real API server ------------------------------------------------------------------


@pytest.fixture
def two_contexts(cluster: Cluster, tmp_path: Path) -> Path:
    """The test cluster's kubeconfig with a second context, current, at a closed port."""
    config = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    down = kubeconfig_for(f"https://127.0.0.1:{free_port()}", "down")
    for part in ("clusters", "users", "contexts"):
        config[part] += down[part]  # type: ignore[operator]
    config["current-context"] = "down"
    path = tmp_path / "two-contexts"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def control_plane(crd_installed: Cluster, namespace: str) -> str:
    crd_installed.apply(
        policy("control-plane", target("jobs-manager", api=JM)), namespace=namespace
    )
    return namespace


def test_the_context_given_is_the_one_used(
    cluster: Cluster, control_plane: str, two_contexts: Path
) -> None:
    env = {**cluster.env, "KUBECONFIG": str(two_contexts)}
    current = cli("reset", f"{control_plane}/control-plane", env=env)
    assert current.returncode == 1
    assert "could not be reached" in error_line(current)
    test_context = yaml.safe_load(two_contexts.read_text())["contexts"][0]["name"]
    chosen = cli("reset", f"{control_plane}/control-plane", "--context", test_context, env=env)
    assert chosen.returncode == 0, chosen.stderr
    annotations = cluster.get("irp", "control-plane", "-n", control_plane)["metadata"]
    assert "images.tracebloc.io/reset" in annotations["annotations"]


def test_an_unknown_context_is_named_in_one_line(cluster: Cluster, control_plane: str) -> None:
    result = cli("reset", f"{control_plane}/control-plane", "--context", "nope", env=cluster.env)
    assert result.returncode == 1
    line = error_line(result)
    assert "nope" in line
    assert line.endswith("pass --kubeconfig FILE (and --context NAME) or set KUBECONFIG; "
                         "without either, ~/.kube/config is read")  # fmt: skip


@pytest.mark.parametrize("command", ["reset", "refresh-now"])
def test_a_caller_without_rights_is_told_what_their_own_account_needs(
    cluster: Cluster, control_plane: str, tmp_path: Path, command: str
) -> None:
    kubeconfig = service_account_kubeconfig(cluster, control_plane, "default", tmp_path / "sa")
    env = {**cluster.env, "KUBECONFIG": str(kubeconfig)}
    result = cli(command, f"{control_plane}/control-plane", env=env)
    assert result.returncode == 1
    line = error_line(result)
    assert line.startswith(f"Error: patch ImageRefreshPolicy {control_plane}/control-plane ")
    assert (
        f"the account your kubeconfig uses (system:serviceaccount:{control_plane}:default) needs "
        f"patch on imagerefreshpolicies.images.tracebloc.io in namespace {control_plane}: have "
        "it granted (a Role/RoleBinding), or use a kubeconfig that has it"
    ) in line
    assert "operator" not in line
    assert "tick" not in line


@pytest.mark.parametrize("command", ["reset", "refresh-now"])
def test_asking_a_policy_that_does_not_exist_fails_in_one_line(
    cluster: Cluster, crd_installed: Cluster, namespace: str, command: str
) -> None:
    result = cli(command, f"{namespace}/no-such-policy", env=cluster.env)
    assert result.returncode == 1
    line = error_line(result)
    assert line.startswith(f"Error: patch ImageRefreshPolicy {namespace}/no-such-policy ")
    assert line.endswith("create it or correct the name/namespace")


def test_planning_a_policy_that_does_not_exist_fails_in_one_line(
    cluster: Cluster, crd_installed: Cluster, namespace: str
) -> None:
    result = cli("plan", f"{namespace}/no-such-policy", env=cluster.env)
    assert result.returncode == 1
    assert error_line(result) == (
        f"Error: no ImageRefreshPolicy {namespace}/no-such-policy; check the name (kubectl get "
        f"irp -n {namespace}) and the kubeconfig context"
    )


def test_migrating_a_cronjob_that_does_not_exist_fails_in_one_line(
    cluster: Cluster, namespace: str
) -> None:
    result = cli("migrate-cronjob", f"{namespace}/no-such-cronjob", env=cluster.env)
    assert result.returncode == 1
    assert error_line(result) == (
        f"Error: no CronJob {namespace}/no-such-cronjob: name the edge's image-refresh CronJob "
        "(kubectl get cronjob -A | grep image-refresh)"
    )


def test_a_failure_is_always_one_line_in_clicks_own_error_style() -> None:
    assert issubclass(CommandFailed, click.ClickException)
    assert CommandFailed("cannot do it:\n  do this").format_message() == "cannot do it: do this"
    assert CouldNotAudit("x").exit_code == AUDIT_UNREADABLE_EXIT


def test_run_names_the_liveness_port_it_cannot_serve_on(crd_installed: Cluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(
            "run", "--namespace", "tracebloc", "--bind-address", "127.0.0.1", "--no-scanning",
            "--metrics-port", str(free_port()), "--liveness-port", str(port), env=crd_installed.env,
        )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"Error: cannot serve /healthz on 127.0.0.1:{port} (Address already in use); give "
        "another --liveness-port, or stop what listens there"
    )
