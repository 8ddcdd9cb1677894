"""The operator image's rows: its size, and its start-up to ``/healthz`` under the chart's CPU
limit, each with what dominates it.

- **Size**: podman's size of the image `make image` builds, split by its layers (the base made
  from Debian's packages, the virtualenv the Dockerfile copies in, the rest), and the
  virtualenv by top-level ``site-packages`` directory — the largest also by its own
  subdirectories. The sizes inside are
  the files' apparent sizes, read by the image's own Python; the row also says how many of the
  virtualenv's modules have their bytecode in the image (without it every start compiles them).
- **Start-up**: ``podman run`` of the image with the chart's cpu and memory limits, a read-only
  root and ``imagerefresh run --leader-elect`` (the chart's mode), until ``/healthz`` answers:
  the median of ``ROUNDS`` runs. The operator serves ``/healthz`` before it reaches the API
  server, so a kubeconfig naming a closed loopback port is enough and the row needs no cluster.
  Then ``import imagerefresh.cli`` in the same container settings but without the cpu limit
  (under it, the quota's stalls land on whichever module happens to be importing): its CPU
  time, and what that comes to at the limit (divided by it: one thread, CPU-bound) against the
  start-up it is part of; ``python -X importtime`` splits it by top-level package (shares of
  the modules' own times).

The chart's limits are read from chart/values.yaml, so the rows follow the chart.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml
from harness import REPO, free_port, note

from support.podman_env import BUILD_IMAGE, PODMAN_RUN

__all__ = [
    "ROUNDS",
    "Size",
    "Startup",
    "chart_limits",
    "image_tag",
    "measure_size",
    "measure_startup",
]

ROUNDS = 3
# The entrypoint's imports, timed in CPU seconds (load on the machine does not count).
IMPORT = (
    "import time; t = time.process_time(); import imagerefresh.cli; print(time.process_time() - t)"
)
UNITS = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "": 1}
PODMAN = ("podman", "--runtime", "runc")
# Run inside the image: apparent sizes under /opt/venv by site-packages entry, and bytecode.
SIZES = r"""
import json, os, sys
site = next(p for p in sys.path if p.startswith("/opt/venv") and p.endswith("site-packages"))
def size(path):
    if not os.path.isdir(path):
        return os.lstat(path).st_size
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)
top = {name: size(os.path.join(site, name)) for name in os.listdir(site)}
largest = max(top, key=top.get)
inner = os.path.join(site, largest)
subs = {n: size(os.path.join(inner, n)) for n in os.listdir(inner)} if os.path.isdir(inner) else {}
py = pyc = 0
for d, _, fs in os.walk(site):
    py += sum(f.endswith(".py") for f in fs)
    pyc += sum(f.endswith(".pyc") for f in fs)
print(json.dumps({"venv": size("/opt/venv"), "top": top, "largest": largest, "subs": subs,
                  "py": py, "pyc": pyc}))
"""


def quantity(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi|)", str(text))
    if match is None:
        raise ValueError(f"unreadable quantity {text!r}")
    return float(match.group(1)) * UNITS[match.group(2)]


def chart_limits() -> tuple[float, int]:
    """The chart's cpu (cores) and memory (bytes) for the operator container."""
    resources = yaml.safe_load((REPO / "chart" / "values.yaml").read_text())["resources"]
    return quantity(resources["cpu"]), int(quantity(resources["memory"]))


def podman(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:2])} failed: {done.stderr[-2000:]}")
    return done


