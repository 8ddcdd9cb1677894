"""The real node of e2e/local: a kubelet with containerd 2 and runc, beside the kwok nodes.

The idea: what a node does (pulls by digest, the image IDs a runtime reports, a container that
crashes, a probe that fails, pods restarting with no registry) is only shown by a real node. This
one runs on the host as two processes, each with its state under ``<state>/node``:

- containerd (built from its module, with Debian's runc), its root, state, socket, registry
  hosts (``certs.d/<host>/hosts.toml``: plain HTTP for the loopback registries) and a CNI
  configuration whose only purpose is that the runtime reports its network ready: pods here
  use the host's network, so no CNI plugin ever runs (a pod that does not is refused with a
  "failed to find plugin" error naming this file);
- the kubelet (built from its module at KUBE_VERSION), with a client certificate of the node
  group, its ports on loopback, image garbage collection and eviction off (disk noise must
  never remove an image mid-test), and its own ``NoSchedule`` taint so that only pods that ask
  for it (the toleration and node selector of :func:`pod_placement`) land here.

The sandbox (pause) image is built here from Debian's static busybox and pushed to the local
registry, since no public registry is reachable. The kubelet runs with a PATH without
``/usr/sbin``: it then finds no iptables and leaves the host's firewall tables as they were.
The kernel settings it adjusts at start (overcommit, panic) are recorded and restored by
:func:`restore_host`. Standard library only, like e2e/local.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

NAME = "real-node-0"
LABEL = "type"
LABEL_VALUE = "real"
TAINT_KEY = "imagerefresh.test/real-node"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
PAUSE_REPOSITORY = "imagerefresh-e2e/pause"
PAUSE_TAG = "1"
RUNC = "/usr/sbin/runc"
CONTAINER_LOG_LINKS = Path("/var/log/containers")
# Fixed host paths the kubelet and containerd use whatever their configuration says: the
# kubelet's log links and device-plugin socket, the shims' socket directory. `down` removes
# the ones `up` found missing, as far as they are empty once the node is gone.
FIXED_HOST_DIRS = (
    CONTAINER_LOG_LINKS,
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet"),
    Path("/run/containerd/s"),
    Path("/run/containerd"),
)
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
# What kubelet's container manager sets at start (protectKernelDefaults: false) and `down`
# puts back.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


class NodeFailure(Exception):
    """The node could not be set up; the message says what and where to look."""


def root(state: Path) -> Path:
    return state / "node"


def containerd_socket(state: Path) -> Path:
    return root(state) / "containerd" / "containerd.sock"


def certs_dir(state: Path) -> Path:
    return root(state) / "containerd" / "certs.d"


def pod_placement() -> dict[str, Any]:
    """The pod spec fields that put a pod on the real node, and only there."""
    return {
        "nodeSelector": {LABEL: LABEL_VALUE},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "hostNetwork": True,
    }


def trust_registry(state: Path, host: str) -> Path:
    """Let containerd pull from the plain-HTTP registry ``host`` (read at each pull)."""
    directory = certs_dir(state) / host
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "hosts.toml"
    path.write_text(
        f'server = "http://{host}"\n\n'
        f'[host."http://{host}"]\n  capabilities = ["pull", "resolve"]\n'
    )
    return path


# --------------------------------------------------------------------------------------------
# containerd


def containerd_config(state: Path, sandbox_image: str) -> Path:
    base = root(state) / "containerd"
    for sub in ("root", "state", "certs.d", "cni/conf", "cni/bin", "opt"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "cni" / "conf" / "10-host-network-only.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "host-network-only",
                "plugins": [{"type": "imagerefresh-e2e-pods-must-use-host-network"}],
            }
        )
        + "\n"
    )
    config = base / "config.toml"
    config.write_text(
        f"""version = 3
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{containerd_socket(state)}"

[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox_image}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{base / "certs.d"}"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{base / "cni" / "bin"}"]
    conf_dir = "{base / "cni" / "conf"}"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        Root = "{base / "runc"}"
        SystemdCgroup = false
