"""The installed commands start through the import that runs no collection and freezes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# `imagerefresh --version` as its console script runs it, in a process of its own.
VERSION = textwrap.dedent(
    """
    import gc, json, sys
    from imagerefresh.entry import main

    sys.argv = ["imagerefresh", "--version"]
    try:
        main()
    except SystemExit:
        pass
    print(json.dumps({"frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}))
    """
)


def test_the_imagerefresh_command_freezes_what_its_imports_built_and_collects_again() -> None:
    done = subprocess.run(
        [sys.executable, "-c", VERSION], capture_output=True, text=True, check=True, timeout=120
    )
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["frozen"] > 20_000
    assert found["enabled"]
