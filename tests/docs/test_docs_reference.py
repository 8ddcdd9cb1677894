"""The reference in docs/ and the code agree, both ways: everything the code defines that a user
meets is documented, and everything the reference names as such still exists.

Each side is read from the real objects, never by searching prose: reasons from
``planner.reasons``, phases and condition types from their enums, spec and status fields from
the CRD's schema, metrics (names, types, labels) from the prometheus_client collectors a
:class:`~imagerefresh.metrics.Metrics` registers, commands and flags by walking the click
command tree, chart values by walking ``values.yaml``, annotations and labels from the package's
constants, audit findings from their enum, alerts from the rendered PrometheusRule. The
reference is read as tables (tests/support/docs.py): a name in a sentence documents nothing.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from typing import Any

import click
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import imagerefresh
from imagerefresh.audit import FindingKind
from imagerefresh.cli import main
from imagerefresh.handlers import GROUP, VERSION
from imagerefresh.metrics import Metrics
from imagerefresh.models import ConditionType, Phase
from imagerefresh.planner import reasons
from imagerefresh.ratelimit import RequestKind

from support.docs import DOCS, REPO, anchors, code_spans, first_code, tables_with
from support.helm_env import only, render

API = DOCS / "api.md"
CRD = REPO / "crds" / "imagerefreshpolicies.images.tracebloc.io.yaml"


def _differ(what: str, in_code: set[str], in_docs: set[str]) -> str:
    return (
        f"{what}: in the code but not documented: {sorted(in_code - in_docs)}; "
        f"documented but not in the code: {sorted(in_docs - in_code)}"
    )


# --- reasons -----------------------------------------------------------------------------------


def _reason_constants() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(reasons).items()
        if name.isupper() and isinstance(value, str)
    }


def test_every_reason_is_classified_as_an_event_or_a_condition_reason() -> None:
    classified = {*reasons.TARGET_EVENTS, *reasons.POLICY_EVENTS, *reasons.CONDITIONS}
    unclassified = {name for name, value in _reason_constants().items() if value not in classified}
    assert not unclassified, (
        f"reasons in planner/reasons.py in none of TARGET_EVENTS, POLICY_EVENTS, CONDITIONS: "
        f"{sorted(unclassified)}"
    )
    assert set(reasons.CONDITION_EVENTS) <= set(reasons.CONDITIONS)


def test_every_event_reason_is_documented_with_what_it_is_about_and_nothing_else() -> None:
    (table,) = tables_with(API, "event reason")
    about = {first_code(row["event reason"]): row["about"] for row in table.rows}
    in_code = {*reasons.TARGET_EVENTS, *reasons.POLICY_EVENTS, *reasons.CONDITION_EVENTS}
    assert set(about) == in_code, _differ("event reasons", in_code, set(about))
    for reason in reasons.TARGET_EVENTS:
        assert about[reason] == "target", reason
    for reason in {*reasons.POLICY_EVENTS, *reasons.CONDITION_EVENTS}:
        assert about[reason] == "policy", reason


def test_every_condition_type_and_reason_is_documented_and_nothing_else() -> None:
    (table,) = tables_with(API, "condition", "status", "reason")
    types = {first_code(row["condition"]) for row in table.rows}
    documented = {first_code(row["reason"]) for row in table.rows}
    assert types == {str(t) for t in ConditionType}, _differ(
        "condition types", {str(t) for t in ConditionType}, types
    )
    assert documented == set(reasons.CONDITIONS), _differ(
        "condition reasons", set(reasons.CONDITIONS), documented
    )


# --- phases --------------------------------------------------------------------------------------


def test_every_phase_is_documented_worst_first_with_its_troubleshooting_section() -> None:
    (table,) = tables_with(API, "phase", "means")
    documented = [first_code(row["phase"]) for row in table.rows]
    assert documented == [str(p) for p in Phase], "docs/api.md's phases, worst first"
    sections = anchors(DOCS / "troubleshooting.md")
    missing = [str(p) for p in Phase if str(p).lower() not in sections]
    assert not missing, f"docs/troubleshooting.md has no section for {missing}"


# --- spec and status fields ----------------------------------------------------------------------


def _schema_paths(schema: dict[str, Any], path: str) -> Iterator[str]:
    for name, child in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        yield here
        if child.get("type") == "array":
            yield from _schema_paths(child.get("items") or {}, here + "[]")
        else:
            yield from _schema_paths(child, here)


def test_every_spec_and_status_field_of_the_crd_is_documented_and_nothing_else() -> None:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    root = version["schema"]["openAPIV3Schema"]["properties"]
    in_crd = {*_schema_paths(root["spec"], "spec"), *_schema_paths(root["status"], "status")}
    documented = {
        first_code(row["field"])
        for table in tables_with(API, "field")
        for row in table.rows
        if first_code(row["field"]).startswith(("spec", "status"))
    }
    assert documented == in_crd, _differ("spec and status fields", in_crd, documented)


# --- annotations and labels ----------------------------------------------------------------------


def _package_constants() -> Iterator[tuple[str, str]]:
    for module in pkgutil.walk_packages(imagerefresh.__path__, "imagerefresh."):
        if module.name == "imagerefresh.__main__":  # importing it runs the command line
            continue
        for name, value in vars(importlib.import_module(module.name)).items():
            if name.isupper() and isinstance(value, str):
                yield name, value


def _own_keys() -> dict[str, set[str]]:
    """The operator's own keys, images.tracebloc.io/<name>, by what the constant naming each
    is: a ``*LABEL`` a label, any other an annotation. The API version has that shape too, and
    a finalizer is neither."""
    keys: dict[str, set[str]] = {"annotation": set(), "label": set()}
    for name, value in _package_constants():
        if (
            re.fullmatch(r"images\.tracebloc\.io/[a-z0-9-]+", value)
            and value != f"{GROUP}/{VERSION}"
            and not name.endswith("FINALIZER")
        ):
            keys["label" if name.endswith("LABEL") else "annotation"].add(value)
    return keys


@pytest.mark.parametrize("kind", ["annotation", "label"])
def test_every_annotation_and_label_the_code_reads_or_writes_is_documented_and_nothing_else(
    kind: str,
) -> None:
    in_code = _own_keys()[kind]
    (table,) = tables_with(API, kind)
    documented = {first_code(row[kind]) for row in table.rows}
    assert documented == in_code, _differ(f"{kind}s", in_code, documented)


# --- metrics -------------------------------------------------------------------------------------


def _metric_families() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each family a Metrics registers: its exposed name, type and label names."""
    metrics = Metrics(version="test")
    families = {}
    for collector in vars(metrics).values():
        if isinstance(collector, MetricWrapperBase):
            kind = collector._type
            name = collector._name + ("_total" if kind == "counter" else "")
            families[name] = (kind, tuple(collector._labelnames))
    return families


