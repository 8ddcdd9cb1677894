"""The memory baseline: a bare kopf operator with one no-op handler on the same CRD.

Run as ``kopf run --standalone --namespace NS bench/bare_operator.py`` against the same
cluster as the operator, it watches the same policies and does nothing with them. It is
configured as the operator configures kopf (handlers.py): kopf's bookkeeping in annotations,
since the CRD's structural status schema prunes kopf's default ``status.kopf`` (kopf would
patch it again and again), and only warnings posted as Kubernetes Events. Its diff base is
kopf's own (a copy of each policy per event): the operator's builds none, which costs it less,
so the baseline does not flatter the operator.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

PREFIX = "bare.bench.imagerefresh.test"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.posting.level = logging.WARNING


@kopf.on.event("images.tracebloc.io", "v1alpha1", "imagerefreshpolicies")
def noop(**_: Any) -> None:
    """Nothing: what kopf itself costs is the baseline."""
