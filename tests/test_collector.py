"""Start-up's heap frozen: a full collection walks only what the operator made since."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# In a process of its own, as the operator: what its command imports, then the freeze.
STARTUP = textwrap.dedent(
    """
    import gc, json
    import imagerefresh.cli.operate  # everything `imagerefresh run` imports before serving
    from imagerefresh.collector import freeze_startup_heap

    tracked = len(gc.get_objects())
    frozen = freeze_startup_heap()
    print(json.dumps({"tracked": tracked, "frozen": frozen, "walked": len(gc.get_objects())}))
    """
)


def test_freezing_takes_the_imports_out_of_every_collection() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STARTUP], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(done.stdout)
    # The imports leave tens of thousands of objects, and all of them are frozen: what a full
    # collection still walks is what was made after the freeze.
    assert found["tracked"] > 20_000
    assert found["frozen"] > 0.9 * found["tracked"]
    assert found["walked"] < 0.01 * found["tracked"]
