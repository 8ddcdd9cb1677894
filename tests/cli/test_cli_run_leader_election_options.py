"""`imagerefresh run --leader-elect`'s options: where the Lease lives, and timings that could
let two leaders overlap refused before anything starts."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from imagerefresh.cli import lease_namespace, main, operate


@pytest.fixture(autouse=True)
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr(operate, "SERVICE_ACCOUNT_NAMESPACE", "/nonexistent/namespace")


def test_the_lease_namespace_is_the_given_one_else_the_pods_else_the_first_exact_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert lease_namespace("ops", ("irp-*", "tracebloc")) == "ops"
    assert lease_namespace(None, ("irp-*", "tracebloc", "other")) == "tracebloc"
    monkeypatch.setenv("POD_NAMESPACE", "home")
    assert lease_namespace(None, ("tracebloc",)) == "home"


def test_without_any_namespace_to_put_the_lease_in_the_operator_says_which_option_to_give() -> None:
    with pytest.raises(click.UsageError, match="give --leader-election-namespace"):
        lease_namespace(None, ("irp-*",))


def test_timings_where_a_standby_could_take_over_from_a_still_writing_leader_are_refused() -> None:
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--namespace",
            "tracebloc",
            "--leader-elect",
            "--leader-election-lease-duration",
            "5",
            "--leader-election-renew-deadline",
            "10",
        ],
    )
    assert result.exit_code == 2
    assert "the lease duration must be longer than the renew deadline" in result.output


@pytest.mark.parametrize("duration", ["10.5", "15.25"])
def test_a_lease_duration_that_is_not_whole_seconds_is_a_usage_error_saying_why(
    duration: str,
) -> None:
    # 10.5 > 10.2 would pass the overlap check, but a Lease stores whole seconds: rounded to
    # 10, both leaders would write for 0.2 s. Refused before anything starts.
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--namespace",
            "tracebloc",
            "--leader-elect",
            "--leader-election-lease-duration",
            duration,
            "--leader-election-renew-deadline",
            "10.2",
        ],
    )
    assert result.exit_code == 2
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error == (
        f"Error: leader election timings: the lease duration must be a whole number of seconds "
        f"(got {float(duration)}): a Lease stores leaseDurationSeconds as an integer"
    )


@pytest.mark.parametrize("option", ["--peering=imagerefresh", "--priority=10", "--standalone"])
def test_kopf_peering_options_are_not_options_of_run(option: str) -> None:
    # Leader election on a Lease is the only way several replicas share the work.
    result = CliRunner().invoke(main, ["run", "--namespace", "tracebloc", option])
    assert result.exit_code == 2
    assert "No such option" in result.output
