"""What leader election guarantees, read from the API server's audit log; the tests' own writes
to a Lease that candidates renew meanwhile.

The guarantees are orderings, never durations: **one writer at a time** — every write of a
candidate falls inside its own tenure, a tenure begins with the Lease write that takes it, and
the one it ends wrote nothing after that take; and **a standby acts only after a loss** — a take
comes a whole lease duration after the last renewal of the holder it replaces (by the API
server's own clock: the standby waits out the lease from when it saw that renewal), unless
that holder released the Lease or the test stole it. A loaded machine can make a leader lose
its Lease, and a standby then rightly takes it: these checks hold either way, where a count of
renewals within some seconds would not.

A test that writes the Lease races the holder's renewals (every retry period): its write is a
read and a replace, read again and replaced again when a renewal landed in between (409),
until it lands, within :data:`WRITE_BOUND` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest

from imagerefresh.kube import KubeApi
from imagerefresh.kube.errors import ResourceConflict

from support.accounts import AuditEntry

__all__ = ["WRITE_BOUND", "Tenure", "assert_one_writer_at_a_time", "tenures", "write_lease"]

WRITE_BOUND = 30.0  # seconds a test's Lease write may take to land, 409s included

Json = dict[str, Any]


def write_lease(api: KubeApi, namespace: str, name: str, change: Callable[[Json], Json]) -> Json:
    """Replace the Lease's spec with ``change(spec)``, reading it again and retrying when a
    candidate's write landed between the read and the replace (409); the Lease as written."""
    deadline = time.monotonic() + WRITE_BOUND
    conflicts = 0
    while True:
        lease = api.read_lease(namespace, name)
        assert lease is not None, f"no Lease {namespace}/{name} to write"
        try:
            return api.replace_lease(
                namespace, name, lease["metadata"]["resourceVersion"], change(lease["spec"])
            )
        except ResourceConflict:
            conflicts += 1
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the Lease {namespace}/{name} kept changing under the test's write: "
                    f"{conflicts} conflicts in {WRITE_BOUND:.0f}s"
                )


@dataclass(frozen=True)
class Tenure:
    """One candidate's hold of the Lease: the write that took it and every write it made."""

    holder: str
    writes: tuple[AuditEntry, ...]

    @property
    def take(self) -> AuditEntry:
        return self.writes[0]

    def renewals(self, lease: str) -> list[AuditEntry]:
        return [w for w in self.writes if w.resource == "leases" and w.name == lease]


def tenures(writes: Sequence[AuditEntry], lease: str) -> list[Tenure]:
    """The successful writes, in the order the API server logged them, cut into tenures: a
    tenure starts at a Lease write by another account than the holder's and holds every write
    logged until the next (whoever sent it: :func:`assert_one_writer_at_a_time` checks that);
    writes before the first take make a tenure of holder ""."""
    cut: list[tuple[str, list[AuditEntry]]] = [("", [])]
    for write in writes:
        if not write.succeeded:
            continue
        holder = cut[-1][0]
        if write.resource == "leases" and write.name == lease and write.account != holder:
            cut.append((write.account, [write]))
        else:
            cut[-1][1].append(write)
    return [Tenure(holder, tuple(found)) for holder, found in cut if holder or found]


def assert_one_writer_at_a_time(
    writes: Sequence[AuditEntry],
    lease: str,
    lease_duration: float,
    *,
    released: Iterable[str] = (),
    stolen_by: Iterable[str] = (),
) -> list[Tenure]:
    """Assert the guarantees of the module docs over ``writes`` (the candidates', and those
    the test made as a ``stolen_by`` account); the tenures, in order.

    ``released``: candidates whose last Lease write handed it over (a graceful stop): whoever
    takes after them need not wait the lease out."""
    found = tenures(writes, lease)
    assert found, "no write at all"
    assert found[0].holder, f"writes before anyone held the Lease: {found[0].writes}"
    for tenure in found:
        strangers = [w for w in tenure.writes if w.account != tenure.holder]
        assert not strangers, f"writes by others while {tenure.holder} held: {strangers}"
    for before, after in pairwise(found):
        # One writer at a time: whatever the one before wrote reached the API server before
        # this take did (by the API server's clock, not only in the order it logged them).
        late = [w for w in before.writes if w.received > after.take.received]
        assert not late, f"{before.holder} wrote after {after.holder} took the Lease: {late}"
        if after.holder in set(stolen_by) or before.holder in set(released):
            continue
        # A standby acts only after a loss: the lease of the last renewal ran out first.
        waited = after.take.received - before.renewals(lease)[-1].received
        assert waited >= timedelta(seconds=lease_duration), (
            f"{after.holder} took the Lease {waited.total_seconds():.3f}s after "
            f"{before.holder}'s last renewal: less than the lease duration {lease_duration}s"
        )
    return found
