"""``make release``: the installable artifacts of this checkout's version, in ``dist/``.

The version is pyproject.toml's ``[project] version``, the one source: the package's metadata
(``imagerefresh --version``, the ``imagerefresh_build_info`` metric) comes from it, e2e/build-image
tags the image with it, and here it becomes the chart's ``version`` and ``appVersion`` (so the
chart's default image tag) and every file name. chart/Chart.yaml carries the same two values
for an install from a checkout; a test keeps them equal and this refuses to release when they
differ. ``--set-version X`` writes X into both.

``dist/`` then holds, for version V:

- ``imagerefresh-V.tgz``: the chart (``helm package``, the CRD included);
- ``imagerefresh-image-V.tar``: the image `make image` builds, named
  ``docker.io/tracebloc/imagerefresh:V`` (the chart's default image), as a docker-archive that
  ``podman load``, ``docker load`` and ``skopeo copy docker-archive:…`` accept;
- ``imagerefresh-V-py3-none-any.whl``: the CLI (``pip install`` it with its dependencies);
- ``SHA256SUMS`` over those (``sha256sum -c SHA256SUMS`` checks them) and, with
  ``--cosign-key``, ``SHA256SUMS.sig``: cosign's signature of it, made offline (no
  transparency log), checked with ``cosign verify-blob --key cosign.pub --signature
  SHA256SUMS.sig --insecure-ignore-tlog=true SHA256SUMS``.

``--push REGISTRY[/PREFIX]`` also pushes the image to ``REGISTRY/PREFIX/imagerefresh:V`` (podman,
with the caller's registry logins) and the chart to ``oci://REGISTRY/PREFIX/charts`` (``helm
push``; then ``helm install oci://REGISTRY/PREFIX/charts/imagerefresh --version V``).
``--plain-http`` for a registry without TLS, ``--insecure-skip-tls-verify`` for one whose
certificate is not trusted here (or, as podman's ``--tls-verify=false``, one without TLS).

helm and cosign are the builds pinned in e2e/versions.env (e2e/build-binaries); podman builds
and saves the image (e2e/build-image, warm in seconds once built).

    release/release.py [--dist DIR] [--cosign-key KEY] [--push REGISTRY[/PREFIX]
                       [--plain-http | --insecure-skip-tls-verify]]
    release/release.py --set-version X
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "chart"
BUILD_BINARIES = REPO / "e2e" / "build-binaries"
BUILD_IMAGE = REPO / "e2e" / "build-image"
# The image's published name: chart/values.yaml's image.repository (a test keeps them equal).
IMAGE_REPOSITORY = "docker.io/tracebloc/imagerefresh"
SUMS = "SHA256SUMS"
# What the wheel is built from (as the Dockerfile's builder stage copies it).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "operator")
_NOT_SOURCES = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
SIGNATURE = "SHA256SUMS.sig"
# One registry path below a host: components of the distribution grammar, joined by `/`.
_PUSH = re.compile(
    r"(?P<host>[A-Za-z0-9.-]+(?::[0-9]+)?|\[[0-9A-Fa-f:]+\](?::[0-9]+)?)"
    r"(?P<prefix>(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
)

__all__ = ["Artifacts", "ReleaseError", "artifact_names", "project_version", "release"]


class ReleaseError(Exception):
    """A release step failed; the message says which and what to do."""


@dataclass(frozen=True)
class Artifacts:
    """The files of one release, by what they are."""

    chart: Path
    image: Path
    wheel: Path
    sums: Path
    signature: Path | None = None

    def checksummed(self) -> list[Path]:
        return [self.chart, self.image, self.wheel]


def artifact_names(version: str) -> dict[str, str]:
    return {
        "chart": f"imagerefresh-{version}.tgz",
        "image": f"imagerefresh-image-{version}.tar",
        "wheel": f"imagerefresh-{version}-py3-none-any.whl",
    }


def log(message: str) -> None:
    print(f"release: {message}", file=sys.stderr, flush=True)


def run(argv: Sequence[str | Path], *, what: str, merged: bool = False, **kwargs: object) -> str:
    """Run a step; its stdout (and stderr after it, ``merged``). A failure raises with the
    step's own error output."""
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, **kwargs
    )  # type: ignore[call-overload]
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()[-3000:]
        raise ReleaseError(f"{what} failed (exit {done.returncode}):\n{output}")
    return str(done.stdout) + (str(done.stderr) if merged else "")


