"""What building the linux/arm64 image on another machine rests on, checked before any build:
the mirrors must serve arm64 (asked of a mirror over HTTP, as apt would), the emulator must be
registered with the kernel — by e2e/binfmt itself, with no systemd here — with the flag that
lets containers use it, and the Dockerfile's builder stage must run natively and fetch the
target's wheels rather than build under emulation. (The build itself, and the arm64 image
answering under emulation, are tests/release/test_release_install.py's.)"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
from aptsources import Mirrors, missing_architecture

REPO = Path(__file__).resolve().parents[2]
BINFMT = Path("/proc/sys/fs/binfmt_misc")


@pytest.fixture
def amd64_only_mirror(tmp_path: Path) -> Iterator[str]:
    """A mirror over HTTP on loopback that carries bookworm (and its security suite) for amd64
    only, as many local mirrors and caches do."""
    for root, suite in (("debian", "bookworm"), ("debian-security", "bookworm-security")):
        index = tmp_path / root / "dists" / suite / "main" / "binary-amd64"
        index.mkdir(parents=True)
        (index / "Release").write_text(f"Archive: {suite}\nArchitecture: amd64\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_mirror_without_the_architecture_is_named_before_anything_is_built(
    amd64_only_mirror: str,
) -> None:
    found = Mirrors(
        "bookworm", f"{amd64_only_mirror}/debian", f"{amd64_only_mirror}/debian-security",
        "bookworm-security",
    )  # fmt: skip
    assert missing_architecture(found, "amd64") is None
    why = missing_architecture(found, "arm64")
    assert why is not None
    assert f"{amd64_only_mirror}/debian/dists/bookworm/main/binary-arm64/Release" in why
    assert "answered 404: that mirror does not serve arm64" in why
    assert "IMAGE_BASE_MIRROR" in why


def test_an_unreachable_mirror_is_named_too() -> None:
    found = Mirrors("bookworm", "http://127.0.0.1:9/debian", "http://127.0.0.1:9/s", "x")
    why = missing_architecture(found, "arm64", timeout=5)
    assert why is not None
    assert "could not be read" in why


def test_the_build_asks_about_the_architecture_first() -> None:
    script = (REPO / "e2e" / "build-image").read_text()
    check, build = script.index('"$here/binfmt" "$arch"'), script.index("mmdebstrap --quiet")
    assert check < script.index("check=(--arch") < build


# A developer's machine without binfmt_misc (not Linux) skips; CI's must have it, and fails.
@pytest.mark.skipif(
    not BINFMT.exists() and os.environ.get("CI") != "true",
    reason="no /proc/sys/fs/binfmt_misc (not Linux)",
)
def test_binfmt_registers_the_arm64_emulator_for_containers_and_is_idempotent() -> None:
    for _ in range(2):
        done = subprocess.run(
            [str(REPO / "e2e" / "binfmt"), "arm64"], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    entry = (BINFMT / "qemu-aarch64").read_text().splitlines()
    assert "enabled" in entry
    assert any(line.startswith("interpreter ") and "aarch64" in line for line in entry)
    (flags,) = [line for line in entry if line.startswith("flags:")]
    assert "F" in flags.split(":", 1)[1]  # opened at registration: usable inside containers
    # An ARM64 ELF runs here, emulated: the emulator answers for itself.
    qemu = subprocess.run(
        ["/usr/bin/qemu-aarch64-static", "--version"], capture_output=True, text=True, check=True
    )
    assert "qemu-aarch64" in qemu.stdout


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("enabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: PO\n", "without the F flag"),
        ("disabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: POF\n", "but disabled"),
    ],
    ids=["no-F-flag", "disabled"],
)
def test_binfmt_refuses_a_registration_containers_cannot_use(
    tmp_path: Path, entry: str, said: str
) -> None:
    """A registration someone else made, which the script leaves as it is but will not build
    on (a stand-in directory: the machine's own may not be broken for a test)."""
    (tmp_path / "register").write_text("")
    (tmp_path / "qemu-aarch64").write_text(entry)
    done = subprocess.run(
        [str(REPO / "e2e" / "binfmt"), "arm64"], capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "BINFMT_MISC": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 1
    assert said in done.stderr
    assert (tmp_path / "register").read_text() == ""  # nothing registered over it


def test_binfmt_refuses_an_architecture_it_has_no_emulator_for() -> None:
    done = subprocess.run(
        [str(REPO / "e2e" / "binfmt"), "sparc"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "no emulator known for sparc" in done.stderr


def test_the_builder_stage_runs_natively_and_installs_the_targets_binary_wheels() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "FROM --platform=${BUILDPLATFORM} ${BUILDER_BASE} AS builder" in dockerfile
    assert "FROM --platform=${TARGETPLATFORM} ${RUNTIME_BASE}" in dockerfile
    run = dockerfile.split("AS builder", 1)[1].split("FROM ", 1)[0]
    assert "--only-binary=:all:" in run
    assert '--platform=" + tag' in run
    assert "arm64) cpu=aarch64" in run
    build = (REPO / "e2e" / "build-image").read_text()
    assert '--build-arg "BUILDPLATFORM=linux/$native"' in build
    assert 'builder_base=$(base minbase "$IMAGE_BUILDER_PACKAGES" "$native")' in build
