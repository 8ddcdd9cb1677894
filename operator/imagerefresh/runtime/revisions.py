"""The previous revision of each workload with a rollout of ours in flight, read once per
generation.

A rollback may restore only what live evidence proves the workload ran (see
:mod:`imagerefresh.kube.revisions`), so a tick reads the previous revision of every target
whose status records a patch of ours. Follow-ups run every few seconds while a rollout is in
flight; the previous revision changes only with the workload's template, so the answer is
kept per (uid, generation) and read again only when the generation moves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.kube.revisions import previous_template

__all__ = ["PreviousRevisions"]

_KEPT = 1_024  # workloads in flight at once, at most, that are remembered


@dataclass
class PreviousRevisions:
    """Previous templates read, kept per (uid, generation); failures are not kept."""

    _known: OrderedDict[tuple[str, int], dict[str, str] | None] = field(default_factory=OrderedDict)
    _lock: Lock = field(default_factory=Lock)

    def read(
        self, api: KubeApi, workload: Mapping[str, Any]
    ) -> tuple[dict[str, str] | None, str | None]:
        """The previous revision's images (None: none kept), and why it could not be read."""
        metadata = workload.get("metadata") or {}
        memo = (str(metadata.get("uid") or ""), int(metadata.get("generation") or 0))
        with self._lock:
            if memo in self._known:
                self._known.move_to_end(memo)
                return self._known[memo], None
        try:
            found = previous_template(api, workload)
        except KubeError as error:
            return None, str(error)
        with self._lock:
            self._known[memo] = found
            while len(self._known) > _KEPT:
                self._known.popitem(last=False)
        return found, None
