"""Candidates for one Lease on a real API server, with short timings (lease 3 s, renew 2 s,
retry 0.5 s): one leads, the other only reads; the standby takes over once the leader stops
renewing; a leader stops writing the moment it sees another holder, or at its renew deadline
when it cannot renew. Candidates run as ServiceAccounts the API server audits, and what
leadership guarantees is read from its audit log as orderings (support/leadership.py): one
writer at a time, a take only once the lease of the last renewal ran out. Waits are bounded
and generous; nothing asserts how long anything took or how many renewals fit in some seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import kopf
import pytest

from imagerefresh.kube import KubeApi
from imagerefresh.kube.login import Login
from imagerefresh.kube.transport import Connection
from imagerefresh.lease import record_from_api
from imagerefresh.runtime.election import ElectionTimings, Elector, LeaderGate

from support.accounts import audited_kubeconfig, audited_writes
from support.cluster_env import Cluster
from support.counting import CountingKubeApi
from support.leadership import assert_one_writer_at_a_time, write_lease
from support.registry_env import free_port

pytestmark = pytest.mark.cluster

FAST = ElectionTimings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
BOUND = 30.0  # generous: several lease durations
LEASE = "imagerefresh"


@pytest.fixture
def api(cluster: Cluster) -> Iterator[KubeApi]:
    kube = KubeApi.from_environment(cluster.kubeconfig, timeout=(1.0, 1.0))
    yield kube
    kube.close()


@pytest.fixture
def audited(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[[str], CountingKubeApi]]:
    """Clients of audited ServiceAccounts of their own (the audit log outlives the test): each
    candidate writes as one, so the audit log names who wrote what; each counts its requests."""
    made: list[CountingKubeApi] = []

    def client(candidate: str) -> CountingKubeApi:
        account = f"{candidate}-{secrets.token_hex(3)}"
        kubeconfig = audited_kubeconfig(cluster, account, tmp_path / account)
        base = KubeApi.from_environment(str(kubeconfig), timeout=(1.0, 1.0))
        counting = CountingKubeApi(base.connection, timeout=(1.0, 1.0))
        counting.account = account  # type: ignore[attr-defined]
        made.append(counting)
        return counting

    yield client
    for counting in made:
        counting.close()


def account(api: KubeApi) -> str:
    return str(api.account)  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def running(coroutine: object) -> AsyncIterator[asyncio.Task[object]]:
    task: asyncio.Task[object] = asyncio.ensure_future(coroutine)  # type: ignore[arg-type]
    try:
        yield task
    finally:
        task.cancel()
        # Bounded: a cancellation the task swallows fails here, naming it.
        stopped, _ = await asyncio.wait({task}, timeout=BOUND)
        assert stopped, f"{task} went on after it was cancelled"
        if not task.cancelled():
            task.exception()  # how it ended is for the test to judge, not this helper


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait for what must happen, generously (the candidates run on this loop meanwhile)."""
    for _ in range(int(BOUND / 0.1)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {BOUND}s")


def holder(api: KubeApi, namespace: str) -> str:
    lease = api.read_lease(namespace, LEASE)
    assert lease is not None
    return record_from_api(lease).holder


async def test_of_two_candidates_one_leads_the_other_waits_and_takes_over_when_it_stops(
    api: KubeApi, cluster: Cluster, namespace: str, audited: Callable[[str], CountingKubeApi]
) -> None:
    clients = {"a": audited("a"), "b": audited("b")}
    a = Elector(clients["a"], namespace, LEASE, "a", FAST)
    b = Elector(clients["b"], namespace, LEASE, "b", FAST)
    first_a, first_b = asyncio.ensure_future(a.acquire()), asyncio.ensure_future(b.acquire())
    done, _ = await asyncio.wait({first_a, first_b}, timeout=BOUND, return_when="FIRST_COMPLETED")
    assert len(done) == 1
    leader, standby, waiting = (a, b, first_b) if first_a in done else (b, a, first_a)
    writer = clients[leader.identity]
    accounts = [account(client) for client in clients.values()]

    async with running(leader.hold()) as holding:
        assert leader.gate()
        assert not standby.gate()
        assert await asyncio.to_thread(holder, api, namespace) == leader.identity
        # Renewals for several lease durations: the standby's chance to take it, were it to
        # (the audit log below says whether it waited the lease out; a leader that lost the
        # Lease meanwhile, on a starved machine, stops renewing: that is checked the same way).
        renewals = 4 * FAST.lease_duration / FAST.retry_period
        await until(
            lambda: holding.done() or writer.count("PUT", "leases") >= renewals,
            "the leader's renewals",
        )

    # The leader stops renewing without releasing (as if killed): the standby takes over.
    await asyncio.wait_for(waiting, timeout=BOUND)
    assert holder(api, namespace) == standby.identity
    assert standby.gate()
    assert not leader.gate()  # its deadline passed long before the Lease expired for others
    lease = api.read_lease(namespace, LEASE)
    assert lease is not None
    assert lease["spec"]["leaseTransitions"] == 1
    writes = [w for w in audited_writes(cluster, *accounts) if w.namespace == namespace]
    tenures = assert_one_writer_at_a_time(writes, LEASE, FAST.lease_duration)
    assert [t.holder for t in tenures] == [account(writer), account(clients[standby.identity])]
    for elector in (a, b):
        elector.close()


async def test_a_standby_sees_each_renewal_by_watching_the_lease_not_by_polling_it(
    api: KubeApi, cluster: Cluster, namespace: str, audited: Callable[[str], CountingKubeApi]
) -> None:
    writer, watcher = audited("a"), audited("b")
    leader = Elector(writer, namespace, LEASE, "a", FAST)
    standby = Elector(watcher, namespace, LEASE, "b", FAST)
    await asyncio.wait_for(leader.acquire(), timeout=BOUND)
    async with running(standby.acquire()) as waiting:
        async with running(leader.hold()):
            # Eight renewals (one every 0.5 s): polled, the standby would read the Lease every
            # 0.5-1.1 s; watching, it reads it once and sees each renewal.
            renewed = writer.count("PUT", "leases")
            await until(lambda: writer.count("PUT", "leases") >= renewed + 8, "eight renewals")
            if not waiting.done():  # still standing by (a starved leader may rightly lose)
                assert watcher.count("GET", "leases") <= 2
        await asyncio.wait_for(waiting, timeout=BOUND)  # the leader stopped: it takes over
    assert holder(api, namespace) == "b"
    writes = [
        w for w in audited_writes(cluster, account(writer), account(watcher))
        if w.namespace == namespace
    ]  # fmt: skip
    assert_one_writer_at_a_time(writes, LEASE, FAST.lease_duration)
    for elector in (leader, standby):
        elector.close()


async def test_a_leader_that_sees_another_holder_closes_its_gate_at_once(
    api: KubeApi, namespace: str
) -> None:
    leader = Elector(api, namespace, LEASE, "a", FAST)
    await asyncio.wait_for(leader.acquire(), timeout=BOUND)
    async with running(leader.hold()) as holding:
        # Written over the leader's renewals: read again and written again until it lands.
        await asyncio.to_thread(
            write_lease,
            api,
            namespace,
            LEASE,
            lambda spec: {**spec, "holderIdentity": "usurper", "leaseDurationSeconds": 60},
        )
        why = await asyncio.wait_for(holding, timeout=BOUND)
    assert why == "another candidate holds the Lease"
    assert not leader.gate()
    assert holder(api, namespace) == "usurper"  # the deposed leader wrote nothing over it
    leader.close()


async def test_a_leader_that_cannot_renew_stops_writing_at_its_renew_deadline(
    api: KubeApi, cluster: Cluster, namespace: str
) -> None:
    leader = Elector(api, namespace, LEASE, "a", FAST)
    await asyncio.wait_for(leader.acquire(), timeout=BOUND)
    # From now on every request of the elector meets a closed port: real refused connections.
    login = Login(kopf.ConnectionInfo(server=f"https://127.0.0.1:{free_port()}"))
    unreachable = KubeApi(Connection(login), timeout=(0.5, 0.5))
    leader.api = unreachable
    why = await asyncio.wait_for(leader.hold(), timeout=BOUND)
    assert "renew deadline" in why
    assert not leader.gate()
    assert holder(api, namespace) == "a"  # nobody else took it: it simply expires for others
    unreachable.close()
    leader.close()


async def test_a_graceful_stop_releases_the_lease_so_a_standby_need_not_wait_it_out(
    api: KubeApi, namespace: str
) -> None:
    slow = ElectionTimings(lease_duration=600.0, renew_deadline=2.0, retry_period=0.5)
    leader = Elector(api, namespace, LEASE, "a", slow)
    standby = Elector(api, namespace, LEASE, "b", slow)
    await asyncio.wait_for(leader.acquire(), timeout=BOUND)
    async with running(standby.acquire()) as waiting:
        await leader.release()
        assert not leader.gate()
        # With a 600 s lease, only the release lets the standby in within the bound.
        await asyncio.wait_for(waiting, timeout=BOUND)
    assert holder(api, namespace) == "b"
    for elector in (leader, standby):
        elector.close()


def test_the_gate_opens_only_until_the_deadline_and_never_again_once_closed() -> None:
    now = [100.0]
    gate = LeaderGate(clock=lambda: now[0])
    assert not gate()
    gate.extend(110.0)
    assert gate()
    gate.extend(105.0)  # an older renewal's deadline never shortens a newer one
    now[0] = 109.999
    assert gate()
    now[0] = 110.0
    assert not gate()
    gate.extend(200.0)
    gate.close()
    assert not gate()


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "why"),
    [
        (10.0, 10.0, 2.0, "longer than the renew deadline"),
        (15.0, 10.0, 9.0, "exceed 1.2 times the retry period"),
        (15.0, 10.0, 0.0, "the retry period must be positive"),
        # 10.5 > 10.2, but the Lease would say 10: both would write for 0.2 s.
        (10.5, 10.2, 2.0, "whole number of seconds"),
        (15.000001, 10.0, 2.0, "whole number of seconds"),
        (float("inf"), 10.0, 2.0, "whole number of seconds"),
    ],
)
def test_timings_that_could_let_two_leaders_overlap_are_refused(
    lease: float, renew: float, retry: float, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        ElectionTimings(lease, renew, retry)


def test_the_lease_duration_written_is_the_one_validated() -> None:
    timings = ElectionTimings(lease_duration=11.0, renew_deadline=10.9, retry_period=2.0)
    assert timings.lease_seconds == 11
    assert isinstance(timings.lease_seconds, int)


async def test_the_lease_records_exactly_the_validated_duration(
    api: KubeApi, namespace: str
) -> None:
    timings = ElectionTimings(lease_duration=4.0, renew_deadline=3.9, retry_period=0.5)
    leader = Elector(api, namespace, LEASE, "a", timings)
    await asyncio.wait_for(leader.acquire(), timeout=BOUND)
    lease = api.read_lease(namespace, LEASE)
    assert lease is not None
    assert lease["spec"]["leaseDurationSeconds"] == 4
    leader.close()
