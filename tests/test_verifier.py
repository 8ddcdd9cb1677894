"""The verifier's memory: what it asks the registry again, and when.

The registry client is replaced by a recorder here: these tests pin down the verifier's own
bookkeeping (verdicts remembered per repository, digest and key set; the backoff for unsigned
digests; one lookup for callers asking at once; failures never remembered). What a real
registry answers, and cosign's real signatures, are tests/registry's and tests/signatures'.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from imagerefresh.credentials import Credentials
from imagerefresh.planner.evidence import SignaturesUnreadable
from imagerefresh.reference import ImageReference, parse
from imagerefresh.registry import RegistryUnavailable
from imagerefresh.signatures import (
    BundleEvidence,
    Failure,
    LegacyEvidence,
    Untrusted,
    Verified,
    parse_public_key,
)
from imagerefresh.verifier import MAX_BACKOFF, SignatureVerifier, VerifyRequest

from support.signing import TestKey, legacy, payload

KEY, OTHER = TestKey.p256(), TestKey.p256()
REPO = parse("registry.test/team/app:prod")
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
INTERVAL = 900.0


@dataclass
class Recorder:
    """Stands in for the registry client: serves a legacy signature per digest, counts asks."""

    signed: dict[str, LegacyEvidence] = field(default_factory=dict)
    failing: bool = False
    asked: list[str] = field(default_factory=list)
    gate: asyncio.Event | None = None

    async def legacy_signature(
        self, reference: ImageReference, digest: str, credentials: Credentials | None = None
    ) -> LegacyEvidence | None:
        self.asked.append(f"legacy {digest}")
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise RegistryUnavailable("registry.test answered 503", registry="registry.test")
        return self.signed.get(digest)

    async def bundle_signatures(
        self, reference: ImageReference, digest: str, credentials: Credentials | None = None
    ) -> tuple[BundleEvidence, ...]:
        self.asked.append(f"bundles {digest}")
        return ()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def legacy_evidence(key: TestKey, digest: str, repository: str) -> LegacyEvidence:
    """The ``.sig`` evidence of a signature of ``digest`` in ``repository`` by ``key``."""
    body = payload(digest, repository)
    return legacy((body, key.sign(body)))


def request(digest: str, *keys: TestKey, interval: float = INTERVAL) -> VerifyRequest:
    parsed = tuple(parse_public_key(k.pem) for k in keys or (KEY,))
    return VerifyRequest(REPO, digest, parsed, None, interval)


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
