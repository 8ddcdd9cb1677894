"""`imagerefresh run --leader-elect`: two real operator processes, one Lease, one writer.

Each process runs as its own ServiceAccount, so the API server's audit log (e2e/local turns one
on for ServiceAccounts of its audited namespace) names who sent every write — what a test
reads to prove what leadership guarantees (support/leadership.py): one writer at a time, the
standby writing nothing, not even an event or a Lease update, until the leader was killed
(SIGKILL, no release) and its lease ran out; a leader which sees another holder on the Lease
exits at once, non-zero, writing nothing more. Those are orderings in the audit log, with
margins that are the lease's own; the timings are short (lease 6 s, renew deadline 3 s, retry
0.5 s), waits are bounded and generous, and nothing asserts how many renewals fit in some
seconds.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from imagerefresh.cli import LEADERSHIP_LOST_EXIT
from imagerefresh.kube import KubeApi

from support.accounts import AuditEntry, audited_kubeconfig, audited_writes
from support.cluster_env import Cluster, eventually
from support.leadership import assert_one_writer_at_a_time, write_lease
from support.operator_env import Operator, deployment_with_policy
from support.registry_env import ImagePusher, free_port
from support.scenario import deployment, event_reasons, policy, target, target_status

pytestmark = pytest.mark.cluster

LEASE = "imagerefresh"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 3.0, 0.5
BOUND = 60.0 + 4 * LEASE_DURATION


@dataclasses.dataclass
class Candidates:
    cluster: Cluster
    registry: str
    namespace: str
    directory: Path
    started: list[Operator] = dataclasses.field(default_factory=list)

    def start(self, account: str, *more: str) -> Operator:
        """``imagerefresh run --leader-elect`` as ServiceAccount ``account`` (kopf included:
        KUBECONFIG is that account's), with ``more`` options."""
        kubeconfig = audited_kubeconfig(self.cluster, account, self.directory / account)
        operator = Operator(
            dataclasses.replace(self.cluster, kubeconfig=str(kubeconfig)),
            self.registry,
            free_port(),
            self.directory / f"{account}.log",
            extra_args=(
                "--leader-elect",
                f"--leader-election-namespace={self.namespace}",
                f"--leader-election-id={LEASE}",
                f"--leader-election-identity={account}",
                f"--leader-election-lease-duration={LEASE_DURATION:g}",
                f"--leader-election-renew-deadline={RENEW_DEADLINE:g}",
                f"--leader-election-retry-period={RETRY_PERIOD:g}",
                *more,
            ),
        )
        operator.start()
        self.started.append(operator)
        return operator


@pytest.fixture
def candidates(
    crd_installed: Cluster, registry: str, policy_namespace: str, tmp_path: Path
) -> Iterator[Candidates]:
    made = Candidates(crd_installed, registry, policy_namespace, tmp_path)
    yield made
    for operator in made.started:
        operator.stop()


def leads(operator: Operator) -> bool:
    return operator.metric("imagerefresh_leader") == 1


def role(operator: Operator) -> Any:
    return httpx.get(f"http://127.0.0.1:{operator.liveness_port}/healthz", timeout=5).json()


def lease_renewals(cluster: Cluster, account: str) -> list[AuditEntry]:
    return [
        w
        for w in audited_writes(cluster, account)
        if w.resource == "leases" and w.name == LEASE and w.succeeded
    ]


def renewing_for(cluster: Cluster, account: str, lease_durations: float) -> bool:
    """Whether ``account``'s renewals span that many lease durations (by the API server)."""
    renewals = lease_renewals(cluster, account)
    span = renewals[-1].received - renewals[0].received if renewals else timedelta(0)
    return span >= timedelta(seconds=lease_durations * LEASE_DURATION)


def writes_in(cluster: Cluster, namespace: str, *accounts: str) -> list[AuditEntry]:
    """The accounts' successful writes in ``namespace``, in the order the API server logged
    them (an operator serves every irp-* namespace, and one an earlier test left terminating
    may still hold a policy of its own)."""
    return [
        w for w in audited_writes(cluster, *accounts) if w.succeeded and w.namespace == namespace
    ]


def test_only_the_leader_writes_and_the_standby_takes_over_after_the_leader_is_killed(
    candidates: Candidates, cluster: Cluster, pusher: ImagePusher
) -> None:
    ns, reg = candidates.namespace, candidates.registry
    # Distinct accounts per test: the audit log outlives the test.
    first, second = f"a-{secrets.token_hex(3)}", f"b-{secrets.token_hex(3)}"
    pusher.push(f"{ns}/app", "prod", seed="leader")
    deployment_with_policy(cluster, ns, f"{reg}/{ns}/app:prod")

    a = candidates.start(first)
    eventually(lambda: leads(a), timeout=BOUND, what=f"{first} to lead")
    b = candidates.start(second)
    a.wait_first_tick(ns, "control-plane", timeout=BOUND)
    # The leader renews for two lease durations: more than the standby waits before it takes
    # a lease whose renewals stopped. What the standby did meanwhile:
    eventually(lambda: renewing_for(cluster, first, 2), timeout=BOUND, what=f"{first}'s renewals")
    assert b.metric("imagerefresh_leader") == 0
    assert role(b) == {"role": "standby"}
    assert role(a) == {"role": "leader"}
    assert b.ticks(ns, "control-plane") == 0
    assert audited_writes(cluster, second) == []  # nothing: no Lease, status, patch or event
    leader_wrote = {w.resource for w in audited_writes(cluster, first) if w.succeeded}
    assert {"leases", "deployments", "imagerefreshpolicies/status"} <= leader_wrote

    a.kill()
    eventually(lambda: leads(b), timeout=BOUND, what=f"{second} to take over")
    b.wait_first_tick(ns, "control-plane", timeout=BOUND)
    assert role(b) == {"role": "leader"}
    writes = writes_in(cluster, ns, first, second)
    tenures = assert_one_writer_at_a_time(writes, LEASE, LEASE_DURATION)
    assert [t.holder for t in tenures] == [first, second]
    # The refresh the first leader sent is not sent again by the second.
    patches = [w for w in writes if w.resource == "deployments" and w.verb == "patch"]
    assert [w.account for w in patches] == [first]
    lease = cluster.get("lease", LEASE, "-n", ns)["spec"]
    assert (lease["holderIdentity"], lease["leaseTransitions"]) == (second, 1)

    # Stopped gracefully (SIGTERM, as a rolling update does), the leader hands the Lease over.
    b.stop()
    assert b.process is not None
    assert b.process.returncode == 0
    assert cluster.get("lease", LEASE, "-n", ns)["spec"]["holderIdentity"] == ""


def test_a_new_leader_judges_the_rollout_the_killed_one_started_and_never_patches_again(
    candidates: Candidates, cluster: Cluster, pusher: ImagePusher
) -> None:
    ns, reg = candidates.namespace, candidates.registry
    first, second = f"a-{secrets.token_hex(3)}", f"b-{secrets.token_hex(3)}"
    pushed = pusher.push(f"{ns}/app", "prod", seed="mid-rollout")
    tag = f"{reg}/{ns}/app:prod"
    # New pods become Ready only 20 s after they are scheduled: the rollout the first leader
    # starts is still in flight when it is killed.
    slow = {"imagerefresh.test/ready-after": "20s"}
    cluster.apply(deployment("app", {"app": tag}, replicas=1, annotations=slow), namespace=ns)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/app", "--timeout=90s")
    # A short health window: the new leader carries it on from status, and judges its end.
    cluster.apply(policy("control-plane", target("app", app=tag), healthyFor="3s"), namespace=ns)

    a = candidates.start(first)
    eventually(lambda: leads(a), timeout=BOUND, what=f"{first} to lead")
    b = candidates.start(second)
    eventually(
        lambda: target_status(cluster, ns, "app").get("pending"),
        timeout=BOUND,
        what="the first leader's refresh to be in flight",
    )
    a.kill()
    eventually(lambda: leads(b), timeout=BOUND, what=f"{second} to take over")
    # The verdict comes from the new leader, from the pending record in status.
    current = eventually(
        lambda: (found := target_status(cluster, ns, "app"))["phase"] == "Current" and found,
        timeout=BOUND,
        what="the new leader's verdict",
    )
    assert current["lastGood"] == {"app": f"{reg}/{ns}/app@{pushed.digest}"}
    event_reasons(cluster, ns, "app", "Refreshing", "Refreshed")
    writes = writes_in(cluster, ns, first, second)
    tenures = assert_one_writer_at_a_time(writes, LEASE, LEASE_DURATION)
    assert [t.holder for t in tenures] == [first, second]
    patches = [w for w in writes if w.resource == "deployments" and w.verb == "patch"]
    assert [w.account for w in patches] == [first]  # exactly one patch for that digest
    verdicts = [w for w in writes if w.resource == "imagerefreshpolicies/status"]
    assert verdicts[-1].account == second


def test_a_leader_that_finds_another_holder_exits_non_zero_and_writes_nothing_more(
    candidates: Candidates, cluster: Cluster, pusher: ImagePusher
) -> None:
    ns, reg = candidates.namespace, candidates.registry
    leader, usurper = f"a-{secrets.token_hex(3)}", f"u-{secrets.token_hex(3)}"
    pusher.push(f"{ns}/app", "prod", seed="deposed")
    deployment_with_policy(cluster, ns, f"{reg}/{ns}/app:prod", healthyFor="2s")
    a = candidates.start(leader)
    eventually(lambda: leads(a), timeout=BOUND, what=f"{leader} to lead")
    a.wait_first_tick(ns, "control-plane", timeout=BOUND)
    # Its refresh judged, the leader has nothing to write until its next interval tick: any
    # write of it after the Lease is taken would be one it should not have sent. (While a
    # rollout is followed, a write in the instant before its next renewal notices the new
    # holder is possible; only a usurper that does not wait for the Lease to expire, as this
    # one, makes that instant matter.)
    eventually(
        lambda: target_status(cluster, ns, "app")["phase"] == "Current",
        timeout=BOUND,
        what="the leader's refresh to be judged",
    )

    # Another identity takes the Lease (as a candidate whose clock ran fast might), racing the
    # leader's renewals: read again and written again until it lands.
    kubeconfig = audited_kubeconfig(cluster, usurper, candidates.directory / usurper)
    api = KubeApi.from_environment(str(kubeconfig))
    try:
        write_lease(
            api,
            ns,
            LEASE,
            lambda spec: {**spec, "holderIdentity": usurper, "leaseDurationSeconds": 600},
        )
    finally:
        api.close()

    assert a.process is not None
    code = eventually(a.process.poll, timeout=BOUND, what="the deposed leader to exit")
    assert code == LEADERSHIP_LOST_EXIT
    assert "exiting: this process no longer leads" in a.log()
    # It wrote nothing once the Lease was taken: not logged after, nor received after.
    writes = writes_in(cluster, ns, leader, usurper)
    tenures = assert_one_writer_at_a_time(writes, LEASE, LEASE_DURATION, stolen_by=[usurper])
    assert [t.holder for t in tenures] == [leader, usurper]
    assert cluster.get("lease", LEASE, "-n", ns)["spec"]["holderIdentity"] == usurper


def test_a_policy_slow_to_plan_holds_neither_the_lease_renewals_nor_healthz(
    candidates: Candidates, cluster: Cluster, pusher: ImagePusher
) -> None:
    """Planning is CPU only, and a large policy takes a while: here every plan spins the CPU
    for twice the renew deadline. Planned off the event loop, the leader goes on renewing the
    Lease and answering /healthz meanwhile, and still leads; on the loop it would renew
    nothing for that long and lose the Lease."""
    ns, reg = candidates.namespace, candidates.registry
    account = f"p-{secrets.token_hex(3)}"
    spin = 2 * RENEW_DEADLINE
    a = candidates.start(account, f"--planning-delay={spin:g}")
    eventually(lambda: leads(a), timeout=BOUND, what=f"{account} to lead")
    pusher.push(f"{ns}/app", "prod", seed="slow-plan")
    answered: list[tuple[float, float, bool]] = []  # (asked, answered, said "leader")
    done = threading.Event()

    def poll_health() -> None:
        while not done.is_set():
            asked = time.time()
            try:
                leader = role(a) == {"role": "leader"}
            except httpx.HTTPError:
                leader = False
            answered.append((asked, time.time(), leader))
            time.sleep(0.2)

    polling = threading.Thread(target=poll_health, daemon=True)
    polling.start()
    deployment_with_policy(cluster, ns, f"{reg}/{ns}/app:prod")
    try:
        a.wait_first_tick(ns, "control-plane", timeout=BOUND)
    finally:
        done.set()
        polling.join(10)
    planned = [
        entry
        for entry in a.log_entries()
        if entry.get("event") == "tick" and entry.get("policy") == f"{ns}/control-plane"
    ]
    assert planned
    took = planned[0]["planning_seconds"]
    assert took >= spin  # the plan did spin that long
    assert a.process is not None
    assert a.process.poll() is None  # still running: never deposed
    assert leads(a)
    # The tick line is logged once the plan is applied: the plan ran within the `took`
    # seconds before the apply; the first half of that span is the plan's, however long the
    # apply took (up to half the spin).
    logged = datetime.fromisoformat(planned[0]["timestamp"].replace("Z", "+00:00"))
    spinning = (logged - timedelta(seconds=took), logged - timedelta(seconds=took / 2))
    renewed = [w for w in lease_renewals(cluster, account) if spinning[0] <= w.received]
    assert [w for w in renewed if w.received <= spinning[1]], "no renewal while it planned"
    during = [
        leader
        for asked, answer, leader in answered
        if spinning[0].timestamp() <= asked and answer <= spinning[1].timestamp()
    ]
    assert during, "no /healthz answer while it planned"
    assert all(leader for *_, leader in answered)  # every answer, throughout: "leader"
