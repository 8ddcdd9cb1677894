"""Certificates for servers on loopback: made by openssl, trusted by naming the file."""

from __future__ import annotations

import subprocess
from pathlib import Path


def loopback_certificate(directory: Path) -> tuple[Path, Path]:
    """``tls.key`` and ``tls.crt`` in ``directory``: a self-signed certificate of 127.0.0.1 (made
    by openssl), its own trust anchor."""
    key, cert = directory / "tls.key", directory / "tls.crt"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return key, cert
