"""``make release``: the installable artifacts of this checkout's version, in ``dist/``.

The version is pyproject.toml's ``[project] version``, the one source: the package's metadata
(``imagerefresh --version``, the ``imagerefresh_build_info`` metric) comes from it, e2e/build-image
tags the image with it, and here it becomes the chart's ``version`` and ``appVersion`` (so the
chart's default image tag) and every file name. chart/Chart.yaml carries the same two values
for an install from a checkout; a test keeps them equal and this refuses to release when they
differ. ``--set-version X`` writes X into both.

``dist/`` then holds, for version V:

- ``imagerefresh-image-V.oci.tar``: the image for linux/amd64 and linux/arm64, one OCI image
  index over the two, as an OCI archive (a tar of an OCI image layout). ``skopeo copy --all
  --preserve-digests oci-archive:imagerefresh-image-V.oci.tar docker://REGISTRY/…:V`` puts it in
  a registry with the index digest unchanged;
- ``imagerefresh-V.tgz``: the chart (``helm package``, the CRD included), whose default image
  is ``docker.io/tracebloc/imagerefresh@<that index digest>`` (``image.digest``; set it empty to
  run the tag, or to another digest);
- ``imagerefresh-image-V-linux-amd64.tar`` and ``…-linux-arm64.tar``: each platform's image,
  named ``docker.io/tracebloc/imagerefresh:V``, as a docker-archive that ``podman load`` and
  ``docker load`` accept (they import one platform anyway: containers/podman#22882);
- ``imagerefresh-V-py3-none-any.whl``: the CLI (``pip install`` it with its dependencies), with
  the ``kubectl-imagerefresh`` plugin (``kubectl imagerefresh …``);
- ``SHA256SUMS`` over those (``sha256sum -c SHA256SUMS`` checks them) and, with
  ``--cosign-key``, ``SHA256SUMS.sig``: cosign's signature of it, made offline (no
  transparency log), checked with ``cosign verify-blob --key cosign.pub --signature
  SHA256SUMS.sig --insecure-ignore-tlog=true SHA256SUMS``.

The images are built by e2e/build-image, one per platform: the machine's own is `make image`'s
build (warm in seconds), the other is built with Debian's qemu-user-static for its one emulated
step (its base once, a few minutes; cached in $IMAGEREFRESH_CACHE like every one-time build).
podman puts them into one index (``podman manifest``), pushed in OCI format to a directory that
becomes the archive.

``--push REGISTRY[/PREFIX]`` also copies the index with both images to
``REGISTRY/PREFIX/imagerefresh:V`` (skopeo, exactly as above, with the caller's registry logins)
and the chart to ``oci://REGISTRY/PREFIX/charts`` (``helm push``; then ``helm install
oci://REGISTRY/PREFIX/charts/imagerefresh --version V --set
image.repository=REGISTRY/PREFIX/imagerefresh``: the pinned index digest is the same there).
``--plain-http`` for a registry without TLS, ``--insecure-skip-tls-verify`` for one whose
certificate is not trusted here (or, as skopeo's ``--dest-tls-verify=false``, one without TLS).

helm and cosign are the builds pinned in e2e/versions.env (e2e/build-binaries).

    release/release.py [--dist DIR] [--cosign-key KEY] [--push REGISTRY[/PREFIX]
                       [--plain-http | --insecure-skip-tls-verify]]
    release/release.py --set-version X
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "chart"
BUILD_BINARIES = REPO / "e2e" / "build-binaries"
BUILD_IMAGE = REPO / "e2e" / "build-image"
# The image's published name: chart/values.yaml's image.repository (a test keeps them equal).
IMAGE_REPOSITORY = "docker.io/tracebloc/imagerefresh"
# The platforms of the released image, each an architecture of linux.
PLATFORMS = ("amd64", "arm64")
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
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

__all__ = [
    "PLATFORMS",
    "Artifacts",
    "ReleaseError",
    "artifact_names",
    "project_version",
    "release",
]


class ReleaseError(Exception):
    """A release step failed; the message says which and what to do."""


@dataclass(frozen=True)
class Artifacts:
    """The files of one release, by what they are."""

    chart: Path
    index: Path  # the OCI archive of the multi-platform image
    platforms: dict[str, Path]  # architecture → its loadable docker-archive
    wheel: Path
    sums: Path
    digest: str  # the index's digest, the chart's default image.digest
    signature: Path | None = None

    def checksummed(self) -> list[Path]:
        return [self.chart, self.index, *self.platforms.values(), self.wheel]


def artifact_names(version: str) -> dict[str, str]:
    return {
        "chart": f"imagerefresh-{version}.tgz",
        "index": f"imagerefresh-image-{version}.oci.tar",
        **{f"image-{arch}": f"imagerefresh-image-{version}-linux-{arch}.tar" for arch in PLATFORMS},
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


def package_chart(helm: Path, version: str, dist: Path, digest: str | None = None) -> Path:
    """``helm package`` the chart; with ``digest``, its default ``image.digest`` is that."""
    with tempfile.TemporaryDirectory(prefix="imagerefresh-chart-") as tmp:
        source = Path(tmp) / "imagerefresh"
        shutil.copytree(CHART, source)  # symlinks (the CRD) become their files
        if digest is not None:
            pin_digest(source / "values.yaml", digest)
        run(
            [helm, "package", source, "--version", version, "--app-version", version,
             "--destination", dist],
            what="helm package",
        )  # fmt: skip
    chart = dist / artifact_names(version)["chart"]
    if not chart.is_file():
        raise ReleaseError(f"helm package wrote no {chart.name}")
    return chart


def pin_digest(values: Path, digest: str) -> None:
    """Write ``digest`` as ``image.digest`` into a chart's values.yaml (the one line under
    ``image:``), keeping its comments."""
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ReleaseError(f"{digest!r} is not a sha256 digest")
    text, count = re.subn(
        r'(^image:\n(?:[ #].*\n)*?  digest: )""', rf'\g<1>"{digest}"', values.read_text(),
        count=1, flags=re.MULTILINE,
    )  # fmt: skip
    if count != 1:
        raise ReleaseError(f'{values} has no `digest: ""` line under image:')
    values.write_text(text)


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


def built_image(arch: str) -> str:
    """The image for linux/``arch`` e2e/build-image builds (the machine's own is `make image`'s,
    warm: podman's layer cache); its local tag."""
    built = run([BUILD_IMAGE, "--platform", f"linux/{arch}"], what=f"e2e/build-image {arch}")
    return built.strip().splitlines()[-1]


def save_image(local: str, version: str, dist: Path, arch: str) -> Path:
    """One platform's image under its published name, as a docker-archive (skopeo names it in
    the archive, so podman's storage keeps its names: both platforms share the published one)."""
    archive = dist / artifact_names(version)[f"image-{arch}"]
    archive.unlink(missing_ok=True)
    run(
        ["skopeo", "copy", "--quiet", f"containers-storage:{local}",
         f"docker-archive:{archive}:{IMAGE_REPOSITORY}:{version}"],
        what=f"skopeo copy (the {arch} docker-archive)",
    )  # fmt: skip
    return archive


def image_index(images: dict[str, str], version: str, dist: Path) -> tuple[Path, str]:
    """The OCI archive of one image index over ``images`` (architecture → local tag), with the
    index's digest: what ``skopeo copy --all --preserve-digests`` pushes unchanged."""
    archive = dist / artifact_names(version)["index"]
    listed = f"localhost/imagerefresh-release-index:{version}"
    subprocess.run(["podman", "manifest", "rm", listed], capture_output=True, check=False)
    run(["podman", "manifest", "create", listed], what="podman manifest create")
    try:
        for arch in PLATFORMS:
            run(
                ["podman", "manifest", "add", "--os", "linux", "--arch", arch, listed,
                 f"containers-storage:{images[arch]}"],
                what=f"podman manifest add {arch}",
            )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="imagerefresh-index-", dir=dist) as tmp:
            layout = Path(tmp) / "layout"
            run(
                ["podman", "manifest", "push", "--quiet", "--all", "--format", "oci", listed,
                 f"oci:{layout}:{IMAGE_REPOSITORY}:{version}"],
                what="podman manifest push (an OCI layout)",
            )  # fmt: skip
            digest = _index_digest(layout)
            _tar_layout(layout, archive)
    finally:
        subprocess.run(["podman", "manifest", "rm", listed], capture_output=True, check=False)
    return archive, digest


