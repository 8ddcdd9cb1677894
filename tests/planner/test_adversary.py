"""An adversary that plays every move, against the pure planner and the write guard.

A stateful property test (Hypothesis's rule-based state machine). The world is one policy with
one Deployment of two containers, each tracking a tag of its own repository, on two nodes; a
registry whose tags anyone with push rights moves (signed builds, unsigned builds, builds that
crash, a tag moved back); rollouts that settle, crash or stall; another writer reverting the
template; someone with ``update`` on the status subresource forging any field; resets; time
passing; the operator restarting (its verdicts in memory lost) or stopping between an intent and
its patches; spec writes that move no image (a scale); and its registry going away.

After every tick it checks, on what the guard lets through (what would be sent), the
invariants no sequence of moves may break:

- every image written is the tracked repository;
- under ``verify``, every image written is a digest signed by the listed key (truth: what was
  signed, not what the operator believes);
- no write names a build that failed here before a reset (a forgery that removes a failed
  entry counts as that reset, which it may at most equal);
- no refresh writes a tag's new digest inside its cooldown, counted from the first interval
  tick that saw the tag answer it (a forged ``seen`` is the documented exception);
- a refresh writes only the desired digest (the tag's answer, or the pin); a rollback only
  images the workload ran (its previous template, or what its pods run);
- every write carries the pulls it causes (counted from the nodes' caches, the helpers' pulls
  included), and no write but a rollback takes the budget below the reserve;
- the planner plans nothing the guard refuses.

``MAX_EXAMPLES``/``STEPS`` are its CI budget; a deep run: ``ADVERSARY_EXAMPLES=2000 pytest
tests/planner/test_adversary.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
)

from imagerefresh.models import (
    FailedBuild,
    PendingPurpose,
    PendingRefresh,
    PolicySpec,
    PolicyStatus,
    PrePullIntent,
    SeenDigest,
    TargetStatus,
)
from imagerefresh.planner import (
    ImagePatch,
    ObservedPod,
    PolicyView,
    Resolved,
    TargetEvidence,
    TickInput,
    Unresolved,
    Workload,
    plan_tick,
)
from imagerefresh.planner.actions import HelperPodCreate
from imagerefresh.planner.evidence import SignaturesUnreadable
from imagerefresh.planner.helperpod import HelperPod
from imagerefresh.ratelimit import BudgetSnapshot, RateLimitReport
from imagerefresh.reference import parse
from imagerefresh.signatures import Failure, Untrusted, Verified

from support.guarded import sent_writes
from support.signing import TestKey
from support.ticks import NS, T0, digest, key
from support.workloads import deployment, pod

HOST = "registry.example:5000"
REPOS = {"api": f"{HOST}/team/api", "side": f"{HOST}/team/side"}
ACCOUNT = (HOST, "anonymous")
NODES = ("n1", "n2")
EDGE = key("edge")
UID = "0c0ffee0-0000-4000-8000-00000000e0e0"
KEY = TestKey.p256()
RESERVE = 2
LIMIT = 20
AGE = timedelta(hours=1)
FORGED_SINCE = T0 - timedelta(days=1)  # a clock no tick of the operator's ever set
MAX_EXAMPLES = int(os.environ.get("ADVERSARY_EXAMPLES", "300"))
# Moves left out, comma-separated (to show what finds what): ADVERSARY_WITHOUT=forge_seen,...
WITHOUT = frozenset(os.environ.get("ADVERSARY_WITHOUT", "").split(","))
STEPS = int(os.environ.get("ADVERSARY_STEPS", "50"))


def image(container: str, n: int | None = None, tag: str = "prod") -> str:
    return f"{REPOS[container]}@{digest(n)}" if n is not None else f"{REPOS[container]}:{tag}"


TRACKED = {c: parse(image(c)).repository for c in REPOS}  # container → its repository
CONTAINER = {repository: c for c, repository in TRACKED.items()}


@dataclass
class World:
    """The truth the adversary and the checks share; the operator sees only evidence of it."""

    verify: bool
    cooldown: bool
    pre_pull: bool
    tags: dict[str, int]  # container → the build its tag answers now
    template: dict[str, str]  # container → the image the pod template names
    pods: list[dict[str, int]]  # per node: container → the build its pod runs
    previous: dict[str, str]  # the template of the revision before the current one
    signed: set[int]
    bad: set[int]  # builds that crash whenever they run
    next_build: int = 100
    generation: int = 1
    rollout: str = "settled"  # settled | unobserved | rolling | failed
    failed_at: Any = None
    registry_up: bool = True
    remaining: int = LIMIT
    cached: dict[str, set[int]] = field(default_factory=dict)  # node → builds it holds
    helpers: dict[str, tuple[str, tuple[str, ...], bool]] = field(default_factory=dict)


class Adversary(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.now = T0
        self.status = PolicyStatus()
        self.reset_request: str | None = None
        self.resets = 0
        self.memory: set[int] = set()  # builds the operator's verifier verified (in memory)
        self.tick_since: dict[str, tuple[int, Any]] = {}  # tag → (build, first tick seeing it)
        self.forged_seen: set[str] = set()  # containers whose clock a forgery moved
        self.pin: dict[str, int] = {}

    def _plays(self, move: str) -> bool:
        return self.world is not None and move not in WITHOUT

    # --- the world ---------------------------------------------------------------------

    @initialize(
        verify=st.booleans(),
        cooldown=st.booleans(),
        pre_pull=st.booleans(),
        pinned=st.booleans(),
        signed=st.booleans(),
        newer=st.fixed_dictionaries(
            {c: st.sampled_from(["signed", "unsigned", "none"]) for c in ("api", "side")}
        ),
    )
    def install(
        self,
        verify: bool,
        cooldown: bool,
        pre_pull: bool,
        pinned: bool,
        signed: bool,
        newer: dict[str, str],
    ) -> None:
        """A fresh install: the chart renders tags (or digests); the pods run builds 1 and 2,
        and a tag may answer a newer build already."""
        template = (
            {"api": image("api", 1), "side": image("side", 2)}
            if pinned
            else {"api": image("api"), "side": image("side")}
        )
        self.world = World(
            verify=verify,
            cooldown=cooldown,
            pre_pull=pre_pull,
            tags={"api": 1, "side": 2},
            template=template,
            pods=[{"api": 1, "side": 2} for _ in NODES],
            previous=dict(template),
            signed={1, 2} if signed else set(),
            bad=set(),
            cached={node: {1, 2} for node in NODES},
        )
        for container, build in newer.items():
            if build != "none":
                self.push(container, signed=build == "signed", bad=False)

    def _w(self) -> World:
        assert self.world is not None
        return self.world

    @precondition(lambda self: self._plays("push"))
    @rule(container=st.sampled_from(["api", "side"]), signed=st.booleans(), bad=st.booleans())
    def push(self, container: str, signed: bool, bad: bool) -> None:
        """Someone with push rights moves the tag to a new build."""
        world = self._w()
        world.next_build += 1
        build = world.next_build
        world.tags[container] = build
        if signed:
            world.signed.add(build)
        if bad:
            world.bad.add(build)

    @precondition(lambda self: self._plays("move_back"))
    @rule(container=st.sampled_from(["api", "side"]), data=st.data())
    def move_back(self, container: str, data: st.DataObject) -> None:
        """The tag is moved back to an older build (a revert, or an old build re-pushed)."""
        world = self._w()
        builds = sorted({1, 2, *range(101, world.next_build + 1)})
        world.tags[container] = data.draw(st.sampled_from(builds))

    @precondition(lambda self: self.world is not None and self._w().rollout != "settled")
    @rule()
    def rollout_settles_or_crashes(self) -> None:
        """The rollout of the template ends: settled, unless a build in it crashes."""
        world = self._w()
        builds = {c: self._build_of(world.template[c]) for c in world.template}
        self._pull(builds)
        if any(b in world.bad for b in builds.values()):
            # The first pod of the old revision stays; the new one crash-loops on the build.
            world.pods = [world.pods[0], dict(builds)]
            world.rollout, world.failed_at = "failed", self.now
        else:
            world.pods = [dict(builds) for _ in NODES]
            world.rollout = "settled"

    @precondition(lambda self: self.world is not None and self._w().rollout == "unobserved")
    @rule()
    def rollout_progresses(self) -> None:
        self._w().rollout = "rolling"

    @precondition(lambda self: self._plays("another_writer"))
    @rule(container=st.sampled_from(["api", "side"]), data=st.data())
    def another_writer(self, container: str, data: st.DataObject) -> None:
        """Another writer (kubectl, GitOps, a chart upgrade) sets an image of the repository."""
        world = self._w()
        builds = sorted({1, 2, *range(101, world.next_build + 1)})
        written = data.draw(
            st.sampled_from([image(container), *(image(container, b) for b in builds)])
        )
        if written == world.template[container]:
            return
        self._land({container: written})

    @precondition(lambda self: self._plays("spec_write"))
    @rule()
    def spec_write(self) -> None:
        """Someone changes the spec but no image (a scale, an HPA): one more generation."""
        self._w().generation += 1

    @precondition(lambda self: self._plays("registry"))
    @rule(up=st.booleans())
    def registry(self, up: bool) -> None:
        self._w().registry_up = up

    @precondition(lambda self: self._plays("operator_restarts"))
    @rule()
    def operator_restarts(self) -> None:
        self.memory.clear()

    @precondition(lambda self: self._plays("time_passes"))
    @rule(minutes=st.sampled_from([1, 15, 61, 240]))
    def time_passes(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)

    @precondition(lambda self: self._plays("budget_moves"))
    @rule(pulls=st.integers(0, LIMIT))
    def budget_moves(self, pulls: int) -> None:
        """The kubelets spend pulls (crash restarts), or the registry's window starts anew."""
        world = self._w()
        world.remaining = LIMIT if pulls == 0 else max(0, world.remaining - pulls)

    @precondition(lambda self: self._plays("reset"))
    @rule()
    def reset(self) -> None:
        self.resets += 1
        self.reset_request = f"reset-{self.resets}"

    # --- forgeries through the status subresource ------------------------------------

    def _target(self) -> TargetStatus | None:
        return next(iter(self.status.targets), None)

    def _forge(self, **changes: Any) -> None:
        target = self._target()
        if target is None:
            return
        target = target.model_copy(update=changes)
        self.status = self.status.model_copy(update={"targets": (target,)})

    @precondition(lambda self: self._plays("forge"))
    @rule(
        kind=st.sampled_from(
            [
                "owed_rollback",
                "pre_pull_intent",
                "failed_away",
                "failed_added",
                "seen",
                "good_and_contested",
                "landed_refresh",
                "generation",
            ]
        ),
        data=st.data(),
    )
    def forge(self, kind: str, data: st.DataObject) -> None:
        """Someone with ``update`` on the status subresource writes a well-formed lie."""
        if kind in WITHOUT:
            return
        getattr(self, f"_forge_{kind}")(data)

    def _forge_owed_rollback(self, data: st.DataObject) -> None:
        """A rollback ``owed`` from the live images to anything of the tracked repositories."""
        world = self._w()
        builds = sorted({1, 2, *range(101, world.next_build + 1)})
        images = {
            c: data.draw(
                st.sampled_from([image(c), image(c, tag="old"), *(image(c, b) for b in builds)])
            )
            for c in world.template
        }
        if images == world.template:
            return
        self._forge(
            pending=PendingRefresh(
                purpose=PendingPurpose.ROLLBACK,
                images=images,
                previous=dict(world.template),
                started_at=self.now,
            )
        )

    def _forge_pre_pull_intent(self, data: st.DataObject) -> None:
        """A pre-pull intent naming the builds the tags answer, as if already charged."""
        world = self._w()
        containers = data.draw(
            st.lists(st.sampled_from(["api", "side"]), min_size=1, max_size=2, unique=True)
        )
        self._forge(
            pre_pull=PrePullIntent(
                images={
                    c: parse(world.template[c]).pinned(digest(world.tags[c])).familiar
                    for c in containers
                },
                started_at=self.now,
            )
        )

    def _forge_failed_away(self, data: st.DataObject) -> None:
        """The failed list emptied: at most what a reset does."""
        self._forge(failed=())

    def _forge_failed_added(self, data: st.DataObject) -> None:
        """A build the tag answers entered as failed here: it must then never be written."""
        world = self._w()
        container = data.draw(st.sampled_from(["api", "side"]))
        entry = FailedBuild(digest=digest(world.tags[container]), at=self.now)
        target = self._target()
        if target is not None:
            self._forge(failed=(entry, *target.failed)[:5])

    def _forge_seen(self, data: st.DataObject) -> None:
        """The cooldown's clock set back (the one documented exception)."""
        world = self._w()
        container = data.draw(st.sampled_from(["api", "side"]))
        tracked = str(parse(image(container)))
        clock = SeenDigest(
            tracked=tracked, digest=digest(world.tags[container]), since=FORGED_SINCE
        )
        seen = (*(s for s in self.status.seen if s.tracked != tracked), clock)
        self.status = self.status.model_copy(
            update={"seen": tuple(sorted(seen, key=lambda s: s.tracked))}
        )
        self.forged_seen.add(container)

    def _forge_good_and_contested(self, data: st.DataObject) -> None:
        world = self._w()
        builds = sorted({1, 2, *range(101, world.next_build + 1)})
        chosen = {c: image(c, data.draw(st.sampled_from(builds))) for c in world.template}
        self._forge(last_good=chosen, contested_images={})

    def _forge_generation(self, data: st.DataObject) -> None:
        """The generation a pending patch of ours produces, set to anything (or none)."""
        target = self._target()
        if target is None or target.pending is None:
            return
        claimed = data.draw(st.none() | st.integers(0, self._w().generation + 3))
        self._forge(pending=target.pending.model_copy(update={"generation": claimed}))

    def _forge_landed_refresh(self, data: st.DataObject) -> None:
        """A refresh "of ours" that landed, replacing anything: its failure owes a rollback."""
        world = self._w()
        builds = sorted({1, 2, *range(101, world.next_build + 1)})
        previous = {
            c: data.draw(
                st.sampled_from([image(c), image(c, tag="old"), *(image(c, b) for b in builds)])
            )
            for c in world.template
        }
        self._forge(
            pending=PendingRefresh(
                images=dict(world.template),
                previous=previous,
                started_at=self.now - timedelta(hours=1),
                generation=world.generation,
            )
        )

    # --- the operator ------------------------------------------------------------------

    @precondition(lambda self: self._plays("tick"))
    @rule()
    def interval_tick(self) -> None:
        self.tick(follow_up=False)

    @precondition(lambda self: self._plays("tick"))
    @rule()
    def rollout_ends_then_tick(self) -> None:
        """What a follow-up sees: the rollout ended (if one ran), then a tick judges it."""
        if self._w().rollout != "settled":
            self.rollout_settles_or_crashes()
        self.tick(follow_up=True)

    @precondition(lambda self: self._plays("stop_after_intent"))
    @rule(follow_up=st.booleans())
    def tick_stopped_after_its_intent(self, follow_up: bool) -> None:
        """The operator stops once the intent is written, before any patch is sent."""
        self.tick(follow_up, send=False)

    @precondition(lambda self: self._plays("tick"))
    @rule(follow_up=st.booleans())
    def tick(self, follow_up: bool, send: bool = True) -> None:
        world = self._w()
        tick = self._input(follow_up)
        plan = plan_tick(tick)
        writes, refused = sent_writes(plan, tick)
        assert not refused, f"the planner planned writes the guard refuses: {refused}"
        target = self._target()
        reset = plan.status.last_reset != self.status.last_reset
        barred = (
            set() if reset or target is None else {self._number(b.digest) for b in target.failed}
        )
        if not follow_up and world.registry_up:
            for container, build in world.tags.items():
                before = self.tick_since.get(container)
                if before is None or before[0] != build:
                    self.tick_since[container] = (build, self.now)
        self._check(writes, barred)
        for delete in plan.pod_deletes:
            world.helpers.pop(delete.name, None)
        for container in list(self.forged_seen):
            # The forged clock stands as long as the operator keeps it (the tag unmoved).
            tracked = str(parse(image(container)))
            kept = any(s.tracked == tracked and s.since == FORGED_SINCE for s in plan.status.seen)
            if not kept:
                self.forged_seen.discard(container)
        status = plan.status
        for write in writes if send else ():
            status = self._apply(write, status)
        self.status = status
        self.now += timedelta(seconds=5) if follow_up else timedelta(minutes=15)

    # --- how the world answers -------------------------------------------------------

    def _number(self, value: str) -> int:
        world = self._w()
        for build in {1, 2, *range(101, world.next_build + 1)}:
            if digest(build) == value:
                return build
        return -1

    def _build_of(self, written: str) -> int:
        """The build an image names: its digest's, or what its tag answers now."""
        ref = parse(written)
        if ref.digest is not None:
            return self._number(ref.digest)
        return self._w().tags[CONTAINER[ref.repository]]

    def _pull(self, builds: dict[str, int]) -> int:
        """Each node pulls what it lacks of ``builds``; how many pulls that took."""
        world = self._w()
        pulls = 0
        for node in NODES:
            for build in set(builds.values()):
                if build not in world.cached[node]:
                    world.cached[node].add(build)
                    pulls += 1
        world.remaining = max(0, world.remaining - pulls)
        return pulls

    def _land(self, images: dict[str, str]) -> None:
        world = self._w()
        world.previous = dict(world.template)
        world.template = {**world.template, **images}
        world.generation += 1
        world.rollout = "unobserved"

    def _apply(self, write: ImagePatch | HelperPodCreate, status: PolicyStatus) -> PolicyStatus:
        world = self._w()
        if isinstance(write, HelperPodCreate):
            images = tuple(c["image"] for c in write.manifest["spec"]["containers"])
            world.helpers[write.manifest["metadata"]["name"]] = (write.node, images, True)
            pulled = {self._number(parse(i).digest or "") for i in images}
            pulls = len(pulled - world.cached[write.node])
            world.cached[write.node] |= pulled
            world.remaining = max(0, world.remaining - pulls)
            return status
        for change in write.changes:
            if world.template[change.container] != change.expected:
                return status  # a precondition failed: nothing written
        self._land({c.container: c.image for c in write.changes})
        target = status.targets[0]
        if target.pending is not None:
            landed = target.pending.model_copy(update={"generation": world.generation})
            target = target.model_copy(update={"pending": landed})
            status = status.model_copy(update={"targets": (target,)})
        return status

    def _workload(self) -> dict[str, Any]:
        world = self._w()
        fields: dict[str, Any] = {"replicas": 2, "generation": world.generation}
        if world.rollout == "unobserved":
            fields["observed"] = world.generation - 1
        elif world.rollout == "rolling":
            fields["updated"], fields["available"] = 1, 1
        elif world.rollout == "failed":
            stamp = world.failed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            fields["updated"], fields["available"] = 2, 0
            fields["conditions"] = [
                {
                    "type": "Progressing",
                    "reason": "ProgressDeadlineExceeded",
                    "lastUpdateTime": stamp,
                }
            ]
        obj = deployment("edge", dict(world.template), namespace=NS, **fields)
        obj["apiVersion"] = "apps/v1"
        obj["metadata"]["uid"] = UID
        return obj

    def _helpers(self) -> tuple[HelperPod, ...]:
        world = self._w()
        found = []
        for name, (node, images, _) in sorted(world.helpers.items()):
            statuses = []
            for index, written in enumerate(images):
                statuses.append({"name": f"pull-{index}", "image": written, "imageID": written})
            obj = {
                "metadata": {"name": name, "uid": f"uid-{name}"},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": f"pull-{i}", "image": w} for i, w in enumerate(images)],
                },
                "status": {"phase": "Pending", "containerStatuses": statuses},
            }
            found.append(HelperPod.from_api(obj))
        return tuple(found)

    def _input(self, follow_up: bool) -> TickInput:
        world = self._w()
        spec_fields: dict[str, Any] = {
            "targets": [
                {
                    "kind": "Deployment",
                    "name": "edge",
                    "containers": [{"name": c, "image": image(c)} for c in ("api", "side")],
                }
            ],
            "pullBudget": {"reserve": RESERVE},
            "maxRefreshAttempts": 3,
            "prePull": world.pre_pull,
        }
        if world.verify:
            spec_fields["verify"] = {"publicKeys": [KEY.pem]}
        if world.cooldown:
            spec_fields["minimumAge"] = "1h"
        policy_spec = PolicySpec.model_validate(spec_fields)
        digests: dict[str, Resolved | Unresolved] = {}
        signatures: dict[str, Any] = {}
        for container, build in world.tags.items():
            if world.registry_up:
                digests[container] = Resolved(digest(build))
            else:
                digests[container] = Unresolved("Unreachable", "the registry is down")
                continue
            if world.verify:
                if build in world.signed:
                    self.memory.add(build)
                    signatures[container] = Verified(
                        digest=digest(build), key=KEY.fingerprint, format="bundle"
                    )
                else:
                    signatures[container] = Untrusted(
                        digest=digest(build), failure=Failure.NO_SIGNATURE, detail="unsigned"
                    )
        if world.verify and not world.registry_up:
            for container, build in world.tags.items():
                if build not in self.memory:
                    signatures[container] = SignaturesUnreadable(digest(build), "down")
        pods = tuple(
            ObservedPod.from_api(
                pod(
                    f"edge-{index}",
                    {c: f"{REPOS[c]}@{digest(b)}" for c, b in running.items()},
                    node=node,
                    images=dict(world.template),
                )
            )
            for index, (node, running) in enumerate(zip(NODES, world.pods, strict=True))
        )
        evidence = TargetEvidence(
            workload=Workload.from_api(self._workload()),
            pods=pods,
            digests=digests,
            signatures=signatures,
            helpers=self._helpers() if world.pre_pull else None,
            previous_template=dict(world.previous),
        )
        if world.verify and world.registry_up:
            self.memory |= world.signed  # the verifier looks up whatever a tick asks about
        verified = frozenset((TRACKED[c], digest(b)) for c in REPOS for b in self.memory)
        report = RateLimitReport(limit=LIMIT, remaining=world.remaining, window_seconds=21600)
        view = PolicyView(NS, "control-plane", 1, policy_spec, self.status, self.reset_request)
        return TickInput(
            view,
            {EDGE: evidence},
            {ACCOUNT: BudgetSnapshot(HOST, "anonymous", report, world.remaining)},
            self.now,
            follow_up=follow_up,
            pre_pull_pods=world.pre_pull,
            verified=verified if world.verify else frozenset(),
        )

    # --- the invariants --------------------------------------------------------------

    def _check(self, writes: list[ImagePatch | HelperPodCreate], barred: set[int]) -> None:
        world = self._w()
        for write in writes:
            rollback = _is_rollback(write)
            for container, text in _images(write):
                ref = parse(text)
                assert ref.repository == TRACKED.get(container), f"{text} is not tracked here"
                build = self._number(ref.digest) if ref.digest else None
                if world.verify:
                    assert build is not None, f"under verify a tag was written: {text}"
                    assert build in world.signed, f"an unsigned build was written: {text}"
                assert build not in barred, f"a build that failed here was written: {text}"
                running = {p[container] for p in world.pods}
                if rollback:
                    ran = {world.previous[container], *(image(container, b) for b in running)}
                    assert text in ran, f"a rollback to what the workload never ran: {text}"
                    continue
                desired = world.tags[container]
                assert build == desired, f"a refresh wrote {text}, not the tag's {digest(desired)}"
                new = running != {build}
                if world.cooldown and new and container not in self.forged_seen:
                    since = self.tick_since.get(container)
                    cooled = since is not None and since[0] == build and self.now - since[1] >= AGE
                    assert cooled, f"{text} written inside its cooldown"
        # Pulls: what the writes cause (the nodes' caches counted), against what they carry —
        # helper pods, rollbacks and refreshes apart; rollbacks spend first and may go below
        # the reserve, nothing else may.
        ordered = sorted(writes, key=lambda w: not _is_rollback(w))
        caused = [self._pulls_caused(w) for w in ordered]
        # (One assertion per kind, each on its own line: Hypothesis tells failures apart by
        # where they are raised.)
        pairs = list(zip(ordered, caused, strict=True))
        helpers = _charges(pairs, "helper pods")
        assert helpers[0] >= helpers[1], f"helper pods cause {helpers[1]}, carry {helpers[0]}"
        rollbacks = _charges(pairs, "rollbacks")
        assert rollbacks[0] >= rollbacks[1], f"rollbacks cause {rollbacks[1]}, carry {rollbacks[0]}"
        refreshes = _charges(pairs, "refreshes")
        assert refreshes[0] >= refreshes[1], f"refreshes cause {refreshes[1]}, carry {refreshes[0]}"
        spent = 0
        for write, pulls in zip(ordered, caused, strict=True):
            spent += pulls
            if pulls and not _is_rollback(write):
                assert world.remaining - spent >= RESERVE, "the budget went below the reserve"

    def _pulls_caused(self, write: ImagePatch | HelperPodCreate) -> int:
        world = self._w()
        if isinstance(write, HelperPodCreate):
            held = world.cached[write.node]
            return sum(
                1 for _, t in _images(write) if self._number(parse(t).digest or "") not in held
            )
        builds = {self._build_of(c.image) for c in write.changes if c.image != c.expected}
        return sum(1 for node in NODES for b in builds if b not in world.cached[node])