# -- the version ------------------------------------------------------------------------------


def project_version(repo: Path = REPO) -> str:
    return str(tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"])


def chart_versions(chart: Path = CHART) -> tuple[str, str]:
    """Chart.yaml's ``version`` and ``appVersion`` (read as the two lines they are)."""
    text = (chart / "Chart.yaml").read_text()
    found = {}
    for key in ("version", "appVersion"):
        match = re.search(rf"^{key}:\s*\"?([^\"\s]+)\"?\s*$", text, re.MULTILINE)
        if match is None:
            raise ReleaseError(f"{chart / 'Chart.yaml'} has no {key}")
        found[key] = match.group(1)
    return found["version"], found["appVersion"]


def check_version(repo: Path = REPO) -> str:
    version = project_version(repo)
    chart = chart_versions(repo / "chart")
    if chart != (version, version):
        raise ReleaseError(
            f"pyproject.toml says {version} but chart/Chart.yaml says version {chart[0]}, "
            f"appVersion {chart[1]}: run `release/release.py --set-version {version}`"
        )
    return version


def set_version(version: str, repo: Path = REPO) -> None:
    """Write ``version`` into pyproject.toml and chart/Chart.yaml (version and appVersion)."""
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(?:[-+.][0-9A-Za-z.-]+)?", version):
        raise ReleaseError(f"{version!r} is not a version like 1.2.3 or 1.2.3-rc.1")
    edits = [
        (repo / "pyproject.toml", r'^version = "[^"]*"$', f'version = "{version}"'),
        (repo / "chart" / "Chart.yaml", r"^version: .*$", f"version: {version}"),
        (repo / "chart" / "Chart.yaml", r"^appVersion: .*$", f'appVersion: "{version}"'),
    ]
    for path, pattern, line in edits:
        text, count = re.subn(pattern, line, path.read_text(), count=1, flags=re.MULTILINE)
        if count != 1:
            raise ReleaseError(f"{path} has no line matching {pattern}")
        path.write_text(text)


# -- the steps --------------------------------------------------------------------------------


def binaries(*names: str) -> dict[str, Path]:
    """The pinned builds of ``names`` (built once, cached by version)."""
    run([BUILD_BINARIES, *names], what=f"e2e/build-binaries {' '.join(names)}")
    bin_dir = Path(run([BUILD_BINARIES, "--print-bin-dir"], what="e2e/build-binaries").strip())
    return {name: bin_dir / name for name in names}


def package_chart(helm: Path, version: str, dist: Path) -> Path:
    run(
        [helm, "package", CHART, "--version", version, "--app-version", version,
         "--destination", dist],
        what="helm package",
    )  # fmt: skip
    chart = dist / artifact_names(version)["chart"]
    if not chart.is_file():
        raise ReleaseError(f"helm package wrote no {chart.name}")
    return chart


def build_wheel(version: str, dist: Path) -> Path:
    """The CLI's wheel, built by pip as the image's builder stage builds it (no dependencies)."""
    env = dict(os.environ)
    # The files' dates in the wheel are the last commit's, so a rebuild gives the same bytes.
    stamp = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True
    ).stdout.strip()
    if stamp:
        env["SOURCE_DATE_EPOCH"] = stamp
    with tempfile.TemporaryDirectory(prefix="imagerefresh-wheel-") as tmp:
        # From a copy of what the image's build copies: setuptools' build/ and egg-info in the
        # checkout can hold files the sources no longer have.
        source, out = Path(tmp) / "src", Path(tmp) / "out"
        source.mkdir()
        for name in WHEEL_SOURCES:
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, source / name, ignore=_NOT_SOURCES)
            else:
                shutil.copy2(REPO / name, source / name)
        run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out,
             source],
            what="pip wheel", env=env,
        )  # fmt: skip
        name = artifact_names(version)["wheel"]
        built = Path(out) / name
        if not built.is_file():
            raise ReleaseError(f"pip wheel wrote {sorted(os.listdir(out))}, not {name}")
        return Path(shutil.move(built, dist / name))


