"""The order of `migrate-cronjob --apply`'s writes, which no timing can be trusted to show.

On the real API server (tests/cli/test_cli_migrate_cronjob.py) our status write usually lands
before the operator's first tick even without the suspended create — and when it does not, the
operator's intent-first status write wins and the workload is refreshed. So the guarantee is
pinned here, on the sequence of requests: the policy is created suspended, its status written,
and only then unsuspended. The API is a recorder of those requests (a narrow protocol fake).
"""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from imagerefresh.kube.edge import EdgeApi
from imagerefresh.kube.errors import KubeError, ResourceConflict
from imagerefresh.migration import MigrationRefused
from imagerefresh.runtime.migrate import MIGRATED_TO, MIGRATION, SUSPENDED_BY, Migrator

from support.edge import Edge
from support.ticks import T0

NS = "tracebloc"
LOCKOUT = {"tracebloc.io/refresh-flap-detected": "3"}


class Recorder:
    """The edge's objects in memory; every write appended to ``writes``."""

    def __init__(self, edge: Edge, jobs: list[dict[str, Any]] | None = None) -> None:
        self.cronjob = edge.cronjob()
        self.cronjob["metadata"]["uid"] = "cj-uid"
        self.workloads = {
            (w["kind"], w["metadata"]["namespace"], w["metadata"]["name"]): w
            for w in edge.workloads().values()
        }
        self.policy: dict[str, Any] | None = None
        self.jobs = jobs or []
        self.writes: list[tuple[str, Any]] = []
        self.conflicts = 0  # status writes to refuse with 409 first

    def read_cronjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.cronjob)

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.workloads.get((kind, namespace, name)))

    def list_jobs(self, namespace: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self.jobs)

    def read_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.policy)

    def patch_cronjob(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.writes.append(("patch cronjob", body))
        _merge(self.cronjob, body)

    def create_policy(self, policy: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create policy", policy))
        self.policy = copy.deepcopy(policy)
        self.policy["metadata"].update(uid="p-uid", resourceVersion="1")
        return copy.deepcopy(self.policy)

    def replace_policy_status(self, policy: dict[str, Any], status: dict[str, Any]) -> None:
        if self.conflicts:
            self.conflicts -= 1
            raise ResourceConflict("409")
        self.writes.append(("write status", status))
        assert self.policy is not None
        self.policy["status"] = status

    def patch_policy(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("patch policy", body))
        assert self.policy is not None
        _merge(self.policy, body)
        return copy.deepcopy(self.policy)

    def delete_policy(self, namespace: str, name: str, uid: str) -> None:
        self.writes.append(("delete policy", uid))
        self.policy = None


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """JSON merge patch (RFC 7386)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def migrator(api: Recorder, said: list[str], **fields: Any) -> Migrator:
    return Migrator(
        cast(EdgeApi, api),
        NS,
        "r-image-refresh",
        clock=lambda: T0,
        sleep=lambda _: None,
        say=said.append,
        **fields,
    )


def edge(**fields: Any) -> Edge:
    return Edge(release="r", namespace=NS, node_agents="tracebloc-node-agents", **fields)


def test_apply_creates_the_policy_suspended_writes_status_then_unsuspends_it() -> None:
    api, said = Recorder(edge(state=LOCKOUT)), []
    migrator(api, said).apply()
    assert [what for what, _ in api.writes] == [
        "patch cronjob",  # suspended, before anything else
        "create policy",
        "patch cronjob",  # the record of the policy --revert deletes
        "write status",
        "patch policy",  # unsuspended last
    ]
    created = api.writes[1][1]
    assert created["spec"]["suspend"] is True
    assert created["metadata"]["annotations"][MIGRATION] == "pending"
    assert {t["phase"] for t in api.writes[3][1]["targets"]} == {"Locked"}
    assert api.writes[4][1] == {
        "metadata": {"annotations": {MIGRATION: "done"}},
        "spec": {"suspend": False},
    }
    assert api.writes[0][1]["spec"] == {"suspend": True}
    assert api.cronjob["metadata"]["annotations"][MIGRATED_TO] == f"{NS}/r-image-refresh p-uid"


def test_a_status_write_the_operator_raced_is_retried_on_what_it_wrote() -> None:
    api, said = Recorder(edge(state=LOCKOUT)), []
    api.conflicts = 2
    migrator(api, said).apply()
    assert [w for w, _ in api.writes].count("write status") == 1
    assert api.policy is not None
    assert api.policy["spec"]["suspend"] is False


def test_a_status_that_never_lands_leaves_the_policy_suspended() -> None:
    api, said = Recorder(edge(state=LOCKOUT)), []
    api.conflicts = 99
    with pytest.raises(KubeError, match="stays suspended"):
        migrator(api, said).apply()
    assert api.policy is not None
    assert api.policy["spec"]["suspend"] is True


def test_a_second_apply_changes_nothing_and_says_so() -> None:
    api, said = Recorder(edge()), []
    migrator(api, said).apply()
    writes = len(api.writes)
    again: list[str] = []
    migrator(api, again).apply()
    assert len(api.writes) == writes
    assert again[0].startswith("nothing to change: CronJob tracebloc/r-image-refresh is suspended")


def test_a_run_stopped_after_the_create_is_finished_by_the_next() -> None:
    api, said = Recorder(edge(state=LOCKOUT)), []
    api.conflicts = 99
    with pytest.raises(KubeError, match="stays suspended"):
        migrator(api, said).apply()
    api.conflicts = 0
    migrator(api, said).apply()
    assert api.policy is not None
    assert api.policy["spec"]["suspend"] is False
    assert [w for w, _ in api.writes].count("create policy") == 1


def test_a_refresh_job_still_running_stops_apply_before_the_policy_exists() -> None:
    running = {
        "metadata": {
            "name": "r-image-refresh-1",
            "ownerReferences": [{"kind": "CronJob", "uid": "cj-uid"}],
        },
        "status": {"active": 1},
    }
    finished = {
        "metadata": {
            "name": "r-image-refresh-0",
            "ownerReferences": running["metadata"]["ownerReferences"],
        },
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    api, said = Recorder(edge(), jobs=[running, finished]), []
    with pytest.raises(MigrationRefused) as caught:
        migrator(api, said, job_wait=0).apply()
    assert str(caught.value).startswith(
        "refresh Job(s) r-image-refresh-1 of CronJob tracebloc/r-image-refresh still running"
    )
    assert [w for w, _ in api.writes] == ["patch cronjob"]
    assert api.policy is None


def test_a_policy_this_command_did_not_create_is_refused_and_left_alone() -> None:
    api, said = Recorder(edge()), []
    api.policy = {"metadata": {"name": "r-image-refresh", "namespace": NS, "uid": "other"}}
    with pytest.raises(MigrationRefused, match="did not create"):
        migrator(api, said).apply()
    assert api.writes == []


def test_revert_deletes_only_the_policy_apply_created_and_unsuspends_what_it_suspended() -> None:
    api, said = Recorder(edge()), []
    migrator(api, said).apply()
    api.writes.clear()
    migrator(api, said).revert()
    assert api.writes[0] == ("delete policy", "p-uid")
    assert api.cronjob["spec"]["suspend"] is False
    assert not {MIGRATED_TO, SUSPENDED_BY} & set(api.cronjob["metadata"]["annotations"])


def test_revert_refuses_a_policy_replaced_since() -> None:
    api, said = Recorder(edge()), []
    migrator(api, said).apply()
    assert api.policy is not None
    api.policy["metadata"]["uid"] = "someone-elses"
    with pytest.raises(MigrationRefused, match="not the object --apply created"):
        migrator(api, said).revert()
    assert api.policy is not None


def test_no_such_cronjob_is_named_and_nothing_is_written() -> None:
    api, said = Recorder(edge()), []
    api.cronjob = None  # type: ignore[assignment]
    for run in (migrator(api, said).apply, migrator(api, said).dry_run, migrator(api, said).revert):
        with pytest.raises(MigrationRefused) as caught:
            run()
        assert str(caught.value).startswith("no CronJob tracebloc/r-image-refresh: name the edge's")
    assert api.writes == []