def _charges(pairs: list[tuple[ImagePatch | HelperPodCreate, int]], kind: str) -> tuple[int, int]:
    """What the writes of ``kind`` carry, and what they cause."""
    mine = [(w, n) for w, n in pairs if _kind(w) == kind]
    carried = sum(n for w, _ in mine for account, n in w.pulls if account == ACCOUNT)
    return carried, sum(n for _, n in mine)


def _kind(write: ImagePatch | HelperPodCreate) -> str:
    if isinstance(write, HelperPodCreate):
        return "helper pods"
    return "rollbacks" if _is_rollback(write) else "refreshes"


def _is_rollback(write: ImagePatch | HelperPodCreate) -> bool:
    return isinstance(write, ImagePatch) and write.purpose is PendingPurpose.ROLLBACK


def _images(write: ImagePatch | HelperPodCreate) -> list[tuple[str, str]]:
    if isinstance(write, ImagePatch):  # a change to what is there already writes nothing
        return [(c.container, c.image) for c in write.changes if c.image != c.expected]
    return [
        (CONTAINER.get(parse(c["image"]).repository, "?"), c["image"])
        for c in write.manifest["spec"]["containers"]
    ]


Adversary.TestCase.settings = settings(
    max_examples=MAX_EXAMPLES,
    # ADVERSARY_SHRINK=0 reports the failing sequences as found (a search for finds).
    phases=[p for p in Phase if os.environ.get("ADVERSARY_SHRINK") != "0" or p is not Phase.shrink],
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_no_write_escapes_the_gates_whatever_the_adversary_plays = Adversary.TestCase
