"""Properties of plan_tick over random evidence: the guarantees no table can enumerate."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagerefresh.models import (
    FailedBuild,
    PendingPurpose,
    PendingRefresh,
    Phase,
    PolicyStatus,
    SeenDigest,
    TargetStatus,
)
from imagerefresh.planner import (
    PatchPurpose,
    Plan,
    PolicyView,
    Resolved,
    TargetEvidence,
    TickInput,
    Unresolved,
    plan_tick,
    unsafe_changes,
)
from imagerefresh.reference import parse
from imagerefresh.signatures import Failure, Untrusted, Verified

from support.guarded import sent_writes
from support.signing import TestKey
from support.ticks import NS, T0, budget, digest, evidence, key, spec
from support.workloads import deployment, pod

REPOS = ["tracebloc/jobs-manager", "tracebloc/pods-monitor", "127.0.0.1:5000/team/app"]
DIGESTS = [digest(n) for n in range(3)]
NAMES = ["api", "sidecar"]
WORKLOADS = ["jobs-manager", "requests-proxy", "resource-monitor"]
DOWN = Unresolved("Unreachable", "registry down")
KEY = TestKey.p256()


def verified(value: str) -> Verified:
    return Verified(digest=value, key=KEY.fingerprint, format="bundle")


def untrusted(value: str) -> Untrusted:
    return Untrusted(digest=value, failure=Failure.NO_SIGNATURE, detail="unsigned")


FOREIGN = [
    "evil.example/miner:1",
    "ghcr.io/tracebloc/jobs-manager:prod",
    "tracebloc/miner@" + digest(9),
]


@st.composite
def scenario(draw: st.DrawFn) -> tuple[TickInput, dict[str, Any]]:
    names = draw(st.lists(st.sampled_from(WORKLOADS), min_size=1, max_size=3, unique=True))
    targets, evidences, statuses = [], {}, []
    facts: dict[str, Any] = {"errors": set(), "unresolved": set(), "tracked": {}}
    max_attempts = draw(st.integers(1, 3))
    for name in names:
        containers = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True))
        tracked = {c: draw(st.sampled_from(REPOS)) for c in containers}
        targets.append(
            {
                "kind": "Deployment",
                "name": name,
                "containers": [{"name": c, "image": f"{tracked[c]}:prod"} for c in containers],
            }
        )
        target_key = key(name)
        shape = draw(st.sampled_from(["present", "present", "present", "missing", "error"]))
        if shape == "error":
            facts["errors"].add(name)
            evidences[target_key] = evidence(None, error="forbidden")
            continue
        if shape == "missing":
            evidences[target_key] = evidence(None)
            continue
        live = {}
        for c in containers:
            repo = draw(st.sampled_from([tracked[c], tracked[c], REPOS[0]]))
            live[c] = draw(
                st.sampled_from([f"{repo}:prod", f"{repo}@{draw(st.sampled_from(DIGESTS))}"])
            )
        replicas = draw(st.integers(0, 3))
        state = draw(st.sampled_from(["settled", "settled", "progressing", "failed"]))
        fields: dict[str, Any] = {"replicas": replicas, "generation": 5}
        if state == "progressing":
            fields["available"] = 0
            fields["updated"] = replicas
        if state == "failed":
            fields["conditions"] = [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]
        work = deployment(name, live, namespace=NS, **fields)
        pods = [
            pod(
                f"{name}-{i}",
                {
                    c: draw(st.sampled_from([None, *(f"{REPOS[0]}@{d}" for d in DIGESTS)]))
                    for c in containers
                },
            )
            for i in range(replicas)
        ]
        digests = {}
        for c in containers:
            outcome = draw(st.sampled_from([*DIGESTS, DOWN]))
            if outcome is DOWN:
                facts["unresolved"].add((name, c))
            digests[c] = outcome
        signatures = {
            c: draw(st.sampled_from([verified(d), untrusted(d), verified(d)]))
            for c, d in digests.items()
            if isinstance(d, str)
        }
        found = evidence(work, pods, digests, signatures=signatures)
        previous = draw(st.sampled_from([None, {c: f"{tracked[c]}:old" for c in containers}]))
        evidences[target_key] = replace(found, previous_template=previous)
        attempts = draw(st.integers(0, 4))
        started = T0 - timedelta(minutes=draw(st.integers(0, 30)))
        pending = None
        shape = draw(st.sampled_from(["none", "none", "reachable", "forged"]))
        # A pending refresh is only ever started below the ceiling (reachable states)...
        if shape == "reachable" and attempts < max_attempts:
            pending = PendingRefresh(
                images={c: live[c] for c in containers},
                previous={c: f"{tracked[c]}:old" for c in containers},
                started_at=started,
                generation=5,
            )
        # ...but anyone with status access can write any well-formed one.
        if shape == "forged":
            pool = [*live.values(), *(f"{r}:old" for r in REPOS), *FOREIGN]
            names = draw(
                st.lists(st.sampled_from([*containers, "intruder"]), min_size=1, unique=True)
            )
            pending = PendingRefresh(
                purpose=draw(st.sampled_from(list(PendingPurpose))),
                images={n: draw(st.sampled_from(pool)) for n in names},
                previous={n: draw(st.sampled_from(pool)) for n in names},
                started_at=started,
            )
        statuses.append(
            TargetStatus(
                kind="Deployment",
                namespace=NS,
                name=name,
                phase=draw(st.sampled_from(list(Phase))),
                refresh_attempts=attempts,
                skip_streak=draw(st.integers(0, 9)),
                pending=pending,
                locked_at=draw(st.sampled_from([None, None, T0 - timedelta(hours=1)])),
                last_good=draw(
                    st.sampled_from([{}, {c: f"docker.io/{REPOS[0]}@{DIGESTS[0]}" for c in live}])
                ),
                failed=tuple(
                    FailedBuild(digest=d, at=T0 - timedelta(hours=1))
                    for d in draw(st.lists(st.sampled_from(DIGESTS), max_size=2, unique=True))
                ),
            )
        )
        facts["tracked"].update({(name, c): parse(f"{tracked[c]}:x").repository for c in live})
    gates: dict[str, Any] = {}
    if draw(st.booleans()):
        gates["verify"] = {"publicKeys": [KEY.pem]}
    if draw(st.booleans()):
        gates["minimumAge"] = "1h"
    policy_spec = spec(
        *targets,
        maxRefreshAttempts=max_attempts,
        dryRun=draw(st.booleans()) and draw(st.booleans()),
        lockstep=draw(st.booleans()),
        healthyFor=draw(st.sampled_from(["0s", "60s"])),
        **gates,
    )
    reset = draw(st.sampled_from([None, None, "r1"]))
    facts["reset"] = reset is not None
    seen = tuple(
        SeenDigest(
            tracked=f"{parse(r + ':prod')}",
            digest=draw(st.sampled_from(DIGESTS)),
            since=T0 - timedelta(minutes=draw(st.sampled_from([5, 90]))),
        )
        for r in sorted(set(REPOS))
        if draw(st.booleans())
    )
    status = PolicyStatus(targets=tuple(statuses), seen=seen)
    view = PolicyView(NS, "p", 1, policy_spec, status, reset)
    hub = ("registry-1.docker.io", "anonymous")
    budgets = {hub: budget("registry-1.docker.io", draw(st.integers(0, 20)))}
    verified_rollbacks = frozenset(
        (parse(f"{r}:x").repository, d) for r in REPOS for d in DIGESTS if draw(st.booleans())
    )
    return TickInput(view, evidences, budgets, T0, verified=verified_rollbacks), facts


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenario())
def test_no_action_ever_changes_a_repository(case: tuple[TickInput, dict[str, Any]]) -> None:
    plan = plan_tick(case[0])
    for patch in plan.patches:
        for change in patch.changes:
            assert parse(change.image).repository == parse(change.expected).repository


@SETTINGS
@given(scenario())
def test_whatever_the_status_says_no_patch_names_another_repository_or_host(
    case: tuple[TickInput, dict[str, Any]],
) -> None:
    tick, facts = case
    for patch in plan_tick(tick).patches:
        for change in patch.changes:
            written = parse(change.image)
            assert written.repository == facts["tracked"][(patch.target.name, change.container)]
            assert written.repository == change.repository
        assert unsafe_changes(patch) == ()


@SETTINGS
@given(scenario())
def test_the_planner_never_plans_a_write_the_guard_refuses(
    case: tuple[TickInput, dict[str, Any]],
) -> None:
    """Every rule of the write guard (signature, failed build, cooldown, what ran, pulls) is
    one the planner already kept: a refusal at the send site is a bug, never a routine."""
    tick = case[0]
    plan = plan_tick(tick)
    _, refused = sent_writes(plan, tick)
    assert refused == []


@SETTINGS
@given(scenario())
def test_no_patch_is_planned_on_unreadable_evidence(case: tuple[TickInput, dict[str, Any]]) -> None:
    tick, facts = case
    plan = plan_tick(tick)
    for patch in plan.patches:
        assert patch.target.name not in facts["errors"]
        if patch.purpose is PatchPurpose.REFRESH:
            for change in patch.changes:
                assert (patch.target.name, change.container) not in facts["unresolved"]


@SETTINGS
@given(scenario())
def test_a_locked_target_gets_no_refresh_until_a_reset(
    case: tuple[TickInput, dict[str, Any]],
) -> None:
    tick, facts = case
    ceiling = tick.policy.spec.max_refresh_attempts
    locked = {
        t.name
        for t in tick.policy.status.targets
        if t.refresh_attempts >= ceiling or t.locked_at is not None
    }
    refreshed = {
        p.target.name for p in plan_tick(tick).patches if p.purpose is PatchPurpose.REFRESH
    }
    if not facts["reset"]:
        assert not locked & refreshed


@SETTINGS
@given(scenario())
def test_planning_is_deterministic(case: tuple[TickInput, dict[str, Any]]) -> None:
    assert plan_tick(case[0]) == plan_tick(case[0])


@SETTINGS
@given(scenario())
def test_ready_is_never_claimed_while_a_target_is_not_current(
    case: tuple[TickInput, dict[str, Any]],
) -> None:
    status = plan_tick(case[0]).status
    ready = next(c for c in status.conditions if c.type == "Ready")
    if ready.status == "True":
        assert all(t.phase is Phase.CURRENT for t in status.targets)


def _resolved(old: TargetEvidence, container: str) -> str | None:
    outcome = old.digests.get(container)
    return f"{REPOS[0]}@{outcome.digest}" if isinstance(outcome, Resolved) else None


def _after_rollout(tick: TickInput, plan: Plan) -> TickInput:
    """The evidence once every refresh patch was applied and its rollout completed."""
    evidences = dict(tick.evidence)
    for patch in plan.patches:
        if patch.purpose is not PatchPurpose.REFRESH:
            continue
        old = evidences[patch.target]
        assert old.workload is not None
        images = {name: c.image for name, c in old.workload.containers.items()}
        images.update({c.container: c.image for c in patch.changes})
        replicas = old.workload.expected_pods
        work = deployment(
            patch.target.name,
            images,
            namespace=NS,
            replicas=replicas,
            generation=old.workload.generation + 1,
        )
        # The kubelet reports what it pulled: the pinned digest, or what the tag resolved to.
        running = {c: image if "@" in image else _resolved(old, c) for c, image in images.items()}
        pods = [pod(f"new-{i}", running) for i in range(replicas)]
        fresh = evidence(work, pods)
        evidences[patch.target] = TargetEvidence(
            fresh.workload, None, fresh.pods, old.digests, old.identities
        )
    view = PolicyView(NS, "p", 1, tick.policy.spec, plan.status, tick.policy.reset_request)
    return TickInput(view, evidences, tick.budgets, tick.now + timedelta(minutes=1))


@SETTINGS
@given(scenario())
def test_after_a_successful_refresh_replanning_plans_nothing_for_that_target(
    case: tuple[TickInput, dict[str, Any]],
) -> None:
    tick = case[0]
    plan = plan_tick(tick)
    refreshed = {p.target for p in plan.patches if p.purpose is PatchPurpose.REFRESH}
    rolled = _after_rollout(tick, plan)
    replan = plan_tick(rolled)
    assert not refreshed & {p.target for p in replan.patches}
    if tick.policy.spec.healthy_for:
        # Settled: its health window started; once over with no crash, it is a success.
        assert all(
            t.pending is not None and t.pending.settled_at == rolled.now
            for t in replan.status.targets
            if (t.kind, t.namespace, t.name) in {(k.kind, k.namespace, k.name) for k in refreshed}
        )
        view = replace(rolled.policy, status=replan.status)
        window = replace(rolled, policy=view, now=rolled.now + tick.policy.spec.healthy_for)
        replan = plan_tick(window)
        assert not refreshed & {p.target for p in replan.patches}
    for target in replan.status.targets:
        if (target.kind, target.namespace, target.name) in {
            (k.kind, k.namespace, k.name) for k in refreshed
        }:
            assert target.refresh_attempts == target.contested  # a success keeps contests
            assert target.pending is None


def _on(status: TargetStatus, container: str, wanted: str) -> bool:
    """Whether ``status`` says the container's template pins ``wanted`` or its pods run it."""
    found = next((c for c in status.containers if c.name == container), None)
    if found is None or found.live is None:
        return False
    live = parse(found.live)
    if live.digest is not None:
        return live.digest == wanted
    return bool(found.running) and set(found.running) == {wanted}


