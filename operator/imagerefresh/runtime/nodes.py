"""The nodes' image lists, read once per round of ticks and shared by every policy's tick.

Offline readiness asks of each node a workload runs on whether it holds the template's
images; a node's ``status.images`` can prove what no pod there shows. The list of nodes is
the cluster's, not a policy's: policies ticking together (a round of the tick grid, a burst of
refresh-nows) share one LIST, and concurrent ticks await the one read in flight. An answer is
used for a short while only (:attr:`~.config.OperatorConfig.node_list_lifetime`), so each
round reads the nodes as they are; a tick someone asked for (a refresh-now) takes no list whose
request started before it was asked for.

Every outcome is explicit evidence for :func:`imagerefresh.offline.offline_readiness`:

- node reads off → ``None`` ("the operator may not read nodes": only pods prove anything);
- a list that failed (RBAC, the API server) → :meth:`NodeInventory.failed`, saying why and what
  to do: every node is *unknown*, never "holds nothing" — silence is not an answer;
- a list stopped at its cap → an inventory that is not ``complete``.

Nodes are large objects: each is reduced to its :class:`~imagerefresh.offline.NodeImages` as
its page arrives (:meth:`KubeApi.list_nodes`), on a thread like every other read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import MappingProxyType

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.offline import NodeInventory, node_images
from imagerefresh.runtime.config import OperatorConfig

__all__ = ["NODE_READS_HELP", "NodeReads", "read_nodes"]

log = structlog.get_logger(__name__)

# What to do about a node list that failed, said where the failure is reported.
NODE_READS_HELP = (
    "grant get and list on nodes to the operator's ServiceAccount (chart value "
    "offline.readNodes: true renders that ClusterRole), or turn node reads off "
    "(offline.readNodes: false; imagerefresh run without --read-nodes)"
)


def read_nodes(api: KubeApi, cap: int) -> NodeInventory:
    """The nodes' image lists now (blocking: run it on a thread); a failure is an inventory
    that says so. ``cap``: the kubelets' ``nodeStatusMaxImages``."""
    try:
        found, complete = api.list_nodes(lambda item: node_images(item, cap))
    except KubeError as error:
        log.warning("nodes not listed; offline evidence unknown", error=str(error))
        return NodeInventory.failed(f"{error} — {NODE_READS_HELP}")
    except (AttributeError, TypeError, ValueError) as error:  # a node list of another shape
        log.warning("nodes unreadable; offline evidence unknown", error=repr(error))
        return NodeInventory.failed(
            f"the API returned a node list we cannot read ({error!r}); retried next tick"
        )
    return NodeInventory(MappingProxyType(dict(found)), complete)


class NodeReads:
    """The current :class:`NodeInventory` for every tick: one LIST per ``lifetime`` at most.

    Concurrent callers await the read in flight; a read answers every caller that asks within
    ``lifetime`` seconds of its start — a failed one too (it is an answer: unknown, retried by
    the next round), so a cluster whose RBAC forbids the list is asked once per round, not once
    per policy.
    """

    def __init__(
        self,
        api: KubeApi,
        config: OperatorConfig,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api, self._clock, self._wall = api, clock, wall
        self.enabled = config.read_nodes
        self._cap = config.node_status_max_images
        self._lifetime = config.node_list_lifetime
        # The read that answers: its task, and when it started (monotonic and epoch seconds).
        self._read: tuple[asyncio.Future[NodeInventory], float, float] | None = None

    async def current(self, asked_at: float | None = None) -> NodeInventory | None:
        """The nodes' image lists for a tick now; None when node reads are off.

        ``asked_at`` (epoch seconds): a tick someone asked for then takes no list whose
        request started before it.
        """
        if not self.enabled:
            return None
        now = self._clock()
        if not self._usable(now, asked_at):
            task = asyncio.ensure_future(asyncio.to_thread(read_nodes, self.api, self._cap))
            self._read = (task, now, self._wall())
        assert self._read is not None
        # Shielded: a tick cancelled while it waits does not cancel the read the others await.
        return await asyncio.shield(self._read[0])

    def _usable(self, now: float, asked_at: float | None) -> bool:
        """Whether the last read answers a tick now: still in flight, or young enough (and of
        this event loop: ``imagerefresh plan`` and tests run one loop after another)."""
        if self._read is None:
            return False
        task, started, wall = self._read
        if task.get_loop() is not asyncio.get_running_loop():
            return False
        if asked_at is not None and wall < asked_at:
            return False
        return not task.done() or now - started < self._lifetime
