"""Lockstep in the planner (SPEC §3 ``lockstep``): one reference, one move, or none.

The edge's policy with ``lockstep: true``: jobs-manager (``api`` on the jobs-manager image,
``pods-monitor-container`` on its own) and requests-proxy (``proxy`` on the jobs-manager image
again). ``api`` and ``proxy`` are one group; ``pods-monitor-container`` is tracked by one
target only, so it is in none. Each test pins down what the planner concludes when one member
can or cannot move: starts held and named, successes held until every member settled, and
rollbacks of every member that moved when one of them fails.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from imagerefresh.models import PendingPurpose, Phase
from imagerefresh.planner import NOTHING_IN_FLIGHT, PatchPurpose, Plan, in_flight
from imagerefresh.planner.evidence import Resolved, TargetEvidence, TargetKey, Unresolved

from support.ticks import JM, NS, PM, RM, Tick, budget, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D1, D2, D3 = digest(1), digest(2), digest(3)
P1, P2 = digest("p1"), digest("p2")
JM_REPO = "tracebloc/jobs-manager"
PM_REPO = "tracebloc/pods-monitor"
JOBS, PROXY = key("jobs-manager"), key("requests-proxy")
GROUP = "docker.io/tracebloc/jobs-manager:prod"


def short(value: str) -> str:
    return value[:19] + "…"


def ran(value: str) -> str:
    """The imageID a kubelet reports for a container of the jobs-manager image on ``value``."""
    return f"docker.io/{JM_REPO}@{value}"


def edge(*more: dict[str, Any], **fields: Any) -> Tick:
    """The edge's jobs-manager and requests-proxy (one image), ``more`` targets, lockstep on.

    The group rules are judged at the instant a member settles (``healthyFor: 0s``); how a
    member's health window binds its group is tested on its own (``..._health_window_...``).
    """
    fields.setdefault("lockstep", True)
    fields.setdefault("healthyFor", "0s")
    return Tick(
        spec(
            target("jobs-manager", api=JM, **{"pods-monitor-container": PM}),
            target("requests-proxy", proxy=JM),
            *more,
            **fields,
        )
    )


def jobs(api: str, monitor: str = P1, generation: int = 1, **fields: Any) -> dict[str, Any]:
    return deployment(
        "jobs-manager",
        {"api": f"{JM_REPO}@{api}", "pods-monitor-container": f"{PM_REPO}@{monitor}"},
        generation=generation,
        **fields,
    )


def proxy(image: str, generation: int = 1, **fields: Any) -> dict[str, Any]:
    return deployment(
        "requests-proxy", {"proxy": f"{JM_REPO}@{image}"}, generation=generation, **fields
    )


def seen(
    jobs_manager: dict[str, Any] | None,
    requests_proxy: dict[str, Any] | None,
    desired: str = D2,
    monitor: str = P1,
    proxy_desired: str | None = None,
) -> dict[TargetKey, TargetEvidence]:
    return {
        JOBS: evidence(jobs_manager, digests={"api": desired, "pods-monitor-container": monitor}),
        PROXY: evidence(requests_proxy, digests={"proxy": proxy_desired or desired}),
    }


def patched(plan: Plan) -> dict[str, dict[str, str]]:
    """Workload name → container → the image its patch writes."""
    return {p.target.name: {c.container: c.image for c in p.changes} for p in plan.patches}


def reasons(plan: Plan, target: TargetKey | None = None) -> list[str]:
    return [e.reason for e in plan.events if target is None or e.target == target]


def started(tick: Tick) -> Plan:
    """Both members on D1, the tag on D2: one tick starts both refreshes."""
    return tick.run(seen(jobs(D1), proxy(D1)), advance=timedelta(seconds=10))


# --- starts ------------------------------------------------------------------------------------


def test_targets_tracking_one_reference_start_their_refresh_in_the_same_tick() -> None:
    tick = edge()
    plan = started(tick)
    assert patched(plan) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D2}"},
        "requests-proxy": {"proxy": f"{JM_REPO}@{D2}"},
    }
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    assert tick.target("requests-proxy").phase is Phase.REFRESHING


def test_a_frozen_peer_holds_the_others_waiting_and_names_it() -> None:
    tick = edge(maxSkipTicks=1)
    plan = tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1)))
    assert plan.patches == ()
    assert tick.target("requests-proxy").phase is Phase.FROZEN
    waiting = tick.target("jobs-manager")
    assert waiting.phase is Phase.WAITING
    assert waiting.message == (
        f"drift: api {short(D1)} → {short(D2)}; lockstep: {GROUP} moves together, and "
        "Deployment tracebloc/requests-proxy (Frozen) cannot refresh now; the refresh starts "
        "when every target tracking it can"
    )
    (event,) = [e for e in plan.events if e.target == JOBS]
    assert (event.type, event.reason, event.message) == (
        "Normal",
        "LockstepWaiting",
        waiting.message,
    )
    assert waiting.pending is None


def test_without_lockstep_a_frozen_target_never_holds_another() -> None:
    tick = edge(maxSkipTicks=1, lockstep=False)
    plan = tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1)))
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D2}"}}


def test_waiting_for_a_peer_writes_nothing_new_and_posts_no_second_event() -> None:
    tick = edge(maxSkipTicks=1)
    tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1)))
    before = tick.status
    again = tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1)))
    assert again.patches == ()
    assert "LockstepWaiting" not in reasons(again)
    assert again.status.to_api() == before.to_api()


def test_a_new_reason_to_wait_posts_a_new_event_that_says_it() -> None:
    tick = edge(maxSkipTicks=1)
    tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1)))
    unreadable = seen(jobs(D1), None)
    unreadable[PROXY] = evidence(None, error="deployments.apps is forbidden")
    plan = tick.run(unreadable)
    waiting = tick.target("jobs-manager")
    assert waiting.phase is Phase.WAITING
    assert "Deployment tracebloc/requests-proxy (Error) cannot refresh now" in waiting.message
    (event,) = [e for e in plan.events if e.target == JOBS]
    assert (event.reason, event.message) == ("LockstepWaiting", waiting.message)


def test_containers_outside_the_held_group_still_refresh_in_the_same_patch() -> None:
    tick = edge(maxSkipTicks=1)
    plan = tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1), monitor=P2))
    assert patched(plan) == {"jobs-manager": {"pods-monitor-container": f"{PM_REPO}@{P2}"}}
    refreshing = tick.target("jobs-manager")
    assert refreshing.phase is Phase.REFRESHING
    assert refreshing.pending.images == {"pods-monitor-container": f"{PM_REPO}@{P2}"}
    assert "api held back (lockstep: " in refreshing.message
    assert "Deployment tracebloc/requests-proxy (Frozen)" in refreshing.message


def test_the_refresh_that_goes_ahead_names_every_container_held_back_and_why() -> None:
    tick = Tick(
        spec(
            target("jobs-manager", api=JM, worker=JM, **{"pods-monitor-container": PM}),
            target("requests-proxy", proxy=JM),
            lockstep=True,
            maxSkipTicks=1,
        )
    )
    images = {
        "api": f"{JM_REPO}@{D1}",
        "worker": f"{JM_REPO}@{D1}",
        "pods-monitor-container": f"{PM_REPO}@{P1}",
    }
    desired = {"api": D2, "worker": D2, "pods-monitor-container": P2}
    plan = tick.run(
        {
            JOBS: evidence(deployment("jobs-manager", images), digests=desired),
            PROXY: evidence(proxy(D1, generation=2, observed=1), digests={"proxy": D2}),
        }
    )
    assert patched(plan) == {"jobs-manager": {"pods-monitor-container": f"{PM_REPO}@{P2}"}}
    refreshing = tick.target("jobs-manager")
    assert refreshing.message == (
        f"refreshing pods-monitor-container {short(P1)} → {short(P2)}; api, worker held back "
        f"(lockstep: {GROUP} moves together, and Deployment tracebloc/requests-proxy (Frozen) "
        "cannot refresh now; the refresh starts when every target tracking it can)"
    )
    (event,) = [e for e in plan.events if e.target == JOBS]
    assert event.message == (
        f"patching Deployment tracebloc/jobs-manager: pods-monitor-container {short(P1)} → "
        f"{short(P2)}"
    )


def test_a_held_container_on_a_tag_is_not_pinned_by_the_patch_of_its_neighbour() -> None:
    tick = edge(maxSkipTicks=1)
    workload = deployment(
        "jobs-manager",
        {"api": f"{JM_REPO}:prod", "pods-monitor-container": f"{PM_REPO}@{P1}"},
    )
    pods = [pod("jm-1", {"api": ran(D1)})]
    plan = tick.run(
        {
            JOBS: evidence(workload, pods, digests={"api": D2, "pods-monitor-container": P2}),
            PROXY: evidence(proxy(D1, generation=2, observed=1), digests={"proxy": D2}),
        }
    )
    assert patched(plan) == {"jobs-manager": {"pods-monitor-container": f"{PM_REPO}@{P2}"}}


HELD_BY_FROZEN_PROXY = (
    f"api held back (lockstep: {GROUP} moves together, and Deployment tracebloc/requests-proxy "
    "(Frozen) cannot refresh now; the refresh starts when every target tracking it can)"
)


def _monitor_on_its_tag() -> dict[TargetKey, TargetEvidence]:
    """jobs-manager's monitor on its tag, its pod on P1; api held by a frozen requests-proxy."""
    workload = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}", "pods-monitor-container": PM})
    pods = [pod("jm-1", {"pods-monitor-container": f"docker.io/{PM_REPO}@{P1}"})]
    return {
        JOBS: evidence(workload, pods, digests={"api": D2, "pods-monitor-container": P2}),
        PROXY: evidence(proxy(D1, generation=2, observed=1), digests={"proxy": D2}),
    }


