"""The CRD in crds/ and the pydantic models describe the same API — and the API server agrees.

The static half walks both schemas field by field (names, required, types, bounds, patterns,
enums, defaults) so neither can drift alone. The cluster half applies the CRD to the real API
server: the defaults it fills are the models' defaults, every malformed input SPEC §3 lists is
rejected at admission, and the printer columns are served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagerefresh.models import PolicySpec, PolicyStatus, parse_duration
from imagerefresh.models.policy import ContainerSpec, PullBudgetSpec, TargetSpec

from support.cluster_env import Cluster, KubectlError

CRD_PATH = (
    Path(__file__).resolve().parents[2] / "crds" / "imagerefreshpolicies.images.tracebloc.io.yaml"
)
CRD = yaml.safe_load(CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
BOUNDS = ("minimum", "minItems", "minLength", "pattern", "enum")


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return _resolve(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in schema:
        (branch,) = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return _resolve(branch, defs)
    return schema


def _compare(model: dict[str, Any], crd: dict[str, Any], defs: dict[str, Any], path: str) -> None:
    assert set(model["properties"]) == set(crd["properties"]), path
    assert set(model.get("required", ())) == set(crd.get("required", ())), path
    for name, crd_field in crd["properties"].items():
        model_field = _resolve(model["properties"][name], defs)
        where = f"{path}.{name}"
        assert model_field["type"] == crd_field["type"], where
        for bound in BOUNDS:
            if bound in model_field or bound in crd_field:
                assert model_field.get(bound) == crd_field.get(bound), f"{where}: {bound}"
        if crd_field["type"] == "object" and "properties" in crd_field:
            _compare(model_field, crd_field, defs, where)
        if crd_field["type"] == "array":
            _compare(_resolve(model_field["items"], defs), crd_field["items"], defs, where)


def test_spec_schema_fields_types_and_bounds_agree_with_the_models() -> None:
    model = PolicySpec.model_json_schema(by_alias=True)
    _compare(model, SCHEMA["properties"]["spec"], model["$defs"], "spec")


def test_status_schema_fields_agree_with_the_models() -> None:
    model = PolicyStatus.model_json_schema(by_alias=True)
    crd = SCHEMA["properties"]["status"]

    def names(m: dict[str, Any], c: dict[str, Any], path: str) -> None:
        assert set(m["properties"]) == set(c["properties"]), path
        for name, c_field in c["properties"].items():
            m_field = _resolve(m["properties"][name], model["$defs"])
            if c_field.get("type") == "object" and "properties" in c_field:
                names(m_field, c_field, f"{path}.{name}")
            if c_field.get("type") == "array" and "properties" in c_field["items"]:
                names(_resolve(m_field["items"], model["$defs"]), c_field["items"], path + name)

    names(model, crd, "status")


@pytest.mark.parametrize(
    ("model", "path"),
    [
        (PolicySpec, ("spec",)),
        (PullBudgetSpec, ("spec", "pullBudget")),
        (TargetSpec, ("spec", "targets", "items")),
        (ContainerSpec, ("spec", "targets", "items", "containers", "items")),
    ],
)
def test_defaults_agree_with_the_models(model: Any, path: tuple[str, ...]) -> None:
    crd = SCHEMA["properties"]
    node: dict[str, Any] = {"properties": crd}
    for part in path:
        node = node["items"] if part == "items" else node["properties"][part]
    for name, field in model.model_fields.items():
        alias = field.alias or name
        crd_default = node["properties"][alias].get("default")
        if field.is_required() or field.default is None:
            assert crd_default is None, f"{alias} has a CRD default the model lacks"
            continue
        if crd_default is None:
            pytest.fail(f"{'.'.join(path)}.{alias} has a model default the CRD lacks")
        if isinstance(crd_default, str) and node["properties"][alias].get("pattern", "").startswith(
            "^(["
        ):
            assert parse_duration(crd_default) == field.default, alias
        elif isinstance(crd_default, dict):
            assert field.default == type(field.default).model_validate(crd_default), alias
        else:
            assert crd_default == field.default, alias


# --- against the API server --------------------------------------------------------------

MINIMAL = {
    "targets": [
        {
            "kind": "Deployment",
            "name": "jobs-manager",
            "containers": [{"name": "api", "image": "tracebloc/jobs-manager:prod"}],
        }
    ]
}


def policy_object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def crd(crd_installed: Cluster) -> Cluster:
    """The project's CRD, installed once (support/operator_env.py)."""
    return crd_installed


def test_the_api_server_fills_the_models_defaults(crd: Cluster, namespace: str) -> None:
    crd.apply(policy_object("minimal", MINIMAL), namespace=namespace)
    stored = crd.get("irp", "minimal", "-n", namespace)
    assert stored["spec"]["interval"] == "15m"
    assert stored["spec"]["pullBudget"] == {"reserve": 2}
    assert PolicySpec.model_validate(stored["spec"]) == PolicySpec.model_validate(MINIMAL)


HEX = "a" * 64
BAD_SPECS = {
    "unknown kind": {
        "targets": [{"kind": "CronJob", "name": "x", "containers": [{"name": "a", "image": "a:b"}]}]
    },
    "empty targets": {"targets": []},
    "empty containers": {"targets": [{"kind": "Deployment", "name": "x", "containers": []}]},
    "digest inside image": {
        "targets": [
            {
                "kind": "Deployment",
                "name": "x",
                "containers": [{"name": "a", "image": f"a@sha256:{HEX}"}],
            }
        ]
    },
    "malformed digest": {
        "targets": [
            {
                "kind": "Deployment",
                "name": "x",
                "containers": [{"name": "a", "image": "a:b", "digest": "sha256:abc"}],
            }
        ]
    },
    "unparseable interval": {**MINIMAL, "interval": "soon"},
    "interval under 30s": {**MINIMAL, "interval": "10s"},
    "rolloutTimeout under 30s": {**MINIMAL, "rolloutTimeout": "29s"},
    "zero maxSkipTicks": {**MINIMAL, "maxSkipTicks": 0},
    "negative maxRefreshAttempts": {**MINIMAL, "maxRefreshAttempts": -1},
    "negative reserve": {**MINIMAL, "pullBudget": {"reserve": -1}},
    "duplicate container": {
        "targets": [
            {
                "kind": "Deployment",
                "name": "x",
                "containers": [{"name": "a", "image": "a:b"}, {"name": "a", "image": "c:d"}],
            }
        ]
    },
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_admission_rejects_what_the_models_reject(crd: Cluster, namespace: str, case: str) -> None:
    spec = BAD_SPECS[case]
    with pytest.raises(KubectlError, match=r"Invalid|invalid|Unsupported|Duplicate|must|should"):
        crd.kubectl(
            "create", "-n", namespace, "-f", "-", input=json.dumps(policy_object("bad", spec))
        )
    with pytest.raises(ValueError, match="validation error"):  # the models reject it too
        PolicySpec.model_validate(spec)


def test_printer_columns_and_short_name_are_served(crd: Cluster, namespace: str) -> None:
    crd.apply(policy_object("columns", MINIMAL), namespace=namespace)
    table = crd.kubectl("get", "irp", "-n", namespace).stdout
    assert table.split()[:6] == ["NAME", "TARGETS", "READY", "PHASE", "LAST", "REFRESH"]
