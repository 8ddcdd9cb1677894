"""The kopf wiring: when each policy ticks. Deliberately thin — the ticker does the work.

kopf timers have one fixed interval per handler, but each policy declares its own
``spec.interval``; so every policy gets a daemon that ticks, then sleeps until the next instant
of its interval's grid (:mod:`imagerefresh.runtime.schedule`: policies of one interval tick
together and share registry answers) — or less, when something worth a prompt tick happens.
A raw-event handler (which, unlike change handlers, persists nothing on the object) wakes the
daemon when the spec's generation, the reset annotation or the refresh-now annotation changes.

Handlers are registered on a registry built by :func:`build_registry`, never at import time;
kopf's own bookkeeping lives in annotations under ``images.tracebloc.io`` (our CRD's status
schema has no room for kopf's), and kopf's log-to-event posting is limited to warnings so that
the operator's own events stay the ones an SRE reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from imagerefresh.kube.errors import KubeError, KubeUnavailable
from imagerefresh.models import PolicySpec, parse_duration
from imagerefresh.runtime.gather import RESET_ANNOTATION
from imagerefresh.runtime.schedule import random_phase, seconds_until_next_tick
from imagerefresh.runtime.ticker import PolicyTicker

__all__ = ["GROUP", "PLURAL", "REFRESH_NOW_ANNOTATION", "VERSION", "Runtime", "build_registry"]

GROUP, VERSION, PLURAL = "images.tracebloc.io", "v1alpha1", "imagerefreshpolicies"
REFRESH_NOW_ANNOTATION = "images.tracebloc.io/refresh-now"
DEFAULT_INTERVAL: float = PolicySpec.model_fields["interval"].default.total_seconds()
RETRY_DELAY = 30.0


@dataclass
class Runtime:
    """What every handler shares (kopf hands each object a shallow copy: the dicts are shared)."""

    ticker: PolicyTicker
    phase: float = field(default_factory=random_phase)  # of every policy's tick grid
    wakeups: dict[str, asyncio.Event] = field(default_factory=dict)
    triggers: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def wakeup(self, uid: str) -> asyncio.Event:
        return self.wakeups.setdefault(uid, asyncio.Event())


def _interval(body: Mapping[str, Any]) -> float:
    text = (body.get("spec") or {}).get("interval")
    try:
        return parse_duration(str(text)).total_seconds() if text else DEFAULT_INTERVAL
    except ValueError:
        return DEFAULT_INTERVAL


def _trigger(body: Mapping[str, Any]) -> tuple[Any, ...]:
    metadata = body.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return (
        metadata.get("generation"),
        annotations.get(RESET_ANNOTATION),
        annotations.get(REFRESH_NOW_ANNOTATION),
    )


def build_registry() -> kopf.OperatorRegistry:
    """A kopf registry with the operator's handlers."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=GROUP, key="last-handled-configuration"
        )
        settings.persistence.finalizer = f"{GROUP}/finalizer"
        settings.posting.level = logging.WARNING

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def noticed(body: kopf.Body, type: str | None, memo: Runtime, **_: Any) -> None:
        uid = body.metadata.uid or ""
        if type == "DELETED":
            memo.triggers.pop(uid, None)
            memo.wakeups.pop(uid, None)
            memo.ticker.claims.forget(uid)
            # Its series go with it (SPEC §6). kopf's finalizer holds the deletion until the
            # daemon has stopped, so no tick of this policy records anything after this.
            memo.ticker.metrics.forget_policy(
                body.metadata.namespace or "", body.metadata.name or ""
            )
            return
        memo.ticker.claims.update(
            uid, body.metadata.namespace or "", body.metadata.name or "", body.spec
        )
        trigger = _trigger(body)
        seen = memo.triggers.get(uid)
        memo.triggers[uid] = trigger
        # The first sighting is the daemon's own start, which ticks at once anyway.
        if seen is not None and seen != trigger:
            memo.wakeup(uid).set()

    @kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, cancellation_timeout=10.0)
    async def tick_policy(
        name: str, namespace: str | None, uid: str, body: kopf.Body, memo: Runtime, **_: Any
    ) -> None:
        assert namespace is not None  # the CRD is namespaced
        wake = memo.wakeup(uid)
        while True:
            wake.clear()
            try:
                await memo.ticker.tick(namespace, name)
            except KubeUnavailable as error:
                raise kopf.TemporaryError(
                    f"the API server is unavailable ({error}); retrying", delay=RETRY_DELAY
                ) from error
            except KubeError as error:
                raise kopf.TemporaryError(f"{error}", delay=RETRY_DELAY) from error
            # The daemon's body is a live view: a changed interval takes effect at once.
            delay = seconds_until_next_tick(_interval(body), time.time(), memo.phase)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=delay)

    return registry
