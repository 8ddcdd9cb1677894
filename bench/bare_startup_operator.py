"""The start-up floor: a bare kopf operator that says what its start cost, to its first handler.

Run as ``kopf run --standalone --namespace NS bench/bare_startup_operator.py`` with
``BARE_STARTUP_FILE`` set, against the namespace of a policy that exists: its one event handler
writes the process's CPU seconds (``time.process_time``: exec, imports, kopf's login and first
list and watch) to that file at its first call. Any kopf operator pays this before its first
handler runs; the operator's start-up row is read against it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import kopf

_reported = False


@kopf.on.event("images.tracebloc.io", "v1alpha1", "imagerefreshpolicies")
def first(**_: Any) -> None:
    """Its first call records the CPU the process took to get here."""
    global _reported
    if not _reported:
        _reported = True
        Path(os.environ["BARE_STARTUP_FILE"]).write_text(str(time.process_time()))