def _runs(status: TargetStatus, container: str, wanted: str) -> bool:
    """Whether every pod of the target reported running ``wanted`` for the container."""
    found = next((c for c in status.containers if c.name == container), None)
    return found is not None and bool(found.running) and set(found.running) == {wanted}


@SETTINGS
@given(scenario())
def test_with_lockstep_a_reference_moves_in_every_target_tracking_it_or_in_none(
    case: tuple[TickInput, dict[str, Any]],
) -> None:
    tick = case[0]
    spec_ = tick.policy.spec
    if not spec_.lockstep:
        return
    plan = plan_tick(tick)
    statuses = {t.name: t for t in plan.status.targets}
    members: dict[str, list[tuple[str, str]]] = {}
    for target in spec_.targets:
        for container in target.containers:
            members.setdefault(str(container.tracked), []).append((target.name, container.name))
    written = {
        (p.target.name, c.container): parse(c.image).digest
        for p in plan.patches
        if p.purpose is PatchPurpose.REFRESH
        for c in p.changes
    }
    for group in members.values():
        if len({name for name, _ in group}) < 2:
            continue
        # A container whose pods already run the digest is pinned in place, not moved: the
        # patch of a neighbour in its pod may pin it while its group is held.
        moved = {
            written[m]
            for m in group
            if written.get(m) is not None and not _runs(statuses[m[0]], m[1], written[m])
        }
        for wanted in moved:
            for name, container in group:
                pending = statuses[name].pending
                flying = (
                    pending is not None
                    and pending.purpose is PendingPurpose.REFRESH
                    and pending.images.get(container, "").endswith(f"@{wanted}")
                )
                assert (
                    written.get((name, container)) == wanted
                    or flying
                    or _on(statuses[name], container, wanted)
                ), (name, container, statuses[name].phase, statuses[name].message)


@SETTINGS
@given(scenario(), st.data())
def test_a_follow_up_never_raises_on_lockstep_targets_added_since_the_last_tick(
    case: tuple[TickInput, dict[str, Any]], data: st.DataObject
) -> None:
    tick = case[0]
    statuses = tick.policy.status.targets
    # The targets whose status is dropped were added to the spec since the last tick.
    kept = tuple(s for s in statuses if data.draw(st.booleans(), label=f"{s.name} seen before"))
    view = replace(
        tick.policy,
        spec=tick.policy.spec.model_copy(update={"lockstep": True}),
        status=tick.policy.status.model_copy(update={"targets": kept}),
    )
    # A follow-up reads only the rollouts in flight.
    flying = {key(s.name) for s in kept if s.pending is not None}
    evidences = {k: found for k, found in tick.evidence.items() if k in flying}
    plan = plan_tick(replace(tick, policy=view, evidence=evidences, follow_up=True))
    # It decides no target it never saw: each waits, without a status, for a full tick.
    assert [t.name for t in plan.status.targets] == [t.name for t in kept]