def _index_digest(layout: Path) -> str:
    """The digest of the one image index an OCI layout's index.json names."""
    entries = json.loads((layout / "index.json").read_text()).get("manifests", [])
    indexes = [e for e in entries if e.get("mediaType") == OCI_INDEX]
    if len(indexes) != 1:
        raise ReleaseError(f"the OCI layout names {len(indexes)} image indexes, not 1: {entries}")
    digest = str(indexes[0]["digest"])
    blob = layout / "blobs" / "sha256" / digest.removeprefix("sha256:")
    if "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest() != digest:
        raise ReleaseError(f"the OCI layout's index blob is not {digest}")
    return digest


def _tar_layout(layout: Path, archive: Path) -> None:
    """An OCI archive: the layout's files at the tar's root, in a fixed order and with fixed
    dates and owners, so the same images give the same bytes."""
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in layout.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(layout)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o644
            with path.open("rb") as handle:
                tar.addfile(info, handle)


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


def push(helm: Path, index: Path, chart: Path, version: str, to: Push) -> dict[str, str]:
    """Push the image index (both platforms) and the chart; the references pushed, with their
    digests."""
    image = to.image(version)
    tls = ["--dest-tls-verify=false"] if to.plain_http or to.insecure else []
    with tempfile.TemporaryDirectory(prefix="imagerefresh-push-") as tmp:
        digest_file = Path(tmp) / "digest"
        run(
            ["skopeo", "copy", "--quiet", "--all", "--preserve-digests", *tls,
             "--digestfile", digest_file, f"oci-archive:{index}", f"docker://{image}"],
            what=f"skopeo copy --all {image}",
        )  # fmt: skip
        image_digest = digest_file.read_text().strip()
    flags = ["--plain-http"] if to.plain_http else []
    flags += ["--insecure-skip-tls-verify"] if to.insecure and not to.plain_http else []
    what = f"helm push {to.charts}"
    try:
        pushed = run([helm, "push", chart, to.charts, *flags], what=what, merged=True)
    except ReleaseError as error:
        # Not verifying TLS lets skopeo fall back to plain HTTP; helm needs to be told.
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
    stale = [*names.values(), SUMS, SIGNATURE, f"imagerefresh-image-{version}.tar"]
    for name in stale:  # never a signature of other sums
        (dist / name).unlink(missing_ok=True)
    tools = binaries("helm", *(["cosign"] if cosign_key is not None else []))
    log("the CLI's wheel")
    wheel = build_wheel(version, dist)
    images = {}
    for arch in PLATFORMS:
        log(f"the linux/{arch} image (e2e/build-image --platform linux/{arch})")
        images[arch] = built_image(arch)
    log("the image index over both platforms")
    index, digest = image_index(images, version, dist)
    platforms = {arch: save_image(images[arch], version, dist, arch) for arch in PLATFORMS}
    log(f"version {version}: the chart, its image pinned to the index {digest}")
    chart = package_chart(tools["helm"], version, dist, digest)
    artifacts = Artifacts(chart, index, platforms, wheel, dist / SUMS, digest)
    sums = write_sums(artifacts.checksummed(), dist)
    signature = sign(tools["cosign"], cosign_key, sums) if cosign_key is not None else None
    pushed = push(tools["helm"], index, chart, version, to) if to is not None else {}
    if to is not None and pushed.get(to.image(version)) != digest:
        raise ReleaseError(
            f"the registry stored the index as {pushed.get(to.image(version))}, not {digest}: "
            "the chart's pinned digest would not resolve there"
        )
    return replace(artifacts, signature=signature), pushed


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
    print(f"image index {artifacts.digest} (linux/{', linux/'.join(PLATFORMS)})")
    for reference, digest in pushed.items():
        print(f"pushed {reference}  {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
