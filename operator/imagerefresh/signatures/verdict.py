"""What verifying one digest concluded: verified by which key, or the check that failed.

A verdict is a value, not an exception: the caller keeps it in memory keyed by (repository,
digest, key set) and reports it. :class:`Failure` is ordered by how far a signature got
through the checks, so when several candidates fail the verdict names the one that came
closest — "signed by your key, but for another repository" says more than "some other
signature did not verify".
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["Failure", "Format", "Untrusted", "Verdict", "Verified"]

Format = Literal["legacy", "bundle"]


class Failure(StrEnum):
    """The check a signature failed, from the earliest to the latest."""

    NO_SIGNATURE = "no-signature"  # nothing that could be a signature of this digest
    TOO_LARGE = "too-large"  # a body over its cap, or more of something than is read
    MALFORMED = "malformed"  # not the JSON, base64 or shape the format prescribes
    PAYLOAD_HASH_MISMATCH = "payload-hash-mismatch"  # a blob is not what its descriptor names
    BAD_SIGNATURE = "bad-signature"  # no listed key verifies it
    WRONG_TYPE = "wrong-type"  # signed, but not a cosign container image signature format
    NOT_A_SIGNATURE = "not-a-signature"  # signed, but an attestation (SBOM, provenance, ...)
    SUBJECT_MISMATCH = "subject-mismatch"  # a bundle about another digest
    DIGEST_MISMATCH = "digest-mismatch"  # a legacy signature of another digest
    REPOSITORY_MISMATCH = "repository-mismatch"  # a legacy signature for another repository

    @property
    def rank(self) -> int:
        """How far the signature got: later checks rank higher."""
        return list(Failure).index(self)


class _Verdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    digest: str


class Verified(_Verdict):
    """``digest`` carries a valid signature by the key whose fingerprint is ``key``."""

    kind: Literal["verified"] = "verified"
    key: str  # sha256:<hex> of the key's DER, as status.verifiedBy reports it
    format: Format

    @property
    def ok(self) -> Literal[True]:
        return True


class Untrusted(_Verdict):
    """``digest`` carries no valid signature; ``failure`` is the check that failed."""

    kind: Literal["untrusted"] = "untrusted"
    failure: Failure
    detail: str
    format: Format | None = None  # which format the reported failure came from, if any

    @property
    def ok(self) -> Literal[False]:
        return False


Verdict = Verified | Untrusted
