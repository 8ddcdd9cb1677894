"""core/v1 Events about the objects the operator acts on: best-effort, they never break a
tick."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from imagerefresh.kube.errors import translate
from imagerefresh.kube.transport import (
    FIELD_MANAGER,
    Transport,
    segment,
)

log = structlog.get_logger(__name__)

__all__ = ["EVENT_COMPONENT", "EventWrites"]

EVENT_COMPONENT = "imagerefresh"
MAX_EVENT_MESSAGE = 1024


class EventWrites(Transport):
    """Events, as client-go's recorder writes them."""

    def post_event(
        self, regarding: Mapping[str, Any], type: str, reason: str, message: str
    ) -> None:
        """Record a core/v1 Event about ``regarding``; best-effort: failures are only logged."""
        metadata = regarding.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        name = str(metadata.get("name") or "unknown")
        what = f"create Event {reason} in {namespace} about {regarding.get('kind')} {name}"
        try:
            self._request(
                what,
                "POST",
                f"/api/v1/namespaces/{segment(namespace)}/events",
                query=[("fieldManager", FIELD_MANAGER)],
                body=_event(regarding, namespace, type, reason, message),
                answer=False,  # the Event as created is of no use to us
            )
        except Exception as error:  # events must never break a tick
            log.warning("event not posted", reason=reason, error=str(translate(error, what=what)))


def _event(
    regarding: Mapping[str, Any], namespace: str, type: str, reason: str, message: str
) -> dict[str, Any]:
    metadata = regarding.get("metadata") or {}
    name = str(metadata.get("name") or "unknown")
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    involved = {
        "apiVersion": regarding.get("apiVersion"),
        "kind": regarding.get("kind"),
        "name": name,
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }
    if len(message) > MAX_EVENT_MESSAGE:
        message = message[: MAX_EVENT_MESSAGE - 1] + "…"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # As client-go's recorder names them: the object's name and a unique hex suffix.
        "metadata": {"name": f"{name[:236]}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": {k: v for k, v in involved.items() if v},
        "type": type,
        "reason": reason,
        "message": message,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
