"""``imagerefresh migrate-cronjob``: switch an edge from its image-refresh CronJob to a policy.

The order of ``--apply`` is what makes it safe, and every step can be run again:

1. read everything and refuse before any write (a missing workload, a bad schedule …);
2. suspend the CronJob (never delete it) and record that we did, on the CronJob itself;
3. wait, bounded, for a refresh Job still running — it may still change the images or the
   state annotations — and stop (nothing created) if one outlives the wait;
4. read the state again and create the policy **suspended**: the operator ticks a suspended
   policy without touching any workload;
5. write the carried-over status (status subresource, guarded by resourceVersion: a write the
   operator made meanwhile makes ours fail and be retried on what it wrote);
6. only then unsuspend the policy. Its first real tick therefore reads the CronJob's lockout as
   ``Locked``, whatever the timing: a lock can never be lost between create and status write.

The CronJob carries the record (``images.tracebloc.io/migrated-to``: the policy and its uid),
so ``--revert`` deletes exactly the policy ``--apply`` created — even if the operator's Helm
chart has adopted it since and dropped our annotations — and un-suspends the CronJob only if
``--apply`` suspended it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from imagerefresh.kube.edge import EdgeApi
from imagerefresh.kube.errors import KubeError, NotFound, ResourceConflict
from imagerefresh.migration import (
    EDGE_SUSPEND_VALUE,
    EDGE_SUSPEND_WHY,
    MIGRATED_FROM,
    CronJobSettings,
    Migration,
    MigrationRefused,
    plan_migration,
    read_cronjob,
)

__all__ = ["MIGRATED_TO", "MIGRATION", "SUSPENDED_BY", "Migrator"]

MIGRATED_TO = "images.tracebloc.io/migrated-to"  # on the CronJob: "<ns>/<policy> <uid>"
SUSPENDED_BY = "images.tracebloc.io/suspended-by"  # on the CronJob, when we suspended it
MIGRATION = "images.tracebloc.io/migration"  # on the policy: pending until its status is written
# Helm's ownership metadata: `helm install` of the operator's chart with the printed values then
# adopts the policy --apply created (same object: uid and status kept) instead of failing.
HELM_LABELS = {"app.kubernetes.io/managed-by": "Helm"}
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
_STATUS_RETRIES = 5


@dataclass
class Migrator:
    """One CronJob's migration, read and written through ``api``."""

    api: EdgeApi
    namespace: str
    name: str
    policy_name: str | None = None
    interval: timedelta | None = None
    job_wait: float = 300.0
    helm_release: str = "imagerefresh"  # the operator chart's release that may adopt the policy
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = time.sleep
    say: Callable[[str], None] = print

    @property
    def cronjob(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def policy(self) -> str:
        return self.policy_name or self.name

    # -- reading ---------------------------------------------------------------------------------

    def _read_cronjob(self) -> dict[str, Any]:
        obj = self.api.read_cronjob(self.namespace, self.name)
        if obj is None:
            raise MigrationRefused(
                f"no CronJob {self.cronjob}: name the edge's image-refresh CronJob "
                "(kubectl get cronjob -A | grep image-refresh)"
            )
        return obj

    def plan(self) -> tuple[dict[str, Any], CronJobSettings, Migration]:
        """The CronJob, its settings and the migration as the cluster is now."""
        cronjob = self._read_cronjob()
        settings = read_cronjob(cronjob)
        workloads = {
            role: self.api.read_workload(ref.kind, ref.namespace, ref.name)
            for role, ref in settings.workloads.items()
        }
        migration = plan_migration(
            settings, workloads, policy_name=self.policy, now=self.clock(), interval=self.interval
        )
        return cronjob, settings, migration

    def running_jobs(self, cronjob: Mapping[str, Any]) -> list[str]:
        """The CronJob's Jobs that have not finished (no Complete or Failed condition)."""
        uid = (cronjob.get("metadata") or {}).get("uid")
        names = []
        for job in self.api.list_jobs(self.namespace):
            owners = (job.get("metadata") or {}).get("ownerReferences") or ()
            if not any(o.get("kind") == "CronJob" and o.get("uid") == uid for o in owners):
                continue
            conditions = (job.get("status") or {}).get("conditions") or ()
            finished = any(
                c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                for c in conditions
            )
            if not finished:
                names.append(str(job["metadata"]["name"]))
        return sorted(names)

    # -- dry run ---------------------------------------------------------------------------------

    def dry_run(self) -> None:
        cronjob, settings, migration = self.plan()
        running = self.running_jobs(cronjob)
        self.say(render(settings, migration))
        if running:
            self.say(
                f"# a refresh Job is running now: {', '.join(running)}; --apply waits for it "
                f"(up to --job-wait {self.job_wait:g}s)"
            )
        self.say(
            f"# nothing was changed. To switch: imagerefresh migrate-cronjob {self.cronjob} --apply"
        )

    # -- apply -----------------------------------------------------------------------------------

    def apply(self) -> None:
        cronjob, settings, migration = self.plan()
        marker = _annotations(cronjob).get(MIGRATED_TO)
        existing = self.api.read_policy(self.namespace, self.policy)
        ours = existing is not None and (
            marker == _marker(existing)
            # created by a run that stopped before it could record it on the CronJob
            or (
                _annotations(existing).get(MIGRATED_FROM) == f"CronJob/{self.cronjob}"
                and _annotations(existing).get(MIGRATION) == "pending"
            )
        )
        if existing is not None and not ours:
            raise MigrationRefused(
                f"an ImageRefreshPolicy {self.namespace}/{self.policy} exists that this command "
                f"did not create for CronJob {self.cronjob}; give another --policy-name, or "
                "delete that policy if it is a leftover"
            )
        if ours and _annotations(existing).get(MIGRATION) != "pending" and settings.suspended:
            self.say(
                f"nothing to change: CronJob {self.cronjob} is suspended and ImageRefreshPolicy "
                f"{self.namespace}/{self.policy} replaces it (its status is the operator's now)"
            )
            self._remind()
            return
        self._suspend_cronjob(cronjob, settings)
        running = self._wait_for_jobs(cronjob)
        if running:
            raise MigrationRefused(
                f"refresh Job(s) {', '.join(running)} of CronJob {self.cronjob} still running "
                f"after {self.job_wait:g}s; the CronJob is suspended and nothing else was "
                "changed. Run --apply again once they finished (kubectl get jobs -n "
                f"{self.namespace}), or give a longer --job-wait"
            )
        # What a Job that just finished wrote (a lockout, a digest) is read now, not before.
        cronjob, settings, migration = self.plan()
        if existing is None:
            existing = self._create_policy(migration)
        if marker != _marker(existing):
            self.api.patch_cronjob(
                self.namespace,
                self.name,
                {"metadata": {"annotations": {MIGRATED_TO: _marker(existing)}}},
            )
        if _annotations(existing).get(MIGRATION) == "pending":
            self._write_status(migration)
            self.api.patch_policy(
                self.namespace,
                self.policy,
                {"metadata": {"annotations": {MIGRATION: "done"}}, "spec": {"suspend": False}},
            )
            self.say(
                f"unsuspended ImageRefreshPolicy {self.namespace}/{self.policy}: the operator "
                "takes over from the carried status"
            )
        for line in migration.carried:
            self.say(f"carried: {line}")
        for line in migration.warnings:
            self.say(f"warning: {line}")
        self._remind()

    def _suspend_cronjob(self, cronjob: Mapping[str, Any], settings: CronJobSettings) -> None:
        if settings.suspended:
            by_us = SUSPENDED_BY in _annotations(cronjob)
            self.say(
                f"CronJob {self.cronjob} is already suspended"
                + ("" if by_us else " (not by this command: --revert leaves it suspended)")
            )
            return
        self.api.patch_cronjob(
            self.namespace,
            self.name,
            {
                "spec": {"suspend": True},
                "metadata": {"annotations": {SUSPENDED_BY: "imagerefresh migrate-cronjob"}},
            },
        )
        self.say(f"suspended CronJob {self.cronjob} (spec.suspend: true; it is not deleted)")

    def _wait_for_jobs(self, cronjob: Mapping[str, Any]) -> list[str]:
        deadline = time.monotonic() + self.job_wait
        running = self.running_jobs(cronjob)
        if running:
            self.say(
                f"waiting up to {self.job_wait:g}s for refresh Job(s) {', '.join(running)} to "
                "finish: they may still change images or state"
            )
        while running and time.monotonic() < deadline:
            self.sleep(2.0)
            running = self.running_jobs(cronjob)
        return running

    def _create_policy(self, migration: Migration) -> dict[str, Any]:
        policy = {
            **migration.policy,
            "metadata": {
                **migration.policy["metadata"],
                "labels": dict(HELM_LABELS),
                "annotations": {
                    **migration.policy["metadata"]["annotations"],
                    MIGRATION: "pending",
                    HELM_RELEASE: self.helm_release,
                    HELM_NAMESPACE: self.namespace,
                },
            },
            # Suspended until its carried status is written: the operator touches no workload.
            "spec": {**migration.policy["spec"], "suspend": True},
        }
        try:
            created = self.api.create_policy(policy)
        except NotFound as error:
            raise MigrationRefused(
                f"{error}: the ImageRefreshPolicy CRD is not installed; install the operator's "
                f"chart first (helm install {self.helm_release} CHART --namespace "
                f"{self.namespace}, which installs the CRD) and run --apply again"
            ) from error
        self.say(
            f"created ImageRefreshPolicy {self.namespace}/{self.policy}, suspended until its "
            "carried status is written"
        )
        return created

    def _write_status(self, migration: Migration) -> None:
        for _ in range(_STATUS_RETRIES):
            current = self.api.read_policy(self.namespace, self.policy)
            if current is None:
                raise MigrationRefused(
                    f"ImageRefreshPolicy {self.namespace}/{self.policy} vanished while being "
                    "migrated; run --apply again"
                )
            try:
                self.api.replace_policy_status(current, migration.status)
            except ResourceConflict:
                continue  # the operator ticked the suspended policy meanwhile: read it again
            locked = " (every target Locked, as the CronJob was)" if migration.locked else ""
            self.say(f"wrote the carried status{locked}")
            return
        raise KubeError(
            f"the status of {self.namespace}/{self.policy} kept changing under us; the policy "
            "stays suspended — run --apply again"
        )

    def _remind(self) -> None:
        self.say(
            f"edge chart: set `{EDGE_SUSPEND_VALUE}` in its values so the hourly helm upgrade "
            f"keeps the CronJob suspended — {EDGE_SUSPEND_WHY}"
        )

    # -- revert ----------------------------------------------------------------------------------

    def revert(self) -> None:
        cronjob = self._read_cronjob()
        annotations = _annotations(cronjob)
        marker = annotations.get(MIGRATED_TO)
        if marker is None and SUSPENDED_BY not in annotations:
            self.say(f"nothing to revert: CronJob {self.cronjob} carries no migration record")
            return
        if marker is not None:
            self._delete_policy(marker)
        changes: dict[str, Any] = {
            "metadata": {"annotations": {MIGRATED_TO: None, SUSPENDED_BY: None}}
        }
        if SUSPENDED_BY in annotations:
            changes["spec"] = {"suspend": False}
        self.api.patch_cronjob(self.namespace, self.name, changes)
        if SUSPENDED_BY in annotations:
            self.say(
                f"un-suspended CronJob {self.cronjob}; it resumes from its own state annotations"
            )
        else:
            self.say(f"CronJob {self.cronjob} was suspended before the migration: left suspended")
        self.say(
            "edge chart: remove `imageRefresh.suspend: true` from its values again, or the next "
            "helm upgrade suspends the CronJob"
        )

    def _delete_policy(self, marker: str) -> None:
        where, _, uid = marker.partition(" ")
        namespace, _, name = where.partition("/")
        policy = self.api.read_policy(namespace, name)
        if policy is None:
            self.say(f"ImageRefreshPolicy {where} is already gone")
            return
        if (policy.get("metadata") or {}).get("uid") != uid:
            raise MigrationRefused(
                f"ImageRefreshPolicy {where} is not the object --apply created (uid {uid}); it "
                "was replaced since, so it is not deleted — delete it yourself if it must go"
            )
        self.api.delete_policy(namespace, name, uid)
        self.say(f"deleted ImageRefreshPolicy {where} (created by --apply)")


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def _marker(policy: Mapping[str, Any]) -> str:
    metadata = policy.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')} {metadata.get('uid')}"


def render(settings: CronJobSettings, migration: Migration) -> str:
    """The dry run's output: the policy and the chart values as YAML, the notes as comments."""
    lines = [
        f"# The ImageRefreshPolicy replacing CronJob {settings.cronjob}; --apply creates it with "
        "the carried status below.",
        yaml.safe_dump(migration.policy, sort_keys=False).rstrip(),
        "---",
        "# Values for the imagerefresh chart that install the same policy:",
        yaml.safe_dump(migration.values, sort_keys=False).rstrip(),
        "---",
        "# Carried over (written as the policy's status by --apply):",
    ]
    lines += [f"#   {line}" for line in migration.carried] or ["#   no state to carry"]
    if migration.warnings:
        lines.append("# Warnings:")
        lines += [f"#   {line}" for line in migration.warnings]
    lines.append(
        f"# Edge chart: set `{EDGE_SUSPEND_VALUE}` so its hourly helm upgrade keeps the CronJob "
        f"suspended — {EDGE_SUSPEND_WHY}."
    )
    return "\n".join(lines)
