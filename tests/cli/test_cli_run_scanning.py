"""`imagerefresh run`'s scope options. `--no-scanning` is how the Helm chart runs the operator
without cluster-wide RBAC (kopf then neither lists CRDs nor namespaces; tests/chart runs it
under the chart's ServiceAccount). Namespace patterns work with it too: they are matched by the
operator over one cluster-wide watch (tests/test_handlers.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from imagerefresh.cli import LOG_FORMAT_ENV, LOG_LEVEL_ENV, main
from imagerefresh.cli import run as run_command


def test_namespaces_and_all_namespaces_together_are_refused() -> None:
    result = CliRunner().invoke(main, ["run", "--namespace", "tracebloc", "--all-namespaces"])
    assert result.exit_code == 2
    assert "not both" in result.output


def test_scanning_is_on_unless_asked_off() -> None:
    with run_command.make_context("run", ["--namespace", "irp-*"]) as ctx:
        assert ctx.params["scanning"] is True
    with run_command.make_context("run", ["--namespace", "a", "--no-scanning"]) as ctx:
        assert ctx.params["scanning"] is False


def test_log_options_come_from_the_environment_when_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LOG_LEVEL_ENV, "DEBUG")
    monkeypatch.setenv(LOG_FORMAT_ENV, "console")
    with main.make_context("imagerefresh", ["run"]) as ctx:
        assert ctx.params == {"log_level": "DEBUG", "log_format": "console"}
    with main.make_context("imagerefresh", ["--log-level", "ERROR", "run"]) as ctx:
        assert ctx.params["log_level"] == "ERROR"