def test_every_metric_is_documented_with_its_type_and_labels_and_nothing_else() -> None:
    (table,) = tables_with(DOCS / "metrics.md", "metric", "type", "labels")
    documented = {
        first_code(row["metric"]): (row["type"], tuple(code_spans(row["labels"])))
        for row in table.rows
    }
    families = _metric_families()
    assert set(documented) == set(families), _differ("metrics", set(families), set(documented))
    assert documented == families


def test_every_registry_request_kind_is_documented_with_whether_it_is_a_pull() -> None:
    (table,) = tables_with(DOCS / "metrics.md", "request kind", "pull")
    documented = {first_code(row["request kind"]): row["pull"] for row in table.rows}
    in_code = {str(kind): "yes" if kind.is_pull else "no" for kind in RequestKind}
    assert set(documented) == set(in_code), _differ("request kinds", set(in_code), set(documented))
    assert documented == in_code


def test_every_alert_the_chart_renders_is_documented_with_its_runbook_and_nothing_else() -> None:
    values = {"metrics": {"prometheusRule": {"enabled": True}}}
    rule = only(render(values), "PrometheusRule")
    rendered = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    (table,) = tables_with(DOCS / "metrics.md", "alert")
    documented = {first_code(row["alert"]) for row in table.rows}
    assert documented == rendered, _differ("alerts", rendered, documented)


# --- the command line ----------------------------------------------------------------------------


def _flags(command: click.Command) -> set[str]:
    return {
        opt
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
        for opt in (*param.opts, *param.secondary_opts)
    }


def _documented_flags(section: str) -> set[str]:
    """The flags a section's `flag` table names (the first word of each code span)."""
    found = set()
    for line in section.splitlines():
        if not line.startswith("| `-"):
            continue
        cell = line.split("|")[1]
        found |= {span.split()[0] for span in code_spans(cell)}
    return found


