"""`imagerefresh run`'s defaults are the operator configuration's: code that builds an
``OperatorConfig`` without a value (a test, a tool) gets what the operator runs with."""

from __future__ import annotations

import dataclasses

import click

from imagerefresh.cli import main
from imagerefresh.runtime.config import OperatorConfig


def test_every_option_of_run_that_is_a_configuration_field_defaults_to_the_field_s_default() -> (
    None
):
    run = main.commands["run"]
    config = OperatorConfig()
    fields = {field.name for field in dataclasses.fields(OperatorConfig)}
    ctx = click.Context(run)
    options = {  # each default as the option hands it on (its type and callback applied)
        param.name: param.process_value(ctx, param.get_default(ctx))
        for param in run.params
        if isinstance(param, click.Option) and param.name in fields and not param.multiple
    }
    assert {"watch_evidence", "read_nodes", "pre_pull_pods", "resolution_window"} <= set(options)
    assert options == {name: getattr(config, name) for name in options}
