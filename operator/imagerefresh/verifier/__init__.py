"""Verify digests' signatures at their registry, off the event loop, and remember the verdicts
in memory only.

With ``spec.verify`` a digest is pinned only when it carries a valid cosign signature by a
listed key. Three parts:

* :mod:`~.lookups` — :class:`SignatureVerifier`: reads what cosign stored for a digest through
  the registry client, checks it with the pure :func:`imagerefresh.signatures.verify`, and
  keeps each policy to its share (lookups per tick, the pull budget's reserve);
* :mod:`~.pool` — :class:`VerificationPool`: the worker threads the checks run on, served to
  policies in turn;
* :mod:`~.memory` — :class:`VerdictMemory`: verified verdicts by (repository, digest, key
  set), shared; untrusted ones by the account that asked too.

Nothing in status is evidence of a signature: after a restart every digest is verified again.
:meth:`SignatureVerifier.verified` answers, from memory alone, whether a digest may be written
under a key set.
"""

from imagerefresh.verifier.lookups import (
    MAX_READS_PER_POLICY,
    MAX_VERIFICATIONS_PER_TICK,
    LookupObserver,
    SignatureVerifier,
    VerifyRequest,
)
from imagerefresh.verifier.memory import MAX_BACKOFF, MAX_REMEMBERED, VerdictMemory
from imagerefresh.verifier.pool import DEFAULT_WORKERS, PoolObserver, VerificationPool

__all__ = [
    "DEFAULT_WORKERS",
    "MAX_BACKOFF",
    "MAX_READS_PER_POLICY",
    "MAX_REMEMBERED",
    "MAX_VERIFICATIONS_PER_TICK",
    "LookupObserver",
    "PoolObserver",
    "SignatureVerifier",
    "VerdictMemory",
    "VerificationPool",
    "VerifyRequest",
]
