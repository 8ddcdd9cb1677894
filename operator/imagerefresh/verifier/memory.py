"""What verifying concluded, kept in this process's memory only — and for whom it holds.

A :class:`~imagerefresh.signatures.Verified` verdict is a fact about the digest: a listed key
signed it, whoever read the signature. It is kept by (repository, digest, key set) and shared
by every policy and account asking the same. An :class:`~imagerefresh.signatures.Untrusted`
verdict is only what one account could read: a registry that answers 404 to reads it does not
authorise looks unsigned to an account without access, so an untrusted verdict is kept by the
account that asked too, and never answers another account — one tenant cannot plant
``Untrusted`` for another tenant's digest. (Unreadable outcomes are not remembered at all.)

A verdict is as old as the lookup that concluded it started. A later lookup's untrusted
verdict replaces an earlier one's however their answers are ordered; a verified verdict stands
whenever its lookup started — a signature found is found — and nothing untrusted replaces it.

Verified and untrusted verdicts are bounded apart (:data:`MAX_REMEMBERED` each, the least
recently used forgotten first), so a flood of untrusted verdicts never evicts the verified
ones other policies rely on.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from imagerefresh.signatures import PublicKey, Untrusted, Verified

__all__ = ["MAX_BACKOFF", "MAX_REMEMBERED", "Memo", "VerdictMemory", "memo_of"]

K = TypeVar("K")
V = TypeVar("V")

# An unsigned digest is asked again at most this far apart.
MAX_BACKOFF = 6 * 3600.0
# Verdicts remembered of each kind (each a few hundred bytes).
MAX_REMEMBERED = 4096

# What a verdict is about: (repository, digest, the key set's fingerprints, sorted).
Memo = tuple[str, str, tuple[str, ...]]


def memo_of(repository: str, digest: str, keys: Iterable[PublicKey]) -> Memo:
    return repository, digest, tuple(sorted({key.fingerprint for key in keys}))


@dataclass(slots=True)
class _Untrusted:
    verdict: Untrusted
    at: float  # when the lookup that concluded it started (the verifier's clock)
    misses: int  # untrusted verdicts in a row: the backoff's exponent


class VerdictMemory:
    """Verified verdicts by memo; untrusted ones by (memo, account)."""

    def __init__(self, capacity: int = MAX_REMEMBERED) -> None:
        self.capacity = capacity
        self._verified: OrderedDict[Memo, Verified] = OrderedDict()
        self._untrusted: OrderedDict[tuple[Memo, str], _Untrusted] = OrderedDict()

    def verified(self, memo: Memo) -> Verified | None:
        """The verified verdict on ``memo``, if there is one; a pure read."""
        return self._verified.get(memo)

    def recall(
        self,
        memo: Memo,
        account: str,
        *,
        interval: float,
        since: float | None,
        judged_at: float,
    ) -> Verified | Untrusted | None:
        """What is known for ``account`` and still good at ``judged_at``; None: look it up.

        An untrusted verdict is good until its backoff (``interval``, doubling with each miss
        up to :data:`MAX_BACKOFF`, less half an interval of slack so that the next tick of the
        interval always asks) is over, and not for a tick asked for at ``since`` after its
        lookup started.
        """
        verified = self._verified.get(memo)
        if verified is not None:
            self._verified.move_to_end(memo)
            return verified
        remembered = self._untrusted.get((memo, account))
        if remembered is None:
            return None
        self._untrusted.move_to_end((memo, account))
        if since is not None and remembered.at < since:
            return None
        backoff = min(interval * 2 ** (remembered.misses - 1), MAX_BACKOFF)
        due = remembered.at + backoff - interval / 2
        return remembered.verdict if judged_at < due else None

    def remember(
        self, memo: Memo, account: str, verdict: Verified | Untrusted, started: float
    ) -> None:
        """Keep what the lookup ``account`` started at ``started`` concluded."""
        if isinstance(verdict, Verified):
            self._untrusted.pop((memo, account), None)
            self._verified.pop(memo, None)
            self._verified[memo] = verdict
            _bound(self._verified, self.capacity)
            return
        if memo in self._verified:
            return  # a signature found stands
        before = self._untrusted.pop((memo, account), None)
        if before is not None and before.at > started:
            self._untrusted[(memo, account)] = before  # a later lookup's verdict stands
            return
        misses = (before.misses if before is not None else 0) + 1
        self._untrusted[(memo, account)] = _Untrusted(verdict, started, misses)
        _bound(self._untrusted, self.capacity)


def _bound(remembered: OrderedDict[K, V], capacity: int) -> None:
    while len(remembered) > capacity:
        remembered.popitem(last=False)
