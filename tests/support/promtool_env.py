"""Prometheus' promtool, to check and unit-test the chart's alerting rules as Prometheus runs them.

`promtool` is the build pinned in `e2e/versions.env` (PROMETHEUS_VERSION), in the same bin dir as
helm (`e2e/build-binaries --print-bin-dir`). A missing binary fails the test, never skips it.

`rules_test` writes the rule groups and one `promtool test rules` file (input series, alert
expectations at evaluation times) into a directory and runs it: promtool replays the series
through the real rule engine, `for` clauses and staleness included.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.helm_env import BUILD_BINARIES


@cache
def promtool_binary() -> Path:
    out = subprocess.run(
        [str(BUILD_BINARIES), "--print-bin-dir"], capture_output=True, text=True, check=True
    )
    promtool = Path(out.stdout.strip()) / "promtool"
    if not promtool.exists():
        pytest.fail(
            f"{promtool} is missing: run `make binaries` (e2e/build-binaries builds it once from "
            "Prometheus' Go module)",
            pytrace=False,
        )
    return promtool


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run promtool in ``cwd``; never raises on a non-zero exit."""
    return subprocess.run(
        [str(promtool_binary()), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def write_rules(directory: Path, groups: Sequence[Mapping[str, Any]]) -> Path:
    """The groups of a PrometheusRule's spec as a Prometheus rule file."""
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": list(groups)}, sort_keys=False))
    return path


def rules_test(
    directory: Path,
    groups: Sequence[Mapping[str, Any]],
    input_series: Mapping[str, str],
    alert_rule_test: Sequence[Mapping[str, Any]],
    *,
    interval: str = "1m",
) -> None:
    """`promtool test rules` with one test: ``input_series`` ({series: values, in promtool's
    expanding notation}, one sample per ``interval``) and the alerts expected at each
    evaluation time. A mismatch fails the test with promtool's report."""
    write_rules(directory, groups)
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": interval,
        "tests": [
            {
                "interval": interval,
                "input_series": [{"series": s, "values": v} for s, v in input_series.items()],
                "alert_rule_test": list(alert_rule_test),
            }
        ],
    }
    (directory / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = promtool("test", "rules", "test.yaml", cwd=directory)
    if result.returncode != 0:
        pytest.fail(f"promtool test rules:\n{result.stdout}{result.stderr}", pytrace=False)