def test_a_neighbour_that_goes_ahead_on_its_tag_is_named_with_the_digest_its_pods_run() -> None:
    tick = edge(maxSkipTicks=1)
    plan = tick.run(_monitor_on_its_tag())
    assert patched(plan) == {"jobs-manager": {"pods-monitor-container": f"{PM_REPO}@{P2}"}}
    assert tick.target("jobs-manager").message == (
        f"refreshing pods-monitor-container {short(P1)} → {short(P2)}; {HELD_BY_FROZEN_PROXY}"
    )


def test_a_neighbour_the_pull_budget_defers_still_names_the_containers_held_back() -> None:
    tick = edge(maxSkipTicks=1, pullBudget={"reserve": 2})
    budgets = {("registry-1.docker.io", "anonymous"): budget("registry-1.docker.io", 2)}
    plan = tick.run(_monitor_on_its_tag(), budgets)
    assert plan.patches == ()
    deferred = tick.target("jobs-manager")
    assert (deferred.phase, deferred.message) == (
        Phase.DEFERRED,
        "deferred: registry-1.docker.io for anonymous has 2 pulls left of 100 per 21600s; this "
        f"refresh needs 1 and 2 stay reserved for the kubelet; {HELD_BY_FROZEN_PROXY}",
    )


def locked(tick: Tick, name: str) -> None:
    """Put ``name`` at its attempts ceiling, as a run of failed refreshes would leave it."""
    tick.run(seen(jobs(D1), proxy(D1), desired=D1))
    tick.status = tick.status.model_copy(
        update={
            "targets": tuple(
                t.model_copy(update={"refresh_attempts": 3}) if t.name == name else t
                for t in tick.status.targets
            )
        }
    )


def test_a_locked_peer_holds_the_others() -> None:
    tick = edge()
    locked(tick, "requests-proxy")
    plan = tick.run(seen(jobs(D1), proxy(D1)))
    assert plan.patches == ()
    assert tick.target("requests-proxy").phase is Phase.LOCKED
    assert "Deployment tracebloc/requests-proxy (Locked) cannot refresh now" in (
        tick.target("jobs-manager").message
    )


def test_a_peer_locked_by_its_own_contested_re_pin_holds_the_others_in_the_same_tick() -> None:
    tick = edge()
    tick.run(seen(jobs(D1), proxy(D1), desired=D1))
    # Two contested re-pins already: another writer moved the proxy off what we last wrote.
    tick.status = tick.status.model_copy(
        update={
            "targets": tuple(
                t.model_copy(
                    update={
                        "refresh_attempts": 2,
                        "contested": 2,
                        "last_good": {"proxy": f"docker.io/{JM_REPO}@{D3}"},
                    }
                )
                if t.name == "requests-proxy"
                else t
                for t in tick.status.targets
            )
        }
    )
    plan = tick.run(seen(jobs(D1), proxy(D1)))
    # The third contest locks the proxy before it patches anything: it does not move to D2,
    # so jobs-manager must not either.
    assert plan.patches == ()
    locked_ = tick.target("requests-proxy")
    assert (locked_.phase, locked_.refresh_attempts) == (Phase.LOCKED, 3)
    waiting = tick.target("jobs-manager")
    assert waiting.phase is Phase.WAITING
    assert waiting.message == (
        f"drift: api {short(D1)} → {short(D2)}; lockstep: {GROUP} moves together, and "
        "Deployment tracebloc/requests-proxy (Locked) cannot refresh now; the refresh starts "
        "when every target tracking it can"
    )


def test_a_group_the_pull_budget_cannot_cover_at_once_is_deferred_as_a_whole() -> None:
    tick = edge(pullBudget={"reserve": 2})
    # One pull is left above the reserve: jobs-manager (1 replica) fits, requests-proxy alone
    # would too, but not both — so neither moves, not even the one a held peer left room for.
    budgets = {("registry-1.docker.io", "anonymous"): budget("registry-1.docker.io", 3)}
    plan = tick.run(seen(jobs(D1), proxy(D1)), budgets)
    assert plan.patches == ()
    assert plan.rate_limited
    for name in ("jobs-manager", "requests-proxy"):
        assert tick.target(name).phase is Phase.DEFERRED
    # The group's pulls are spent together or not at all, and the message says what they need.
    for name in ("jobs-manager", "requests-proxy"):
        assert tick.target(name).message == (
            f"deferred: lockstep: {GROUP} moves together, and the pull budget does not cover "
            "all of its refreshes at once (Deployment tracebloc/jobs-manager, Deployment "
            "tracebloc/requests-proxy): registry-1.docker.io for anonymous has 3 pulls left of "
            "100 per 21600s; their 2 refreshes need 2 and 2 stay reserved for the kubelet"
        )
    assert tick.condition("RateLimited").status == "True"


