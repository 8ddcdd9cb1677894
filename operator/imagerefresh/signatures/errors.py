"""Every way checking a signature can fail, as one hierarchy.

A listed key that cannot be used is a mistake in the policy and is raised at once; a signature
that fails a check is a finding about the image, which :func:`~imagerefresh.signatures.verify`
turns into an :class:`~imagerefresh.signatures.verdict.Untrusted` verdict, never an exception.

``SignatureError``
  ├─ ``InvalidPublicKey`` — a key of ``spec.verify.publicKeys`` is unusable (also a ValueError)
  └─ ``Rejected``         — fetched evidence failed one check; ``failure`` says which
"""

from __future__ import annotations

from imagerefresh.signatures.verdict import Failure

__all__ = ["InvalidPublicKey", "Rejected", "SignatureError"]


class SignatureError(Exception):
    """A signature could not be verified; nothing is pinned on it."""


class InvalidPublicKey(SignatureError, ValueError):
    """A public key that cannot be used; the message says which one and why."""


class Rejected(SignatureError):
    """Evidence failed ``failure``; ``detail`` says how, for a user reading the event."""

    def __init__(self, failure: Failure, detail: str) -> None:
        super().__init__(f"{failure.value}: {detail}")
        self.failure = failure
        self.detail = detail
