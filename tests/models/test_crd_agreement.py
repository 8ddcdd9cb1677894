"""The CRD in crds/ and the pydantic models describe the same API — and the API server agrees.

The static half walks both schemas field by field (names, required, types, bounds, patterns,
enums, defaults; for status, names, types and enums) so neither can drift alone, and checks that
the CRD describes every field: its descriptions are the one place a field's meaning is written
for users. The cluster half applies the CRD to the real API server: the defaults it fills are
the models' defaults, every malformed input SPEC §3 lists is rejected at admission, the printer
columns are served, and `kubectl explain` answers for every field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagerefresh.models import Phase, PolicySpec, PolicyStatus, parse_duration
from imagerefresh.models.policy import ContainerSpec, PullBudgetSpec, TargetSpec

from support.cluster_env import Cluster, KubectlError, eventually

CRD_PATH = (
    Path(__file__).resolve().parents[2] / "crds" / "imagerefreshpolicies.images.tracebloc.io.yaml"
)
CRD = yaml.safe_load(CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
BOUNDS = ("minimum", "minItems", "maxItems", "minLength", "pattern", "enum")


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
        if crd_field["type"] == "array" and "properties" in crd_field["items"]:
            _compare(_resolve(model_field["items"], defs), crd_field["items"], defs, where)
        elif crd_field["type"] == "array":  # a list of scalars (a window's days)
            model_items, crd_items = _resolve(model_field["items"], defs), crd_field["items"]
            assert model_items["type"] == crd_items["type"], f"{where}[]"
            for bound in BOUNDS:
                assert model_items.get(bound) == crd_items.get(bound), f"{where}[]: {bound}"


def test_spec_schema_fields_types_and_bounds_agree_with_the_models() -> None:
    model = PolicySpec.model_json_schema(by_alias=True)
    _compare(model, SCHEMA["properties"]["spec"], model["$defs"], "spec")


def _compare_status(
    model: dict[str, Any], crd: dict[str, Any], defs: dict[str, Any], path: str
) -> None:
    """Names, types and enums. Status carries few admission bounds: anything the operator
    reads back is untrusted and checked by the models, which fail closed on it."""
    assert set(model["properties"]) == set(crd["properties"]), path
    for name, crd_field in crd["properties"].items():
        model_field = _resolve(model["properties"][name], defs)
        where = f"{path}.{name}"
        assert model_field["type"] == crd_field["type"], where
        assert model_field.get("enum") == crd_field.get("enum"), f"{where}: enum"
        is_time = {f.get("format") == "date-time" for f in (model_field, crd_field)}
        assert len(is_time) == 1, f"{where}: date-time"
        if crd_field["type"] == "object" and "properties" in crd_field:
            _compare_status(model_field, crd_field, defs, where)
        elif crd_field["type"] == "object":  # a map: container name -> image
            values = _resolve(model_field["additionalProperties"], defs)
            assert values["type"] == crd_field["additionalProperties"]["type"], f"{where}{{}}"
        elif crd_field["type"] == "array" and "properties" in crd_field["items"]:
            _compare_status(_resolve(model_field["items"], defs), crd_field["items"], defs, where)
        elif crd_field["type"] == "array":
            assert _resolve(model_field["items"], defs)["type"] == crd_field["items"]["type"], where


def test_status_schema_fields_types_and_enums_agree_with_the_models() -> None:
    model = PolicyStatus.model_json_schema(by_alias=True)
    _compare_status(model, SCHEMA["properties"]["status"], model["$defs"], "status")


def test_phases_are_enumerated_worst_first_as_the_models_order_them() -> None:
    status = SCHEMA["properties"]["status"]["properties"]
    phases = [str(phase) for phase in Phase]
    assert status["phase"]["enum"] == phases
    assert status["targets"]["items"]["properties"]["phase"]["enum"] == phases


def _properties(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property under ``schema``, nested objects and array items included, by path."""
    for name, field in schema.get("properties", {}).items():
        yield f"{path}.{name}", field
        yield from _properties(field, f"{path}.{name}")
        if "items" in field:
            yield from _properties(field["items"], f"{path}.{name}")


