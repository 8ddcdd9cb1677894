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


# As the installed commands start: the command line imported through import_frozen.
COMMAND_START = textwrap.dedent(
    """
    import gc, json
    from imagerefresh.collector import import_frozen

    collections = []
    gc.callbacks.append(lambda phase, info: collections.append(info["generation"]))
    import_frozen("imagerefresh.cli")
    during = len(collections)
    print(json.dumps({
        "collections": during,
        "frozen": gc.get_freeze_count(),
        "walked": len(gc.get_objects()),
        "enabled": gc.isenabled(),
    }))
    """
)


def test_the_commands_import_without_a_collection_and_freeze_what_they_imported() -> None:
    done = subprocess.run(
        [sys.executable, "-c", COMMAND_START], capture_output=True, text=True, check=True,
        timeout=120,
    )  # fmt: skip
    found = json.loads(done.stdout)
    assert found["collections"] == 0
    assert found["frozen"] > 20_000
    assert found["walked"] < 0.01 * found["frozen"]
    assert found["enabled"]