def test_two_groups_one_target_ties_together_are_deferred_as_one_naming_both_references() -> None:
    # jobs-manager is in both groups (api with requests-proxy, its monitor with sidecar), so
    # the three refreshes spend the budget as one unit: 4 pulls do not fit in the 3 above the
    # reserve, and the message names each reference that ties them, not only the first.
    tick = edge(target("sidecar", monitor=PM), pullBudget={"reserve": 2})
    found = seen(jobs(D1), proxy(D1), monitor=P2)
    found[key("sidecar")] = evidence(
        deployment("sidecar", {"monitor": f"{PM_REPO}@{P1}"}), digests={"monitor": P2}
    )
    budgets = {("registry-1.docker.io", "anonymous"): budget("registry-1.docker.io", 5)}
    plan = tick.run(found, budgets)
    assert plan.patches == ()
    for name in ("jobs-manager", "requests-proxy", "sidecar"):
        assert tick.target(name).phase is Phase.DEFERRED
        assert tick.target(name).message == (
            f"deferred: lockstep: {GROUP}, docker.io/tracebloc/pods-monitor:prod moves "
            "together, and the pull budget does not cover all of its refreshes at once "
            "(Deployment tracebloc/jobs-manager, Deployment tracebloc/requests-proxy, "
            "Deployment tracebloc/sidecar): registry-1.docker.io for anonymous has 5 pulls "
            "left of 100 per 21600s; their 3 refreshes need 4 and 2 stay reserved for the "
            "kubelet"
        )


def test_a_group_the_pull_budget_covers_starts_together() -> None:
    tick = edge(pullBudget={"reserve": 2})
    budgets = {("registry-1.docker.io", "anonymous"): budget("registry-1.docker.io", 4)}
    plan = tick.run(seen(jobs(D1), proxy(D1)), budgets)
    assert set(patched(plan)) == {"jobs-manager", "requests-proxy"}


def test_a_peer_with_a_conflict_or_missing_workload_holds_the_others() -> None:
    for requests_proxy, phase in (
        (deployment("requests-proxy", {"proxy": f"mirror.local/{JM_REPO}@{D1}"}), "Conflict"),
        (None, "Missing"),
    ):
        tick = edge()
        plan = tick.run(seen(jobs(D1), requests_proxy))
        assert plan.patches == ()
        assert f"Deployment tracebloc/requests-proxy ({phase}) cannot refresh now" in (
            tick.target("jobs-manager").message
        )


def test_a_peer_whose_evidence_is_unreadable_holds_the_others() -> None:
    tick = edge()
    evidence_ = seen(jobs(D1), proxy(D1))
    evidence_[PROXY] = evidence(None, error="deployments.apps is forbidden")
    plan = tick.run(evidence_)
    assert plan.patches == ()
    assert "Deployment tracebloc/requests-proxy (Error) cannot refresh now" in (
        tick.target("jobs-manager").message
    )


def test_a_peer_already_on_the_new_digest_lets_the_one_behind_catch_up_alone() -> None:
    tick = edge()
    plan = tick.run(seen(jobs(D1), proxy(D2)))
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D2}"}}
    assert tick.target("requests-proxy").phase is Phase.CURRENT


def test_pinned_containers_are_in_no_group() -> None:
    tick = Tick(
        spec(
            target("jobs-manager", api=JM),
            {
                "kind": "Deployment",
                "name": "requests-proxy",
                "containers": [{"name": "proxy", "image": JM, "digest": D1}],
            },
            lockstep=True,
            maxSkipTicks=1,
        )
    )
    plan = tick.run(
        {
            JOBS: evidence(
                deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}"}), digests={"api": D2}
            ),
            PROXY: evidence(proxy(D1, generation=2, observed=1)),
        }
    )
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D2}"}}


def test_peers_that_resolved_different_digests_wait_until_they_agree() -> None:
    tick = edge()
    plan = tick.run(seen(jobs(D1), proxy(D1), desired=D2, proxy_desired=D3))
    assert plan.patches == ()
    # Named in the order they sort in: D3's before D2's.
    held = (
        f"lockstep: its peers resolved {GROUP} to different digests ({short(D3)}, {short(D2)}); "
        "they move when they agree"
    )
    assert tick.target("jobs-manager").message == f"drift: api {short(D1)} → {short(D2)}; {held}"
    assert tick.target("requests-proxy").message == (
        f"drift: proxy {short(D1)} → {short(D3)}; {held}"
    )
    for name in ("jobs-manager", "requests-proxy"):
        assert tick.target(name).phase is Phase.WAITING


def test_a_reference_tracked_by_one_target_only_is_no_group_so_nothing_in_it_waits() -> None:
    # api and worker run one image in one pod: one patch moves them, lockstep or not. The
    # worker's pods report a platform manifest of the index that could not be read, so the
    # worker is left alone; api still refreshes.
    tick = Tick(spec(target("jobs-manager", api=JM, worker=JM), lockstep=True))
    workload = deployment("jobs-manager", {"api": f"{JM_REPO}@{D1}", "worker": f"{JM_REPO}:prod"})
    unread = Unresolved("RegistryUnavailable", "the index's platform manifests could not be read")
    plan = tick.run(
        {
            JOBS: evidence(
                workload,
                [pod("jm-1", {"api": ran(D1), "worker": ran(D3)})],
                digests={"api": D2, "worker": unread},
            )
        }
    )
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D2}"}}
    assert tick.target("jobs-manager").message == (
        f"refreshing api {short(D1)} → {short(D2)}; not resolved, left alone: worker: the "
        "index's platform manifests could not be read"
    )


def test_a_new_digest_waits_for_every_peer_still_rolling_out_the_last_one_and_names_each() -> None:
    tick = edge(target("gateway", gateway=JM))
    gateway = key("gateway")

    def world(
        jobs_: dict[str, Any], proxy_: dict[str, Any], desired: str
    ) -> dict[TargetKey, TargetEvidence]:
        found = seen(jobs_, proxy_, desired=desired)
        found[gateway] = evidence(
            deployment("gateway", {"gateway": f"{JM_REPO}@{D2}"}), digests={"gateway": desired}
        )
        return found

    # The gateway already runs D2: the other two move to it together.
    first = tick.run(world(jobs(D1), proxy(D1), D2), advance=timedelta(minutes=1))
    assert set(patched(first)) == {"jobs-manager", "requests-proxy"}
    # The tag moves on to D3 while they still roll out: the gateway waits for both.
    plan = tick.run(
        world(jobs(D2, generation=2, available=0), proxy(D2, generation=2, available=0), D3)
    )
    assert plan.patches == ()
    waiting = tick.target("gateway")
    assert waiting.phase is Phase.WAITING
    assert waiting.message == (
        f"drift: gateway {short(D2)} → {short(D3)}; lockstep: {GROUP} moves together, and "
        "Deployment tracebloc/jobs-manager (Refreshing), Deployment tracebloc/requests-proxy "
        "(Refreshing) cannot refresh now; the refresh starts when every target tracking it can"
    )