def image_tag() -> str:
    """The image `make image` builds (warm: seconds)."""
    done = subprocess.run(
        [str(BUILD_IMAGE)], capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"e2e/build-image failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def mib(size: float) -> str:
    return f"{size / 2**20:.0f} MiB"


@dataclass(frozen=True)
class Size:
    total: int
    layers: list[tuple[str, int]]  # (what, bytes), largest first
    venv: int
    top: list[tuple[str, int]]  # site-packages entries, largest first
    largest: str
    subs: list[tuple[str, int]]  # the largest entry's own entries, largest first
    modules: int
    compiled: int

    def layers_text(self) -> str:
        return ", ".join(f"{what} {mib(size)}" for what, size in self.layers if size >= 2**20)

    def venv_text(self, count: int = 5) -> str:
        inner = ", ".join(f"{name} {mib(size)}" for name, size in self.subs[:2])
        parts = []
        for name, size in self.top[:count]:
            parts.append(f"{name} {mib(size)}" + (f" ({inner})" if name == self.largest else ""))
        return ", ".join(parts)


def _layer_name(created_by: str) -> str:
    """What a layer of the final stage is, from podman's history of the instruction."""
    if "COPY" in created_by:
        return "virtualenv"  # the final stage's only COPY: /opt/venv from the builder
    if "ADD file:" in created_by or not created_by.strip():
        return "Debian base"
    if "/etc/passwd" in created_by:
        return "user"
    return "other"


def measure_size(image: str) -> Size:
    total = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    history = json.loads(podman("history", "--format", "json", image).stdout)
    layers: Counter[str] = Counter()
    for layer in history:
        layers[_layer_name(str(layer.get("CreatedBy") or layer.get("createdBy") or ""))] += int(
            layer.get("size") or layer.get("Size") or 0
        )
    inside = json.loads(
        podman(
            "run", "--rm", "--network=none", *PODMAN_RUN, "--entrypoint", "python3", image,
            "-c", SIZES,
        ).stdout
    )  # fmt: skip
    return Size(
        total=total,
        layers=layers.most_common(),
        venv=int(inside["venv"]),
        top=sorted(inside["top"].items(), key=lambda kv: -kv[1]),
        largest=str(inside["largest"]),
        subs=sorted(inside["subs"].items(), key=lambda kv: -kv[1]),
        modules=int(inside["py"]),
        compiled=int(inside["pyc"]),
    )


@dataclass(frozen=True)
class Startup:
    cpu: float
    seconds: list[float]  # start-up to /healthz, per round
    imports: float  # CPU seconds of `import imagerefresh.cli`
    by_package: list[tuple[str, float]]  # seconds per top-level package, largest first

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def imports_at_limit(self) -> float:
        return self.imports / self.cpu

    def imports_text(self, count: int = 6) -> str:
        shown = self.by_package[:count]
        rest = self.imports - sum(seconds for _, seconds in shown)
        parts = [f"{name} {seconds / self.imports:.0%}" for name, seconds in shown]
        return ", ".join(
            [*parts, f"{len(self.by_package) - len(shown)} others {rest / self.imports:.0%}"]
        )


def _kubeconfig(directory: Path) -> Path:
    """A kubeconfig whose API server is a closed loopback port: /healthz does not need one."""
    path = directory / "kubeconfig"
    cluster = {"server": f"https://127.0.0.1:{free_port()}", "insecure-skip-tls-verify": True}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "none", "cluster": cluster}],
                "users": [{"name": "none", "user": {"token": "none"}}],
                "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
                "current-context": "none",
            }
        )
    )
    path.chmod(0o644)
    directory.chmod(0o755)
    return path


def _limits(cpu: float | None, memory: int) -> list[str]:
    return [
        *PODMAN_RUN,
        "--network=host",
        *([f"--cpus={cpu}"] if cpu is not None else []),
        f"--memory={memory}",
        f"--memory-swap={memory}",
        "--read-only",
        "--tmpfs=/tmp:rw,size=67108864,mode=1777",
    ]


