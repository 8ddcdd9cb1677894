"""The verifier's memory: what it asks the registry again, and when.

The registry client is replaced by a recorder here: these tests pin down the verifier's own
bookkeeping (verdicts remembered per repository, digest and key set; the backoff for unsigned
digests; one lookup for callers asking at once; failures never remembered). What a real
registry answers, and cosign's real signatures, are tests/registry's and tests/signatures'.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from imagerefresh.credentials import Credentials
from imagerefresh.planner.evidence import (
    SignatureOutcome,
    SignaturesUnreadable,
    SignaturesWaiting,
)
from imagerefresh.reference import ImageReference, parse
from imagerefresh.registry import PullBudgetHeld, RegistryUnavailable
from imagerefresh.signatures import (
    BundleEvidence,
    Failure,
    LegacyEvidence,
    Untrusted,
    Verdict,
    Verified,
    parse_public_key,
    verify,
)
from imagerefresh.verifier import (
    MAX_BACKOFF,
    MAX_READS_PER_POLICY,
    SignatureVerifier,
    VerifyRequest,
    lookups,
)

from support.signing import TestKey, bundle, legacy, payload, statement

KEY, OTHER = TestKey.p256(), TestKey.p256()
REPO = parse("registry.test/team/app:prod")
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
INTERVAL = 900.0


@dataclass
class Recorder:
    """Stands in for the registry client: serves a legacy signature per digest, counts asks."""

    signed: dict[str, LegacyEvidence] = field(default_factory=dict)
    referrers: dict[str, tuple[BundleEvidence, ...]] = field(default_factory=dict)
    failing: bool = False
    failing_for: set[str] = field(default_factory=set)  # digests whose lookups fail
    hidden_from: set[str] = field(default_factory=set)  # accounts that read 404 everywhere
    below_reserve: bool = False  # a GET would take the budget below the caller's reserve
    asked: list[str] = field(default_factory=list)
    reading_now: int = 0  # legacy reads in flight
    gate: asyncio.Event | None = None
    reading: asyncio.Event | None = None  # set once a lookup has read the legacy tag

    async def legacy_signature(
        self,
        reference: ImageReference,
        digest: str,
        credentials: Credentials | None = None,
        *,
        reserve: int | None = None,
    ) -> LegacyEvidence | None:
        self.asked.append(f"legacy {digest}")
        found, gate = self.signed.get(digest), self.gate  # read now, answered once the gate opens
        if self.reading is not None:
            self.reading.set()
        self.reading_now += 1
        try:
            if gate is not None:
                await gate.wait()
        finally:
            self.reading_now -= 1
        if self.failing or digest in self.failing_for:
            raise RegistryUnavailable("registry.test answered 503", registry="registry.test")
        if self.below_reserve and reserve is not None:
            raise PullBudgetHeld(
                f"registry.test for anonymous has {reserve} pulls left; a signature lookup "
                f"needs 1 and {reserve} stay reserved for the kubelet",
                registry="registry.test",
            )
        account = credentials.account if credentials is not None else "anonymous"
        return None if account in self.hidden_from else found

    async def bundle_signatures(
        self,
        reference: ImageReference,
        digest: str,
        credentials: Credentials | None = None,
        *,
        reserve: int | None = None,
    ) -> tuple[BundleEvidence, ...]:
        self.asked.append(f"bundles {digest}")
        return self.referrers.get(digest, ())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def legacy_evidence(key: TestKey, digest: str, repository: str) -> LegacyEvidence:
    """The ``.sig`` evidence of a signature of ``digest`` in ``repository`` by ``key``."""
    body = payload(digest, repository)
    return legacy((body, key.sign(body)))


def request(
    digest: str,
    *keys: TestKey,
    interval: float = INTERVAL,
    credentials: Credentials | None = None,
    reserve: int | None = None,
) -> VerifyRequest:
    parsed = tuple(parse_public_key(k.pem) for k in keys or (KEY,))
    return VerifyRequest(REPO, digest, parsed, credentials, interval, reserve)


def verifier(recorder: Recorder, clock: Clock) -> SignatureVerifier:
    return SignatureVerifier(recorder, clock=clock)  # type: ignore[arg-type]


def outcome(v: SignatureVerifier, r: VerifyRequest, since: float | None = None) -> object:
    return asyncio.run(v.verify([r], since=since))[r]


def test_a_verified_digest_is_looked_up_once_and_the_legacy_tag_spares_the_referrers() -> None:
    recorder, clock = Recorder({D1: legacy_evidence(KEY, D1, REPO.repository)}), Clock()
    v = verifier(recorder, clock)
    first = outcome(v, request(D1))
    assert isinstance(first, Verified)
    clock.now += 10 * MAX_BACKOFF
    assert outcome(v, request(D1)) == first
    assert recorder.asked == [f"legacy {D1}"]


def test_an_unsigned_digest_is_asked_again_from_the_next_interval_doubling_up_to_six_hours() -> (
    None
):
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)
    asked_at = []
    for _ in range(80):  # every interval, for twenty hours
        before = len(recorder.asked)
        result = outcome(v, request(D2))
        assert isinstance(result, Untrusted)
        assert result.failure is Failure.NO_SIGNATURE
        if len(recorder.asked) > before:
            asked_at.append(clock.now)
        clock.now += INTERVAL
    gaps = [round((b - a) / INTERVAL) for a, b in itertools.pairwise(asked_at)]
    assert gaps[:5] == [1, 2, 4, 8, 16]
    assert max(gaps) == MAX_BACKOFF / INTERVAL == 24
    assert all(recorder.asked[i].startswith("legacy") for i in range(0, len(recorder.asked), 2))


def test_a_tick_asked_for_looks_an_unsigned_digest_up_again_at_once_but_only_once() -> None:
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)
    outcome(v, request(D2))
    clock.now += 5
    recorder.signed[D2] = legacy_evidence(KEY, D2, REPO.repository)  # signed since
    assert isinstance(outcome(v, request(D2), since=clock.now - 1), Verified)
    asks = len(recorder.asked)
    assert isinstance(outcome(v, request(D2), since=clock.now - 1), Verified)
    assert len(recorder.asked) == asks


def test_a_registry_failure_is_unreadable_and_never_remembered() -> None:
    recorder, clock = Recorder(failing=True), Clock()
    v = verifier(recorder, clock)
    first = outcome(v, request(D1))
    assert isinstance(first, SignaturesUnreadable)
    assert first.digest == D1
    assert "503" in first.message
    recorder.failing = False
    recorder.signed[D1] = legacy_evidence(KEY, D1, REPO.repository)
    assert isinstance(outcome(v, request(D1)), Verified)


def test_verdicts_are_per_key_set_and_callers_at_once_share_one_lookup() -> None:
    recorder, clock = Recorder({D1: legacy_evidence(KEY, D1, REPO.repository)}), Clock()
    v = verifier(recorder, clock)
    assert isinstance(outcome(v, request(D1, OTHER)), Untrusted)
    assert isinstance(outcome(v, request(D1, KEY)), Verified)

    async def together() -> list[object]:
        recorder.gate = asyncio.Event()
        many = [asyncio.ensure_future(v.verify([request(D2)])) for _ in range(5)]
        await asyncio.sleep(0)
        recorder.gate.set()
        return [next(iter((await m).values())) for m in many]

    asks = len(recorder.asked)
    results = asyncio.run(together())
    assert all(isinstance(r, Untrusted) for r in results)
    assert len(recorder.asked) - asks == 2  # one legacy HEAD, one referrers lookup


async def held_lookup(
    recorder: Recorder, v: SignatureVerifier, clock: Clock
) -> tuple[asyncio.Event, asyncio.Task[dict[VerifyRequest, SignatureOutcome]]]:
    """A lookup of the unsigned D2 that has read the legacy tag (nothing there) and answers
    only when the returned gate opens; meanwhile D2 is signed, 5 s later."""
    gate = recorder.gate = asyncio.Event()
    recorder.reading = asyncio.Event()
    looking = asyncio.ensure_future(v.verify([request(D2)]))
    await recorder.reading.wait()
    recorder.gate = recorder.reading = None
    clock.now += 5
    recorder.signed[D2] = legacy_evidence(KEY, D2, REPO.repository)
    return gate, looking


def test_a_tick_asked_for_shares_no_lookup_that_started_before_it_and_an_older_one_never_wins() -> (
    None
):
    # A lookup read the .sig tag before the signature was pushed and is still answering when a
    # tick is asked for: that tick asks on its own, and the older lookup, landing last, does not
    # overwrite what the newer one concluded.
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)

    async def race() -> tuple[bool, object, object]:
        gate, earlier = await held_lookup(recorder, v, clock)
        asked = asyncio.ensure_future(v.verify([request(D2)], since=clock.now - 1))
        # Its lookup waits on nothing but a verification thread: had it joined the older
        # lookup, it would wait for the gate, which opens only after this.
        await asyncio.wait({asked}, timeout=30)
        answered_first = asked.done()
        gate.set()
        return answered_first, (await earlier)[request(D2)], (await asked)[request(D2)]

    answered_first, earlier, asked = asyncio.run(race())
    assert answered_first  # it did not wait for the older lookup
    assert isinstance(earlier, Untrusted)
    assert isinstance(asked, Verified)
    asks = len(recorder.asked)
    assert isinstance(outcome(v, request(D2)), Verified)
    assert len(recorder.asked) == asks


def test_an_untrusted_verdict_is_as_old_as_its_lookup_s_start() -> None:
    # The lookup read before a tick was asked for and answered after it: the tick asks again.
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)

    async def slow_lookup() -> object:
        gate, looking = await held_lookup(recorder, v, clock)
        gate.set()
        return (await looking)[request(D2)]

    assert isinstance(asyncio.run(slow_lookup()), Untrusted)
    assert isinstance(outcome(v, request(D2), since=clock.now - 1), Verified)


def test_a_slow_round_s_late_ticks_take_its_verdicts_and_the_next_round_looks_up_again() -> None:
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)
    unsigned, grid = request(D2, interval=30.0), 2000.0  # the CRD's shortest interval

    def in_round(round_at: float | None) -> object:
        return asyncio.run(v.verify([unsigned], round_at=round_at))[unsigned]

    clock.now = grid + 1  # the round's first tick looks the digest up
    assert isinstance(in_round(grid), Untrusted)
    asks = len(recorder.asked)
    clock.now = grid + 25  # past half the interval from that lookup: a late tick of the round
    assert isinstance(in_round(grid), Untrusted)
    assert len(recorder.asked) == asks
    clock.now = grid + 31  # the next round looks it up again
    assert isinstance(in_round(grid + 30), Untrusted)
    assert len(recorder.asked) > asks


def digests(count: int) -> list[str]:
    return [f"sha256:{n:064x}" for n in range(1, count + 1)]


def test_a_call_looks_up_at_most_its_limit_and_the_rest_wait_without_blame() -> None:
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)
    wanted = [request(d) for d in digests(5)]
    first = asyncio.run(v.verify(wanted, owner="ns/policy", limit=2))
    looked_up = {r.digest for r, o in first.items() if isinstance(o, Untrusted)}
    waiting = [o for o in first.values() if isinstance(o, SignaturesWaiting)]
    assert looked_up == set(digests(2))
    assert {f"legacy {d}" for d in digests(5)} & set(recorder.asked) == {
        f"legacy {d}" for d in digests(2)
    }
    assert len(waiting) == 3
    assert not any(w.budget for w in waiting)
    assert all("at most 2 digests' signatures a tick" in w.message for w in waiting)
    # The next call looks up those that waited, the remembered verdicts cost nothing.
    second = asyncio.run(v.verify(wanted, owner="ns/policy", limit=2))
    assert {r.digest for r, o in second.items() if isinstance(o, SignaturesWaiting)} == {
        digests(5)[4]
    }
    third = asyncio.run(v.verify(wanted, owner="ns/policy", limit=2))
    assert not any(isinstance(o, SignaturesWaiting) for o in third.values())
    assert sorted(a for a in recorder.asked if a.startswith("legacy")) == sorted(
        f"legacy {d}" for d in digests(5)
    )


def test_a_lookup_that_keeps_failing_waits_behind_those_never_looked_up() -> None:
    d1, d2 = digests(2)
    recorder, clock = Recorder(failing_for={d1}), Clock()
    v = verifier(recorder, clock)
    wanted = [request(d1), request(d2)]
    first = asyncio.run(v.verify(wanted, limit=1))
    assert isinstance(first[wanted[0]], SignaturesUnreadable)
    assert isinstance(first[wanted[1]], SignaturesWaiting)
    clock.now += 1
    second = asyncio.run(v.verify(wanted, limit=1))
    assert isinstance(second[wanted[1]], Untrusted)  # its turn, though listed second
    assert isinstance(second[wanted[0]], SignaturesWaiting)


def test_joining_a_lookup_in_flight_costs_nothing_of_the_limit() -> None:
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)
    d1, d2 = digests(2)

    async def together() -> dict[VerifyRequest, SignatureOutcome]:
        recorder.gate = asyncio.Event()
        other = asyncio.ensure_future(v.verify([request(d1)], owner="other", limit=1))
        await asyncio.sleep(0)
        mine = asyncio.ensure_future(v.verify([request(d1), request(d2)], owner="me", limit=1))
        await asyncio.sleep(0)
        recorder.gate.set()
        await other
        return await mine

    outcomes = asyncio.run(together())
    assert all(isinstance(o, Untrusted) for o in outcomes.values())
    assert recorder.asked.count(f"legacy {d1}") == 1


def test_one_account_s_unsigned_reading_never_answers_another_account() -> None:
    # On a registry that answers 404 to reads it does not authorise, an account without access
    # finds no signature: that is its verdict, not the digest's.
    d = digests(1)[0]
    recorder, clock = Recorder({d: legacy_evidence(KEY, d, REPO.repository)}), Clock()
    recorder.hidden_from = {"anonymous"}
    v = verifier(recorder, clock)
    stranger = request(d)
    tenant = request(d, credentials=Credentials("tenant", "secret", "team/pull"))
    assert isinstance(outcome(v, stranger), Untrusted)
    assert isinstance(outcome(v, tenant), Verified)
    # A verified verdict is the digest's: it answers the stranger now, at no cost.
    asks = len(recorder.asked)
    assert isinstance(outcome(v, stranger), Verified)
    assert len(recorder.asked) == asks


def test_accounts_asking_at_once_never_share_a_lookup() -> None:
    d = digests(1)[0]
    recorder, clock = Recorder({d: legacy_evidence(KEY, d, REPO.repository)}), Clock()
    recorder.hidden_from = {"anonymous"}
    v = verifier(recorder, clock)
    stranger = request(d)
    tenant = request(d, credentials=Credentials("tenant", "secret", "team/pull"))

    async def together() -> list[dict[VerifyRequest, SignatureOutcome]]:
        recorder.gate = asyncio.Event()
        calls = [asyncio.ensure_future(v.verify([r])) for r in (stranger, tenant)]
        await asyncio.sleep(0)
        recorder.gate.set()
        return list(await asyncio.gather(*calls))

    first, second = asyncio.run(together())
    assert isinstance(first[stranger], Untrusted)
    assert isinstance(second[tenant], Verified)
    assert recorder.asked.count(f"legacy {d}") == 2


def test_a_lookup_held_by_the_reserve_waits_without_blame_and_is_asked_again() -> None:
    d = digests(1)[0]
    recorder = Recorder({d: legacy_evidence(KEY, d, REPO.repository)}, below_reserve=True)
    clock = Clock()
    v = verifier(recorder, clock)
    held = outcome(v, request(d, reserve=2))
    assert isinstance(held, SignaturesWaiting)
    assert held.budget
    assert "2 stay reserved for the kubelet; it is looked up at the next tick" in held.message
    recorder.below_reserve = False
    assert isinstance(outcome(v, request(d, reserve=2)), Verified)  # nothing was remembered


def test_verified_answers_from_memory_alone() -> None:
    d1, d2 = digests(2)
    recorder, clock = Recorder({d1: legacy_evidence(KEY, d1, REPO.repository)}), Clock()
    v = verifier(recorder, clock)
    keys = request(d1).keys
    assert not v.verified(REPO.repository, d1, keys)
    assert isinstance(outcome(v, request(d1)), Verified)
    assert isinstance(outcome(v, request(d2)), Untrusted)
    asks = len(recorder.asked)
    assert v.verified(REPO.repository, d1, keys)
    assert not v.verified(REPO.repository, d2, keys)
    assert not v.verified(REPO.repository, d1, request(d1, KEY, OTHER).keys)
    assert not v.verified("registry.test/team/other", d1, keys)
    assert len(recorder.asked) == asks


def test_signature_checks_run_on_the_verification_thread_not_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = digests(1)[0]
    recorder, clock = Recorder({d: legacy_evidence(KEY, d, REPO.repository)}), Clock()
    v = verifier(recorder, clock)
    checked_on: list[int] = []

    def recorded(*args: Any, **kwargs: Any) -> Verdict:
        checked_on.append(threading.get_ident())
        return verify(*args, **kwargs)

    monkeypatch.setattr(lookups, "verify", recorded)

    async def main() -> tuple[int, SignatureOutcome]:
        return threading.get_ident(), (await v.verify([request(d)]))[request(d)]

    loop_thread, verdict = asyncio.run(main())
    assert isinstance(verdict, Verified)
    assert checked_on
    assert loop_thread not in checked_on


def test_a_verified_verdict_landing_after_a_later_lookup_s_untrusted_one_stands() -> None:
    # The first lookup reads the signature and answers slowly; meanwhile the signature tag is
    # gone (deleted, or a registry hiccup), and a tick asked for looks up again and lands first
    # with nothing found. The signature was there: the verified verdict stands.
    d = digests(1)[0]
    recorder, clock = Recorder({d: legacy_evidence(KEY, d, REPO.repository)}), Clock()
    v = verifier(recorder, clock)

    async def race() -> tuple[SignatureOutcome, SignatureOutcome]:
        gate = recorder.gate = asyncio.Event()
        recorder.reading = asyncio.Event()
        earlier = asyncio.ensure_future(v.verify([request(d)]))
        await recorder.reading.wait()
        recorder.gate = recorder.reading = None
        del recorder.signed[d]
        clock.now += 5
        later = (await v.verify([request(d)], since=clock.now - 1))[request(d)]
        gate.set()
        return later, (await earlier)[request(d)]

    later, earlier = asyncio.run(race())
    assert isinstance(later, Untrusted)
    assert isinstance(earlier, Verified)
    assert v.verified(REPO.repository, d, request(d).keys)
    assert isinstance(outcome(v, request(d)), Verified)


def test_a_policy_reads_two_digests_signatures_at_once_and_never_holds_another_policy_s_read() -> (
    None
):
    recorder, clock = Recorder(), Clock()
    v = verifier(recorder, clock)

    async def main() -> tuple[int, int]:
        recorder.gate = asyncio.Event()
        many = asyncio.ensure_future(v.verify([request(d) for d in digests(6)], owner="hostile"))
        for _ in range(20):
            await asyncio.sleep(0)
        hostile_reads = recorder.reading_now
        one = asyncio.ensure_future(v.verify([request(digests(7)[-1])], owner="honest"))
        for _ in range(20):
            await asyncio.sleep(0)
        both = recorder.reading_now
        recorder.gate.set()
        await asyncio.gather(many, one)
        return hostile_reads, both

    assert asyncio.run(main()) == (MAX_READS_PER_POLICY, MAX_READS_PER_POLICY + 1)


def _palette(digest: str) -> dict[str, LegacyEvidence | BundleEvidence]:
    """Candidates that fail at different checks, and good ones, of ``digest``."""
    body = payload(digest, REPO.repository)
    elsewhere = payload(digest, "registry.test/team/other")
    return {
        "legacy-good": legacy((body, KEY.sign(body))),
        "legacy-other-key": legacy((body, OTHER.sign(body))),
        "legacy-elsewhere": legacy((elsewhere, KEY.sign(elsewhere))),
        "bundle-good": bundle(digest, KEY),
        "bundle-other-key": bundle(digest, OTHER),
        "bundle-attestation": bundle(
            digest, KEY, body=statement(digest, predicate_type="https://slsa.dev/provenance/v1")
        ),
        "bundle-other-subject": bundle(digest, KEY, subject="sha256:" + "9" * 64),
    }


@pytest.mark.parametrize(
    "legacy_case", [None, "legacy-good", "legacy-other-key", "legacy-elsewhere"]
)
def test_checking_candidate_by_candidate_concludes_what_verify_concludes_of_all(
    legacy_case: str | None,
) -> None:
    d = digests(1)[0]
    palette = _palette(d)
    names = [n for n in palette if n.startswith("bundle")]
    for count in range(4):
        for chosen in itertools.product(names, repeat=count):
            found_legacy = palette[legacy_case] if legacy_case else None
            found_bundles = tuple(palette[n] for n in chosen)
            assert found_legacy is None or isinstance(found_legacy, LegacyEvidence)
            recorder = Recorder(
                {d: found_legacy} if found_legacy is not None else {},
                referrers={d: found_bundles},  # type: ignore[dict-item]
            )
            v = verifier(recorder, Clock())
            expected = verify(
                d,
                REPO,
                request(d).keys,
                legacy=found_legacy,
                bundles=found_bundles,  # type: ignore[arg-type]
            )
            assert outcome(v, request(d)) == expected, (legacy_case, chosen)