def test_a_target_held_in_two_groups_moves_in_neither_and_gives_both_reasons() -> None:
    tick = edge(target("sidecar", monitor=PM), maxSkipTicks=1)
    found = seen(jobs(D1), proxy(D1, generation=2, observed=1), monitor=P2)
    frozen = deployment("sidecar", {"monitor": f"{PM_REPO}@{P1}"}, generation=2, observed=1)
    found[key("sidecar")] = evidence(frozen, digests={"monitor": P2})
    plan = tick.run(found)
    assert plan.patches == ()
    waiting = tick.target("jobs-manager")
    assert waiting.phase is Phase.WAITING
    assert waiting.message == (
        f"drift: api {short(D1)} → {short(D2)}, pods-monitor-container {short(P1)} → "
        f"{short(P2)}; lockstep: {GROUP} moves together, and Deployment "
        "tracebloc/requests-proxy (Frozen) cannot refresh now; the refresh starts when every "
        "target tracking it can; lockstep: docker.io/tracebloc/pods-monitor:prod moves together, "
        "and Deployment tracebloc/sidecar (Frozen) cannot refresh now; the refresh starts when "
        "every target tracking it can"
    )


def test_a_reset_honoured_in_a_tick_that_holds_its_group_clears_the_attempts_all_the_same() -> None:
    tick = edge(maxSkipTicks=1)
    locked(tick, "jobs-manager")
    tick.reset = "after-the-incident"
    plan = tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1)))
    assert plan.patches == ()
    waiting = tick.target("jobs-manager")
    assert (waiting.phase, waiting.refresh_attempts, waiting.locked_at) == (
        Phase.WAITING,
        0,
        None,
    )


def test_a_dry_run_reports_the_hold_as_it_would_happen() -> None:
    tick = edge(maxSkipTicks=1, dryRun=True)
    plan = tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1)))
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.WAITING
    tick = edge(dryRun=True)
    tick.run(seen(jobs(D1), proxy(D1)))
    assert [t.phase for t in tick.status.targets] == [Phase.DRIFTED, Phase.DRIFTED]


# --- verdicts ----------------------------------------------------------------------------------


def test_a_member_that_settles_first_holds_its_success_until_every_peer_settled() -> None:
    tick = edge()
    started(tick)
    holding = tick.run(seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0)))
    assert holding.patches == ()
    assert "Refreshed" not in reasons(holding)
    first = tick.target("jobs-manager")
    assert first.phase is Phase.REFRESHING
    assert first.pending is not None
    assert first.pending.settled_at is not None
    assert first.message == (
        f"our refresh rolled out; its lockstep peers on {GROUP} have not all settled on "
        f"{short(D2)}: Deployment tracebloc/requests-proxy (Refreshing): it counts as "
        "refreshed once they have"
    )
    done = tick.run(seen(jobs(D2, generation=2), proxy(D2, generation=2)))
    assert reasons(done).count("Refreshed") == 2
    for name in ("jobs-manager", "requests-proxy"):
        status = tick.target(name)
        assert (status.phase, status.pending, status.refresh_attempts) == (Phase.CURRENT, None, 0)
    assert tick.target("jobs-manager").last_good["api"] == f"docker.io/{JM_REPO}@{D2}"


def test_a_held_success_has_no_deadline_of_its_own_while_its_peer_is_followed() -> None:
    tick = edge()
    tick.run(seen(jobs(D1), proxy(D1, replicas=2)), advance=timedelta(minutes=1))
    tick.run(
        seen(jobs(D2, generation=2), proxy(D2, generation=2, replicas=2, updated=1, available=0)),
        advance=timedelta(minutes=1),
    )
    # The proxy makes progress: its deadline moves on; the settled jobs-manager's would not.
    tick.run(seen(jobs(D2, generation=2), proxy(D2, generation=2, replicas=2, available=1)))
    flying = in_flight(tick.spec, tick.status, NS)
    assert flying.workloads == {JOBS, PROXY}
    proxy_pending = tick.target("requests-proxy").pending
    assert proxy_pending.progressed_at is not None
    assert flying.deadline == proxy_pending.progressed_at + timedelta(minutes=10, seconds=1)


def test_when_one_member_fails_every_member_that_moved_rolls_back_and_only_it_counts() -> None:
    tick = edge()
    started(tick)
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    plan = tick.run(
        seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0, conditions=failed))
    )
    assert patched(plan) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D1}"},
        "requests-proxy": {"proxy": f"{JM_REPO}@{D1}"},
    }
    assert all(p.purpose is PatchPurpose.ROLLBACK for p in plan.patches)
    follower, culprit = tick.target("jobs-manager"), tick.target("requests-proxy")
    assert (culprit.phase, culprit.refresh_attempts) == (Phase.ROLLING_BACK, 1)
    assert (follower.phase, follower.refresh_attempts) == (Phase.ROLLING_BACK, 0)
    assert follower.pending.purpose is PendingPurpose.ROLLBACK
    assert reasons(plan, JOBS) == ["RollingBack"]
    (event,) = [e for e in plan.events if e.target == JOBS]
    assert event.message == (
        f"rolling Deployment tracebloc/jobs-manager back to api={JM_REPO}@{D1}: its lockstep "
        f"peers on {GROUP} did not all move to {short(D2)}: Deployment "
        "tracebloc/requests-proxy (RollingBack)"
    )
    assert "(no attempt counted against this target)" in follower.message


def test_a_member_still_rolling_out_rolls_back_too_when_its_peer_fails() -> None:
    tick = edge()
    started(tick)
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    plan = tick.run(
        seen(
            jobs(D2, generation=2, available=0),
            proxy(D2, generation=2, available=0, conditions=failed),
        )
    )
    assert set(patched(plan)) == {"jobs-manager", "requests-proxy"}
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK


def test_a_member_whose_rollback_with_its_peers_is_unproven_is_refused_naming_both() -> None:
    tick = edge()
    started(tick)
    tick.revisions[JOBS] = []  # jobs-manager's old ReplicaSet is gone: D1 is proven nowhere
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    plan = tick.run(
        seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0, conditions=failed))
    )
    assert patched(plan) == {"requests-proxy": {"proxy": f"{JM_REPO}@{D1}"}}
    refusal = (
        f"Deployment tracebloc/jobs-manager is not rolled back: api would go back to "
        f"{JM_REPO}@{D1}, which no live evidence shows the workload ran (not its previous "
        "revision's template, nor what its pods run). It stays on what it runs; roll it back by "
        "hand (kubectl rollout undo), then reset the policy if its status was edited: "
        "imagerefresh reset tracebloc/control-plane"
    )
    refused = tick.target("jobs-manager")
    assert (refused.phase, refused.pending, refused.refresh_attempts) == (Phase.REFUSED, None, 0)
    assert refused.message == (
        f"its lockstep peers on {GROUP} did not all move to {short(D2)}: Deployment "
        f"tracebloc/requests-proxy (RollingBack); {refusal}"
    )
    (event,) = [e for e in plan.events if e.target == JOBS]
    assert (event.type, event.reason, event.message) == ("Warning", "RollbackNotAllowed", refusal)


