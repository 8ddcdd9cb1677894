"""The bench's moving parts: its own local environment, the operator, the counting front.

Everything reuses the test suite's support code (``tests/support``): ``e2e/local`` for the
cluster and registry (with the bench's own state dir), :class:`HubFront` to count what the
registry receives, :class:`ImagePusher` to push digests, :class:`Operator` to run
``imagerefresh run`` as a subprocess. What is added here is what a benchmark needs and a test
does not: bulk triggers through the Python client (a kubectl launch per policy would spread
100 ticks over many seconds), the operator's metrics and log as data, and RSS readings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import kubernetes.client  # noqa: E402
import kubernetes.config  # noqa: E402

from support.cluster_env import Cluster, local_bin_dir, parse_exports  # noqa: E402
from support.hub_front import HubFront  # noqa: E402
from support.operator_env import CRD, REFRESH_NOW, Operator  # noqa: E402
from support.registry_env import free_port  # noqa: E402

__all__ = [
    "CRD",
    "REPO",
    "Environment",
    "HubFront",
    "Json",
    "OperatorRun",
    "Triggers",
    "free_port",
    "parse_prometheus",
    "rss_kib",
    "runtime_venv",
]

Json = dict[str, Any]
LOCAL = REPO / "e2e" / "local"
GROUP, VERSION, PLURAL = "images.tracebloc.io", "v1alpha1", "imagerefreshpolicies"


def note(text: str) -> None:
    print(f"bench {time.strftime('%H:%M:%S')}: {text}", file=sys.stderr, flush=True)


def runtime_venv() -> Path:
    """A virtualenv with the operator and its runtime dependencies only, as the image has them.

    Memory is measured on the operator as it ships: the development virtualenv also holds the
    test tools, and some of them change what the operator imports (structlog renders with
    ``rich`` when it is installed, ~4 MiB). The bare kopf baselines run from here too, so both
    sides import the same libraries. Cached by ``pyproject.toml``'s content; the package is
    installed editable, so it is always this checkout's code.
    """
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    cache = Path(os.environ.get("IMAGEREFRESH_CACHE") or Path.home() / ".cache/imagerefresh")
    venv = cache / f"bench-runtime-{key}"
    if not (venv / "bin" / "imagerefresh").exists():
        note(f"creating the runtime-only virtualenv {venv}")
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "-e", str(REPO)], check=True)
    return venv


@dataclass
class Environment:
    """``e2e/local`` with the bench's own state dir: up at the start, down at the end."""

    state: Path
    cluster: Cluster | None = None
    registry: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Always this state dir and never a caller's cluster: the figures are of e2e/local.
        self.env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.env["IMAGEREFRESH_E2E_STATE"] = str(self.state)
        self.env["IMAGEREFRESH_E2E_PROFILING"] = "1"  # kube-apiserver's pprof (row 3)

    def up(self) -> Cluster:
        status = subprocess.run(
            [str(LOCAL), "status"], capture_output=True, text=True, env=self.env, timeout=60
        )
        if status.returncode == 0:
            # Its objects, and whoever else uses it, would make the figures meaningless.
            raise RuntimeError(
                f"an environment is already running in {self.state} (another bench?); "
                f"stop it with IMAGEREFRESH_E2E_STATE={self.state} e2e/local down"
            )
        started = time.monotonic()
        up = self._up()
        if up.returncode != 0:
            kept = self._keep_logs()
            self.down()  # whatever half of it started
            raise RuntimeError(f"e2e/local up failed (logs in {kept}):\n{up.stderr[-3000:]}")
        exported = parse_exports(up.stdout)
        bin_dir = local_bin_dir()
        self.registry = exported["IMAGEREFRESH_TEST_REGISTRY"]
        cache = self.state / "kubectl-cache"
        cache.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(
            kubeconfig=exported["KUBECONFIG"],
            bin_dir=bin_dir,
            registry=self.registry,
            started_here=True,
            kubectl_cache=cache,
            e2e_state=Path(exported["IMAGEREFRESH_E2E_STATE"]),
            node=exported["IMAGEREFRESH_TEST_NODE"],
        )
        note(f"local environment up in {time.monotonic() - started:.1f}s (state {self.state})")
        return self.cluster

    def _up(self) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [str(LOCAL), "up"], capture_output=True, text=True, env=self.env, timeout=900
            )
        except BaseException:
            self.down()
            raise

    def _keep_logs(self) -> Path:
        """The environment's logs, copied out of the state dir that `down` removes."""
        kept = Path(tempfile.mkdtemp(prefix="imagerefresh-bench-up-"))
        if (self.state / "logs").is_dir():
            shutil.copytree(self.state / "logs", kept / "logs")
        return kept

    def component_pids(self) -> dict[str, int]:
        """The environment's processes (kube-apiserver, etcd, …) by component name."""
        found = {}
        for record in sorted((self.state / "run").glob("*.json")):
            try:
                found[record.stem] = int(json.loads(record.read_text())["pid"])
            except (OSError, ValueError, KeyError):
                continue
        return found

    def down(self) -> None:
        if os.environ.get("BENCH_KEEP") == "1":
            note(f"BENCH_KEEP=1: leaving the environment in {self.state} running")
            return
        down = subprocess.run(
            [str(LOCAL), "down"], capture_output=True, text=True, env=self.env, timeout=180
        )
        if down.returncode != 0:
            note(f"e2e/local down failed: {down.stderr[-2000:]}")


