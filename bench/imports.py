"""What start-up's imports cost before a line of the operator runs: the start-up row's floor.

Each figure is the CPU time of one import in a fresh interpreter of the bench's runtime-only
virtualenv (what the image installs, without the kubernetes client: kopf would import it
whenever it is installed), the median of ``ROUNDS``: ``import kopf``, and
``import imagerefresh.cli`` (everything ``imagerefresh run`` imports, kopf included). Measured
in CPU seconds, so load on the machine does not count.
"""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

__all__ = ["ROUNDS", "import_costs"]

ROUNDS = 5
_TIMED = "import sys, time\n{before}\nt = time.process_time()\nimport {module}\n" + (
    "print(time.process_time() - t)"
)
IMPORTS = {
    "kopf": ("kopf", ""),
    "imagerefresh.cli (all that run imports)": ("imagerefresh.cli", ""),
}


def import_costs(venv: Path) -> dict[str, float]:
    """CPU seconds of each of :data:`IMPORTS`, the median of :data:`ROUNDS` fresh processes."""
    python = str(venv / "bin" / "python")
    costs = {}
    for name, (module, before) in IMPORTS.items():
        code = _TIMED.format(before=before, module=module)
        runs = [
            float(
                subprocess.run(
                    [python, "-c", code], capture_output=True, text=True, check=True, timeout=60
                ).stdout
            )
            for _ in range(ROUNDS)
        ]
        costs[name] = statistics.median(runs)
    return costs
