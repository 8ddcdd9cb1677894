"""The installed CRD's schema against the models' fields: which paths the API server would prune.

The pure half (runtime/schema.py): the models' paths, derived generically; the comparison,
table by table against the API server's pruning rules; and the repository's CRD, which must
lack nothing. The check as the ticks ask it, on a stand-in for the API (how often it reads,
failing closed on every way the read can fail), and the hook in the ticker: a tick under an
outdated CRD reads no target and writes nothing but its conditions.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path as FilePath
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from imagerefresh.kube.errors import Forbidden, KubeError, KubeUnavailable
from imagerefresh.kube.policies import kind_schema
from imagerefresh.metrics import Metrics
from imagerefresh.runtime.config import OperatorConfig
from imagerefresh.runtime.policyview import PolicyUnreadable
from imagerefresh.runtime.schema import (
    CRD_NAME,
    ITEMS,
    VALUES,
    CrdCheck,
    Path,
    display,
    missing_paths,
    model_paths,
    operator_paths,
)
from imagerefresh.runtime.ticker import PolicyTicker

CRD_FILE = (
    FilePath(__file__).resolve().parents[2]
    / "crds"
    / "imagerefreshpolicies.images.tracebloc.io.yaml"
)
CURRENT = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
# Fields of the models the CRD has not always had (a8eba12): an older CRD prunes them.
REMOVED = [
    ("spec", "minimumAge"),
    ("spec", "verify"),
    ("status", "seen"),
    ("status", "targets", ITEMS, "failed"),
]


def without(schema: dict[str, Any], *paths: Path) -> dict[str, Any]:
    """``schema`` with the properties at ``paths`` removed (``[]`` steps into items)."""
    older = copy.deepcopy(schema)
    for path in paths:
        node = older
        for segment in path[:-1]:
            node = node["items"] if segment == ITEMS else node["properties"][segment]
        del node["properties"][path[-1]]
    return older


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def arr(items: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {"type": "array", **({"items": items} if items is not None else {}), **more}


S = {"type": "string"}
PRESERVE = {"x-kubernetes-preserve-unknown-fields": True}


# (installed schema, paths the models hold, the paths reported missing)
TABLE: dict[str, tuple[dict[str, Any], list[str], list[str]]] = {
    "declared": (obj(spec=obj(a=S)), ["spec", "spec.a"], []),
    "missing at the top": (obj(spec=obj(a=S)), ["status", "status.b"], ["status"]),
    "missing at depth 3, its children not listed again": (
        obj(spec=obj(verify=obj(other=S))),
        ["spec.verify", "spec.verify.publicKeys", "spec.verify.publicKeys[]"],
        ["spec.verify.publicKeys"],
    ),
    "missing in an array's items": (
        obj(status=obj(targets=arr(obj(name=S)))),
        ["status.targets[].name", "status.targets[].failed[].digest"],
        ["status.targets[].failed"],
    ),
    "missing in an array of arrays": (
        obj(a=arr(arr(obj(b=S)))),
        ["a[][].b", "a[][].c"],
        ["a[][].c"],
    ),
    "an array without items keeps scalars": (obj(a=arr()), ["a[]"], []),
    "an array without items prunes its objects' fields": (obj(a=arr()), ["a[].b"], ["a[].b"]),
    "several depths at once": (
        obj(spec=obj(x=obj()), status=obj(t=arr(obj(c=arr(obj()))))),
        ["spec.x.y", "spec.z", "status.t[].c[].n", "status.t[].d"],
        ["spec.x.y", "spec.z", "status.t[].c[].n", "status.t[].d"],
    ),
    "preserve-unknown-fields keeps everything under an undeclared field": (
        obj(status={"type": "object", **PRESERVE}),
        ["status.seen[].since", "status.targets[].failed[].at"],
        [],
    ),
    "preserve-unknown-fields at the root": (
        {"type": "object", **PRESERVE},
        ["spec.verify.publicKeys[]", "status.seen"],
        [],
    ),
    "a declared field under preserve-unknown-fields is pruned by its own schema": (
        obj(status={**obj(targets=arr(obj(name=S))), **PRESERVE}),
        ["status.seen", "status.targets[].name", "status.targets[].failed"],
        ["status.targets[].failed"],
    ),
    "array items inherit preserve-unknown-fields": (
        obj(a={**arr(obj(b=S)), **PRESERVE}),
        ["a[].b", "a[].c.d"],
        [],
    ),
    "preserve-unknown-fields on an array without items": (
        obj(a={**arr(), **PRESERVE}),
        ["a[].b.c"],
        [],
    ),
    "a map's values (additionalProperties)": (
        obj(lastGood={"type": "object", "additionalProperties": S}),
        ["lastGood", "lastGood.*"],
        [],
    ),
    "a map with no additionalProperties prunes every key": (
        obj(lastGood={"type": "object"}),
        ["lastGood", "lastGood.*"],
        ["lastGood.*"],
    ),
    "a map of objects missing a field": (
        obj(m={"type": "object", "additionalProperties": obj(a=S)}),
        ["m.*.a", "m.*.b"],
        ["m.*.b"],
    ),
    "additionalProperties true keeps scalar values only": (
        obj(m={"type": "object", "additionalProperties": True}),
        ["m.*", "m.*.x"],
        ["m.*.x"],
    ),
    "a named field under a map is one of its keys": (
        obj(m={"type": "object", "additionalProperties": obj(a=S)}),
        ["m.anything.a"],
        [],
    ),
}


@pytest.mark.parametrize("case", list(TABLE))
def test_missing_paths_follow_the_api_servers_pruning(case: str) -> None:
    schema, paths, expected = TABLE[case]
    found = missing_paths(schema, [_parse(text) for text in paths])
    assert [display(path) for path in found] == expected


def _parse(text: str) -> Path:
    """``a.b[].c.*`` as a path; ``*`` is a map's values."""
    segments: list[str] = []
    for part in text.split("."):
        name = part.replace("[]", "")
        segments.append(VALUES if name == "*" else name)
        segments.extend([ITEMS] * part.count("[]"))
    return tuple(segments)


