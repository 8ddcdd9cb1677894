"""Signatures in cosign's shapes, made two ways: by hand with Python keys, and by real cosign.

The hand-made ones (:class:`TestKey`, :func:`legacy`, :func:`bundle`) let a test change one
thing — a claim, a byte, a type — and see which check catches it; they follow what cosign
v3 writes, byte for byte where it matters (compact JSON payloads, the OCI layout). The real
ones (:func:`cosign_sign`, :func:`cosign_attest`, :func:`cosign_verifies`) run the pinned
cosign against the loopback registry, offline; :func:`read_evidence` fetches what it stored
the way the registry client will: the ``.sig`` tag, then the referrers fallback tag.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from imagerefresh.signatures import (
    BUNDLE_MEDIA_TYPE,
    COSIGN_SIGN_PREDICATE,
    SIMPLE_SIGNING,
    BundleEvidence,
    LegacyEvidence,
    bundle_layer,
    fallback_tag,
    legacy_tag,
    pae,
    referrer_manifests,
    signature_layers,
)

from support.registry_env import ImagePusher

__all__ = [
    "COSIGN_TYPE",
    "IN_TOTO_PAYLOAD",
    "IN_TOTO_V1",
    "TestKey",
    "bundle",
    "bundle_document",
    "copy_manifest",
    "cosign_attest",
    "cosign_import_key",
    "cosign_sign",
    "cosign_verifies",
    "key_hint",
    "legacy",
    "payload",
    "push_signatures",
    "read_evidence",
    "statement",
]

COSIGN_TYPE = "cosign container image signature"
IN_TOTO_V1 = "https://in-toto.io/Statement/v1"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
ACCEPT = f"{OCI_MANIFEST},{OCI_INDEX},application/vnd.docker.distribution.manifest.v2+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _compact(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


@dataclass(frozen=True)
class TestKey:
    """A private key and its public PEM; signs as cosign does for its kind."""

    private: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

    __test__ = False  # not a pytest class

    @classmethod
    def p256(cls) -> TestKey:
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def p384(cls) -> TestKey:
        return cls(ec.generate_private_key(ec.SECP384R1()))

    @classmethod
    def rsa(cls, bits: int = 2048) -> TestKey:
        return cls(rsa.generate_private_key(public_exponent=65537, key_size=bits))

    @property
    def pem(self) -> str:
        return (
            self.private.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )

    @property
    def fingerprint(self) -> str:
        der = self.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return _digest(der)

    @property
    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def sign(self, data: bytes) -> bytes:
        if isinstance(self.private, ec.EllipticCurvePrivateKey):
            chosen: hashes.HashAlgorithm = (
                hashes.SHA384() if self.private.curve.key_size == 384 else hashes.SHA256()
            )
            return self.private.sign(data, ec.ECDSA(chosen))
        return self.private.sign(data, padding.PKCS1v15(), hashes.SHA256())


def payload(digest: str, reference: str, *, kind: str = COSIGN_TYPE, **critical: object) -> bytes:
    """A simple-signing payload as cosign writes it (``critical`` adds or replaces fields)."""
    document = {
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": kind,
            **critical,
        },
        "optional": None,
    }
    return _compact(document)


def legacy(
    *layers: tuple[bytes, bytes | None],
    media_type: str = OCI_MANIFEST,
    blobs: dict[str, bytes] | None = None,
) -> LegacyEvidence:
    """A ``.sig`` manifest with one simple-signing layer per (payload, signature); a None
    signature leaves the annotation out. ``blobs`` replaces what was "read" of the layers."""
    descriptors = []
    for body, signature in layers:
        annotations = {}
        if signature is not None:
            annotations["dev.cosignproject.cosign/signature"] = base64.b64encode(signature).decode()
        descriptors.append(
            {"mediaType": SIMPLE_SIGNING, "size": len(body), "digest": _digest(body),
             "annotations": annotations}
        )  # fmt: skip
    config = b"{}"
    manifest = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "size": len(config), "digest": _digest(config)},
        "layers": descriptors,
    }  # fmt: skip
    read = {_digest(body): body for body, _ in layers} if blobs is None else blobs
    return LegacyEvidence(manifest=_compact(manifest), payloads=read)


def statement(
    digest: str, *, predicate_type: str = COSIGN_SIGN_PREDICATE, kind: str = IN_TOTO_V1,
    subjects: list[dict[str, str]] | None = None,
) -> bytes:  # fmt: skip
    """An in-toto Statement as ``cosign sign`` writes it."""
    algorithm, _, encoded = digest.partition(":")
    document = {
        "_type": kind,
        "subject": [{"digest": d, "annotations": {}} for d in subjects]
        if subjects is not None
        else [{"digest": {algorithm: encoded}, "annotations": {}}],
        "predicateType": predicate_type,
        "predicate": {},
    }
    return json.dumps(document).encode()


def key_hint(fingerprint: str) -> str:
    """The key hint cosign writes into a bundle: the base64 of the key's DER's sha256."""
    return base64.b64encode(bytes.fromhex(fingerprint.removeprefix("sha256:"))).decode()


def bundle_document(
    body: bytes, signatures: list[bytes], *, payload_type: str = IN_TOTO_PAYLOAD,
    media_type: str = BUNDLE_MEDIA_TYPE, hint: object = "not used",
) -> bytes:  # fmt: skip
    """A v0.3 bundle with a DSSE envelope of ``body`` and these signatures; ``hint`` is its
    ``verificationMaterial.publicKey.hint`` (cosign's: :func:`key_hint`)."""
    document = {
        "mediaType": media_type,
        "verificationMaterial": {"publicKey": {"hint": hint}},
        "dsseEnvelope": {
            "payload": base64.b64encode(body).decode(),
            "payloadType": payload_type,
            "signatures": [{"sig": base64.b64encode(s).decode()} for s in signatures],
        },
    }
    return json.dumps(document).encode()


def bundle(
    digest: str, key: TestKey | None = None, *, body: bytes | None = None,
    document: bytes | None = None, subject: str | None = None, read: bytes | None = None,
) -> BundleEvidence:  # fmt: skip
    """A referrer of ``subject`` (default ``digest``) holding a bundle: ``document`` as
    given, else one of ``body`` (default: the Statement of ``digest``) signed by ``key``
    over DSSE's encoding. ``read`` replaces the blob that was "read"."""
    if document is None:
        body = statement(digest) if body is None else body
        signer = TestKey.p256() if key is None else key
        document = bundle_document(body, [signer.sign(pae(IN_TOTO_PAYLOAD, body))])
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": BUNDLE_MEDIA_TYPE,
        "config": {"mediaType": OCI_EMPTY, "size": 2, "digest": _digest(b"{}")},
        "layers": [{"mediaType": BUNDLE_MEDIA_TYPE, "size": len(document),
                    "digest": _digest(document)}],
        "subject": {"mediaType": OCI_MANIFEST, "size": 1, "digest": subject or digest},
    }  # fmt: skip
    return BundleEvidence(manifest=_compact(manifest), bundle=document if read is None else read)


