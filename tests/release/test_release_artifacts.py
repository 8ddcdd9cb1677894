"""What `make release` puts in dist/, step by step, without a cluster: the packaged chart is
this version's, carries the CRD and defaults to the released image, pinned to its index digest
(and runs the tag when told to); the wheel is the CLI of this version, with the kubectl plugin;
SHA256SUMS is what ``sha256sum -c`` checks; its cosign signature verifies with the public key
(cosign's and openssl's) and fails on changed sums; the version lives in one place and the
release refuses a chart that says otherwise. The whole run with both platforms' images, a push
and an install from the registry is tests/release/test_release_install.py."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from support.cosign_env import key_pair
from support.helm_env import KUBE_VERSION, helm, helm_binary, of_kind, only, operator_container

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "release"))
import release
from release import Push, ReleaseError

REPO = release.REPO
VERSION = release.project_version()
CRD_NAME = "imagerefreshpolicies.images.tracebloc.io"
# sha256 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt).
APACHE_2_0 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


INDEX = "sha256:" + "1d" * 32


def test_the_packaged_chart_is_this_version_carries_the_crd_and_defaults_to_the_release_image(
    tmp_path: Path,
) -> None:
    archive = release.package_chart(helm_binary(), VERSION, tmp_path, INDEX)
    assert archive.name == f"imagerefresh-{VERSION}.tgz"
    with tarfile.open(archive) as tar:
        member = tar.extractfile("imagerefresh/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    rendered = helm(
        "template", "r", str(archive), "--namespace", "tracebloc", "--include-crds",
        "--kube-version", KUBE_VERSION,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    objects = rendered.objects
    (crd,) = of_kind(objects, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == CRD_NAME
    assert only(objects, "Deployment")
    assert operator_container(objects)["image"] == f"{release.IMAGE_REPOSITORY}@{INDEX}"
    # Overridable: another registry's copy (the same digest), or the tag.
    for values, image in (
        ({"image": {"repository": "registry.example/p/imagerefresh"}},
         f"registry.example/p/imagerefresh@{INDEX}"),
        ({"image": {"digest": ""}}, f"{release.IMAGE_REPOSITORY}:{VERSION}"),
    ):  # fmt: skip
        again = helm(
            "template", "r", str(archive), "--namespace", "tracebloc", "--kube-version",
            KUBE_VERSION, values=values,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert operator_container(again.objects)["image"] == image
    # The checkout's chart is untouched: it runs the tag.
    assert 'digest: ""' in (REPO / "chart" / "values.yaml").read_text()


def test_pinning_a_digest_rewrites_the_one_image_digest_line_and_refuses_anything_else(
    tmp_path: Path,
) -> None:
    values = tmp_path / "values.yaml"
    original = (REPO / "chart" / "values.yaml").read_text()
    values.write_text(original)
    release.pin_digest(values, INDEX)
    changed = [
        (a, b)
        for a, b in zip(original.splitlines(), values.read_text().splitlines(), strict=True)
        if a != b
    ]
    assert changed == [('  digest: ""', f'  digest: "{INDEX}"')]
    with pytest.raises(ReleaseError, match="not a sha256 digest"):
        release.pin_digest(values, "latest")
    values.write_text("image:\n  repository: x\n")
    with pytest.raises(ReleaseError, match="no `digest"):
        release.pin_digest(values, INDEX)


def test_the_release_names_both_platforms_archives_and_the_index() -> None:
    assert release.artifact_names("1.2.3") == {
        "chart": "imagerefresh-1.2.3.tgz",
        "index": "imagerefresh-image-1.2.3.oci.tar",
        "image-amd64": "imagerefresh-image-1.2.3-linux-amd64.tar",
        "image-arm64": "imagerefresh-image-1.2.3-linux-arm64.tar",
        "wheel": "imagerefresh-1.2.3-py3-none-any.whl",
    }


def test_the_release_names_its_image_as_the_charts_default_repository() -> None:
    values = yaml.safe_load((REPO / "chart" / "values.yaml").read_text())
    assert values["image"]["repository"] == release.IMAGE_REPOSITORY
    assert values["image"]["tag"] == ""  # the appVersion, i.e. the release's version


def test_the_wheel_is_the_cli_of_this_version_with_its_license_and_no_tests(
    tmp_path: Path,
) -> None:
    wheel = release.build_wheel(VERSION, tmp_path)
    assert wheel.name == f"imagerefresh-{VERSION}-py3-none-any.whl"
    info = f"imagerefresh-{VERSION}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert f"Version: {VERSION}\n" in metadata
    assert "License-Expression: Apache-2.0\n" in metadata
    assert "imagerefresh = imagerefresh.entry:main" in entry_points
    assert "kubectl-imagerefresh = imagerefresh.entry:kubectl_plugin" in entry_points
    assert "imagerefresh/cli/__init__.py" in names
    # Exactly the package's sources: nothing a stale build directory still holds.
    sources = {
        str(path.relative_to(REPO / "operator"))
        for path in (REPO / "operator" / "imagerefresh").rglob("*.py")
    }
    assert {n for n in names if n.endswith(".py")} == sources
    assert f"{info}/licenses/LICENSE" in names
    assert not [n for n in names if n.startswith(("tests/", "support/", "e2e/", "bench/"))]
    # The same commit gives the same bytes (the files' dates are the commit's).
    (tmp_path / "again").mkdir()
    again = release.build_wheel(VERSION, tmp_path / "again")
    assert release.sha256(again) == release.sha256(wheel)


def test_the_license_is_the_unmodified_apache_license_2_0() -> None:
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0


def test_sha256sums_is_what_sha256sum_checks(tmp_path: Path) -> None:
    files = []
    for name, content in (("b.tgz", b"chart"), ("a.whl", b"wheel"), ("c.tar", b"image")):
        (tmp_path / name).write_bytes(content)
        files.append(tmp_path / name)
    sums = release.write_sums(files, tmp_path)
    assert [line.split("  ")[1] for line in sums.read_text().splitlines()] == [
        "a.whl", "b.tgz", "c.tar",
    ]  # fmt: skip
    checked = subprocess.run(
        ["sha256sum", "--check", "--strict", sums.name], cwd=tmp_path, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (tmp_path / "b.tgz").write_bytes(b"changed")
    changed = subprocess.run(
        ["sha256sum", "--check", sums.name], cwd=tmp_path, capture_output=True, check=False
    )
    assert changed.returncode != 0


def test_the_signature_of_the_sums_verifies_with_the_public_key_offline_and_not_after_a_change(
    cosign: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = key_pair(cosign, tmp_path / "keys")
    (tmp_path / "a.whl").write_bytes(b"wheel")
    sums = release.write_sums([tmp_path / "a.whl"], tmp_path)
    monkeypatch.setenv("COSIGN_PASSWORD", keys.password)
    # No network here: signing and verifying must need neither Rekor, Fulcio nor TUF.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    signature = release.sign(cosign, keys.private, sums)
    assert signature.name == "SHA256SUMS.sig"
    release.verify(cosign, keys.public, sums, signature)
    # A user without cosign: the signature is ECDSA over SHA-256, base64-encoded.
    raw = tmp_path / "sig.bin"
    raw.write_bytes(base64.b64decode(signature.read_text()))
    with_openssl = subprocess.run(
        ["openssl", "dgst", "-sha256", "-verify", str(keys.public), "-signature", str(raw),
         str(sums)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert with_openssl.stdout.strip() == "Verified OK", with_openssl.stderr
    sums.write_text(sums.read_text().replace("a.whl", "b.whl"))
    with pytest.raises(ReleaseError, match="cosign verify-blob failed"):
        release.verify(cosign, keys.public, sums, signature)


def copy_of_version_files(directory: Path) -> Path:
    (directory / "chart").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", directory / "pyproject.toml")
    shutil.copy(REPO / "chart" / "Chart.yaml", directory / "chart" / "Chart.yaml")
    return directory


def test_set_version_writes_the_one_version_into_pyproject_and_the_chart(tmp_path: Path) -> None:
    repo = copy_of_version_files(tmp_path)
    release.set_version("1.2.3-rc.1", repo)
    assert release.check_version(repo) == "1.2.3-rc.1"
    chart = yaml.safe_load((repo / "chart" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == ("1.2.3-rc.1", "1.2.3-rc.1")
    assert 'version = "1.2.3-rc.1"' in (repo / "pyproject.toml").read_text()
    with pytest.raises(ReleaseError, match="not a version"):
        release.set_version("v1", repo)


def test_a_chart_whose_version_differs_from_pyprojects_is_refused_with_the_fix(
    tmp_path: Path,
) -> None:
    repo = copy_of_version_files(tmp_path)
    chart = repo / "chart" / "Chart.yaml"
    chart.write_text(chart.read_text().replace(f'appVersion: "{VERSION}"', 'appVersion: "9.9.9"'))
    with pytest.raises(ReleaseError) as refused:
        release.check_version(repo)
    assert "appVersion 9.9.9" in str(refused.value)
    assert f"--set-version {VERSION}" in str(refused.value)


@pytest.mark.parametrize(
    ("given", "image", "charts"),
    [
        ("127.0.0.1:5000/team/edge", "127.0.0.1:5000/team/edge/imagerefresh:1.0.0",
         "oci://127.0.0.1:5000/team/edge/charts"),
        ("registry.example/", "registry.example/imagerefresh:1.0.0", "oci://registry.example/charts"),
        ("[::1]:5000/x", "[::1]:5000/x/imagerefresh:1.0.0", "oci://[::1]:5000/x/charts"),
    ],
)  # fmt: skip
def test_push_sends_the_image_and_the_chart_below_the_given_prefix(
    given: str, image: str, charts: str
) -> None:
    to = Push.parse(given)
    assert (to.image("1.0.0"), to.charts) == (image, charts)


@pytest.mark.parametrize(
    "given", ["https://registry.example/x", "registry.example/Team", "registry.example/x:tag", ""]
)
def test_a_push_target_that_is_not_registry_and_prefix_is_refused(given: str) -> None:
    with pytest.raises(ReleaseError, match="is not REGISTRY"):
        Push.parse(given)


def test_make_release_passes_its_variables_to_the_script() -> None:
    dry = subprocess.run(
        ["make", "-n", "-s", "release", "DIST=/tmp/d", "COSIGN_KEY=/k/cosign.key",
         "PUSH=127.0.0.1:5000/p", "PUSH_PLAIN_HTTP=true"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    line = " ".join(dry.replace("\\\n", " ").split())
    assert (
        "release/release.py --dist '/tmp/d' --cosign-key '/k/cosign.key' "
        "--push '127.0.0.1:5000/p' --plain-http" in line
    ), dry
    insecure = subprocess.run(
        ["make", "-n", "-s", "release", "PUSH=r.example/p", "PUSH_TLS_VERIFY=false"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "--insecure-skip-tls-verify" in insecure
    assert "--plain-http" not in insecure
