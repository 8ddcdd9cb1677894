"""What may be pinned: the stage between the comparison and the refresh where gates stand.

The spec's step j. A container is refreshed to digest D only when every gate lets D through:

1. **signature** (with ``spec.verify``): D carries a valid signature by a listed key. Unsigned,
   signed by another key, for another digest or repository, or tampered: the target is
   Untrusted (a Warning naming D and the check that failed). Signatures that could not be read
   (anything but a 404 everywhere) hold D too, as unreadable evidence: Error, Degraded.
   Signatures not looked up yet hold D without blame: the policy's verifications for the tick
   were used up (Waiting, VerificationQueued; the next tick looks them up), or the lookup would
   take the pull budget below its reserve (Deferred, VerificationDeferred, RateLimited). Digest
   pins are verified too, and so are digests the pods already run: a container running an
   unverified D is held, never Current (nothing is patched either way).
2. **failed build**: D is not on the target's ``failed`` list — a build whose rollout failed here
   is not tried again until a reset (Waiting, BuildFailed), even when the tag moves away and
   back.
3. **cooldown** (with ``spec.minimumAge``): the tag has answered D for that long
   (:mod:`~imagerefresh.planner.cooldown`); until then Waiting, CoolingDown, and the policy is
   ticked when it ends. Digest pins and adoptions do not wait.

A held container is left as it is, as one whose digest could not be resolved is, while the
target's other containers still refresh; the target takes the worst phase of its holds and of
what the rest came to (see :meth:`~.decision.Decision.finish`). A held container is neither
starting nor current, so a lockstep group with such a member holds, as it does for a Frozen one.

The stage runs after the pending patch was judged and after the skip step: verdicts and
rollbacks never pass through it, since a rollback restores what ran, whatever a gate says. While
a refresh of ours rolls out, the containers it does not pin face the gates all the same
(:func:`screen_bystanders`): a target with an unsigned sidecar stays Untrusted through its
api's rollout instead of reading Refreshing in between, and the hold's Warning is posted once.
"""

from __future__ import annotations

from dataclasses import replace

from imagerefresh.models import (
    ContainerSpec,
    ContainerStatus,
    PendingRefresh,
    Phase,
    format_duration,
)
from imagerefresh.models.base import format_timestamp
from imagerefresh.planner import reasons
from imagerefresh.planner.cooldown import cooled_at
from imagerefresh.planner.evidence import SignaturesUnreadable, SignaturesWaiting, Workload
from imagerefresh.planner.target.compare import Comparison, compare
from imagerefresh.planner.target.decision import Decision, Hold, short
from imagerefresh.reference import parse
from imagerefresh.signatures import Untrusted, Verified

__all__ = ["report_verified", "screen", "screen_bystanders"]


def screen(decision: Decision, comparison: Comparison) -> Comparison:
    """The comparison as the gates let it through to the refresh; each hold is recorded on
    ``decision`` (its event, its wake-up, whether it degrades the tick)."""
    specs = {c.name: c for c in decision.target.containers}
    holds: dict[str, Hold] = {}
    for name, digest in comparison.drifted.items():
        hold = (
            _signature(decision, name, digest)
            or _failed_build(decision, name, digest)
            or _cooling_down(decision, specs[name], digest)
        )
        if hold is not None:
            holds[name] = hold
    for name, digest in comparison.current.items():
        hold = _signature(decision, name, digest)
        if hold is not None:
            holds[name] = hold
    report_verified(decision)
    for name in sorted(holds):
        decision.hold(holds[name])
    return replace(
        comparison,
        drifted={n: d for n, d in comparison.drifted.items() if n not in holds},
        current={n: d for n, d in comparison.current.items() if n not in holds},
    )


def screen_bystanders(decision: Decision, workload: Workload, pending: PendingRefresh) -> str:
    """While ``pending`` rolls out, hold the containers it does not pin to their desired digest,
    as a settled target would; the holds' note for the target's message ("" when none)."""
    comparison = compare(decision, workload)
    # The workload carries the pending images (the patch landed), so a container the patch pins
    # to what it should run now is current; one whose tag has moved on since is drifted, and
    # faces the gates with the others.
    pinned = {
        name
        for name, image in pending.images.items()
        if parse(image).digest == comparison.current.get(name)
    }
    current = {n: d for n, d in comparison.current.items() if n not in pinned}
    screen(decision, replace(comparison, current=current))
    held = decision.held()
    return f"; held: {held}" if held else ""


