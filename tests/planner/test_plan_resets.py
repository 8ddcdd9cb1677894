"""The reset (SPEC §4.3b, i): what `imagerefresh reset` clears, and what an SRE reads after it.

A reset is the only way out of Locked, so what it leaves behind decides how many failures the
target gets next: every counter must start from zero again, on every target of the policy, and
a pending record the operator cannot trust is dropped instead of keeping the target in Error.
"""

from __future__ import annotations

from datetime import timedelta

from imagerefresh.models import PendingRefresh, Phase
from imagerefresh.planner import Event, PatchPurpose

from support.ticks import JM, T0, Tick, digest, evidence, key, spec, target
from support.workloads import deployment

D1, D2 = digest(1), digest(2)
JM_REPO = "tracebloc/jobs-manager"
NAMES = ("jobs-manager", "requests-proxy")


def good(name: str, generation: int = 1) -> dict[str, object]:
    return deployment(name, {"api": f"{JM_REPO}@{D1}"}, generation=generation)


def bad(name: str, generation: int = 2) -> dict[str, object]:
    return deployment(name, {"api": f"{JM_REPO}@{D2}"}, generation=generation, available=0)


def locked_tick() -> Tick:
    """Two targets that reached the ceiling of 3, one failed attempt and two contests each."""
    tick = Tick(
        spec(*(target(n, api=JM) for n in NAMES), maxRefreshAttempts=3, rolloutTimeout="1m")
    )
    tick.run({key(n): evidence(good(n), digests={"api": D1}) for n in NAMES})
    counters = {"refresh_attempts": 3, "contested": 2, "locked_at": T0, "phase": Phase.LOCKED}
    tick.status = tick.status.model_copy(
        update={"targets": tuple(t.model_copy(update=counters) for t in tick.status.targets)}
    )
    return tick


def test_a_reset_clears_attempts_contests_and_the_lock_on_every_target() -> None:
    tick = locked_tick()
    tick.reset = "2026-11-29T13:00"
    plan = tick.run({key(n): evidence(good(n), digests={"api": D2}) for n in NAMES})
    assert [(p.target.name, p.purpose) for p in plan.patches] == [
        (n, PatchPurpose.REFRESH) for n in NAMES
    ]
    for name in NAMES:
        status = tick.target(name)
        assert (status.refresh_attempts, status.contested, status.locked_at) == (0, 0, None)
        assert status.phase is Phase.REFRESHING
    assert tick.condition("Locked").status == "False"


def test_after_a_reset_the_target_gets_the_full_number_of_attempts_again() -> None:
    tick = locked_tick()
    tick.reset = "2026-11-29T13:00"
    name = NAMES[0]
    phases, messages = [], []
    for round_ in range(3):
        patches = tick.run({key(name): evidence(good(name, 1 + 2 * round_), digests={"api": D2})})
        assert [p.purpose for p in patches.patches] == [PatchPurpose.REFRESH]
        plan = tick.run({key(name): evidence(bad(name, 2 + 2 * round_), digests={"api": D2})})
        phases.append(tick.target(name).phase)
        messages += [e.message for e in plan.events if e.reason == "RefreshFailed"]
    assert phases == [Phase.ROLLING_BACK, Phase.ROLLING_BACK, Phase.LOCKED]
    assert [m.split(": ")[0] for m in messages] == [
        f"refresh of Deployment tracebloc/{name} failed (attempt {n} of 3)" for n in (1, 2, 3)
    ]


def test_a_reset_is_announced_once_on_the_policy_and_remembered() -> None:
    tick = locked_tick()
    tick.reset = "2026-11-29T13:00"
    plan = tick.run({key(n): evidence(good(n), digests={"api": D2}) for n in NAMES})
    assert [e for e in plan.events if e.reason == "Reset"] == [
        Event(
            "Normal",
            "Reset",
            "reset '2026-11-29T13:00' honoured: refresh attempts cleared on every target",
        )
    ]
    assert tick.status.last_reset == "2026-11-29T13:00"


def test_a_reset_drops_a_pending_record_it_cannot_trust_and_judges_the_workload_afresh() -> None:
    name = NAMES[0]
    tick = Tick(spec(target(name, api=JM)))
    current = deployment(name, {"api": f"{JM_REPO}@{D2}"})
    tick.run({key(name): evidence(current, digests={"api": D2})})
    forged = PendingRefresh(
        images={"sidecar": f"{JM_REPO}@{D1}"}, previous={"sidecar": JM}, started_at=T0
    )
    (status,) = tick.status.targets
    tick.status = tick.status.model_copy(
        update={"targets": (status.model_copy(update={"pending": forged}),)}
    )
    tick.run({key(name): evidence(current, digests={"api": D2})})
    assert tick.target(name).phase is Phase.ERROR
    tick.reset = "rebuild"
    for _ in range(2):  # the tick of the reset, and the one after it
        plan = tick.run({key(name): evidence(current, digests={"api": D2})})
        assert plan.patches == ()
        status = tick.target(name)
        assert (status.phase, status.pending) == (Phase.CURRENT, None)
        assert tick.condition("Degraded").status == "False"


def test_a_follow_up_leaves_a_new_reset_for_the_tick_that_reads_every_target() -> None:
    """A follow-up reads only the rollouts in flight: honouring a reset there would clear
    counters of targets it never read and use the value up (lastReset) before a full tick."""
    flying, idle = NAMES
    tick = Tick(spec(*(target(n, api=JM) for n in NAMES)))
    # One target has a rollout of ours in flight; only its workload is read by a follow-up.
    tick.run(
        {
            key(flying): evidence(good(flying), digests={"api": D2}),
            key(idle): evidence(good(idle), digests={"api": D1}),
        },
        advance=timedelta(seconds=30),
    )
    assert tick.target(flying).pending is not None
    tick.status = tick.status.model_copy(
        update={
            "targets": tuple(
                t.model_copy(update={"refresh_attempts": 2, "contested": 1})
                for t in tick.status.targets
            ),
        }
    )
    tick.reset = "2026-11-29T13:00"
    tick.run(
        {key(flying): evidence(bad(flying, generation=2), digests={"api": D2})},
        follow_up=True,
    )
    assert tick.status.last_reset is None  # left for the tick that reads every target
    other = tick.target(idle)
    assert (other.phase, other.refresh_attempts, other.contested) == (Phase.CURRENT, 2, 1)
    assert tick.target(flying).refresh_attempts == 2
    assert tick.condition("Degraded").status == "False"
    tick.run(
        {
            key(flying): evidence(bad(flying, generation=2), digests={"api": D2}),
            key(idle): evidence(good(idle), digests={"api": D1}),
        }
    )
    assert tick.status.last_reset == "2026-11-29T13:00"
    assert [tick.target(n).contested for n in NAMES] == [0, 0]
    assert tick.target(idle).refresh_attempts == 0