def _documented_defaults(section: str) -> dict[str, str]:
    """Each flag of a section's table → the first code span of its default cell."""
    found = {}
    for line in section.splitlines():
        if not line.startswith("| `-"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        spans = code_spans(cells[1])
        for flag in code_spans(cells[0]):
            if spans:
                found[flag.split()[0]] = spans[0]
    return found


def _cli_sections() -> dict[str, str]:
    text = (DOCS / "cli.md").read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip("`"): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_command_and_flag_is_documented_and_nothing_else() -> None:
    sections = _cli_sections()
    commands = {f"imagerefresh {name}" for name in main.commands}
    documented = {name for name in sections if name.startswith("imagerefresh ")}
    assert documented == commands, _differ("commands", commands, documented)
    global_flags = _flags(main)
    assert _documented_flags(sections["Global options"]) == global_flags
    for name, command in main.commands.items():
        # The global log options are every command's too (after the command), documented once.
        expected = _flags(command) - global_flags
        flags = _documented_flags(sections[f"imagerefresh {name}"])
        assert flags == expected, _differ(f"flags of imagerefresh {name}", expected, flags)


def test_every_flags_documented_default_is_its_default() -> None:
    sections = _cli_sections()
    for command, section in [
        (main, sections["Global options"]),
        *((c, sections[f"imagerefresh {n}"]) for n, c in main.commands.items()),
    ]:
        documented = _documented_defaults(section)
        for param in command.params:
            default = param.default
            if not isinstance(param, click.Option) or param.hidden or param.is_flag:
                continue
            if isinstance(default, bool) or not isinstance(default, int | float | str):
                continue  # no default, or one that is said in words
            written = documented.get(param.opts[0])
            assert written is not None, (command.name, param.opts[0], default)
            if isinstance(default, str):
                assert written == default, (command.name, param.opts[0], written, default)
            else:
                assert float(written) == float(default), (command.name, param.opts[0], written)


# --- chart values --------------------------------------------------------------------------------


def _leaves(values: dict[str, Any], path: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        here = f"{path}.{key}" if path else key
        if isinstance(value, dict) and value:
            yield from _leaves(value, here)
        else:
            yield here, value


def _keys(values: dict[str, Any], path: str = "") -> Iterator[str]:
    for key, value in values.items():
        here = f"{path}.{key}" if path else key
        yield here
        if isinstance(value, dict):
            yield from _keys(value, here)


def _as_written(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def test_every_chart_value_is_documented_with_its_default_and_nothing_else() -> None:
    values = yaml.safe_load((REPO / "chart" / "values.yaml").read_text())
    (table,) = tables_with(DOCS / "install.md", "value", "default")
    rows = {first_code(row["value"]): row["default"] for row in table.rows}
    subtrees = {name.removesuffix(".*") for name in rows if name.endswith(".*")}
    leaves = dict(_leaves(values))
    undocumented = [
        leaf
        for leaf in leaves
        if leaf not in rows and not any(leaf.startswith(tree + ".") for tree in subtrees)
    ]
    assert not undocumented, f"chart values missing from docs/install.md: {undocumented}"
    keys = set(_keys(values))
    gone = [name for name in rows if name.removesuffix(".*") not in keys]
    assert not gone, f"docs/install.md documents chart values that do not exist: {gone}"
    for name, default in rows.items():
        value = leaves.get(name)
        spans = code_spans(default)
        if value not in (None, "", [], {}) and spans and not spans[0].startswith("<"):
            assert spans[0] == _as_written(value), (name, default, value)


# --- audit findings ------------------------------------------------------------------------------


def test_every_audit_finding_is_documented_and_nothing_else() -> None:
    (table,) = tables_with(DOCS / "audit.md", "finding", "means")
    documented = {first_code(row["finding"]) for row in table.rows}
    in_code = {str(kind) for kind in FindingKind}
    assert documented == in_code, _differ("audit findings", in_code, documented)


# --- links and citations -------------------------------------------------------------------------

USER_PAGES = sorted(
    [REPO / "README.md", REPO / "examples" / "README.md", *DOCS.rglob("*.md")],
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_stays_inside_the_repository_and_reaches_its_file_and_section(page: Any) -> None:
    for target in _LINK.findall(page.read_text()):
        assert not target.startswith(("http://", "https://")) or "github.com/tracebloc" in target, (
            page,
            target,
        )
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        assert resolved.is_relative_to(REPO), f"{page}: {target} leaves the repository"
        assert resolved.exists(), f"{page}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page}: {target}: no such section"


_CITATION = re.compile(r"\bSPEC\b|§|[Cc]ontext doc")


def _user_facing_files() -> Iterator[Any]:
    yield REPO / "README.md"
    yield from (REPO / "examples").rglob("*.*")
    yield from (p for p in DOCS.rglob("*.md") if "contributing" not in p.parts)
    yield from (p for p in (REPO / "chart").rglob("*") if p.is_file())


def _help_texts(command: click.Command, ctx: click.Context) -> Iterator[str]:
    yield command.get_help(ctx)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _help_texts(sub, click.Context(sub, info_name=name, parent=ctx))


def test_no_user_facing_text_cites_documents_a_user_does_not_have() -> None:
    cited = [
        str(path.relative_to(REPO))
        for path in _user_facing_files()
        if _CITATION.search(path.read_text(errors="replace"))
    ]
    assert not cited, f"these cite the design spec or context documents: {cited}"
    for text in _help_texts(main, click.Context(main, info_name="imagerefresh")):
        assert not _CITATION.search(text), text


def test_no_message_of_the_operator_cites_documents_a_user_does_not_have() -> None:
    # Every string literal of the package: messages, help, events, what migrate-cronjob prints.
    package = REPO / "operator" / "imagerefresh"
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not _CITATION.search(node.value), (str(path.relative_to(REPO)), node.value)


# --- the README's policy -------------------------------------------------------------------------


def test_the_readmes_policy_is_the_example_policy() -> None:
    readme = (REPO / "README.md").read_text()
    (block,) = re.findall(r"kubectl apply -f - <<'EOF'\n(.*?)\nEOF\n", readme, flags=re.S)
    example = REPO / "examples" / "policies" / "control-plane.yaml"
    assert yaml.safe_load(block) == yaml.safe_load(example.read_text())