def _one_startup(image: str, cpu: float, memory: int, config: Path, budget: float) -> float:
    port, metrics = free_port(), free_port()
    name = f"imagerefresh-bench-{port}"
    started = time.monotonic()
    podman(
        "run", "--detach", f"--name={name}", *_limits(cpu, memory),
        f"--volume={config.parent}:/bench:ro", image,
        "--kubeconfig=/bench/kubeconfig", "--namespace=bench-image", "--leader-elect",
        "--leader-election-namespace=bench-image", f"--liveness-port={port}",
        f"--metrics-port={metrics}", "--bind-address=127.0.0.1",
    )  # fmt: skip
    try:
        while time.monotonic() - started < budget:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            state = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            if state != "true":
                logs = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True)
                raise RuntimeError(f"the image exited before /healthz:\n{logs.stderr[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"/healthz did not answer within {budget:.0f} s")
    finally:
        subprocess.run([*PODMAN, "rm", "--force", "--time=0", name], capture_output=True)


def import_times(stderr: str) -> tuple[float, list[tuple[str, float]]]:
    """``-X importtime``'s lines: the total and the seconds per top-level package (self times)."""
    per: Counter[str] = Counter()
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)", line)
        if match:
            per[match.group(2).split(".")[0]] += int(match.group(1))
    total = sum(per.values()) / 1e6
    return total, [(name, us / 1e6) for name, us in per.most_common()]


def measure_startup(image: str, rounds: int = ROUNDS, budget: float = 180) -> Startup:
    cpu, memory = chart_limits()
    with tempfile.TemporaryDirectory(prefix="imagerefresh-bench-image-") as tmp:
        config = _kubeconfig(Path(tmp))
        seconds: list[float] = []
        for round_ in range(rounds):
            seconds.append(_one_startup(image, cpu, memory, config, budget))
            note(f"image start-up {round_ + 1}/{rounds}: {seconds[-1]:.1f} s at {cpu:g} cpu")
    # Each module's own time is wall time: a run that lost the CPU for a moment charges it to
    # whichever module was importing, so each package's share is the median of a few runs.
    cpu_runs: list[float] = []
    shares: list[dict[str, float]] = []
    for _ in range(rounds):
        imported = podman(
            "run", "--rm", *_limits(None, memory), "--entrypoint", "python3", image,
            "-X", "importtime", "-c", IMPORT,
        )  # fmt: skip
        total, by_package = import_times(imported.stderr)
        cpu_runs.append(float(imported.stdout.strip().splitlines()[-1]))
        shares.append({name: spent / total for name, spent in by_package})
    cpu_seconds = statistics.median(cpu_runs)
    names = {name for run in shares for name in run}
    median_share = {n: statistics.median(run.get(n, 0.0) for run in shares) for n in names}
    ranked = sorted(median_share.items(), key=lambda kv: -kv[1])
    return Startup(cpu, seconds, cpu_seconds, [(n, share * cpu_seconds) for n, share in ranked])


def rows(image: str) -> list[tuple[str, str]]:
    """(figure, measured) of the image rows, for bench/run.py's table."""
    size = measure_size(image)
    startup = measure_startup(image)
    cpu = f"{startup.cpu * 1000:g}m"
    spread = ", ".join(f"{s:.1f}" for s in startup.seconds)
    return [
        ("image size (podman), by layer", f"{mib(size.total)}: {size.layers_text()}"),
        (
            f"virtualenv {mib(size.venv)}, largest in site-packages",
            f"{size.venv_text()}; bytecode for {size.compiled} of {size.modules} modules",
        ),
        (
            f"start-up to /healthz at the chart's {cpu} cpu, median of {len(startup.seconds)}",
            f"{startup.median:.1f} s ({spread})",
        ),
        (
            "of which imports: CPU, at the limit, by package (python -X importtime)",
            f"{startup.imports:.2f} s, so {startup.imports_at_limit:.1f} s at {cpu}: "
            f"{startup.imports_text()}",
        ),
    ]


if __name__ == "__main__":  # the image rows alone: .venv/bin/python bench/image.py
    for figure, measured in rows(image_tag()):
        print(f"| 8 image | {figure} | {measured} |")