"""
    )
    return config


def containerd_argv(bins: Path, config: Path) -> list[str]:
    return [str(bins / "containerd"), "--config", str(config), "--log-level", "warn"]


def runtime_env(bins: Path) -> dict[str, str]:
    """containerd finds its shim (our build) and runc (Debian's) on this PATH."""
    return {
        "PATH": f"{bins}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(Path.home()),
    }


def ctr(
    bins: Path, state: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(bins / "ctr"),
            "--address",
            str(containerd_socket(state)),
            "--namespace",
            "k8s.io",
            *args,
        ],
        check=check,
        text=True,
        capture_output=True,
        timeout=120,
    )


def stop_containers(bins: Path, state: Path) -> list[str]:
    """Kill and delete every task of the node's containerd, so that each shim exits and every
    container's mounts are released. Returns what it could not remove."""
    left: list[str] = []
    if not containerd_socket(state).exists() or not (bins / "ctr").exists():
        return left
    listed = ctr(bins, state, "tasks", "ls", "--quiet", check=False)
    if listed.returncode != 0:
        return [f"ctr tasks ls: {listed.stderr.strip()}"]
    for task in listed.stdout.split():
        ctr(bins, state, "tasks", "kill", "--signal", "SIGKILL", task, check=False)
    for task in listed.stdout.split():
        done = ctr(bins, state, "tasks", "delete", "--force", task, check=False)
        if done.returncode != 0 and "not found" not in done.stderr:
            left.append(f"task {task}: {done.stderr.strip()}")
    return left


# --------------------------------------------------------------------------------------------
# kubelet


def pod_logs(state: Path) -> Path:
    """The kubelet's podLogsDir: <namespace>_<pod>_<uid>/<container>/<n>.log, as in
    /var/log/pods on a node set up the usual way."""
    return root(state) / "kubelet" / "pod-logs"


def kubelet_config(state: Path, ca: Path, port: int, healthz_port: int) -> Path:
    base = root(state) / "kubelet"
    pod_logs(state).mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{containerd_socket(state)}",
        "podLogsDir": str(pod_logs(state)),
        "volumePluginDir": str(base / "volume-plugins"),
        "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        # What this machine needs: cgroup v1 with cgroupfs, no QoS hierarchy to manage.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        # Nothing is ever removed behind a test's back: no image GC, no eviction.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "0%",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
            "imagefs.inodesFree": "0%",
        },
        "evictionPressureTransitionPeriod": "0s",
        "localStorageCapacityIsolation": False,
        "serializeImagePulls": False,
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "maxPods": 110,
    }
    path = base / "config.json"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def kubelet_kubeconfig(state: Path, api_port: int, ca: Path, cert: Path, key: Path) -> Path:
    path = root(state) / "kubelet" / "kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": f"https://127.0.0.1:{api_port}",
                            "certificate-authority": str(ca),
                        },
                    }
                ],
                "users": [
                    {
                        "name": NAME,
                        "user": {"client-certificate": str(cert), "client-key": str(key)},
                    }
                ],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": NAME}}],
                "current-context": "local",
            },
            indent=2,
        )
        + "\n"
    )
    path.chmod(0o600)
    return path


def kubelet_argv(bins: Path, state: Path, config: Path, kubeconfig: Path) -> list[str]:
    base = root(state) / "kubelet"
    return [
        str(bins / "kubelet"),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={base / 'root'}",
        f"--cert-dir={base / 'pki'}",
        f"--hostname-override={NAME}",
        f"--node-labels={LABEL}={LABEL_VALUE}",
        "--v=1",
    ]