# ObjectMeta is described by the API server itself.
DESCRIBED_ELSEWHERE = {".metadata"}


def test_every_field_of_spec_and_status_has_a_description() -> None:
    fields = dict(_properties(SCHEMA, ""))
    assert len([p for p in fields if p.startswith(".status.")]) > 50  # nested ones included
    undescribed = [
        path
        for path, field in fields.items()
        if path not in DESCRIBED_ELSEWHERE and not str(field.get("description", "")).strip()
    ]
    assert undescribed == []
    assert SCHEMA["description"].strip()


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
    "a window without a time zone": {
        **MINIMAL,
        "windows": [{"days": ["Sat"], "start": "02:00", "end": "05:00"}],
    },
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


def _flat(text: str) -> str:
    return " ".join(text.split())


def _explained_fields(explanation: str) -> dict[str, str]:
    """`kubectl explain`'s FIELDS section: each child field's name to its description, as one
    line. A description (wrapped) is indented deeper than its field's line; lines indented as
    the field's (`enum: …`) say more about the type."""
    _, _, fields = explanation.partition("\nFIELDS:\n")
    found: dict[str, str] = {}
    for block in re.split(r"\n\s*\n", fields):
        lines = block.strip("\n").splitlines()
        if not lines or not lines[0].startswith(" "):
            continue
        indent = len(lines[0]) - len(lines[0].lstrip())
        described = [line for line in lines[1:] if len(line) - len(line.lstrip()) > indent]
        found[lines[0].split()[0]] = _flat(" ".join(described))
    return found


def _objects_with_fields(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each object (or array of objects) with named fields, as a `kubectl explain` path."""
    if "properties" in schema:
        yield path, schema
    for name, field in schema.get("properties", {}).items():
        yield from _objects_with_fields(field.get("items", field), f"{path}.{name}")


def _explain(cluster: Cluster, path: str, *flags: str) -> str:
    return cluster.kubectl("explain", f"imagerefreshpolicies.{path}", *flags).stdout


@pytest.mark.parametrize("part", ["spec", "status"])
def test_kubectl_explain_describes_every_field_as_the_crd_does(crd: Cluster, part: str) -> None:
    """What a user reads on the real API server: `kubectl explain irp.<field>` lists every
    child field with the CRD's description."""
    # The API server publishes a CRD's OpenAPI a moment after the CRD changes.
    described = _flat(SCHEMA["properties"][part]["description"])[:60]
    eventually(
        lambda: described in _flat(_explain(crd, part)),
        timeout=30,
        what=f"the CRD's {part} descriptions to be published",
    )
    recursive = _explain(crd, part, "--recursive")
    objects = list(_objects_with_fields(SCHEMA["properties"][part], part))
    for _, schema in objects:
        for name in schema["properties"]:
            assert re.search(rf"^\s+{name}\s+<", recursive, re.M), f"{part}: {name}"
    for path, schema in objects:
        explained = _explained_fields(_explain(crd, path))
        assert set(explained) == set(schema["properties"]), path
        for name, field in schema["properties"].items():
            written = _flat(field["description"])[:60]
            assert explained[name].startswith(written), f"{path}.{name}: {explained[name]}"


# --- admission rules the models share (CEL) ------------------------------------------------


def one_target(*images: str, **target: Any) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    return {"kind": "Deployment", "name": "x", **target, "containers": containers}


def create(cluster: Cluster, namespace: str, spec: dict[str, Any]) -> str:
    """A server-side dry-run create of a policy; the API server's refusal, or "" if admitted."""
    proc = cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-",
        input=json.dumps(policy_object("p", spec)), check=False,
    )  # fmt: skip
    return proc.stderr if proc.returncode else ""


def window(**fields: Any) -> dict[str, Any]:
    return {"days": ["Sat"], "start": "02:00", "end": "05:00", "timeZone": "UTC", **fields}


