"""Refresh windows in the planner: a refresh STARTS only inside one; nothing else waits.

Outside every window a drifted target is Waiting, and its message names the next start as an
absolute UTC instant — so the status changes only when that instant does, and idle ticks write
nothing. Verdicts, rollbacks (owed or on failure) and adoption never wait. The override
annotation lets one tick refresh outside the windows, once per value, remembered in
``status.lastWindowOverride`` — which, being status, anyone may forge: a forged value can at
most cause what a new annotation value would, once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from imagerefresh.models import PendingPurpose, PendingRefresh, Phase
from imagerefresh.planner import Event, PatchPurpose, Plan, revise_target

from support.ticks import JM, T0, Tick, budget, digest, evidence, key, spec, target
from support.workloads import deployment, pod

D1, D2, D3 = digest(1), digest(2), digest(3)
JM_REPO = "tracebloc/jobs-manager"
JOBS = key("jobs-manager")
# T0 is Sunday 2026-11-29 12:00Z (13:00 in Berlin): the Saturday window is closed until
# Saturday 2026-12-05 02:00 CET, which is 01:00Z.
SATURDAY_NIGHT = {"days": ["Sat"], "start": "02:00", "end": "05:00", "timeZone": "Europe/Berlin"}
OPENS = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)
ANNOTATION = "images.tracebloc.io/refresh-outside-window"


def short(value: str) -> str:
    return value[:19] + "…"


def waiting_message(opens: str = "2026-12-05T01:00:00Z", old: str = D1, new: str = D2) -> str:
    return (
        f"drift: api {short(old)} → {short(new)}; outside the refresh windows (spec.windows): "
        f"the refresh starts when the next window opens, at {opens}; to refresh once now: "
        "imagerefresh refresh-now tracebloc/control-plane --outside-window (a new value of the "
        f"annotation {ANNOTATION})"
    )


def windowed(*windows: dict[str, Any], **fields: Any) -> Tick:
    """A policy refreshing only inside ``windows``; a settled refresh is a success at once
    (``healthyFor: 0s``): these tables are about when refreshes start, not how they end."""
    fields.setdefault("healthyFor", "0s")
    return Tick(spec(target("jobs-manager", api=JM), windows=list(windows), **fields))


def settled(image: str, generation: int = 1, **fields: Any) -> dict[str, Any]:
    return deployment("jobs-manager", {"api": image}, generation=generation, **fields)


def drifted(tick: Tick, new: str = D2, **kwargs: Any) -> Plan:
    """A tick on which the workload runs D1 and the tag now resolves to ``new``."""
    return tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": new})}, **kwargs)


def reasons(plan: Plan) -> list[str]:
    return [e.reason for e in plan.events]


# --- the gate --------------------------------------------------------------------------------


def test_outside_every_window_a_drifted_target_waits_and_names_the_next_start_in_utc() -> None:
    tick = windowed(SATURDAY_NIGHT)
    plan = drifted(tick)
    status = tick.target("jobs-manager")
    assert plan.patches == ()
    assert (status.phase, status.message, status.pending) == (
        Phase.WAITING,
        waiting_message(),
        None,
    )
    assert plan.status.phase is Phase.WAITING
    assert plan.wake_at == OPENS
    assert [e for e in plan.events if e.reason == "WaitingForWindow"] == [
        Event("Normal", "WaitingForWindow", waiting_message(), JOBS)
    ]


def test_inside_a_window_the_refresh_starts() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.now = OPENS + timedelta(hours=1)
    plan = drifted(tick)
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    assert plan.wake_at is None
    assert "WaitingForWindow" not in reasons(plan)


def test_the_refresh_starts_at_the_windows_first_second_and_not_one_before() -> None:
    before = windowed(SATURDAY_NIGHT)
    before.now = OPENS - timedelta(seconds=1)
    assert drifted(before).patches == ()
    assert before.target("jobs-manager").message == waiting_message()
    at = windowed(SATURDAY_NIGHT)
    at.now = OPENS
    assert [p.purpose for p in drifted(at).patches] == [PatchPurpose.REFRESH]


def test_at_the_windows_end_the_refresh_waits_for_the_next_week() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.now = OPENS + timedelta(hours=3)
    plan = drifted(tick)
    assert plan.patches == ()
    assert tick.target("jobs-manager").message == waiting_message("2026-12-12T01:00:00Z")


def test_without_windows_a_refresh_starts_at_any_tick() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    plan = drifted(tick)
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert plan.wake_at is None


def test_idle_ticks_outside_a_window_write_nothing_and_post_nothing() -> None:
    tick = windowed(SATURDAY_NIGHT)
    drifted(tick)
    first = tick.status
    for _ in range(4):
        plan = drifted(tick)
        assert plan.status == first
        assert plan.events == ()
        assert plan.wake_at == OPENS


def test_the_status_changes_when_the_next_start_does_and_says_so_once() -> None:
    tick = windowed(SATURDAY_NIGHT)
    drifted(tick)
    tick.now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)  # the operator slept through the window
    plan = drifted(tick)
    message = waiting_message("2026-12-12T01:00:00Z")
    assert tick.target("jobs-manager").message == message
    assert plan.events == (Event("Normal", "WaitingForWindow", message, JOBS),)


def test_a_new_digest_while_waiting_is_named_and_announced() -> None:
    tick = windowed(SATURDAY_NIGHT)
    drifted(tick)
    plan = drifted(tick, new=D3)
    assert tick.target("jobs-manager").message == waiting_message(new=D3)
    assert reasons(plan) == ["WaitingForWindow"]


def test_several_windows_wait_for_the_earliest_and_in_its_own_zone() -> None:
    new_york = {"days": ["Sun"], "start": "20:00", "end": "21:00", "timeZone": "America/New_York"}
    tick = windowed(SATURDAY_NIGHT, new_york)
    plan = drifted(tick)
    assert plan.wake_at == datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
    assert tick.target("jobs-manager").message == waiting_message("2026-11-30T01:00:00Z")


def test_a_follow_up_tick_outside_the_window_waits_for_the_window_too() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.window_override = "once"  # a refresh to D2 starts outside the window, once
    started = tick.run(
        {JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D2})},
        advance=timedelta(seconds=30),
    )
    assert [p.purpose for p in started.patches] == [PatchPurpose.REFRESH]
    # The follow-up records the success, and the tag has moved on meanwhile: that refresh
    # waits for the window like any other.
    plan = tick.run(
        {JOBS: evidence(settled(f"{JM_REPO}@{D2}", generation=2), digests={"api": D3})},
        follow_up=True,
    )
    assert plan.patches == ()
    assert tick.target("jobs-manager").message == waiting_message(old=D2, new=D3)
    assert plan.wake_at == OPENS


def test_a_current_target_outside_the_window_stays_current_and_nothing_waits() -> None:
    tick = windowed(SATURDAY_NIGHT)
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D1})})
    assert tick.target("jobs-manager").phase is Phase.CURRENT
    assert plan.wake_at is None


def test_a_locked_target_outside_the_window_says_locked() -> None:
    tick = windowed(SATURDAY_NIGHT, maxRefreshAttempts=1)
    drifted(tick)
    (status,) = tick.status.targets
    locked = status.model_copy(update={"refresh_attempts": 1, "locked_at": T0})
    tick.status = tick.status.model_copy(update={"targets": (locked,)})
    plan = drifted(tick)
    assert tick.target("jobs-manager").phase is Phase.LOCKED
    assert plan.wake_at is None


def test_waiting_for_a_window_spends_no_pull_budget_and_is_not_rate_limited() -> None:
    tick = windowed(SATURDAY_NIGHT)
    hub = "registry-1.docker.io"
    plan = drifted(tick, budgets={(hub, "anonymous"): budget(hub, 0)})
    assert tick.target("jobs-manager").phase is Phase.WAITING
    assert plan.rate_limited is False
    assert tick.condition("RateLimited").status == "False"


def test_a_dry_run_outside_the_window_reports_the_wait() -> None:
    tick = windowed(SATURDAY_NIGHT, dryRun=True)
    plan = drifted(tick)
    assert (tick.target("jobs-manager").phase, plan.patches) == (Phase.WAITING, ())


def test_another_writer_is_not_counted_as_contested_while_the_refresh_waits() -> None:
    tick = windowed(SATURDAY_NIGHT)
    drifted(tick)
    (status,) = tick.status.targets
    ours = status.model_copy(update={"last_good": {"api": f"docker.io/{JM_REPO}@{D3}"}})
    tick.status = tick.status.model_copy(update={"targets": (ours,)})
    plan = drifted(tick)
    assert (tick.target("jobs-manager").refresh_attempts, reasons(plan)) == (0, [])


# --- what never waits ----------------------------------------------------------------------


def in_flight(tick: Tick, purpose: PendingPurpose = PendingPurpose.REFRESH) -> None:
    """A patch of ours to D2 (or back to D1) that landed before the window closed."""
    images, previous = f"{JM_REPO}@{D2}", f"{JM_REPO}@{D1}"
    if purpose is PendingPurpose.ROLLBACK:
        images, previous = previous, images
    pending = PendingRefresh(
        purpose=purpose, images={"api": images}, previous={"api": previous}, started_at=tick.now
    )
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D1}"), digests={"api": D1})})
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": pending}),)}
    )


def test_a_verdict_on_a_refresh_never_waits_for_a_window() -> None:
    tick = windowed(SATURDAY_NIGHT)
    in_flight(tick)
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    assert "Refreshed" in reasons(plan)
    assert tick.target("jobs-manager").phase is Phase.CURRENT


def test_a_rollback_on_failure_never_waits_for_a_window() -> None:
    tick = windowed(SATURDAY_NIGHT, rolloutTimeout="1m")
    in_flight(tick)
    tick.now += timedelta(minutes=5)
    failing = settled(f"{JM_REPO}@{D2}", 2, available=0)
    plan = tick.run({JOBS: evidence(failing, digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK


def test_an_owed_rollback_never_waits_for_a_window() -> None:
    tick = windowed(SATURDAY_NIGHT)
    in_flight(tick, PendingPurpose.ROLLBACK)
    plan = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}"), digests={"api": D2})})
    assert [p.purpose for p in plan.patches] == [PatchPurpose.ROLLBACK]
    assert tick.target("jobs-manager").phase is Phase.ROLLING_BACK


def test_an_adoption_never_waits_for_a_window() -> None:
    tick = windowed(SATURDAY_NIGHT)
    pods = [pod("p", {"api": f"docker.io/{JM_REPO}@{D2}"})]
    plan = tick.run({JOBS: evidence(settled(JM), pods, digests={"api": D2})})
    assert (tick.target("jobs-manager").phase, plan.patches) == (Phase.CURRENT, ())


# --- the override, once per value ------------------------------------------------------------

HONOURED = (
    "refresh-outside-window 'now-please' honoured: drifted targets refresh in this tick "
    "whatever spec.windows says; later refreshes wait for a window again"
)


def test_the_override_refreshes_outside_the_window_and_is_remembered() -> None:
    tick = windowed(SATURDAY_NIGHT)
    drifted(tick)
    tick.window_override = "now-please"
    plan = drifted(tick)
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert tick.target("jobs-manager").phase is Phase.REFRESHING
    assert tick.status.last_window_override == "now-please"
    assert plan.events[0] == Event("Normal", "RefreshOutsideWindow", HONOURED)
    assert plan.wake_at is None


def test_the_same_value_is_honoured_once() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.window_override = "now-please"
    drifted(tick)
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})  # settles
    plan = drifted(tick, new=D3)  # a newer digest: it waits for the window again
    assert plan.patches == ()
    assert tick.target("jobs-manager").message == waiting_message(new=D3)
    assert "RefreshOutsideWindow" not in reasons(plan)
    assert tick.status.last_window_override == "now-please"


def test_a_new_value_is_honoured_again() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.window_override = "first"
    drifted(tick)
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    tick.window_override = "second"
    plan = drifted(tick, new=D3)
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert tick.status.last_window_override == "second"


def test_a_follow_up_tick_leaves_a_new_override_for_the_next_tick() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.window_override = "now-please"
    plan = drifted(tick, follow_up=True)
    assert (plan.patches, tick.status.last_window_override) == ((), None)
    assert "RefreshOutsideWindow" not in reasons(plan)
    assert [p.purpose for p in drifted(tick).patches] == [PatchPurpose.REFRESH]


def test_a_forged_last_override_buys_at_most_one_more_tick() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.window_override = "now-please"
    drifted(tick)
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D2}", 2), digests={"api": D2})})
    tick.status = tick.status.model_copy(update={"last_window_override": "forged"})
    refreshed = drifted(tick, new=D3)
    assert [p.purpose for p in refreshed.patches] == [PatchPurpose.REFRESH]
    assert tick.status.last_window_override == "now-please"
    tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D3}", 3), digests={"api": D3})})
    later = tick.run({JOBS: evidence(settled(f"{JM_REPO}@{D3}", 3), digests={"api": D1})})
    assert later.patches == ()
    assert tick.target("jobs-manager").phase is Phase.WAITING


def test_an_override_without_windows_is_remembered_and_changes_nothing_else() -> None:
    tick = Tick(spec(target("jobs-manager", api=JM)))
    tick.window_override = "now-please"
    plan = drifted(tick)
    assert [p.purpose for p in plan.patches] == [PatchPurpose.REFRESH]
    assert tick.status.last_window_override == "now-please"


def test_a_revision_keeps_the_override_it_honoured() -> None:
    tick = windowed(SATURDAY_NIGHT)
    tick.window_override = "now-please"
    view = tick.input({}).policy  # what the tick read: no override honoured yet
    plan = drifted(tick)
    (refused,) = plan.status.targets
    revised = revise_target(view, plan.status, refused.model_copy(update={"pending": None}), T0)
    assert revised.last_window_override == "now-please"