# -- the models' paths ---------------------------------------------------------------------


class Leaf(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel)
    build_digest: str


class Toy(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel)
    plain_field: int = 0
    maybe_nested: Leaf | None = None
    many: tuple[Leaf, ...] = ()
    names: list[str] = []
    by_name: dict[str, Leaf] = {}


def test_model_paths_walk_nested_models_lists_and_maps_by_alias() -> None:
    assert {display(path) for path in model_paths(Toy, "spec")} == {
        "spec",
        "spec.plainField",
        "spec.maybeNested",
        "spec.maybeNested.buildDigest",
        "spec.many",
        "spec.many[]",
        "spec.many[].buildDigest",
        "spec.names",
        "spec.names[]",
        "spec.byName",
        "spec.byName.*",
        "spec.byName.*.buildDigest",
    }


def test_the_operators_paths_cover_what_the_older_crds_lacked_and_every_map() -> None:
    shown = {display(path) for path in operator_paths()}
    assert {
        "spec.verify.publicKeys[]",
        "spec.minimumAge",
        "status.seen[].since",
        "status.targets[].failed[].digest",
        "status.targets[].containers[].verifiedBy",
        "status.targets[].lastGood.*",
        "status.targets[].pending.images.*",
        "status.conditions[].observedGeneration",
    } <= shown


def test_the_repositorys_crd_stores_every_field_of_the_models() -> None:
    assert missing_paths(CURRENT, operator_paths()) == []


def test_a_crd_without_the_newest_fields_lacks_exactly_those() -> None:
    older = without(CURRENT, *REMOVED)
    assert missing_paths(older, operator_paths()) == sorted(REMOVED)


# -- the OpenAPI v3 document ------------------------------------------------------------------

GVK = {"group": "images.tracebloc.io", "version": "v1alpha1"}


def test_the_kinds_schema_is_found_by_its_group_version_kind_not_its_list() -> None:
    listed = {"x-kubernetes-group-version-kind": [{**GVK, "kind": "ImageRefreshPolicyList"}]}
    kind = {**CURRENT, "x-kubernetes-group-version-kind": [{**GVK, "kind": "ImageRefreshPolicy"}]}
    document = {"components": {"schemas": {"a.List": listed, "a.Policy": kind}}}
    assert kind_schema(document, "read") is kind


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"components": []},
        {"components": {"schemas": []}},
        {"components": {"schemas": {"x": {"type": "object"}}}},
        {"components": {"schemas": {"x": {"x-kubernetes-group-version-kind": [GVK]}}}},
    ],
)
def test_a_document_without_the_kind_is_an_error(document: dict[str, Any]) -> None:
    with pytest.raises(KubeError, match="read"):
        kind_schema(document, "read")


# -- the check, as ticks ask it -----------------------------------------------------------------


class Schemas:
    """The one read the check makes: answers (a schema or an error) in turn, the last repeated."""

    def __init__(self, *answers: dict[str, Any] | KubeError) -> None:
        self.answers, self.reads = list(answers), 0

    def read_policy_schema(self) -> dict[str, Any]:
        answer = self.answers[min(self.reads, len(self.answers) - 1)]
        self.reads += 1
        if isinstance(answer, KubeError):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def check(api: Schemas, clock: Clock, metrics: Metrics | None = None) -> CrdCheck:
    return CrdCheck(
        api,  # type: ignore[arg-type]
        metrics or Metrics(CollectorRegistry()),
        clock=clock,
        recheck_current=300,
        recheck_outdated=5,
    )


def gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("imagerefresh_crd_outdated")


async def test_a_current_crd_is_read_once_then_again_after_minutes() -> None:
    api, clock, metrics = Schemas(CURRENT), Clock(), Metrics(CollectorRegistry())
    crd = check(api, clock, metrics)
    await crd.require()
    clock.now += 299
    await crd.require()
    assert api.reads == 1
    assert gauge(metrics) == 0
    clock.now += 1
    await crd.require()
    assert api.reads == 2


