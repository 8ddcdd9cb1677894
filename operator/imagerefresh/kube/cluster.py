"""Cluster-scoped reads: the nodes (offline evidence), and whether a namespace exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from imagerefresh.kube.errors import NotFound
from imagerefresh.kube.transport import (
    Json,
    Transport,
    segment,
)

T = TypeVar("T")

__all__ = ["MAX_NODES", "ClusterReads"]

# Nodes one list reads at most: a cluster larger than this is listed in part (reported as
# such), so one list bounds the memory and time a tick spends on nodes.
MAX_NODES = 5_000


class ClusterReads(Transport):
    """Nodes and namespaces."""

    def list_nodes(
        self, keep: Callable[[Json], T | None], *, cap: int = MAX_NODES
    ) -> tuple[list[T], bool]:
        """What ``keep`` makes of each node (None: nothing), and whether the list is complete.

        Nodes are large (their image lists alone run to tens of KiB), so each is handed to
        ``keep`` as its page arrives and never held past it. At most ``cap`` nodes are read;
        ``complete`` is False when the list stopped there with more left, so a caller can tell
        a node not listed from a node that does not exist.
        """
        kept: list[T] = []
        read = 0
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", max(1, min(self.page_size, cap - read)))]
            if token is not None:
                query.append(("continue", token))
            page = self._request("list nodes", "GET", "/api/v1/nodes", query=query)
            items = page.get("items")
            items = items if isinstance(items, list) else []
            room = max(0, cap - read)
            for item in items[:room]:
                if isinstance(item, dict) and (found := keep(item)) is not None:
                    kept.append(found)
            read += min(len(items), room)
            token = (page.get("metadata") or {}).get("continue") or None
            if len(items) > room:  # a page larger than asked for: the cap still holds
                return kept, False
            if token is None:
                return kept, True
            if read >= cap:
                return kept, False

    def namespace_exists(self, namespace: str) -> bool:
        """Whether the namespace exists (Forbidden when the caller may not get namespaces)."""
        try:
            self._request(
                f"get namespace {namespace}", "GET", f"/api/v1/namespaces/{segment(namespace)}"
            )
        except NotFound:
            return False
        return True
