"""Which signatures a tick asks for, and on whose account: never for a target that failed its
checks, at most the policy's share a tick, held to its pull budget's reserve.

The reads are built as :mod:`imagerefresh.runtime.reads` leaves them (a :class:`TargetReads`),
and the verifier is a recorder of what it is asked: which digests, for whom, with which cap and
reserve. Each target that fails a check is also planned, to show the planner ends it before any
gate — a lookup for it would be spent for nothing, and charged to an account it cannot use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable
from typing import Any

import pytest

from imagerefresh.credentials import Credentials
from imagerefresh.models import Phase
from imagerefresh.planner import NamespacePolicy, Resolved, TickInput, Workload, plan_tick
from imagerefresh.planner.evidence import SignatureOutcome, SignaturesWaiting
from imagerefresh.reference import registry_host
from imagerefresh.runtime.answers import verify_signatures
from imagerefresh.runtime.gather import _evidence
from imagerefresh.runtime.policyview import policy_view
from imagerefresh.runtime.reads import TargetReads, WorkloadRead
from imagerefresh.verifier import MAX_VERIFICATIONS_PER_TICK, VerifyRequest

from support.signing import TestKey
from support.ticks import JM, NS, T0, digest, key
from support.workloads import daemonset, deployment

KEY = TestKey.p256()
REPO = "tracebloc/jobs-manager"
D1, D2, PIN = digest(1), digest(2), digest("pin")
SECRET = Credentials("robot", "secret", f"{NS}/pull")


class Asked:
    """Stands in for the verifier: records what it is asked, and says everything waits."""

    def __init__(self) -> None:
        self.requests: list[VerifyRequest] = []
        self.owner: Hashable = None
        self.limit: int | None = None

    def clock(self) -> float:
        return 0.0

    async def verify(
        self,
        requests: Iterable[VerifyRequest],
        *,
        since: float | None = None,
        round_at: float | None = None,
        owner: Hashable = None,
        limit: int | None = None,
    ) -> dict[VerifyRequest, SignatureOutcome]:
        self.requests, self.owner, self.limit = list(requests), owner, limit
        return {r: SignaturesWaiting(r.digest, "recorded") for r in self.requests}


def policy(*targets: dict[str, Any], reserve: int = 3) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": "edge"},
        "spec": {
            "targets": list(targets),
            "verify": {"publicKeys": [KEY.pem]},
            "pullBudget": {"reserve": reserve},
        },
    }


def declared(name: str, kind: str = "Deployment", pin: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "api", "image": JM}
    if pin is not None:
        container["digest"] = pin
    return {"kind": kind, "name": name, "containers": [container]}


def read(workload: dict[str, Any] | None, **fields: Any) -> WorkloadRead:
    found = WorkloadRead(workload, **fields)
    if workload is not None:
        found.parsed = Workload.from_api(workload)
    return found


def running(name: str, image: str = f"{REPO}:prod", **fields: Any) -> WorkloadRead:
    return read(deployment(name, {"api": image}), **fields)


def asked_for(found: TargetReads, **digests: str) -> Asked:
    asked = Asked()
    resolved = {key(name): {"api": Resolved(d)} for name, d in digests.items()}
    asyncio.run(verify_signatures(found, resolved, asked))  # type: ignore[arg-type]
    return asked


def test_a_target_that_passed_its_checks_is_asked_on_its_account_with_the_policy_s_share() -> None:
    found = TargetReads(policy_view(policy(declared("jobs-manager"), reserve=3)), {})
    found.reads[key("jobs-manager")] = running("jobs-manager")
    found.credentials[(key("jobs-manager"), registry_host("docker.io"))] = SECRET
    asked = asked_for(found, **{"jobs-manager": D1})
    (request,) = asked.requests
    assert (request.digest, request.repository.repository) == (D1, f"docker.io/{REPO}")
    assert request.credentials == SECRET
    assert request.reserve == 3
    assert asked.owner == (NS, "edge")
    assert asked.limit == MAX_VERIFICATIONS_PER_TICK == 16


FAILED_CHECKS = {
    "workload-missing": (read(None), Phase.MISSING),
    "workload-unreadable": (read(None, error="forbidden: deployments"), Phase.ERROR),
    "pods-unreadable": (running("jobs-manager", unreadable="a pod we cannot read"), Phase.ERROR),
    "another-repository": (running("jobs-manager", "evil/miner:latest"), Phase.CONFLICT),
    "container-not-in-template": (
        read(deployment("jobs-manager", {"other": f"{REPO}:prod"})),
        Phase.CONFLICT,
    ),
}


@pytest.mark.parametrize("pin", [None, PIN], ids=["tag", "digest-pin"])
@pytest.mark.parametrize(("case"), list(FAILED_CHECKS))
def test_a_target_that_failed_its_checks_asks_no_registry_for_signatures(
    case: str, pin: str | None
) -> None:
    workload, phase = FAILED_CHECKS[case]
    found = TargetReads(policy_view(policy(declared("jobs-manager", pin=pin))), {})
    found.reads[key("jobs-manager")] = workload
    assert asked_for(found, **{"jobs-manager": D1}).requests == []
    # And the planner ends it before any gate: a verdict would change nothing.
    evidence = {key("jobs-manager"): _evidence(workload, {"api": Resolved(D1)}, {}, {})}
    tick = TickInput(found.view, evidence, {}, T0, NamespacePolicy(), {})
    (target,) = plan_tick(tick).status.targets
    assert target.phase is phase


def test_an_on_delete_daemonset_asks_no_registry_for_signatures() -> None:
    found = TargetReads(policy_view(policy(declared("agent", "DaemonSet", pin=PIN))), {})
    workload = daemonset("agent", {"api": f"{REPO}@{PIN}"}, namespace=NS, strategy="OnDelete")
    found.reads[key("agent", "DaemonSet")] = read(workload)
    assert asked_for(found).requests == []


def test_containers_another_policy_claims_or_a_target_declared_twice_ask_nothing() -> None:
    claimed = TargetReads(
        policy_view(policy(declared("jobs-manager", pin=PIN))),
        {(key("jobs-manager"), "api"): "tracebloc/other"},
    )
    claimed.reads[key("jobs-manager")] = running("jobs-manager")
    assert asked_for(claimed).requests == []
    twice = TargetReads(
        # Once with the policy's namespace defaulted, once naming it: one workload.
        policy_view(
            policy(declared("jobs-manager", pin=PIN), {**declared("jobs-manager"), "namespace": NS})
        ),
        {},
    )
    twice.reads[key("jobs-manager")] = running("jobs-manager")
    assert asked_for(twice).requests == []


def test_a_namespace_out_of_reach_is_never_read_so_never_asked() -> None:
    far = {**declared("jobs-manager", pin=PIN), "namespace": "elsewhere"}
    found = TargetReads(policy_view(policy(far)), {})  # read_targets reads only what it may
    assert asked_for(found).requests == []
