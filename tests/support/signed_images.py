"""Images signed by the real cosign on both test registries: the ``cosign_signed`` fixture.

Per registry — distribution 2.8 (no referrers API: cosign stores bundles under the fallback tag
``sha256-<hex>``) and go-containerregistry's (the referrers API: cosign 3 attaches bundles
through it) — one image signed in the legacy format (the ``.sig`` tag), one in the bundle format,
and one unsigned, all in :data:`PATH`; made once per session, offline (see support/signing.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from imagerefresh.signatures import PublicKey, parse_public_key

from support.cosign_env import key_pair
from support.referrers_env import ReferrersRegistry
from support.registry_env import ImagePusher
from support.signing import cosign_sign

__all__ = ["CASES", "PATH", "SignedImages", "cosign_signed"]

PATH = "signed/app"
PASSWORD = "signed-images"
# case → the format cosign signs it in (None: not signed)
CASES: dict[str, bool | None] = {"legacy": False, "bundle": True, "unsigned": None}


@dataclass(frozen=True)
class SignedImages:
    hosts: dict[str, str]  # "distribution" / "referrers" → host:port
    digests: dict[tuple[str, str], str]  # (registry, case) → digest
    main: PublicKey  # the key every signed case is signed by
    other: PublicKey  # a key that signed nothing here

    def digest(self, registry: str, case: str) -> str:
        return self.digests[(registry, case)]


@pytest.fixture(scope="session")
def cosign_signed(
    registry: str,
    referrers_registry: ReferrersRegistry,
    cosign: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> SignedImages:
    work = tmp_path_factory.mktemp("cosign-signed")
    main, other = key_pair(cosign, work / "main", PASSWORD), key_pair(cosign, work / "other")
    hosts = {"distribution": registry, "referrers": referrers_registry.host}
    digests = {}
    for name, host in hosts.items():
        pusher = ImagePusher(host)
        try:
            for case, bundle_format in CASES.items():
                digest = pusher.push(PATH, case, seed=f"signed-{case}").digest
                if bundle_format is not None:
                    cosign_sign(cosign, main.private, f"{host}/{PATH}@{digest}",
                                bundle_format=bundle_format, password=PASSWORD)  # fmt: skip
                digests[(name, case)] = digest
        finally:
            pusher.close()
    return SignedImages(
        hosts,
        digests,
        parse_public_key(main.public.read_text()),
        parse_public_key(other.public.read_text()),
    )
