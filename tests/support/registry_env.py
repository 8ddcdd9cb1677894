"""The real registry the tests talk to, and images pushed into it through the registry API.

A session fixture starts distribution's registry (Debian's ``docker-registry serve CONFIG``) on
a free loopback port — or uses ``IMAGEREFRESH_TEST_REGISTRY`` when the local environment
(``e2e/local up``) already runs one. Tests push images with :class:`ImagePusher`, which speaks
the registry HTTP API (blob uploads, manifest PUTs) like ``docker push`` does and returns the
digest the registry computed, so assertions compare with what the registry says, not with
what the test believes.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from imagerefresh.registry import RegistryClient

from support.hostile_registry import HostileRegistry
from support.hub_front import HubFront

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
import realnode

__all__ = ["ImagePusher", "LoggedRequest", "PushedImage", "RegistryServer", "free_port"]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
PLATFORMS = (("linux", "amd64"), ("linux", "arm64"))


class FakeClock:
    """A wall clock the test moves by hand (token lifetimes, rate-limit windows)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def client_for(*hosts: str, **kwargs: object) -> RegistryClient:
    """A registry client speaking plain HTTP to ``hosts``, retrying without real waits."""
    return RegistryClient(insecure_registries=hosts, backoff=0.01, **kwargs)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the registry's access log has it."""

    method: str
    uri: str
    status: int


# The access log (Apache's combined format):
# 127.0.0.1 - - [05/Dec/2026:07:51:07 +0000] "HEAD /v2/team/app/manifests/prod HTTP/1.1" 401 151 …
_ACCESS_LINE = re.compile(
    r'^\S+ \S+ \S+ \[[^]]+\] "(?P<method>[A-Z]+) (?P<uri>\S+) [^"]*" (?P<status>\d{3}) '
)
_AUTH_FAILURE = re.compile(r'"msg":"error authenticating user \\"(?P<user>[^\\]*)\\": ')


@dataclass
class RegistryServer:
    """A distribution registry process on 127.0.0.1 with storage in ``root``; over TLS when
    given ``tls`` (a certificate of 127.0.0.1 and its key, ``tls.crt`` and ``tls.key``); asking
    for Basic credentials when given ``htpasswd`` (a file of ``user:bcrypt-hash`` lines, the
    only hashes distribution accepts; it needs TLS for them)."""

    root: Path
    port: int
    tls: Path | None = None
    htpasswd: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / "registry.log"

    def _http(self) -> dict[str, object]:
        if self.tls is None:
            return {"addr": self.host}
        tls = {"certificate": str(self.tls / "tls.crt"), "key": str(self.tls / "tls.key")}
        return {"addr": self.host, "tls": tls}

    def _auth(self) -> dict[str, object]:
        if self.htpasswd is None:
            return {}
        return {"auth": {"htpasswd": {"realm": "imagerefresh-test", "path": str(self.htpasswd)}}}

    def _answers(self) -> bool:
        if self.tls is None:
            scheme, verify = "http", ssl.create_default_context()
        else:
            scheme, verify = "https", ssl.create_default_context(cafile=self.tls / "tls.crt")
        try:
            answer = httpx.get(f"{scheme}://{self.host}/v2/", timeout=1, verify=verify)
        except httpx.HTTPError:
            return False
        # Asking for credentials is an answer too.
        return answer.status_code == (401 if self.htpasswd is not None else 200)

    def requests(self) -> list[LoggedRequest]:
        """Every request the registry answered, in order (its access log)."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            match = _ACCESS_LINE.match(line)
            if match is not None:
                found.append(LoggedRequest(match["method"], match["uri"], int(match["status"])))
        return found

    def authentication_failures(self) -> list[str]:
        """The users whose credentials the registry checked and refused, in order."""
        text = self.log.read_text(errors="replace")
        return [match["user"] for match in _AUTH_FAILURE.finditer(text)]

    def start(self) -> None:
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RuntimeError(
                "docker-registry is not installed; `make setup` installs the Debian package"
            )
        config = self.root / "config.yml"
        config.write_text(
            json.dumps(  # JSON is YAML; the registry reads it as its config file
                {
                    "version": 0.1,
                    # With credentials asked for, every answer is logged: tests read them.
                    "log": (
                        {"level": "info", "formatter": "json"}
                        if self.htpasswd is not None
                        else {"level": "warn"}
                    ),
                    "storage": {
                        "filesystem": {"rootdirectory": str(self.root / "data")},
                        "delete": {"enabled": True},
                    },
                    "http": self._http(),
                    **self._auth(),
                }
            )
        )
        log = self.log.open("wb")
        self.process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log)
        try:
            self._wait_until_it_answers()
        except BaseException:
            self.stop()  # a registry that never answered is not left running
            raise

    def _wait_until_it_answers(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"docker-registry exited; see {self.root / 'registry.log'}")
            if self._answers():
                return
            time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not answer on {self.host}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@dataclass(frozen=True)
class PushedImage:
    """What the registry answered to a push."""

    repository: str  # host:port/path
    tag: str
    digest: str  # the digest the registry returned for the top-level manifest
    media_type: str
    body: bytes

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"


def _layer_tar(files: dict[str, bytes]) -> bytes:
    """An uncompressed tar of ``files`` at the root, byte-for-byte reproducible."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            archive.addfile(info, io.BytesIO(content))
    return out.getvalue()