def test_without_rollback_on_failure_a_peer_failing_rolls_nothing_back() -> None:
    tick = edge(rollbackOnFailure=False)
    started(tick)
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    plan = tick.run(
        seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0, conditions=failed))
    )
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.CURRENT


def left_without_intent(tick: Tick, name: str, phase: Phase) -> None:
    """What the shell leaves when ``name``'s refresh patch did not land: ``phase`` and no
    intent (Refused: the API server refused it for good; the previous phase: it met a
    concurrent edit)."""
    tick.status = tick.status.model_copy(
        update={
            "targets": tuple(
                t.model_copy(update={"phase": phase, "pending": None}) if t.name == name else t
                for t in tick.status.targets
            )
        }
    )


def test_a_member_whose_patch_was_refused_is_behind_so_the_one_that_moved_rolls_back() -> None:
    tick = edge()
    started(tick)
    left_without_intent(tick, "requests-proxy", Phase.REFUSED)
    tick.spec = tick.spec.model_copy(update={"max_skip_ticks": 1})
    plan = tick.run(seen(jobs(D2, generation=2), proxy(D1, generation=2, observed=1)))
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D1}"}}
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK


def test_a_member_whose_patch_met_a_concurrent_edit_joins_the_refresh_in_flight() -> None:
    tick = edge()
    started(tick)
    left_without_intent(tick, "requests-proxy", Phase.CURRENT)
    plan = tick.run(seen(jobs(D2, generation=2, available=0), proxy(D1)))
    assert patched(plan) == {"requests-proxy": {"proxy": f"{JM_REPO}@{D2}"}}
    assert tick.target("jobs-manager").phase is Phase.REFRESHING


def test_a_follow_up_holds_for_a_member_it_did_not_read_and_the_next_tick_lets_it_join() -> None:
    tick = edge()
    started(tick)
    left_without_intent(tick, "requests-proxy", Phase.CURRENT)
    # A follow-up reads only the rollouts in flight: the proxy's status is the last tick's.
    followed = tick.run({JOBS: seen(jobs(D2, generation=2), None)[JOBS]}, follow_up=True)
    assert followed.patches == ()
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    assert "Deployment tracebloc/requests-proxy (Current)" in tick.target("jobs-manager").message
    joined = tick.run(seen(jobs(D2, generation=2), proxy(D1)))
    assert patched(joined) == {"requests-proxy": {"proxy": f"{JM_REPO}@{D2}"}}


def test_a_peer_whose_evidence_is_unreadable_mid_rollout_holds_the_others_never_rolls_back() -> (
    None
):
    tick = edge()
    started(tick)
    evidence_ = seen(jobs(D2, generation=2), None)
    evidence_[PROXY] = evidence(None, error="the API server did not answer")
    plan = tick.run(evidence_)
    assert plan.patches == ()
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    assert tick.target("jobs-manager").pending.settled_at is not None


def test_a_held_success_stays_a_success_when_its_pods_restart_meanwhile() -> None:
    tick = edge()
    started(tick)
    tick.run(seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0)))
    done = tick.run(seen(jobs(D2, generation=2, available=0), proxy(D2, generation=2)))
    assert reasons(done).count("Refreshed") == 2
    assert tick.target("jobs-manager").phase is not Phase.REFRESHING


def test_a_follow_up_tick_applies_the_same_group_rules() -> None:
    tick = edge()
    started(tick)
    holding = tick.run(
        seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0)), follow_up=True
    )
    assert "Refreshed" not in reasons(holding)
    done = tick.run(seen(jobs(D2, generation=2), proxy(D2, generation=2)), follow_up=True)
    assert reasons(done).count("Refreshed") == 2
    assert in_flight(tick.spec, tick.status, NS) == NOTHING_IN_FLIGHT


def test_a_forced_rollback_cascades_to_the_other_group_the_target_moved_in() -> None:
    # jobs-manager moves api (group jobs-manager) and pods-monitor-container (group
    # pods-monitor, shared with a sidecar target): requests-proxy failing rolls jobs-manager
    # back, so the sidecar, which moved with it on pods-monitor, rolls back too.
    tick = edge(target("sidecar", monitor=PM))
    sidecar = key("sidecar")

    def side(image: str, generation: int = 1, **fields: Any) -> dict[str, Any]:
        return deployment(
            "sidecar", {"monitor": f"{PM_REPO}@{image}"}, generation=generation, **fields
        )

    def world(**kwargs: Any) -> dict[TargetKey, TargetEvidence]:
        found = seen(kwargs.get("jobs", jobs(D1)), kwargs.get("proxy", proxy(D1)), monitor=P2)
        found[sidecar] = evidence(kwargs.get("side", side(P1)), digests={"monitor": P2})
        return found

    first = tick.run(world())
    assert set(patched(first)) == {"jobs-manager", "requests-proxy", "sidecar"}
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    plan = tick.run(
        world(
            jobs=jobs(D2, P2, generation=2),
            proxy=proxy(D2, generation=2, available=0, conditions=failed),
            side=side(P2, generation=2),
        )
    )
    assert patched(plan) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D1}", "pods-monitor-container": f"{PM_REPO}@{P1}"},
        "requests-proxy": {"proxy": f"{JM_REPO}@{D1}"},
        "sidecar": {"monitor": f"{PM_REPO}@{P1}"},
    }
    assert tick.target("sidecar").refresh_attempts == 0


def test_a_forged_settled_at_in_the_future_is_not_ours_and_patches_nothing() -> None:
    tick = edge()
    started(tick)
    forged = tuple(
        t.model_copy(
            update={
                "pending": t.pending.model_copy(update={"settled_at": tick.now + timedelta(days=1)})
            }
        )
        if t.name == "jobs-manager"
        else t
        for t in tick.status.targets
    )
    tick.status = tick.status.model_copy(update={"targets": forged})
    plan = tick.run(seen(jobs(D2, generation=2), proxy(D2, generation=2)))
    status = tick.target("jobs-manager")
    assert status.phase is Phase.ERROR
    assert "settled in the future" in status.message
    assert "jobs-manager" not in patched(plan)


def test_a_peer_already_on_the_digest_but_unreadable_holds_a_settled_catch_up() -> None:
    tick = edge()
    tick.run(seen(jobs(D1), proxy(D2)))  # jobs-manager catches up alone: the proxy is on D2
    unreadable = seen(jobs(D2, generation=2), None)
    unreadable[PROXY] = evidence(None, error="the API server did not answer")
    plan = tick.run(unreadable)
    assert plan.patches == ()
    assert "Refreshed" not in reasons(plan)
    holding = tick.target("jobs-manager")
    assert holding.phase is Phase.REFRESHING
    assert "Deployment tracebloc/requests-proxy (Error)" in holding.message
    done = tick.run(seen(jobs(D2, generation=2), proxy(D2)))
    assert reasons(done, JOBS) == ["Refreshed"]