async def test_an_outdated_crd_refuses_naming_the_crd_its_missing_fields_and_what_to_do() -> None:
    api, clock, metrics = Schemas(without(CURRENT, *REMOVED)), Clock(), Metrics(CollectorRegistry())
    with pytest.raises(PolicyUnreadable) as refused:
        await check(api, clock, metrics).require()
    assert refused.value.part == "crd"
    message = str(refused.value)
    assert CRD_NAME in message
    assert "spec.verify" in message
    assert "status.targets[].failed" in message
    assert "helm upgrade" in message
    assert "kubectl apply --server-side -f" in message
    assert gauge(metrics) == 1


async def test_many_missing_fields_are_named_a_few_then_counted() -> None:
    older = without(CURRENT, *REMOVED, ("spec", "lockstep"), ("spec", "dryRun"))
    with pytest.raises(PolicyUnreadable, match=r"and 2 more"):
        await check(Schemas(older), Clock()).require()


async def test_an_outdated_crd_is_read_again_within_seconds_and_an_upgrade_heals() -> None:
    api, clock, metrics = (
        Schemas(without(CURRENT, *REMOVED), without(CURRENT, *REMOVED), CURRENT),
        Clock(),
        Metrics(CollectorRegistry()),
    )
    crd = check(api, clock, metrics)
    for _ in range(4):  # at 0, 2, 4 and 6 s
        with pytest.raises(PolicyUnreadable):
            await crd.require()
        clock.now += 2
    assert api.reads == 2  # at 0 and 6 s: at every tick, but never more often than every 5 s
    clock.now += 5
    await crd.require()  # the CRD was upgraded meanwhile
    assert gauge(metrics) == 0


@pytest.mark.parametrize(
    "error",
    [
        Forbidden("get path /openapi/v3/apis/images.tracebloc.io/v1alpha1: forbidden", status=403),
        KubeUnavailable("read: the API server answered 503"),
        KubeError("read: the answer is not an OpenAPI v3 document; retried next tick"),
    ],
)
async def test_a_schema_that_cannot_be_read_fails_closed(error: KubeError) -> None:
    metrics = Metrics(CollectorRegistry())
    with pytest.raises(PolicyUnreadable, match="cannot be read") as refused:
        await check(Schemas(error), Clock(), metrics).require()
    assert refused.value.part == "crd"
    assert str(error) in str(refused.value)
    assert gauge(metrics) == 1


async def test_ticks_asking_together_share_one_read() -> None:
    api = Schemas(without(CURRENT, *REMOVED))
    crd = check(api, Clock())
    answers = await asyncio.gather(*(crd.problem() for _ in range(20)))
    assert api.reads == 1
    assert len(set(answers)) == 1


# -- the hook in the ticker -------------------------------------------------------------------

POLICY = {
    "apiVersion": "images.tracebloc.io/v1alpha1",
    "kind": "ImageRefreshPolicy",
    "metadata": {"namespace": "ns", "name": "p", "generation": 1, "resourceVersion": "7"},
    "spec": {
        "targets": [
            {"kind": "Deployment", "name": "app", "containers": [{"name": "a", "image": "a:b"}]}
        ]
    },
    "status": {"conditions": []},
}


class OutdatedCluster(Schemas):
    """An API under an outdated CRD that records writes; reading a target is a failure."""

    def __init__(self) -> None:
        super().__init__(without(CURRENT, *REMOVED))
        self.statuses: list[dict[str, Any]] = []
        self.events: list[str] = []

    def read_policy(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(POLICY)

    def replace_policy_status(self, policy: Any, status: dict[str, Any]) -> dict[str, Any]:
        self.statuses.append(status)
        return {}

    def post_event(self, regarding: Any, type: str, reason: str, message: str) -> None:
        self.events.append(reason)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a tick under an outdated CRD called {name}")


async def test_a_tick_under_an_outdated_crd_reads_no_target_and_only_marks_the_policy() -> None:
    api, metrics = OutdatedCluster(), Metrics(CollectorRegistry())
    anything: Any = object()
    ticker = PolicyTicker(
        api=api,  # type: ignore[arg-type]
        resolver=anything,
        ledger=anything,
        config=OperatorConfig(watch_evidence=False),
        metrics=metrics,
        verifier=anything,
    )
    assert await ticker.tick("ns", "p") is None
    assert ticker.events.wait_idle(10)
    (status,) = api.statuses
    assert set(status) == {"conditions"}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"Degraded": ("True", "CRDOutdated"), "Ready": ("False", "CRDOutdated")}
    assert api.events == ["CRDOutdated"]
    sample = metrics.registry.get_sample_value
    labels = {"namespace": "ns", "policy": "p"}
    assert sample("imagerefresh_ticks_total", {**labels, "outcome": "crd_outdated"}) == 1
    assert sample("imagerefresh_policy_condition", {**labels, "condition": "Ready"}) == 0
    assert sample("imagerefresh_policy_condition", {**labels, "condition": "Degraded"}) == 1
    assert gauge(metrics) == 1
