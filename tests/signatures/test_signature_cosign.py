"""Real cosign's signatures, read back from a real registry, and ``cosign verify``'s opinion.

The pinned cosign signs images pushed to the loopback distribution registry, offline (no
signing config, no transparency log; see support/signing.py), in both formats; the test reads
what it stored the way the registry client will and asks the core for a verdict. The same
artifacts go to ``cosign verify --key --insecure-ignore-tlog=true``. The two agree except
where the core is stricter on purpose, and each such row says why:

* a legacy signature copied to another repository: cosign does not check the repository
  claim;
* an attestation alone: cosign 3.1.3's ``verify`` accepts a bundle of any predicate type;
* ECDSA P-384 keys: cosign 3.1.3 signs with SHA-384 but its ``verify --key`` checks with
  SHA-256, so it rejects its own signatures.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from imagerefresh.reference import parse
from imagerefresh.signatures import (
    BUNDLE_MEDIA_TYPE,
    COSIGN_SIGN_PREDICATE,
    SIMPLE_SIGNING,
    Failure,
    PublicKey,
    Untrusted,
    Verdict,
    Verified,
    fallback_tag,
    legacy_tag,
    parse_public_key,
    verify,
)

from support.cosign_env import key_pair
from support.registry_env import ImagePusher
from support.signing import (
    TestKey,
    copy_manifest,
    cosign_attest,
    cosign_import_key,
    cosign_sign,
    cosign_verifies,
    read_evidence,
)

pytestmark = pytest.mark.registry

PATH, ELSEWHERE = "signatures/app", "signatures/elsewhere"
PASSWORD = "signatures-test"


@dataclass(frozen=True)
class Case:
    path: str
    digest: str
    key: Path  # the public key the verifier is given


@dataclass(frozen=True)
class Signed:
    host: str
    cases: dict[str, Case]
    default_key: Path


@pytest.fixture(scope="module")
def signed(registry: str, cosign: Path, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    """One image per row of ``ROWS``, signed (or not) by real cosign as the row says."""
    work = tmp_path_factory.mktemp("cosign-signatures")
    main, other = (
        key_pair(cosign, work / "main", PASSWORD),
        key_pair(cosign, work / "other", PASSWORD),
    )
    p384 = TestKey.p384()
    rsa = TestKey.rsa()
    p384_key = cosign_import_key(cosign, p384.private_pem, work / "p384", PASSWORD)
    rsa_key = cosign_import_key(cosign, rsa.private_pem, work / "rsa", PASSWORD)
    predicate = work / "provenance.json"
    predicate.write_text(json.dumps({"buildType": "https://example.com/build"}))
    pusher = ImagePusher(registry)
    cases: dict[str, Case] = {}

    def image(name: str, path: str = PATH) -> str:
        digest = pusher.push(path, name, seed=f"signatures-{name}").digest
        return digest

    def sign(digest: str, key: Path, *, bundle_format: bool) -> None:
        cosign_sign(cosign, key, f"{registry}/{PATH}@{digest}", bundle_format=bundle_format,
                    password=PASSWORD)  # fmt: skip

    try:
        for name, bundle_format in (("legacy", False), ("bundle", True)):
            digest = image(name)
            sign(digest, main.private, bundle_format=bundle_format)
            cases[name] = Case(PATH, digest, main.public)
            cases[f"{name}-by-another-key"] = Case(PATH, digest, other.public)
            for kind, private, public in (("p384", p384_key, p384), ("rsa", rsa_key, rsa)):
                digest = image(f"{kind}-{name}")
                sign(digest, private, bundle_format=bundle_format)
                public_path = work / f"{kind}.pub"
                public_path.write_text(public.pem)
                cases[f"{kind}-{name}"] = Case(PATH, digest, public_path)
        cases["unsigned"] = Case(PATH, image("unsigned"), main.public)
        attested = image("attested")
        cosign_attest(cosign, main.private, f"{registry}/{PATH}@{attested}", predicate,
                      password=PASSWORD)  # fmt: skip
        cases["attestation-only"] = Case(PATH, attested, main.public)
        # The same build pushed to another repository, with the first one's signature.
        copied = image("legacy", path=ELSEWHERE)
        assert copied == cases["legacy"].digest
        copy_manifest(registry, PATH, legacy_tag(copied), ELSEWHERE, legacy_tag(copied))
        cases["legacy-copied-to-another-repository"] = Case(ELSEWHERE, copied, main.public)
        # Another image's signature stored under this one's .sig tag.
        moved = image("signature-of-another-digest")
        copy_manifest(registry, PATH, legacy_tag(cases["legacy"].digest), PATH, legacy_tag(moved))
        cases["legacy-signature-of-another-digest"] = Case(PATH, moved, main.public)
    finally:
        pusher.close()
    return Signed(registry, cases, main.public)


@dataclass(frozen=True)
class Row:
    failure: Failure | None  # None: verified
    format: str | None
    cosign_accepts: bool


ROWS: dict[str, Row] = {
    "legacy": Row(None, "legacy", cosign_accepts=True),
    "bundle": Row(None, "bundle", cosign_accepts=True),
    "rsa-legacy": Row(None, "legacy", cosign_accepts=True),
    "rsa-bundle": Row(None, "bundle", cosign_accepts=True),
    "p384-legacy": Row(None, "legacy", cosign_accepts=False),  # cosign verifies with SHA-256
    "p384-bundle": Row(None, "bundle", cosign_accepts=False),  # likewise
    "unsigned": Row(Failure.NO_SIGNATURE, None, cosign_accepts=False),
    "legacy-by-another-key": Row(Failure.BAD_SIGNATURE, "legacy", cosign_accepts=False),
    "bundle-by-another-key": Row(Failure.BAD_SIGNATURE, "bundle", cosign_accepts=False),
    "attestation-only": Row(Failure.NOT_A_SIGNATURE, "bundle", cosign_accepts=True),
    "legacy-copied-to-another-repository": Row(
        Failure.REPOSITORY_MISMATCH, "legacy", cosign_accepts=True
    ),
    "legacy-signature-of-another-digest": Row(
        Failure.DIGEST_MISMATCH, "legacy", cosign_accepts=False
    ),
}
KNOWN_DIFFERENCES = {
    "legacy-copied-to-another-repository", "attestation-only", "p384-legacy", "p384-bundle",
}  # fmt: skip


def _key(path: Path) -> PublicKey:
    return parse_public_key(path.read_text())


def _verdict(signed: Signed, case: Case) -> Verdict:
    legacy, bundles = read_evidence(signed.host, case.path, case.digest)
    tracked = parse(f"{signed.host}/{case.path}:tracked")
    return verify(case.digest, tracked, [_key(case.key)], legacy=legacy, bundles=bundles)


@pytest.mark.parametrize("name", list(ROWS))
def test_the_core_judges_real_cosign_artifacts(signed: Signed, name: str) -> None:
    case, row = signed.cases[name], ROWS[name]
    verdict = _verdict(signed, case)
    if row.failure is None:
        assert verdict == Verified(digest=case.digest, key=_key(case.key).fingerprint,
                                   format=row.format)  # fmt: skip
    else:
        assert isinstance(verdict, Untrusted), verdict
        assert (verdict.failure, verdict.format) == (row.failure, row.format), verdict.detail


@pytest.mark.parametrize("name", list(ROWS))
def test_cosign_verify_agrees_except_where_the_core_is_stricter_on_purpose(
    signed: Signed, cosign: Path, name: str
) -> None:
    case, row = signed.cases[name], ROWS[name]
    accepted = cosign_verifies(cosign, case.key, f"{signed.host}/{case.path}@{case.digest}")
    assert accepted is row.cosign_accepts
    ours = _verdict(signed, case).ok
    assert (ours == accepted) is (name not in KNOWN_DIFFERENCES)


def test_cosign_3_stores_bundles_under_the_fallback_tag_on_distribution_2_8(signed: Signed) -> None:
    digest = signed.cases["bundle"].digest
    with httpx.Client(base_url=f"http://{signed.host}/v2/{PATH}", timeout=10) as http:
        assert http.get(f"/referrers/{digest}").status_code == 404  # no referrers API
        accept = {"Accept": "application/vnd.oci.image.index.v1+json"}
        index = http.get(f"/manifests/{fallback_tag(digest)}", headers=accept).json()
        (entry,) = index["manifests"]
        assert entry["artifactType"] == BUNDLE_MEDIA_TYPE
        referrer = http.get(f"/manifests/{entry['digest']}", headers={"Accept": entry["mediaType"]})
        manifest = referrer.json()
        assert manifest["subject"]["digest"] == digest
        assert manifest["annotations"]["dev.sigstore.bundle.predicateType"] == COSIGN_SIGN_PREDICATE
        assert [layer["mediaType"] for layer in manifest["layers"]] == [BUNDLE_MEDIA_TYPE]
        # No legacy signature beside it: cosign 3 writes one format per signing.
        assert http.get(f"/manifests/{legacy_tag(digest)}", headers=accept).status_code == 404


def test_cosign_legacy_signatures_are_simple_signing_layers_under_the_sig_tag(
    signed: Signed,
) -> None:
    legacy, bundles = read_evidence(signed.host, PATH, signed.cases["legacy"].digest)
    assert legacy is not None
    assert bundles == []
    manifest = json.loads(legacy.manifest)
    assert [layer["mediaType"] for layer in manifest["layers"]] == [SIMPLE_SIGNING]
    (body,) = legacy.payloads.values()
    claims = json.loads(body)["critical"]
    assert claims["identity"]["docker-reference"] == f"{signed.host}/{PATH}"
    assert claims["type"] == "cosign container image signature"


def test_the_fingerprint_is_the_key_hint_cosign_puts_in_its_bundles(signed: Signed) -> None:
    _, (found,) = read_evidence(signed.host, PATH, signed.cases["bundle"].digest)
    assert found.bundle is not None
    hint = json.loads(found.bundle)["verificationMaterial"]["publicKey"]["hint"]
    fingerprint = _key(signed.default_key).fingerprint
    assert base64.b64decode(hint) == bytes.fromhex(fingerprint.removeprefix("sha256:"))
    assert hashlib.sha256(b"").hexdigest() != fingerprint  # a real key, not an empty DER