def test_a_dry_run_holds_a_settled_success_while_a_peer_would_join_it() -> None:
    tick = edge()
    started(tick)
    left_without_intent(tick, "requests-proxy", Phase.CURRENT)
    tick.spec = tick.spec.model_copy(update={"dry_run": True})  # turned on mid-rollout
    plan = tick.run(seen(jobs(D2, generation=2), proxy(D1)))
    assert plan.patches == ()
    assert "Refreshed" not in reasons(plan)
    assert tick.target("requests-proxy").phase is Phase.DRIFTED
    holding = tick.target("jobs-manager")
    assert holding.phase is Phase.REFRESHING
    assert holding.message == (
        f"our refresh rolled out; its lockstep peers on {GROUP} have not all settled on "
        f"{short(D2)}: Deployment tracebloc/requests-proxy (Drifted): it counts as refreshed "
        "once they have"
    )


def test_a_dry_run_holds_no_success_for_a_peer_that_could_move_only_part_of_the_group() -> None:
    tick = Tick(
        spec(
            target("jobs-manager", api=JM),
            target("requests-proxy", proxy=JM, **{"proxy-worker": JM}),
            lockstep=True,
            healthyFor="0s",
        )
    )
    both = {"proxy": f"{JM_REPO}@{D1}", "proxy-worker": f"{JM_REPO}@{D1}"}

    def world(
        api: str, generation: int, worker: str | Unresolved
    ) -> dict[TargetKey, TargetEvidence]:
        return {
            JOBS: evidence(
                deployment("jobs-manager", {"api": f"{JM_REPO}@{api}"}, generation=generation),
                digests={"api": D2},
            ),
            PROXY: evidence(
                deployment("requests-proxy", both), digests={"proxy": D2, "proxy-worker": worker}
            ),
        }

    first = tick.run(world(D1, 1, D2), advance=timedelta(minutes=1))
    assert set(patched(first)) == {"jobs-manager", "requests-proxy"}
    left_without_intent(tick, "requests-proxy", Phase.CURRENT)
    tick.spec = tick.spec.model_copy(update={"dry_run": True})
    # The proxy's worker cannot be resolved now: the proxy would move only part of the group,
    # so it is held and joins nothing; jobs-manager's refresh, settled, is a success.
    unread = Unresolved("RegistryUnavailable", "the index's platform manifests could not be read")
    plan = tick.run(world(D2, 2, unread))
    assert tick.target("requests-proxy").phase is Phase.WAITING
    assert reasons(plan, JOBS) == ["Refreshed"]


def on_tag(generation: int = 1, **fields: Any) -> dict[str, Any]:
    """requests-proxy with its template on the tag, as GitOps wrote it."""
    return deployment(
        "requests-proxy", {"proxy": f"{JM_REPO}:prod"}, generation=generation, **fields
    )


def test_a_peer_on_the_tag_running_a_platform_manifest_of_the_digest_runs_it() -> None:
    tick = edge()
    arm64 = digest("arm64")
    index = Resolved(D2, frozenset({arm64}))

    def world(jobs_manager: dict[str, Any]) -> dict[TargetKey, TargetEvidence]:
        return {
            JOBS: evidence(jobs_manager, digests={"api": index, "pods-monitor-container": P1}),
            PROXY: evidence(on_tag(), [pod("rp-1", {"proxy": ran(arm64)})], {"proxy": index}),
        }

    # The proxy's pods run D2's arm64 manifest: it is on D2, jobs-manager catches up alone.
    first = tick.run(world(jobs(D1)))
    assert patched(first) == {"jobs-manager": {"api": f"{JM_REPO}@{D2}"}}
    done = tick.run(world(jobs(D2, generation=2)))
    assert done.patches == ()
    assert reasons(done, JOBS) == ["Refreshed"]


def test_a_peer_on_the_tag_whose_patch_was_refused_and_pods_run_the_old_build_is_behind() -> None:
    tick = edge()
    old_pods = [pod("rp-1", {"proxy": ran(D1)})]

    def world(
        jobs_manager: dict[str, Any], requests_proxy: dict[str, Any]
    ) -> dict[TargetKey, TargetEvidence]:
        found = seen(jobs_manager, None)
        found[PROXY] = evidence(requests_proxy, old_pods, {"proxy": D2})
        return found

    first = tick.run(world(jobs(D1), on_tag()), advance=timedelta(minutes=1))
    assert set(patched(first)) == {"jobs-manager", "requests-proxy"}
    left_without_intent(tick, "requests-proxy", Phase.REFUSED)
    tick.spec = tick.spec.model_copy(update={"max_skip_ticks": 1})
    plan = tick.run(world(jobs(D2, generation=2), on_tag(generation=2, observed=1)))
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D1}"}}
    assert tick.target("jobs-manager").message == (
        f"its lockstep peers on {GROUP} did not all move to {short(D2)}: Deployment "
        f"tracebloc/requests-proxy (Frozen); rolling back to api={JM_REPO}@{D1} with them (no "
        "attempt counted against this target)"
    )


def test_a_peer_whose_pods_took_a_newer_build_of_the_tag_meanwhile_does_not_run_the_digest() -> (
    None
):
    tick = edge()

    def world(
        jobs_manager: dict[str, Any], runs: str, desired: str
    ) -> dict[TargetKey, TargetEvidence]:
        found = seen(jobs_manager, None, desired=desired)
        found[PROXY] = evidence(on_tag(), [pod("rp-1", {"proxy": ran(runs)})], {"proxy": desired})
        return found

    first = tick.run(world(jobs(D1), D2, D2))
    assert patched(first) == {"jobs-manager": {"api": f"{JM_REPO}@{D2}"}}
    # The tag moved on to D3 and the proxy's pods were rescheduled onto it: jobs-manager's D2
    # is a build the proxy does not run.
    plan = tick.run(world(jobs(D2, generation=2), D3, D3))
    assert "Refreshed" not in reasons(plan)
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D1}"}}
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK


def test_a_peer_whose_container_left_its_template_or_became_unparseable_does_not_run_it() -> None:
    for requests_proxy in (
        deployment("requests-proxy", {"proxy-v2": f"{JM_REPO}@{D2}"}, generation=2),
        deployment("requests-proxy", {"proxy": f"{JM_REPO}@@{D2}"}, generation=2),
    ):
        tick = edge()
        tick.run(seen(jobs(D1), proxy(D2)))  # jobs-manager catches up alone
        plan = tick.run(seen(jobs(D2, generation=2), requests_proxy))
        assert tick.target("requests-proxy").phase is Phase.CONFLICT
        assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D1}"}}
        assert tick.target("jobs-manager").message.startswith(
            f"its lockstep peers on {GROUP} did not all move to {short(D2)}: Deployment "
            "tracebloc/requests-proxy (Conflict); rolling back"
        )