def built_image() -> str:
    """The image `make image` builds (warm: podman's layer cache); its local tag."""
    return run([BUILD_IMAGE], what="e2e/build-image").strip().splitlines()[-1]


def save_image(local: str, version: str, dist: Path) -> Path:
    """``podman save`` the image under its published name, as a docker-archive."""
    published = f"{IMAGE_REPOSITORY}:{version}"
    archive = dist / artifact_names(version)["image"]
    existed = subprocess.run(["podman", "image", "exists", published], check=False).returncode == 0
    run(["podman", "tag", local, published], what="podman tag")
    try:
        run(
            ["podman", "save", "--quiet", "--format", "docker-archive", "--output", archive,
             published],
            what="podman save",
        )  # fmt: skip
    finally:
        if not existed:  # leave podman's storage as it was
            subprocess.run(["podman", "untag", local, published], check=False)
    return archive


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_sums(files: Sequence[Path], dist: Path) -> Path:
    """``SHA256SUMS`` in sha256sum's format (two spaces, then the name), sorted by name."""
    sums = dist / SUMS
    sums.write_text(
        "".join(f"{sha256(p)}  {p.name}\n" for p in sorted(files, key=lambda p: p.name))
    )
    return sums


def sign(cosign: Path, key: Path, sums: Path) -> Path:
    """cosign's signature of ``sums`` with ``key``, offline (no transparency log, no Fulcio),
    checked against the key's public half before it is kept. A password-protected key reads
    its password from $COSIGN_PASSWORD (cosign's own variable)."""
    signature = sums.with_name(SIGNATURE)
    run(
        [cosign, "sign-blob", "--yes", "--key", key, "--use-signing-config=false",
         "--new-bundle-format=false", "--tlog-upload=false", "--output-signature", signature,
         sums],
        what="cosign sign-blob",
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="imagerefresh-cosign-") as tmp:
        public = Path(tmp) / "cosign.pub"
        public.write_text(run([cosign, "public-key", "--key", key], what="cosign public-key"))
        verify(cosign, public, sums, signature)
    signature.chmod(0o644)  # cosign writes it private; it is published with the sums
    return signature


def verify(cosign: Path, public_key: Path, sums: Path, signature: Path) -> None:
    run(
        [cosign, "verify-blob", "--key", public_key, "--signature", signature,
         "--insecure-ignore-tlog=true", sums],
        what="cosign verify-blob",
    )  # fmt: skip


@dataclass(frozen=True)
class Push:
    """Where ``--push`` sends the image and the chart."""

    registry: str  # host[:port]
    prefix: str  # "" or "/a/b"
    plain_http: bool = False
    insecure: bool = False

    @classmethod
    def parse(cls, text: str, *, plain_http: bool = False, insecure: bool = False) -> Push:
        match = _PUSH.fullmatch(text.rstrip("/"))
        if match is None:
            raise ReleaseError(
                f"--push {text!r} is not REGISTRY[/PREFIX] (e.g. registry.example:5000/team, "
                "no scheme, no tag; lowercase path)"
            )
        return cls(match["host"], match["prefix"], plain_http, insecure)

    def image(self, version: str) -> str:
        return f"{self.registry}{self.prefix}/imagerefresh:{version}"

    @property
    def charts(self) -> str:
        return f"oci://{self.registry}{self.prefix}/charts"


