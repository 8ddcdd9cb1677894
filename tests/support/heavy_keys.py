"""Eight RSA-8192 key pairs: the costliest keys a policy may list, for tests of what a hostile
policy costs.

Generating one takes from seconds to a minute of CPU (a prime search), so they were generated
once (``rsa.generate_private_key(65537, 8192)``) and are committed under ``keys/``. They are
test material: nothing anywhere trusts them.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from support.signing import TestKey

__all__ = ["KEYS_DIR", "rsa8192_keys"]

KEYS_DIR = Path(__file__).parent / "keys"


def rsa8192_keys() -> list[TestKey]:
    """The eight committed RSA-8192 keys, in order."""
    keys = []
    for index in range(8):
        loaded = serialization.load_pem_private_key(
            (KEYS_DIR / f"rsa8192-{index}.pem").read_bytes(), password=None
        )
        assert isinstance(loaded, rsa.RSAPrivateKey)
        assert loaded.key_size == 8192
        keys.append(TestKey(loaded))
    return keys
