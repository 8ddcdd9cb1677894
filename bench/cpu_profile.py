"""Where the operator's CPU goes: py-spy sampling the running process, summarised by category.

py-spy (the bench's extra) samples the operator from outside — the event loop and the threads
its API reads and watches run on — without instrumenting it. Only the thread holding the GIL is
sampled (``--gil``): a thread blocked on a socket, or waiting for the GIL, is not running Python,
so the shares are of the CPU the interpreter spent (TLS and JSON in C count where called with
the GIL held). A sample counts in every category one of its frames falls in (a JSON decode
inside a watch thread is both), so the shares need not add up to 100 %.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Profile", "Sampler"]

# Frames matched by file path (py-spy's raw frames read `function (path:line)`).
CATEGORIES = {
    "JSON encode/decode": ("json/",),
    "pydantic models": ("pydantic/", "pydantic_core/"),
    "HTTP and TLS (urllib3, http.client, ssl)": ("urllib3/", "http/client.py", "ssl.py"),
    "planning (pure core)": ("imagerefresh/planner/",),
    "watch-fed copies": ("imagerefresh/kube/watch.py", "imagerefresh/runtime/watches.py"),
    "logging (structlog)": ("structlog/", "logging/"),
    "kopf": ("kopf/",),
    "asyncio": ("asyncio/",),
    # A module's first import, its body included (a model class built at import is both).
    "imports": ("importlib",),
}
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^:()]*):\d+\)$")


@dataclass
class Profile:
    samples: int
    categories: Counter[str]
    leaves: Counter[str]  # function (file) of the innermost frame: self time

    def shares(self) -> str:
        """Each category's share of the samples, largest first."""
        total = max(self.samples, 1)
        ranked = self.categories.most_common()
        return ", ".join(f"{name} {100 * n / total:.0f} %" for name, n in ranked if n)

    def hottest(self, n: int = 6) -> str:
        """The functions most samples were in (self time)."""
        total = max(self.samples, 1)
        ranked = self.leaves.most_common(n)
        return ", ".join(f"{name} {100 * c / total:.0f} %" for name, c in ranked)

    @classmethod
    def read(cls, raw: Path) -> Profile:
        """py-spy's ``--format raw`` output: ``frame;frame;… count`` per line."""
        samples = 0
        categories: Counter[str] = Counter()
        leaves: Counter[str] = Counter()
        for line in raw.read_text(errors="replace").splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = stack.split(";")
            samples += count
            paths = [_path(frame) for frame in frames]
            for name, needles in CATEGORIES.items():
                if any(needle in path for path in paths for needle in needles):
                    categories[name] += count
            leaves[_short(frames[-1])] += count
        return cls(samples, categories, leaves)


def _path(frame: str) -> str:
    found = _FRAME.match(frame.strip())
    return found.group("path") if found else ""


def _short(frame: str) -> str:
    found = _FRAME.match(frame.strip())
    if not found:
        return frame.strip()
    return f"{found.group('function')} ({Path(found.group('path')).name})"


class Sampler:
    """``py-spy record`` on one process until :meth:`stop`; None when py-spy is absent."""

    def __init__(self, pid: int, output: Path, rate: int = 100) -> None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.output = output
        self.process = subprocess.Popen(
            [
                *(spy, "record", "--pid", str(pid), "--format", "raw"),
                *("--output", str(output), "--rate", str(rate), "--nonblocking", "--gil"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> Profile | None:
        self.process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return None
        return Profile.read(self.output) if self.output.exists() else None