def push(helm: Path, local: str, chart: Path, version: str, to: Push) -> dict[str, str]:
    """Push the image and the chart; the references pushed, with their digests."""
    image = to.image(version)
    tls = ["--tls-verify=false"] if to.plain_http or to.insecure else []
    with tempfile.TemporaryDirectory(prefix="imagerefresh-push-") as tmp:
        digest_file = Path(tmp) / "digest"
        run(
            ["podman", "push", "--quiet", *tls, "--digestfile", digest_file, local,
             f"docker://{image}"],
            what=f"podman push {image}",
        )  # fmt: skip
        image_digest = digest_file.read_text().strip()
    flags = ["--plain-http"] if to.plain_http else []
    flags += ["--insecure-skip-tls-verify"] if to.insecure and not to.plain_http else []
    what = f"helm push {to.charts}"
    try:
        pushed = run([helm, "push", chart, to.charts, *flags], what=what, merged=True)
    except ReleaseError as error:
        # Not verifying TLS lets podman fall back to plain HTTP; helm needs to be told.
        if not (to.insecure and "HTTP response to HTTPS client" in str(error)):
            raise
        pushed = run([helm, "push", chart, to.charts, "--plain-http"], what=what, merged=True)
    match = re.search(r"Digest:\s*(sha256:[0-9a-f]{64})", pushed)
    chart_ref = f"{to.charts}/imagerefresh:{version}"
    return {image: image_digest, chart_ref: match.group(1) if match else "?"}


# -- the whole release ------------------------------------------------------------------------


def release(
    dist: Path, *, cosign_key: Path | None = None, to: Push | None = None
) -> tuple[Artifacts, dict[str, str]]:
    version = check_version()
    names = artifact_names(version)
    if cosign_key is not None and not cosign_key.is_file():
        raise ReleaseError(f"the cosign key {cosign_key} does not exist")
    dist.mkdir(parents=True, exist_ok=True)
    for stale in [*names.values(), SUMS, SIGNATURE]:  # never a signature of other sums
        (dist / stale).unlink(missing_ok=True)
    tools = binaries("helm", *(["cosign"] if cosign_key is not None else []))
    log(f"version {version}: the chart")
    chart = package_chart(tools["helm"], version, dist)
    log("the CLI's wheel")
    wheel = build_wheel(version, dist)
    log("the image (e2e/build-image)")
    local = built_image()
    image = save_image(local, version, dist)
    sums = write_sums([chart, image, wheel], dist)
    signature = sign(tools["cosign"], cosign_key, sums) if cosign_key is not None else None
    pushed = push(tools["helm"], local, chart, version, to) if to is not None else {}
    return Artifacts(chart, image, wheel, sums, signature), pushed


def human(size: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="release/release.py", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--dist", type=Path, default=REPO / "dist", help="default: dist/")
    parser.add_argument("--cosign-key", type=Path, help="sign SHA256SUMS with this cosign key")
    parser.add_argument("--push", metavar="REGISTRY[/PREFIX]", help="push the image and chart")
    parser.add_argument("--plain-http", action="store_true", help="the registry speaks HTTP")
    parser.add_argument(
        "--insecure-skip-tls-verify", action="store_true", help="do not verify its certificate"
    )
    parser.add_argument("--set-version", metavar="X", help="write X as the version and stop")
    args = parser.parse_args(argv)
    try:
        if args.set_version:
            set_version(args.set_version)
            log(f"pyproject.toml and chart/Chart.yaml now say {args.set_version}")
            return 0
        to = None
        if args.push:
            to = Push.parse(
                args.push, plain_http=args.plain_http, insecure=args.insecure_skip_tls_verify
            )
        artifacts, pushed = release(args.dist, cosign_key=args.cosign_key, to=to)
    except ReleaseError as error:
        log(f"error: {error}")
        return 1
    files = [*artifacts.checksummed(), artifacts.sums]
    files += [artifacts.signature] if artifacts.signature is not None else []
    for path in files:
        print(f"{path}  ({human(path.stat().st_size)})")
    for reference, digest in pushed.items():
        print(f"pushed {reference}  {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