def test_two_digests_in_flight_when_lockstep_is_turned_on_are_each_judged() -> None:
    tick = edge(lockstep=False, rolloutTimeout="30m")
    # Without lockstep jobs-manager moved to D3 while the proxy was not settled; then the
    # proxy moved to D2, the tag's next build.
    tick.run(seen(jobs(D1), proxy(D1, generation=2, observed=1), desired=D3))
    tick.run(seen(jobs(D3, generation=2, available=0), proxy(D1, generation=2), desired=D2))
    assert tick.target("requests-proxy").phase is Phase.REFRESHING
    tick.spec = tick.spec.model_copy(update={"lockstep": True})
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    plan = tick.run(
        seen(
            jobs(D3, generation=2, available=0, conditions=failed),
            proxy(D2, generation=3),
            desired=D2,
        )
    )
    # D3's move failed (jobs-manager rolls back on its own), and D2's, judged after it (D3's
    # digest sorts first), is judged all the same: jobs-manager does not run D2, so the proxy
    # rolls back too.
    assert patched(plan) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D1}"},
        "requests-proxy": {"proxy": f"{JM_REPO}@{D1}"},
    }
    assert tick.target("requests-proxy").refresh_attempts == 0


def test_a_follow_up_counts_a_catch_up_refreshed_when_the_peer_it_did_not_read_runs_it() -> None:
    tick = edge()
    tick.run(seen(jobs(D1), proxy(D2)), advance=timedelta(seconds=10))
    followed = tick.run({JOBS: seen(jobs(D2, generation=2), None)[JOBS]}, follow_up=True)
    assert reasons(followed, JOBS) == ["Refreshed"]
    assert tick.target("jobs-manager").phase is Phase.CURRENT


def grown() -> Tick:
    """jobs-manager alone starts its refresh to D2 (no group yet); then requests-proxy, on the
    same tag, is added to the spec: a follow-up has no status for it and does not read it."""
    tick = edge()
    tick.spec = spec(
        target("jobs-manager", api=JM, **{"pods-monitor-container": PM}),
        lockstep=True,
        healthyFor="0s",
    )
    plan = tick.run({JOBS: seen(jobs(D1), None)[JOBS]}, advance=timedelta(seconds=10))
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D2}"}}
    tick.spec, tick.generation = edge().spec, 2
    return tick


def statused(tick: Tick) -> list[str]:
    return [t.name for t in tick.status.targets]


def test_a_follow_up_judges_a_rollout_in_flight_when_a_peer_was_added_to_the_spec() -> None:
    tick = grown()
    followed = tick.run(
        {JOBS: seen(jobs(D2, generation=2, available=0), None)[JOBS]}, follow_up=True
    )
    assert followed.patches == ()
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    assert tick.target("jobs-manager").pending.settled_at is None
    # The new member is not read by a follow-up: it waits, without a status, for a full tick.
    assert statused(tick) == ["jobs-manager"]


def test_a_follow_up_holds_a_success_for_a_peer_added_to_the_spec_and_never_decided() -> None:
    tick = grown()
    followed = tick.run({JOBS: seen(jobs(D2, generation=2), None)[JOBS]}, follow_up=True)
    assert followed.patches == ()
    assert "Refreshed" not in reasons(followed)
    assert statused(tick) == ["jobs-manager"]
    held = tick.target("jobs-manager")
    assert held.phase is Phase.REFRESHING
    assert held.pending.settled_at is not None
    assert held.message == (
        f"our refresh rolled out; its lockstep peers on {GROUP} have not all settled on "
        f"{short(D2)}: Deployment tracebloc/requests-proxy (not yet decided): it counts as "
        "refreshed once they have"
    )
    # The next full tick reads the new member: behind, it joins the refresh in flight.
    joined = tick.run(seen(jobs(D2, generation=2), proxy(D1)))
    assert patched(joined) == {"requests-proxy": {"proxy": f"{JM_REPO}@{D2}"}}
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    done = tick.run(seen(jobs(D2, generation=2), proxy(D2, generation=2)))
    assert reasons(done).count("Refreshed") == 2


def test_a_follow_up_rolls_back_a_failed_rollout_whatever_the_peer_added_to_the_spec() -> None:
    tick = grown()
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    rolling = jobs(D2, generation=2, available=0, conditions=failed)
    plan = tick.run({JOBS: seen(rolling, None)[JOBS]}, follow_up=True)
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D1}"}}
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK
    assert statused(tick) == ["jobs-manager"]


def test_a_catch_up_is_held_when_another_group_rolls_back_the_peer_it_would_join() -> None:
    """Three groups, decided in rounds: pods-monitor's fails and rolls jobs-manager back; the
    proxy, held on resource-monitor by the missing metrics, must then not catch up alone on
    jobs-manager's digest — a group whose members were all decided anew is read again."""
    rm_repo, r1, r2 = "tracebloc/resource-monitor", digest("r1"), digest("r2")
    watcher, metrics = key("pods-watcher"), key("metrics")
    first = (
        target("jobs-manager", api=JM, **{"pods-monitor-container": PM}),
        target("pods-watcher", watch=PM),
    )
    tick = Tick(spec(*first, lockstep=True, healthyFor="0s"))
    tick.run(
        {
            JOBS: evidence(jobs(D1), digests={"api": D2, "pods-monitor-container": P2}),
            watcher: evidence(
                deployment("pods-watcher", {"watch": f"{PM_REPO}@{P1}"}), digests={"watch": P2}
            ),
        },
        advance=timedelta(seconds=10),
    )
    tick.spec = spec(
        *first,
        target("requests-proxy", proxy=JM, agent=RM),
        target("metrics", monitor=RM),
        lockstep=True,
        healthyFor="0s",
    )
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    watching = deployment(
        "pods-watcher", {"watch": f"{PM_REPO}@{P2}"}, generation=2, available=0, conditions=failed
    )
    behind = deployment("requests-proxy", {"proxy": f"{JM_REPO}@{D1}", "agent": f"{rm_repo}@{r1}"})
    plan = tick.run(
        {
            JOBS: evidence(
                jobs(D2, P2, generation=2, available=0),
                digests={"api": D2, "pods-monitor-container": P2},
            ),
            watcher: evidence(watching, digests={"watch": P2}),
            PROXY: evidence(behind, digests={"proxy": D2, "agent": r2}),
            metrics: evidence(None, digests={"monitor": r2}),
        }
    )
    assert patched(plan) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D1}", "pods-monitor-container": f"{PM_REPO}@{P1}"},
        "pods-watcher": {"watch": f"{PM_REPO}@{P1}"},
    }
    held = tick.target("requests-proxy")
    assert (held.phase, held.pending) == (Phase.WAITING, None)
    assert held.message.endswith(
        f"; lockstep: {GROUP} moves together, and Deployment tracebloc/jobs-manager "
        "(RollingBack) cannot refresh now; the refresh starts when every target tracking it can"
    )
    assert reasons(plan, PROXY) == ["LockstepWaiting"]


