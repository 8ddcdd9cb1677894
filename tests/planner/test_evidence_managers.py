"""Who wrote a container's image, read from managedFields: anyone with patch access writes
them, so a malformed entry names nobody (an unknown writer) and never breaks the read."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.planner import Workload
from imagerefresh.runtime.kept import kept_workload

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


def owning(
    manager: str | None, when: str | None, fields: dict[str, object], section: str = "f:containers"
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "operation": "Update",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {section: {'k:{"name":"api"}': fields}}}}},
    }
    if manager is not None:
        entry["manager"] = manager
    if when is not None:
        entry["time"] = when
    return entry


IMAGE = {"f:image": {}}
EARLY, LATE = "2026-11-29T11:00:00Z", "2026-11-29T12:00:00Z"


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        # The newest write of the image names its writer, in whatever order they are listed.
        ([owning("helm", EARLY, IMAGE), owning("kubectl", LATE, IMAGE)], "kubectl"),
        ([owning("kubectl", LATE, IMAGE), owning("helm", EARLY, IMAGE)], "kubectl"),
        # An entry without a time is older than any with one.
        ([owning("kubectl", LATE, IMAGE), owning("helm", None, IMAGE)], "kubectl"),
        # A manager of other fields of the container did not write its image.
        ([owning("helm", EARLY, IMAGE), owning("kubectl", LATE, {"f:resources": {}})], "helm"),
        # Whoever wrote it without naming itself is still someone.
        ([owning(None, LATE, IMAGE)], "an unnamed client"),
        # Junk before a good entry does not hide it.
        (["junk", owning("helm", EARLY, IMAGE)], "helm"),
    ],
    ids=["newest-last", "newest-first", "untimed", "other-fields", "unnamed", "junk-first"],
)
def test_the_newest_writer_of_the_image_is_named(entries: list[Any], named: str) -> None:
    assert with_managed_fields(*entries).image_managers == {"api": named}


def test_the_writer_of_an_init_container_s_image_is_named_from_the_object_and_the_watch_copy() -> (
    None
):
    work = deployment("jobs-manager", {"app": "tracebloc/jobs-manager:prod"})
    work["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "api", "image": "tracebloc/jobs-manager:prod"}
    ]
    work["spec"]["template"]["spec"]["containers"] = [
        {"name": "app", "image": "tracebloc/jobs-manager:prod"}
    ]
    work["metadata"]["managedFields"] = [owning("helm", EARLY, IMAGE, "f:initContainers")]
    assert Workload.from_api(work).image_managers == {"api": "helm"}
    # The watch keeps only who set each image, rebuilt from what image_owners found, under the
    # section it found it in: a tick fed by the watch copy names the same writer.
    assert Workload.from_api(kept_workload(work)).image_managers == {"api": "helm"}
