"""Context for the memory baseline: kopf with one no-op *daemon* per policy, as the operator has.

The operator ticks each policy from a kopf daemon, which costs kopf itself something per object
(a task, its stopper, a finalizer). Run next to the operator and the bare operator, it shows how
much of the operator's memory is kopf's daemon machinery rather than the operator's own code.
kopf is configured as the operator configures it (see bare_operator.py).
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

PREFIX = "daemons.bench.imagerefresh.test"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.posting.level = logging.WARNING


@kopf.daemon("images.tracebloc.io", "v1alpha1", "imagerefreshpolicies", cancellation_timeout=5)
async def idle(stopped: kopf.DaemonStopped, **_: Any) -> None:
    """Nothing until the policy goes away."""
    await stopped.wait()
