"""Verdict memory: what one account concluded never answers another, and a signature found
stands whenever its lookup started."""

from __future__ import annotations

from imagerefresh.signatures import Failure, Untrusted, Verified, parse_public_key
from imagerefresh.verifier import MAX_BACKOFF, VerdictMemory
from imagerefresh.verifier.memory import memo_of

from support.signing import TestKey

KEY, OTHER = TestKey.p256(), TestKey.p256()
KEYS = (parse_public_key(KEY.pem),)
REPOSITORY = "registry.test/team/app"
D = "sha256:" + "1" * 64
MEMO = memo_of(REPOSITORY, D, KEYS)
VERIFIED = Verified(digest=D, key=KEY.fingerprint, format="bundle")
UNSIGNED = Untrusted(digest=D, failure=Failure.NO_SIGNATURE, detail="no signature was found")
INTERVAL = 900.0


def recall(memory: VerdictMemory, account: str, at: float = 0.0) -> object:
    return memory.recall(MEMO, account, interval=INTERVAL, since=None, judged_at=at)


def test_an_untrusted_verdict_answers_only_the_account_that_concluded_it() -> None:
    # A registry that answers 404 to reads it does not authorise: the tenant without access
    # sees no signature. Its verdict must not stand for the tenant that can read it.
    memory = VerdictMemory()
    memory.remember(MEMO, "tenant-without-access", UNSIGNED, started=0.0)
    assert recall(memory, "tenant-without-access") == UNSIGNED
    assert recall(memory, "tenant-with-access") is None  # looked up on its own


def test_a_verified_verdict_answers_every_account() -> None:
    memory = VerdictMemory()
    memory.remember(MEMO, "tenant-with-access", VERIFIED, started=0.0)
    assert recall(memory, "anyone") == VERIFIED
    assert recall(memory, "anyone", at=100 * MAX_BACKOFF) == VERIFIED
    assert memory.verified(MEMO) == VERIFIED


def test_a_verified_verdict_landing_after_a_later_lookup_s_untrusted_one_stands() -> None:
    # Lookup 1 starts at 10 and reads the signature; lookup 2 starts at 20 and (a registry
    # hiccup, a signature tag moved) finds none, and lands first. Lookup 1 lands last.
    memory = VerdictMemory()
    memory.remember(MEMO, "tenant", UNSIGNED, started=20.0)
    memory.remember(MEMO, "tenant", VERIFIED, started=10.0)
    assert recall(memory, "tenant", at=21.0) == VERIFIED
    assert memory.verified(MEMO) == VERIFIED


def test_nothing_untrusted_replaces_a_verified_verdict() -> None:
    memory = VerdictMemory()
    memory.remember(MEMO, "tenant", VERIFIED, started=10.0)
    memory.remember(MEMO, "tenant", UNSIGNED, started=20.0)
    memory.remember(MEMO, "other", UNSIGNED, started=30.0)
    assert recall(memory, "tenant", at=31.0) == VERIFIED
    assert recall(memory, "other", at=31.0) == VERIFIED


def test_an_earlier_lookup_s_untrusted_verdict_never_replaces_a_later_one() -> None:
    memory = VerdictMemory()
    later = UNSIGNED.model_copy(update={"detail": "later"})
    memory.remember(MEMO, "tenant", later, started=20.0)
    memory.remember(MEMO, "tenant", UNSIGNED, started=10.0)
    assert recall(memory, "tenant", at=21.0) == later


def test_verdicts_are_per_key_set_and_repository() -> None:
    memory = VerdictMemory()
    memory.remember(MEMO, "tenant", VERIFIED, started=0.0)
    both = (*KEYS, parse_public_key(OTHER.pem))
    assert memory.verified(memo_of(REPOSITORY, D, both)) is None
    assert memory.verified(memo_of("registry.test/team/other", D, KEYS)) is None
    assert memory.verified(memo_of(REPOSITORY, D, reversed(KEYS))) == VERIFIED


def test_a_flood_of_untrusted_verdicts_never_evicts_a_verified_one() -> None:
    memory = VerdictMemory(capacity=4)
    memory.remember(MEMO, "tenant", VERIFIED, started=0.0)
    for n in range(100):
        other = memo_of(REPOSITORY, "sha256:" + f"{n:064x}", KEYS)
        memory.remember(other, "hostile", UNSIGNED, started=float(n))
    assert memory.verified(MEMO) == VERIFIED