@functools.cache
def _busybox_layer() -> tuple[bytes, bytes]:
    """(tar, gzipped tar) of Debian's static busybox as /bin/busybox: what makes an image
    runnable on the real node (the same bytes as e2e/local's sandbox image)."""
    tar = realnode.busybox_layer()
    return tar, gzip.compress(tar, mtime=0)


class ImagePusher:
    """Push small but real images to a registry through its HTTP API: one gzipped tar layer
    and a config naming its diff_id, so that a runtime (podman) pulls and stores them."""

    def __init__(
        self, host: str, *, tls: Path | None = None, auth: tuple[str, str] | None = None
    ) -> None:
        """``tls``: the registry's certificate (HTTPS, trusting it); ``auth``: Basic
        credentials (user, password)."""
        self.host = host
        if tls is None:
            self.http = httpx.Client(base_url=f"http://{host}", timeout=10, auth=auth)
        else:
            trust = ssl.create_default_context(cafile=str(tls))
            self.http = httpx.Client(
                base_url=f"https://{host}", timeout=10, auth=auth, verify=trust
            )

    def _blob(self, path: str, content: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        started = self.http.post(f"/v2/{path}/blobs/uploads/")
        started.raise_for_status()
        location = started.headers["location"]
        separator = "&" if "?" in location else "?"
        done = self.http.put(
            f"{location}{separator}digest={digest}",
            content=content,
            headers={"Content-Type": "application/octet-stream"},
        )
        done.raise_for_status()
        return {"digest": digest, "size": len(content)}

    def _manifest(
        self, path: str, ref: str, media_type: str, document: dict[str, object]
    ) -> tuple[str, bytes]:
        body = json.dumps(document, sort_keys=True).encode()
        answer = self.http.put(
            f"/v2/{path}/manifests/{ref}", content=body, headers={"Content-Type": media_type}
        )
        answer.raise_for_status()
        digest = answer.headers["docker-content-digest"]
        assert digest == "sha256:" + hashlib.sha256(body).hexdigest()
        return digest, body

    def put_blob(self, path: str, content: bytes) -> str:
        """Upload ``content`` as a blob of ``path``; its digest."""
        return str(self._blob(path, content)["digest"])

    def put_manifest(self, path: str, ref: str, media_type: str, body: bytes) -> str:
        """PUT ``body`` as the manifest ``ref`` (a tag or its digest) of ``path``, byte for
        byte; the digest the registry answered."""
        answer = self.http.put(
            f"/v2/{path}/manifests/{ref}", content=body, headers={"Content-Type": media_type}
        )
        answer.raise_for_status()
        return str(answer.headers["docker-content-digest"])

    def _image_manifest(
        self,
        path: str,
        seed: str,
        docker: bool,
        platform: tuple[str, str],
        entrypoint: tuple[str, ...] | None = None,
    ) -> dict[str, object]:
        """A manifest a container runtime accepts: a gzipped tar layer whose uncompressed
        digest is the config's ``diff_id``. The same seed and platform give the same bytes.
        With an ``entrypoint`` the image also carries busybox below that layer and runs it."""
        os_name, arch = platform
        layer_tar = _layer_tar({"seed": f"{seed} {os_name}/{arch}\n".encode()})
        layers = [(layer_tar, gzip.compress(layer_tar, mtime=0))]
        run: dict[str, object] = {"Cmd": ["/seed"]}
        if entrypoint is not None:
            layers.insert(0, _busybox_layer())
            run = {"Entrypoint": list(entrypoint)}
        config = json.dumps(
            {
                "architecture": arch,
                "os": os_name,
                "created": "2026-01-01T00:00:00Z",
                "rootfs": {
                    "type": "layers",
                    "diff_ids": ["sha256:" + hashlib.sha256(t).hexdigest() for t, _ in layers],
                },
                "config": {"Labels": {"seed": seed}, **run},
            },
            sort_keys=True,
        ).encode()
        layer_type = DOCKER_LAYER if docker else OCI_LAYER
        return {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST if docker else OCI_MANIFEST,
            "config": {
                "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
                **self._blob(path, config),
            },
            "layers": [{"mediaType": layer_type, **self._blob(path, gz)} for _, gz in layers],
        }

    def push(
        self,
        path: str,
        tag: str,
        *,
        seed: str,
        kind: str = "oci-manifest",
        entrypoint: tuple[str, ...] | None = None,
        platforms: tuple[tuple[str, str], ...] = PLATFORMS,
    ) -> PushedImage:
        """Push ``path:tag``; kind is ``oci-manifest``, ``oci-index`` or ``docker-list``.

        A different ``seed`` gives different content, hence a new digest for the same tag.
        ``entrypoint`` makes an image a real node can run (busybox and that command).
        ``platforms``: what an index or list offers (one a node lacks is an image its kubelet
        cannot pull: "no match for platform in manifest").
        """
        if kind == "oci-manifest":
            manifest = self._image_manifest(path, seed, False, PLATFORMS[0], entrypoint)
            digest, body = self._manifest(path, tag, OCI_MANIFEST, manifest)
            return PushedImage(f"{self.host}/{path}", tag, digest, OCI_MANIFEST, body)
        docker = kind == "docker-list"
        child_type, top_type = (
            (DOCKER_MANIFEST, DOCKER_LIST) if docker else (OCI_MANIFEST, OCI_INDEX)
        )
        entries = []
        for platform in platforms:
            child = self._image_manifest(path, seed, docker, platform, entrypoint)
            child_digest, child_body = self._manifest(path, "tmp-" + seed, child_type, child)
            entries.append(
                {
                    "mediaType": child_type,
                    "digest": child_digest,
                    "size": len(child_body),
                    "platform": {"os": platform[0], "architecture": platform[1]},
                }
            )
        index = {"schemaVersion": 2, "mediaType": top_type, "manifests": entries}
        digest, body = self._manifest(path, tag, top_type, index)
        return PushedImage(f"{self.host}/{path}", tag, digest, top_type, body)

    def close(self) -> None:
        self.http.close()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a real distribution registry on loopback (plain HTTP)."""
    given = os.environ.get("IMAGEREFRESH_TEST_REGISTRY")
    if given:
        yield given
        return
    server = RegistryServer(tmp_path_factory.mktemp("registry"), free_port())
    server.start()
    try:
        yield server.host
    finally:
        server.stop()


@pytest.fixture
def pusher(registry: str) -> Iterator[ImagePusher]:
    pusher = ImagePusher(registry)
    yield pusher
    pusher.close()


@pytest.fixture
def hub_front(registry: str) -> Iterator[HubFront]:
    """A fresh Docker-Hub-like front (tokens, rate limits, counters) before the registry."""
    front = HubFront(registry).start()
    yield front
    front.stop()


@pytest.fixture
def hostile(registry: str) -> Iterator[HostileRegistry]:
    """A plain-HTTP front before the registry that misbehaves as its ``behaviour`` says."""
    front = HostileRegistry(registry).start()
    yield front
    front.stop()