def api_client(cluster: Cluster) -> kubernetes.client.ApiClient:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=cluster.kubeconfig, client_configuration=configuration, persist_config=False
    )
    configuration.connection_pool_maxsize = 32
    return kubernetes.client.ApiClient(configuration)


class Triggers:
    """Bumps ``images.tracebloc.io/refresh-now`` on many policies at once, and counts it."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.pool = ThreadPoolExecutor(16)
        self.sent = 0
        self._serial = 0

    def bump(self, policies: Iterable[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """Annotate every (namespace, name) at once; when each one's PATCH was answered."""
        self._serial += 1
        value = f"bench-{self._serial}-{time.time_ns()}"
        body = {"metadata": {"annotations": {REFRESH_NOW: value}}}

        def one(key: tuple[str, str]) -> tuple[tuple[str, str], float]:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, key[0], PLURAL, key[1], body, _content_type=MERGE
            )
            return key, time.time()

        answered = dict(self.pool.map(one, list(policies)))
        self.sent += len(answered)
        return answered

    def close(self) -> None:
        self.pool.shutdown()


MERGE = "application/merge-patch+json"


def parse_prometheus(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text exposition → {(name, labels): value} (comments skipped)."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))
        try:
            found[(name, pairs)] = float(value)
        except ValueError:
            continue
    return found


@dataclass
class Patched:
    target: str  # "Deployment ns/name"
    images: dict[str, str]
    at: float


class LogFollower:
    """The operator's JSON log, read as it grows: tick ends and patches, with their times.

    Waiting on the log costs the operator nothing, where polling its /metrics would make it
    render thousands of samples several times a second in the middle of a timed round.
    """

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset = path, offset
        self.ticks: dict[str, int] = {}  # "namespace/name" → tick lines so far
        self.tick_ends: list[tuple[str, float]] = []
        self.patched: list[Patched] = []
        self._partial = b""

    def poll(self) -> None:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = self._partial + log.read()
        self.offset += len(data) - len(self._partial)
        *lines, self._partial = data.split(b"\n")
        for raw in lines:
            if b'"event": "tick"' not in raw and b'"images patched"' not in raw:
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            at = _epoch(str(line.get("timestamp", "")))
            if line.get("event") == "tick":
                if line.get("follow_up") is True:
                    continue  # judged rollouts between ticks: not a tick of the policy's own
                policy = str(line.get("policy"))
                self.ticks[policy] = self.ticks.get(policy, 0) + 1
                self.tick_ends.append((policy, at))
            elif line.get("event") == "images patched":
                images = {str(k): str(v) for k, v in (line.get("images") or {}).items()}
                self.patched.append(Patched(str(line.get("target")), images, at))


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class OperatorRun:
    """``imagerefresh run`` (the test suite's :class:`Operator`) with the bench's arguments."""

    operator: Operator
    log: LogFollower

    @classmethod
    def start(
        cls,
        cluster: Cluster,
        registry: str,
        front: HubFront,
        log_path: Path,
        namespaces: Iterable[str],
        pairs: Iterable[str] = (),
        window: float = 10.0,
        extra_args: Iterable[str] = (),
        venv: Path | None = None,
    ) -> OperatorRun:
        extra: list[str] = list(extra_args)
        for namespace in namespaces:
            extra += ["--namespace", namespace]
        for pair in pairs:
            extra += ["--allow-namespace-pair", pair]
        # The test fixture runs with a zero window; the bench runs the production default.
        extra += ["--resolution-window", str(window)]
        operator = Operator(
            cluster, registry, free_port(), log_path, front, extra_args=tuple(extra)
        )
        if venv is not None:
            operator.executable = venv / "bin" / "imagerefresh"
        operator.start()
        return cls(operator, LogFollower(log_path, operator._log_offset))

    @property
    def pid(self) -> int:
        assert self.operator.process is not None
        return self.operator.process.pid

    def alive(self) -> bool:
        return self.operator.process is not None and self.operator.process.poll() is None

    def ticks(self) -> dict[str, int]:
        """Completed ticks so far, per "namespace/name" (from the log)."""
        self.log.poll()
        return dict(self.log.ticks)

    def wait_ticks(
        self,
        before: dict[str, int],
        policies: Iterable[tuple[str, str]],
        timeout: float = 120.0,
        poll: float = 0.1,
    ) -> None:
        """Until each policy has logged one more tick than in ``before``."""
        wanted = [f"{namespace}/{name}" for namespace, name in policies]
        deadline = time.monotonic() + timeout
        while True:
            now = self.ticks()
            late = [p for p in wanted if now.get(p, 0) < before.get(p, 0) + 1]
            if not late:
                return
            if not self.alive():
                raise RuntimeError(f"imagerefresh run died; log tail:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(late)} policies did not tick within {timeout}s: {late[:5]}; "
                    f"log tail:\n{self.text()[-2000:]}"
                )
            time.sleep(poll)

    def text(self) -> str:
        return self.operator.log()

    def stop(self) -> None:
        self.operator.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = re.search(r"^VmRSS:\s+(\d+)", status, re.M)
    hwm = re.search(r"^VmHWM:\s+(\d+)", status, re.M)
    if rss is None or hwm is None:
        raise RuntimeError(f"no VmRSS/VmHWM for pid {pid}")
    return int(rss.group(1)), int(hwm.group(1))


def wait_for(check: Callable[[], bool], what: str, timeout: float, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