def kubelet_env() -> dict[str, str]:
    """No /usr/sbin: the kubelet finds no iptables, so it makes no chains on the host."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home())}


# --------------------------------------------------------------------------------------------
# The host: kernel settings and mounts


def record_host(state: Path) -> None:
    path = root(state) / "kernel-tunables.json"
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    missing = [str(d) for d in FIXED_HOST_DIRS if not d.exists()]
    (root(state) / "host.json").write_text(json.dumps({"missing_dirs": missing}) + "\n")
    values = {}
    for name in KERNEL_TUNABLES:
        with contextlib.suppress(OSError):
            values[name] = Path("/proc/sys", name).read_text().strip()
    path.write_text(json.dumps(values, indent=2) + "\n")


def restore_host(state: Path) -> list[str]:
    """Put back the kernel settings the kubelet changed; unmount what it left in the state."""
    problems: list[str] = []
    path = root(state) / "kernel-tunables.json"
    with contextlib.suppress(OSError, ValueError):
        for name, value in json.loads(path.read_text()).items():
            try:
                target = Path("/proc/sys", name)
                if target.read_text().strip() != value:
                    target.write_text(value + "\n")
            except OSError as err:
                problems.append(f"restoring {name}={value}: {err}")
    problems.extend(unmount_under(state))
    problems.extend(remove_log_links(state))
    return problems


def remove_log_links(state: Path) -> list[str]:
    """Remove what the node left at fixed host paths: the kubelet's log links that point into
    this state dir, its device-plugin socket, and the directories `up` found missing."""
    prefix = str(state.resolve()) + "/"
    with contextlib.suppress(OSError):
        for link in CONTAINER_LOG_LINKS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(prefix):
                    link.unlink()
    missing: list[str] = []
    with contextlib.suppress(OSError, ValueError, KeyError):
        missing = json.loads((root(state) / "host.json").read_text())["missing_dirs"]
    if str(DEVICE_PLUGIN_SOCKET.parent) in missing and DEVICE_PLUGIN_SOCKET.is_socket():
        DEVICE_PLUGIN_SOCKET.unlink()
    problems = []
    for directory in FIXED_HOST_DIRS:  # deepest first
        if str(directory) in missing and directory.exists():
            try:
                directory.rmdir()
            except OSError as err:
                problems.append(f"{directory} is not empty, left in place: {err}")
    return problems


def unmount_under(directory: Path) -> list[str]:
    """Unmount every mount point below ``directory`` (deepest first): the kubelet's volumes
    and any container root file system a killed shim left."""
    prefix = str(directory.resolve()) + "/"
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                points.append(point)
    problems = []
    for point in sorted(set(points), key=len, reverse=True):
        done = subprocess.run(["umount", "--lazy", point], capture_output=True, text=True)
        if done.returncode != 0:
            problems.append(f"umount {point}: {done.stderr.strip()}")
    return problems


# --------------------------------------------------------------------------------------------
# The sandbox image


def busybox_layer() -> bytes:
    """An uncompressed tar holding Debian's static busybox as /bin/busybox, reproducibly."""
    if not BUSYBOX.exists():
        raise NodeFailure(f"{BUSYBOX} is missing: `make setup` installs Debian's busybox-static")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        directory = tarfile.TarInfo("bin")
        directory.type, directory.mode, directory.mtime = tarfile.DIRTYPE, 0o755, 0
        archive.addfile(directory)
        content = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode, info.mtime = len(content), 0o755, 0
        archive.addfile(info, io.BytesIO(content))
    return out.getvalue()


def push_pause(registry: str) -> str:
    """Push the sandbox image (busybox sleeping) and return its reference."""
    layer_tar = busybox_layer()
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
            "config": {"Entrypoint": ["/bin/busybox", "sleep", "2147483647"]},
        },
        sort_keys=True,
    ).encode()
    path = PAUSE_REPOSITORY
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **_push_blob(registry, path, config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    **_push_blob(registry, path, layer),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    _request(
        "PUT",
        f"http://{registry}/v2/{path}/manifests/{PAUSE_TAG}",
        manifest,
        "application/vnd.oci.image.manifest.v1+json",
    )
    return f"{registry}/{path}:{PAUSE_TAG}"


def _digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def _push_blob(registry: str, path: str, content: bytes) -> dict[str, Any]:
    digest = _digest(content)
    location = _request("POST", f"http://{registry}/v2/{path}/blobs/uploads/", b"", None)
    if location.startswith("/"):
        location = f"http://{registry}{location}"
    separator = "&" if "?" in location else "?"
    _request("PUT", f"{location}{separator}digest={digest}", content, "application/octet-stream")
    return {"digest": digest, "size": len(content)}


def _request(method: str, url: str, body: bytes, content_type: str | None) -> str:
    request = urllib.request.Request(url, data=body, method=method)
    if content_type:
        request.add_header("Content-Type", content_type)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            return str(response.headers.get("Location", ""))
    except urllib.error.HTTPError as err:
        raise NodeFailure(f"pushing the sandbox image: {method} {url}: HTTP {err.code}") from err


def runtime_ready(bins: Path, state: Path) -> bool:
    return (
        containerd_socket(state).exists()
        and ctr(bins, state, "version", check=False).returncode == 0
    )
