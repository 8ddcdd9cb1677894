"""Who wrote a container's image, read from managedFields: anyone with patch access writes
them, so a malformed entry names nobody (an unknown writer) and never breaks the read."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.planner import Workload

from support.workloads import deployment


def with_managed_fields(*entries: dict[str, Any]) -> Workload:
    work = deployment("jobs-manager", {"api": "tracebloc/jobs-manager:prod"})
    work["metadata"]["managedFields"] = list(entries)
    return Workload.from_api(work)


def entry(manager: str, fields: object) -> dict[str, Any]:
    return {"manager": manager, "operation": "Update", "time": "2026-11-29T12:00:00Z", **fields}


GOOD = {
    "f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"api"}': {"f:image": {}}}}}}
}


def test_the_manager_that_owns_the_image_field_is_named() -> None:
    assert with_managed_fields(entry("helm", {"fieldsV1": GOOD})).image_managers == {"api": "helm"}


@pytest.mark.parametrize(
    "fields",
    [
        {"fieldsV1": ["f:spec"]},
        {"fieldsV1": {"f:spec": "f:template"}},
        {"fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": ["api"]}}}}},
        {"fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:["api"]': {}}}}}}},
        {"fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{bad": {}}}}}}},
        {
            "fieldsV1": {
                "f:spec": {
                    "f:template": {"f:spec": {"f:containers": {'k:{"name":1}': {"f:image": {}}}}}
                }
            }
        },
    ],
    ids=["list", "string", "containers-list", "key-not-object", "key-not-json", "name-not-text"],
)
def test_a_malformed_managed_fields_entry_names_nobody(fields: dict[str, Any]) -> None:
    workload = with_managed_fields(entry("helm", {"fieldsV1": GOOD}), entry("mallory", fields))
    assert workload.image_managers == {"api": "helm"}
