"""`imagerefresh run --leader-elect`: two real operator processes, one Lease, one writer.

Each process runs as its own ServiceAccount, so the API server's audit log (e2e/local turns one
on for ServiceAccounts of its audited namespace) names who sent every write — what a test
counts to prove that the standby wrote nothing, not even an event or a Lease update, until the
leader was killed (SIGKILL, no release) and it took over; and that a leader which sees another
holder on the Lease exits at once, non-zero, writing nothing more. Timings are short (lease
3 s, renew 2 s, retry 0.5 s); waits are bounded and generous; nothing asserts a duration.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from imagerefresh.cli import LEADERSHIP_LOST_EXIT
from imagerefresh.kube import KubeApi

from support.accounts import AuditEntry, audited_kubeconfig, audited_writes
from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, deployment_with_policy
from support.registry_env import ImagePusher, free_port
from support.scenario import deployment, event_reasons, policy, target, target_status

pytestmark = pytest.mark.cluster

LEASE = "imagerefresh"
BOUND = 60.0


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
                "--leader-election-lease-duration=3",
                "--leader-election-renew-deadline=2",
                "--leader-election-retry-period=0.5",
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
    # Let the leader renew a good many times, then look at what the standby did meanwhile.
    eventually(
        lambda: len(lease_renewals(cluster, first)) >= 8,
        timeout=BOUND,
        what=f"{first}'s renewals",
    )
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
    # Its own namespace only: an operator serves every irp-* namespace, and one an earlier test
    # left terminating may still hold a policy of its own.
    writes = [
        w for w in audited_writes(cluster, first, second) if w.succeeded and w.namespace == ns
    ]
    takeover = next(i for i, w in enumerate(writes) if w.account == second)
    assert writes[takeover].resource == "leases"  # its first write is taking the Lease
    assert all(w.account == first for w in writes[:takeover])
    assert all(w.account == second for w in writes[takeover:])
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
    # Its own namespace only: an operator serves every irp-* namespace, and one an earlier test
    # left terminating may still hold a policy of its own.
    writes = [
        w for w in audited_writes(cluster, first, second) if w.succeeded and w.namespace == ns
    ]
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

    # Another identity takes the Lease (as a candidate whose clock ran fast might).
    kubeconfig = audited_kubeconfig(cluster, usurper, candidates.directory / usurper)
    api = KubeApi.from_environment(str(kubeconfig))
    lease = api.read_lease(ns, LEASE)
    assert lease is not None
    spec = {**lease["spec"], "holderIdentity": usurper, "leaseDurationSeconds": 600}
    api.replace_lease(ns, LEASE, lease["metadata"]["resourceVersion"], spec)
    api.close()

    assert a.process is not None
    code = eventually(a.process.poll, timeout=BOUND, what="the deposed leader to exit")
    assert code == LEADERSHIP_LOST_EXIT
    assert "exiting: this process no longer leads" in a.log()
    writes = [w for w in audited_writes(cluster, leader, usurper) if w.succeeded]
    stolen = next(i for i, w in enumerate(writes) if w.account == usurper)
    assert [w for w in writes[stolen:] if w.account == leader] == []
    assert cluster.get("lease", LEASE, "-n", ns)["spec"]["holderIdentity"] == usurper


def test_a_policy_slow_to_plan_holds_neither_the_lease_renewals_nor_healthz(
    candidates: Candidates, cluster: Cluster, pusher: ImagePusher
) -> None:
    """Planning is CPU only, and a large policy takes a while: here every plan spins the CPU
    for longer than the renew deadline (5 s against 2 s). Planned off the event loop, the
    leader goes on renewing the Lease and answering /healthz meanwhile, and still leads; on
    the loop it would renew nothing for those 5 s and lose the Lease."""
    ns, reg = candidates.namespace, candidates.registry
    account = f"p-{secrets.token_hex(3)}"
    a = candidates.start(account, "--planning-delay=5")
    eventually(lambda: leads(a), timeout=BOUND, what=f"{account} to lead")
    pusher.push(f"{ns}/app", "prod", seed="slow-plan")
    answered: list[bool] = []
    done = threading.Event()

    def poll_health() -> None:
        while not done.is_set():
            try:
                answered.append(role(a) == {"role": "leader"})
            except httpx.HTTPError:
                answered.append(False)
            time.sleep(0.2)

    before = len(lease_renewals(cluster, account))
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
    assert planned[0]["planning_seconds"] >= 5  # the plan did spin that long
    assert a.process is not None
    assert a.process.poll() is None  # still running: never deposed
    assert leads(a)
    # Renewals every 0.5 s went on through the 5 s plan; /healthz answered throughout.
    assert len(lease_renewals(cluster, account)) - before >= 5
    assert answered.count(True) >= 10
    assert False not in answered