# Real cosign. Offline: no signing config (no TUF), no transparency log; the proxy variables
# send anything but loopback to a closed port, so a dial outside fails the command loudly.
def _offline_env(password: str) -> dict[str, str]:
    dead = "http://127.0.0.1:9"
    return {
        **os.environ, "COSIGN_PASSWORD": password, "HTTPS_PROXY": dead, "HTTP_PROXY": dead,
        "https_proxy": dead, "http_proxy": dead, "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }  # fmt: skip


def _cosign(cosign: Path, *args: str, password: str, cwd: Path | None = None) -> None:
    done = subprocess.run(
        [str(cosign), *args], capture_output=True, text=True, env=_offline_env(password),
        cwd=cwd, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"cosign {' '.join(args)}:\n{done.stderr}"


_SIGN_OFFLINE = ("--use-signing-config=false", "--tlog-upload=false", "--allow-http-registry")


def cosign_sign(
    cosign: Path, key: Path, image: str, *, bundle_format: bool, password: str,
    identity: str | None = None,
) -> None:  # fmt: skip
    """``cosign sign --key`` of ``image`` (repo@digest), legacy or bundle format, offline.

    ``identity``: the repository a legacy payload claims (``--sign-container-identity``)
    instead of ``image``'s — as when the image is pushed to a registry and pulled through a
    proxy in front of it, which is where the operator's tests track it."""
    claim = () if identity is None else (f"--sign-container-identity={identity}",)
    _cosign(
        cosign, "sign", "--yes", "--key", str(key), *_SIGN_OFFLINE, *claim,
        f"--new-bundle-format={'true' if bundle_format else 'false'}", image, password=password,
    )  # fmt: skip


def cosign_attest(cosign: Path, key: Path, image: str, predicate: Path, *, password: str) -> None:
    """``cosign attest --key`` of a SLSA provenance predicate (bundle format), offline."""
    _cosign(
        cosign, "attest", "--yes", "--key", str(key), *_SIGN_OFFLINE, "--new-bundle-format=true",
        "--type", "slsaprovenance", "--predicate", str(predicate), image, password=password,
    )  # fmt: skip


def cosign_import_key(cosign: Path, private_pem: bytes, directory: Path, password: str) -> Path:
    """``cosign import-key-pair`` of a PEM private key; the path of cosign's encrypted key."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "key.pem").write_bytes(private_pem)
    _cosign(cosign, "import-key-pair", "--yes", "--key", "key.pem", password=password,
            cwd=directory)  # fmt: skip
    return directory / "import-cosign.key"


def cosign_verifies(cosign: Path, public_key: Path, image: str) -> bool:
    """Whether ``cosign verify --key`` accepts ``image``, offline (no tlog, no TUF)."""
    done = subprocess.run(
        [str(cosign), "verify", "--key", str(public_key), "--insecure-ignore-tlog=true",
         "--allow-http-registry", image],
        capture_output=True, text=True, env=_offline_env(""), timeout=120, check=False,
    )  # fmt: skip
    assert "proxyconnect" not in done.stderr, done.stderr  # it tried to leave loopback
    return done.returncode == 0


def read_evidence(
    host: str, path: str, digest: str
) -> tuple[LegacyEvidence | None, list[BundleEvidence]]:
    """What cosign stored for ``digest`` in ``host/path``, read as the client will: the
    ``.sig`` tag and its layers; the referrers fallback tag, each referrer and its bundle."""
    with httpx.Client(base_url=f"http://{host}/v2/{path}", timeout=10) as http:

        def manifest(reference: str) -> bytes | None:
            answer = http.get(f"/manifests/{reference}", headers={"Accept": ACCEPT})
            if answer.status_code == 404:
                return None
            answer.raise_for_status()
            return answer.content

        def blob(digest: str) -> bytes:
            answer = http.get(f"/blobs/{digest}")
            answer.raise_for_status()
            return answer.content

        found: LegacyEvidence | None = None
        signature_manifest = manifest(legacy_tag(digest))
        if signature_manifest is not None:
            layers = signature_layers(signature_manifest)
            found = LegacyEvidence(
                manifest=signature_manifest, payloads={x.digest: blob(x.digest) for x in layers}
            )
        bundles: list[BundleEvidence] = []
        index = manifest(fallback_tag(digest))
        if index is not None:
            for entry in referrer_manifests(index):
                referrer = manifest(entry.digest)
                assert referrer is not None
                layer = bundle_layer(referrer, digest=digest)
                bundles.append(BundleEvidence(manifest=referrer, bundle=blob(layer.digest)))
        return found, bundles


def copy_manifest(host: str, source: str, reference: str, target: str, tag: str) -> None:
    """Copy the manifest ``source:reference`` and its blobs to ``target:tag``, byte for byte:
    a signature moved to where it was not made for."""
    with httpx.Client(base_url=f"http://{host}/v2", timeout=10) as http:
        answer = http.get(f"/{source}/manifests/{reference}", headers={"Accept": ACCEPT})
        answer.raise_for_status()
        document = json.loads(answer.content)
        for descriptor in [document["config"], *document["layers"]]:
            content = http.get(f"/{source}/blobs/{descriptor['digest']}")
            content.raise_for_status()
            started = http.post(f"/{target}/blobs/uploads/")
            started.raise_for_status()
            location = started.headers["location"]
            separator = "&" if "?" in location else "?"
            http.put(
                f"{location}{separator}digest={descriptor['digest']}", content=content.content,
                headers={"Content-Type": "application/octet-stream"},
            ).raise_for_status()  # fmt: skip
        http.put(
            f"/{target}/manifests/{tag}", content=answer.content,
            headers={"Content-Type": answer.headers["content-type"]},
        ).raise_for_status()  # fmt: skip


def push_signatures(
    pusher: ImagePusher, path: str, digest: str, *, legacy: LegacyEvidence | None = None,
    bundles: Sequence[BundleEvidence] = (),
) -> None:  # fmt: skip
    """Store hand-made evidence for ``digest`` where cosign stores it on a registry without
    the referrers API: ``legacy`` under the ``.sig`` tag (its manifest byte for byte, its
    payloads as blobs); each of ``bundles`` as a manifest by digest, with its bundle blob,
    listed in an index under the fallback tag ``sha256-<hex>``."""
    pusher.put_blob(path, b"{}")  # the empty config every manifest here names
    if legacy is not None:
        for body in legacy.payloads.values():
            pusher.put_blob(path, body)
        media_type = json.loads(legacy.manifest)["mediaType"]
        pusher.put_manifest(path, legacy_tag(digest), media_type, legacy.manifest)
    if not bundles:
        return
    entries = []
    for evidence in bundles:
        if evidence.bundle is not None:
            pusher.put_blob(path, evidence.bundle)
        referrer = pusher.put_manifest(path, _digest(evidence.manifest), OCI_MANIFEST,
                                       evidence.manifest)  # fmt: skip
        entries.append({"mediaType": OCI_MANIFEST, "artifactType": BUNDLE_MEDIA_TYPE,
                        "digest": referrer, "size": len(evidence.manifest)})  # fmt: skip
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    pusher.put_manifest(path, fallback_tag(digest), OCI_INDEX, _compact(index))