LOWERCASE = "the repository path in image must be lowercase"
SHORT = "sha256:" + HEX[:63]
REFUSED = {
    "uppercase in a repository path": (
        {"targets": [one_target("tracebloc/Jobs-Manager:prod")]},
        LOWERCASE,
    ),
    "uppercase in an official image's name": ({"targets": [one_target("Nginx:1.27")]}, LOWERCASE),
    "uppercase after a registry host": (
        {"targets": [one_target("Registry.Example:5000/Team/app:prod")]},
        LOWERCASE,
    ),
    "a URL scheme": (
        {"targets": [one_target("https://registry.example.com/team/app:prod")]},
        "image must not carry a URL scheme",
    ),
    "a target repeated": (
        {"targets": [one_target("a:b"), one_target("c:d")]},
        "each workload may be targeted once per policy",
    ),
    "a target repeated in a named namespace": (
        {"targets": [one_target("a:b", namespace="n"), one_target("c:d", namespace="n")]},
        "each workload may be targeted once per policy",
    ),
    "a container repeated in a target": (
        {"targets": [{**one_target("a:b"), "containers": [{"name": "a", "image": "a:b"}] * 2}]},
        "Duplicate value",
    ),
    "a zero ceiling": (
        {**MINIMAL, "maxRefreshAttempts": 0},
        "should be greater than or equal to 1",
    ),
    "a window day listed twice": (
        {**MINIMAL, "windows": [window(days=["Sat", "Sat"])]},
        "Duplicate value",
    ),
    "an unknown window day": (
        {**MINIMAL, "windows": [window(days=["Saturday"])]},
        'supported values: "Mon", "Tue"',
    ),
    "a window start of 24:00": (
        {**MINIMAL, "windows": [window(start="24:00")]},
        "spec.windows[0].start",
    ),
    "a window end without a leading zero": (
        {**MINIMAL, "windows": [window(end="5:00")]},
        "spec.windows[0].end",
    ),
    "a time zone that is a path": (
        {**MINIMAL, "windows": [window(timeZone="../../etc/passwd")]},
        "spec.windows[0].timeZone",
    ),
    "an empty list of windows": ({**MINIMAL, "windows": []}, "spec.windows"),
    "more targets than a policy may hold": (
        {"targets": [one_target("a:b", name=f"w{i}") for i in range(65)]},
        "spec.targets: Too many: 65: must have at most 64 items",
    ),
    "more containers than a target may hold": (
        {"targets": [one_target(*[f"a{i}:b" for i in range(17)])]},
        "must have at most 16 items",
    ),
    "more containers than a policy may hold in all": (
        {"targets": [one_target(*[f"a{i}:b" for i in range(16)], name=f"w{t}") for t in range(17)]},
        "a policy declares at most 256 containers in all",
    ),
    "a digest of the wrong length": (
        {
            "targets": [
                {**one_target(), "containers": [{"name": "a", "image": "a", "digest": SHORT}]}
            ]
        },
        "spec.targets[0].containers[0].digest",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_admission_refuses_what_the_models_refuse_and_says_why(
    crd: Cluster, namespace: str, case: str
) -> None:
    spec, message = REFUSED[case]
    refusal = create(crd, namespace, spec)
    assert "is invalid" in refusal
    assert message in refusal
    with pytest.raises(ValueError, match="validation error"):  # never admitted, then skipped
        PolicySpec.model_validate(spec)


ADMITTED = {
    "capitals in the registry host": {"targets": [one_target("Registry.Example/team/app:prod")]},
    "a capitalised single-name registry host": {"targets": [one_target("LOCALDOMAIN/debian")]},
    "capitals in the tag": {"targets": [one_target("nginx:Latest", "localhost:5000/a/b:V1")]},
    "one name as two kinds": {
        "targets": [one_target("a:b"), {**one_target("a:b"), "kind": "DaemonSet"}]
    },
    "windows across midnight, in two zones": {
        **MINIMAL,
        "windows": [
            window(days=["Fri", "Sat"], start="22:00", end="02:00", timeZone="Europe/Berlin"),
            window(days=["Sun"], start="00:00", end="00:00", timeZone="America/New_York"),
        ],
    },
    "the largest policy: 256 containers": {
        "targets": [one_target(*[f"a{i}:b" for i in range(16)], name=f"w{t}") for t in range(16)]
    },
    # The same workload only once the namespace is defaulted: the operator reports a Conflict.
    "one name with and without a namespace": {
        "targets": [one_target("a:b"), one_target("a:b", namespace="n")]
    },
}


@pytest.mark.parametrize("case", list(ADMITTED))
def test_admission_admits_what_the_models_admit(crd: Cluster, namespace: str, case: str) -> None:
    spec = ADMITTED[case]
    PolicySpec.model_validate(spec)
    assert create(crd, namespace, spec) == ""


# References from distribution's grammar (tests/test_reference.py) and capitalised variants.
REFERENCES = [
    "nginx", "nginx:1.27", "docker.io/nginx", "index.docker.io/docker/docker", "test_com/foo",
    "test.com:8080/foo", "xn--n3h.com:18080/foo", "localhost/foo", "localhost:5000/a/b:t",
    "LOCALDOMAIN/debian", "[fc00::1]:5000/docker/docker", "localhost:5000", "192.168.0.1:80",
    "sha256:" + HEX, "d/docker:_tag-1.2", "foo:UPPER_tag", "docker/Docker",
    "docker.io/docker/Docker", "Docker/Docker", "https://github.com/docker/docker",
    "http://localhost:5000/a", "-docker", "docker///docker", "docker/", "dock..er/docker",
    "[fc00::1]:5000", "foo:-tag", "my_host.example/foo", "NGINX", "Nginx:Latest", "A/b", "A/B",
    "a/B", "localhost/Foo", "docker.io/Library/nginx", "[::1]:5000/App", "foo_bar/Baz",
    "Foo_bar/baz", "sha256:ABC", "nginx:A/b", "a.com/b:5000/C", "Registry.Example:5000/t/a:V",
    "ghcr.io/team/app", "ghcr.io/Team/app", "a" * 64, "A" * 64,
]  # fmt: skip


def _refused_images(cluster: Cluster, namespace: str, images: list[str]) -> set[str]:
    """The images the API server refuses, asked 16 at a time (a target's container limit)."""
    refused: set[str] = set()
    for start in range(0, len(images), 16):
        batch = images[start : start + 16]
        refusal = create(cluster, namespace, {"targets": [one_target(*batch)]})
        indices = {int(i) for i in re.findall(r"containers\[(\d+)\]\.image", refusal)}
        refused.update(batch[i] for i in indices)
    return refused


def _model_refusal(image: str) -> str:
    try:
        ContainerSpec.model_validate({"name": "c", "image": image})
    except ValueError as error:
        return str(error)
    return ""


# What admission refuses of REFERENCES: every capital in a repository path, every URL scheme.
# The models refuse more (the grammar's other rules; "Foo_bar/baz", whose capitalised first
# element reads as an invalid host) — those stay runtime errors, never admitted-and-misread.
REFUSED_REFERENCES = {
    "docker/Docker", "docker.io/docker/Docker", "Docker/Docker", "NGINX", "Nginx:Latest", "A/B",
    "a/B", "localhost/Foo", "docker.io/Library/nginx", "[::1]:5000/App", "foo_bar/Baz",
    "ghcr.io/Team/app", "A" * 64, "https://github.com/docker/docker", "http://localhost:5000/a",
}  # fmt: skip


def test_admission_refuses_capitalised_paths_and_schemes_and_nothing_the_models_accept(
    crd: Cluster, namespace: str
) -> None:
    refused = _refused_images(crd, namespace, REFERENCES)
    assert refused == REFUSED_REFERENCES
    assert [image for image in refused if not _model_refusal(image)] == []