def test_a_member_locked_mid_rollout_rolls_back_with_its_peers_and_stays_locked() -> None:
    tick = edge()
    tick.run(seen(jobs(D1), proxy(D1), desired=D1))
    tick.status = tick.status.model_copy(
        update={
            "targets": tuple(
                t.model_copy(update={"refresh_attempts": 2}) if t.name == "jobs-manager" else t
                for t in tick.status.targets
            )
        }
    )
    started(tick)  # two failed attempts behind it, one left: jobs-manager starts
    tick.spec = tick.spec.model_copy(update={"max_refresh_attempts": 2})  # lowered meanwhile
    failed = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    plan = tick.run(
        seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0, conditions=failed))
    )
    assert patched(plan) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D1}"},
        "requests-proxy": {"proxy": f"{JM_REPO}@{D1}"},
    }
    locked_ = tick.target("jobs-manager")
    assert (locked_.phase, locked_.refresh_attempts) == (Phase.LOCKED, 2)
    assert locked_.message == (
        f"locked after 2 failed or contested refreshes (its lockstep peers on {GROUP} did not "
        f"all move to {short(D2)}: Deployment tracebloc/requests-proxy (RollingBack); rolling "
        f"back to api={JM_REPO}@{D1} with them (no attempt counted against this target)); no "
        "re-imaging until a reset: imagerefresh reset tracebloc/control-plane"
    )
    assert reasons(plan, JOBS) == ["RollingBack", "Locked"]


def test_another_writer_moving_a_member_mid_rollout_rolls_the_others_back() -> None:
    tick = edge()
    started(tick)
    # Someone pins the proxy to another build by hand while our refresh rolls out.
    plan = tick.run(seen(jobs(D2, generation=2), proxy(D3, generation=3)))
    # The proxy's refresh was superseded: a contested attempt, and jobs-manager, which moved
    # with it, rolls back; the proxy re-pins D2 only once jobs-manager can move with it.
    assert patched(plan) == {"jobs-manager": {"api": f"{JM_REPO}@{D1}"}}
    assert reasons(plan, PROXY) == ["Contested", "LockstepWaiting"]
    contested = tick.target("requests-proxy")
    assert (contested.phase, contested.refresh_attempts, contested.contested) == (
        Phase.WAITING,
        1,
        1,
    )
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK


def test_a_settled_time_ahead_by_no_more_than_the_clock_skew_bound_is_accepted() -> None:
    tick = edge()
    started(tick)
    rolling = seen(jobs(D2, generation=2), proxy(D2, generation=2, available=0))
    tick.run(rolling, advance=timedelta(seconds=10))
    # Written by another replica whose clock is ahead by the whole tolerated skew.
    ahead = tuple(
        t.model_copy(
            update={
                "pending": t.pending.model_copy(
                    update={"settled_at": tick.now + timedelta(minutes=5)}
                )
            }
        )
        if t.name == "jobs-manager"
        else t
        for t in tick.status.targets
    )
    tick.status = tick.status.model_copy(update={"targets": ahead})
    plan = tick.run(rolling, follow_up=True)
    assert plan.patches == ()
    holding = tick.target("jobs-manager")
    assert holding.phase is Phase.REFRESHING
    assert holding.message.startswith("our refresh rolled out; its lockstep peers")


# --- adoption is no move -------------------------------------------------------------------


def test_pinning_an_adopted_member_with_a_refresh_outside_the_group_is_no_move_of_the_group() -> (
    None
):
    """The edge's policy with lockstep: jobs-manager's ``api`` is on the tag and its pods
    already run the tag's digest; ``pods-monitor-container`` drifts. Its refresh pins ``api``
    too (free: no rollout of its own), but that moves nothing of the group — so the proxy
    that cannot move (Frozen) is never a reason to roll jobs-manager back."""
    tick = edge(maxSkipTicks=1)
    on_tag = deployment("jobs-manager", {"api": JM, "pods-monitor-container": f"{PM_REPO}@{P1}"})
    runs_d2 = [pod("p", {"api": ran(D2), "pods-monitor-container": f"docker.io/{PM_REPO}@{P1}"})]
    frozen = proxy(D1, generation=2, observed=1)
    first = tick.run(
        {
            JOBS: evidence(on_tag, runs_d2, digests={"api": D2, "pods-monitor-container": P2}),
            PROXY: evidence(frozen, digests={"proxy": D2}),
        },
        advance=timedelta(seconds=10),
    )
    assert patched(first) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D2}", "pods-monitor-container": f"{PM_REPO}@{P2}"}
    }
    assert tick.target("jobs-manager").pending.adopted == ("api",)
    assert tick.target("requests-proxy").phase is Phase.FROZEN
    done = tick.run(
        {
            JOBS: evidence(
                jobs(D2, P2, generation=2), digests={"api": D2, "pods-monitor-container": P2}
            ),
            PROXY: evidence(frozen, digests={"proxy": D2}),
        }
    )
    assert done.patches == ()
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    assert "Refreshed" in reasons(done, JOBS)
    assert "RollingBack" not in reasons(done)


def test_a_container_already_running_the_digest_is_pinned_in_place_while_its_group_is_held() -> (
    None
):
    tick = edge()
    workload = deployment(
        "jobs-manager", {"api": f"{JM_REPO}:prod", "pods-monitor-container": f"{PM_REPO}:prod"}
    )
    pods = [pod("jm-1", {"api": ran(D2)})]
    plan = tick.run(
        {
            JOBS: evidence(workload, pods, digests={"api": D2, "pods-monitor-container": P2}),
            PROXY: evidence(None, digests={"proxy": D2}),
        }
    )
    # api's pods run D2 already: pinning it moves nothing, so the Missing peer holds nothing;
    # the monitor's refresh restarts the pod anyway and the pin makes api's build explicit.
    assert patched(plan) == {
        "jobs-manager": {"api": f"{JM_REPO}@{D2}", "pods-monitor-container": f"{PM_REPO}@{P2}"}
    }
    assert tick.target("requests-proxy").phase is Phase.MISSING


def test_a_peer_in_conflict_mid_rollout_holds_a_settled_success_as_a_refresh_still_in_flight() -> (
    None
):
    """Its pending refresh is not judged this tick (the conflict ends its decision first), yet
    it is still ours in flight: its template already names the digest, and that is no proof
    its rollout settled."""
    tick = edge()
    started(tick)
    conflicting = deployment(
        "requests-proxy", {"proxy": f"mirror.local/{JM_REPO}@{D2}"}, generation=2
    )
    plan = tick.run(seen(jobs(D2, generation=2), conflicting))
    assert plan.patches == ()
    assert "Refreshed" not in reasons(plan)
    assert tick.target("requests-proxy").phase is Phase.CONFLICT
    assert tick.target("requests-proxy").pending is not None
    held = tick.target("jobs-manager")
    assert held.phase is Phase.REFRESHING
    assert held.pending is not None
    assert held.pending.settled_at is not None
    assert held.message == (
        f"our refresh rolled out; its lockstep peers on {GROUP} have not all settled on "
        f"{short(D2)}: Deployment tracebloc/requests-proxy (Conflict): it counts as "
        "refreshed once they have"
    )
