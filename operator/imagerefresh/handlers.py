"""The kopf wiring: which policies exist, and when they changed. Deliberately thin.

kopf reports the policies through one raw-event handler — which, unlike change handlers,
daemons and timers, persists nothing on the object and puts no finalizer on it — and the
:class:`~imagerefresh.runtime.scheduler.Scheduler` decides when each ticks: on its interval's
grid, at once when its spec, reset, refresh-now or refresh-outside-window annotation changes,
at the start of a refresh window one of its targets waits for, and every few seconds while a
rollout of ours is in flight. Deleting a policy, its namespace or the release never
waits for the operator.

With a namespace pattern kopf watches policies cluster-wide and the handler serves only those
in a matching namespace (:mod:`imagerefresh.kube.namespaces` says why kopf does not match).

Handlers are registered on a registry built by :func:`build_registry`, never at import time;
kopf's log-to-event posting is limited to warnings so that the operator's own events stay the
ones an SRE reads.

kopf works out on every event of a policy what changed since the last one it handled (its
"diff base": a deep copy of the whole body, cleaned, and compared), for change handlers.
There are none here, and every status write of ours is such an event, so
:class:`NoEssence` tells kopf that nothing a handler of ours reads ever changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from imagerefresh.kube.login import Login
from imagerefresh.kube.namespaces import NamespaceScope
from imagerefresh.models import PolicySpec, parse_duration
from imagerefresh.runtime.leftovers import delete_leftover_helpers
from imagerefresh.runtime.policyview import RESET_ANNOTATION, WINDOW_OVERRIDE_ANNOTATION
from imagerefresh.runtime.schedule import random_phase
from imagerefresh.runtime.scheduler import Scheduler
from imagerefresh.runtime.ticker import PolicyTicker

__all__ = [
    "GROUP",
    "PLURAL",
    "REFRESH_NOW_ANNOTATION",
    "VERSION",
    "NoEssence",
    "Runtime",
    "build_registry",
]

GROUP, VERSION, PLURAL = "images.tracebloc.io", "v1alpha1", "imagerefreshpolicies"
REFRESH_NOW_ANNOTATION = "images.tracebloc.io/refresh-now"
# kopf's watch streams can go silent without a disconnect (kopf's docs; root cause unknown
# upstream): no event, no error, until kopf's 70 s inactivity timer reconnects. Ending every
# watch after WATCH_SERVER_TIMEOUT (server side) or WATCH_CLIENT_TIMEOUT (client side, if the
# server never ends it) bounds how late a new policy, a refresh-now or a spec change can be
# noticed. kopf resumes from the last resourceVersion, so a reconnect lists nothing again: one
# watch request per stream per period.
WATCH_SERVER_TIMEOUT = 25
WATCH_CLIENT_TIMEOUT = 35.0
DEFAULT_INTERVAL: float = PolicySpec.model_fields["interval"].default.total_seconds()


class NoEssence(kopf.DiffBaseStorage):
    """A diff base for an operator without change handlers: every essence is empty, none is
    stored. kopf still detects creations and deletions from the event's type."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return kopf.BodyEssence()

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


@dataclass
class Runtime:
    """What every handler shares (kopf's ``memo``)."""

    ticker: PolicyTicker
    phase: float = field(default_factory=random_phase)  # of every policy's tick grid
    follow_period: float = 2.0
    scheduler: Scheduler = field(init=False)
    task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.scheduler = Scheduler(self.ticker, phase=self.phase, follow_period=self.follow_period)


def _interval(body: Mapping[str, Any]) -> float:
    text = (body.get("spec") or {}).get("interval")
    try:
        return parse_duration(str(text)).total_seconds() if text else DEFAULT_INTERVAL
    except ValueError:
        return DEFAULT_INTERVAL


def _trigger(body: Mapping[str, Any]) -> dict[str, Any]:
    """What asks for a prompt tick when it changes, by the name the ask is counted under."""
    metadata = body.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return {
        "spec": metadata.get("generation"),
        "reset": annotations.get(RESET_ANNOTATION),
        "refresh_now": annotations.get(REFRESH_NOW_ANNOTATION),
        "outside_window": annotations.get(WINDOW_OVERRIDE_ANNOTATION),
    }


def build_registry(login: Login, scope: NamespaceScope | None = None) -> kopf.OperatorRegistry:
    """A kopf registry with the operator's handlers, for the policies of ``scope`` (all when
    None). kopf watches where it is told; ``scope`` decides which of those policies are ours.
    kopf logs in as the operator's own requests do (``login``), and asks again on a 401 or
    when the token it holds expires."""
    registry = kopf.OperatorRegistry()
    serves = (scope or NamespaceScope()).serves

    def in_scope(namespace: str | None, **_: Any) -> bool:
        return serves(namespace or "")

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, memo: Runtime, **_: Any) -> None:
        # Nothing of kopf's is stored on policies: no handler here persists state or needs a
        # finalizer. Kept under our group in case a future handler does.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = NoEssence()
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
        settings.watching.client_timeout = WATCH_CLIENT_TIMEOUT
        memo.task = asyncio.get_running_loop().create_task(memo.scheduler.run())

    @kopf.on.cleanup(registry=registry)
    async def stop(memo: Runtime, **_: Any) -> None:
        if memo.task is not None:
            memo.task.cancel()
            await asyncio.gather(memo.task, return_exceptions=True)
        await memo.scheduler.stop()
        memo.ticker.close()

    @kopf.on.login(registry=registry)
    def log_in(**_: Any) -> kopf.ConnectionInfo:
        return login.info()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, when=in_scope)
    async def noticed(body: kopf.Body, type: str | None, memo: Runtime, **_: Any) -> None:
        uid = body.metadata.uid or ""
        if type == "DELETED":
            memo.ticker.claims.forget(uid)
            memo.scheduler.forget(uid)  # and its series go with it
            config = memo.ticker.config
            if config.pre_pull_pods:  # a pre-pull in flight has no next tick
                api, policy = memo.ticker.api, dict(body)
                await asyncio.to_thread(delete_leftover_helpers, api, policy, config.namespaces)
            return
        if body.metadata.get("deletionTimestamp"):
            return  # going: no new tick for it
        namespace, name = body.metadata.namespace or "", body.metadata.name or ""
        memo.ticker.claims.update(uid, namespace, name, body.spec)
        memo.scheduler.observe(uid, namespace, name, _interval(body), _trigger(body))

    return registry