def _signature(decision: Decision, name: str, digest: str) -> Hold | None:
    """Hold ``digest`` unless it carries a valid signature by a listed key (with verify)."""
    if decision.ctx.spec.verify is None:
        return None
    found = decision.evidence.signatures.get(name)
    if isinstance(found, Verified) and found.digest == digest:
        return None
    if isinstance(found, Untrusted) and found.digest == digest:
        return Hold(
            Phase.UNTRUSTED,
            reasons.UNTRUSTED,
            f"{name}: {digest} carries no valid signature by a key of spec.verify "
            f"({found.failure}: {found.detail}); it is not pinned — sign that digest with one "
            "of the listed keys (cosign sign --key), or push a signed build",
            warning=True,
        )
    if isinstance(found, SignaturesWaiting) and found.digest == digest:
        return _waiting(name, digest, found)
    why = (
        found.message
        if isinstance(found, SignaturesUnreadable) and found.digest == digest
        else "they were not read this tick"
    )
    return Hold(
        Phase.ERROR,
        reasons.SIGNATURES_UNREADABLE,
        f"{name}: the signatures of {short(digest)} could not be read ({why}); nothing is "
        "pinned on them",
        warning=True,
        degraded=True,
    )


def _waiting(name: str, digest: str, found: SignaturesWaiting) -> Hold:
    """Hold ``digest`` whose signatures wait for a later tick: not evidence of anything."""
    if found.budget:
        return Hold(
            Phase.DEFERRED,
            reasons.VERIFICATION_DEFERRED,
            f"{name}: the signatures of {short(digest)} are not looked up: {found.message}",
            rate_limited=True,
        )
    return Hold(
        Phase.WAITING,
        reasons.VERIFICATION_QUEUED,
        f"{name}: signature verification of {short(digest)} queued: {found.message}",
    )


def _failed_build(decision: Decision, name: str, digest: str) -> Hold | None:
    """Hold ``digest`` if its rollout failed on this target before (until a reset)."""
    build = next((b for b in decision.status.failed if b.digest == digest), None)
    if build is None:
        return None
    return Hold(
        Phase.WAITING,
        reasons.BUILD_FAILED,
        f"{name}: {digest} failed its rollout here at {format_timestamp(build.at)}; it is not "
        f"tried again on this target — push a fixed build, or reset to retry it: imagerefresh "
        f"reset {decision.ctx.policy}",
    )


def _cooling_down(decision: Decision, container: ContainerSpec, digest: str) -> Hold | None:
    """Hold a new digest of a tag until the tag has answered it for ``spec.minimumAge``."""
    age = decision.ctx.spec.minimum_age
    if not age or container.digest is not None:
        return None
    tracked, now = str(container.tracked), decision.ctx.now
    ready = cooled_at(decision.ctx.seen, tracked, digest, age, now)
    if ready <= now:
        return None
    since = ready - age
    return Hold(
        Phase.WAITING,
        reasons.COOLING_DOWN,
        f"{container.name}: {short(digest)} is cooling down — {tracked} has answered it since "
        f"{format_timestamp(since)}; it is pinned from {format_timestamp(ready)} "
        f"(spec.minimumAge {format_duration(age)})",
        until=ready,
    )


def report_verified(decision: Decision) -> None:
    """``verifiedBy`` for each container whose desired digest a listed key verified."""
    if decision.ctx.spec.verify is None:
        return
    decision.update(containers=tuple(_verified(decision, c) for c in decision.status.containers))


def _verified(decision: Decision, container: ContainerStatus) -> ContainerStatus:
    found = decision.evidence.signatures.get(container.name)
    verified = isinstance(found, Verified) and found.digest == container.desired
    key = found.key if verified and isinstance(found, Verified) else None
    return container.model_copy(update={"verified_by": key})
