"""Where kube-apiserver's CPU goes in a window: its own pprof profile, summarised by category.

kube-apiserver serves ``/debug/pprof/profile?seconds=N`` to system:masters when started with
``--profiling`` (e2e/local does so with ``IMAGEREFRESH_E2E_PROFILING=1``, as the bench starts
it). The profile is taken beside a window the bench measures — a scale round, the floor — and
read with ``go tool pprof -top -cum``: a function's cumulative share is the CPU spent in it and
what it called, so a category's share is that of the handler that serves one kind of request
(a policy's status update, a patch, a watch), from decoding the request to storing the object;
the request chain around it (authentication, flow control, audit) and the garbage collector
are apart, the latter a category of its own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.cluster_env import Cluster

__all__ = ["ApiserverProfile", "ApiserverProfiler"]

# Category → regular expressions of Go function names: for a request, the goroutine that stores
# it (the API server hands the work of a write to one). A pattern's time is the largest
# cumulative time among the functions it matches (its outermost); a category's, the sum over its
# patterns, which match disjoint paths. The shares are a lower bound for each kind of request.
CATEGORIES = {
    "policy status writes (the CRD's status updates)": (
        r"customresource\.\(\*StatusREST\)\.Update$",
    ),
    "patches (the workloads'; kwok's of pods)": (
        r"handlers\.\(\*patcher\)\.patchResource\.func\d$",
    ),
    "controllers' status updates (deployments, replicasets, pods)": (
        r"apps/deployment/storage\.\(\*StatusREST\)\.Update$",
        r"apps/replicaset/storage\.\(\*StatusREST\)\.Update$",
        r"core/pod/storage\.\(\*StatusREST\)\.Update$",
    ),
    "creates (events, replicasets, pods)": (
        r"handlers\.CreateResource\.createHandler\.func1\.\d$",
    ),
    "reads (get, list)": (r"handlers\.ListResource\.func1$", r"getResourceHandler\.func\d+$"),
    "watch serving (encoding and sending events)": (r"handlers\.\(\*WatchServer\)\.HandleHTTP$",),
    "watch cache input (etcd's events decoded)": (r"etcd3\.\(\*watchChan\)\.transform$",),
    "watch cache dispatch": (r"cacher\.\(\*Cacher\)\.dispatchEvents$",),
    "garbage collection": (r"runtime\.gcBgMarkWorker$",),
}
_TOP = re.compile(r"^\s*(\S+)\s+(\S+)%\s+(\S+)%\s+(\S+)\s+(\S+)%\s+(.+)$")


@dataclass
class ApiserverProfile:
    seconds: float  # CPU seconds the profile sampled
    cumulative: dict[str, float] = field(default_factory=dict)  # function → CPU seconds

    def share(self, patterns: tuple[str, ...]) -> float:
        return sum(
            max((s for f, s in self.cumulative.items() if re.search(p, f)), default=0.0)
            for p in patterns
        )

    def shares(self) -> str:
        total = max(self.seconds, 1e-9)
        ranked = sorted(
            ((name, self.share(patterns)) for name, patterns in CATEGORIES.items()),
            key=lambda item: -item[1],
        )
        return ", ".join(f"{name} {100 * s / total:.0f} %" for name, s in ranked if s)

    @classmethod
    def read(cls, raw: Path) -> ApiserverProfile | None:
        go = shutil.which("go")
        if go is None:
            return None
        top = subprocess.run(
            [go, "tool", "pprof", "-top", "-cum", "-nodecount=3000", str(raw)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if top.returncode != 0:
            return None
        profile = cls(seconds=0.0)
        for line in top.stdout.splitlines():
            if line.lstrip().startswith("Duration:"):
                # "Duration: 8s, Total samples = 5.12s (64.00%)"
                total = re.search(r"Total samples = ([\d.]+)(m?s)", line)
                if total:
                    profile.seconds = float(total[1]) / (1000 if total[2] == "ms" else 1)
                continue
            row = _TOP.match(line)
            if row is None:
                continue
            profile.cumulative[row[6].strip()] = _seconds(row[4])
        return profile


def _seconds(text: str) -> float:
    number = re.match(r"[\d.]+", text)
    if number is None:
        return 0.0
    value = float(number[0])
    return value / 1000 if text.endswith("ms") else value


class ApiserverProfiler:
    """A ``seconds``-long CPU profile of kube-apiserver, taken on a thread while the bench
    runs a window; ``stop()`` waits for it and reads it (None where profiling is off or Go is
    missing: the row is left out, never guessed)."""

    def __init__(self, cluster: Cluster, seconds: int, out: Path, at: float = 0.0) -> None:
        """``at``: when to start (epoch seconds; at once when past)."""
        self.out = out
        self._thread = threading.Thread(target=self._take, args=(cluster, seconds, at), daemon=True)
        self._ok = False
        self._thread.start()

    def _take(self, cluster: Cluster, seconds: int, at: float) -> None:
        time.sleep(max(0.0, at - time.time()))
        kubectl = str(cluster.bin_dir / "kubectl")
        with self.out.open("wb") as sink:
            done = subprocess.run(
                [kubectl, "get", "--raw", f"/debug/pprof/profile?seconds={seconds}"],
                stdout=sink,
                stderr=subprocess.DEVNULL,
                env=cluster.env,
                timeout=seconds + 60,
                check=False,
            )
        self._ok = done.returncode == 0

    def stop(self) -> ApiserverProfile | None:
        self._thread.join()
        return ApiserverProfile.read(self.out) if self._ok else None
