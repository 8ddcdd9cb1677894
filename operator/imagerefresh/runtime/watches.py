"""What the targets name, watched: the workloads and their pods as the ticks read them.

A tick decides on its targets' workloads and the pods of those workloads. Reading them again
on every tick is most of what a fleet's ticks ask of the API server, and polling them is how
a rollout's end would be noticed; instead the operator keeps watch-fed copies
(:class:`~imagerefresh.kube.watch.Collection`) of exactly what its targets name:

- **workloads**, per kind and namespace where the operator may list and watch them (one stream
  for all of a namespace's Deployments); where it may not — the chart scopes workload access
  to the declared names with ``resourceNames`` — per workload by name
  (``fieldSelector=metadata.name``, which ``resourceNames`` allows);
- **pods**, per namespace (the operator may list pods there; watching adds ``watch``), reduced
  on arrival to the labels a selector matches and the digests they run.

A copy is started the first time a tick reads what it covers; until its first LIST answers,
and whenever its stream broke and was not listed again, it says nothing and the tick reads
the API server directly, as it would without watches (fail closed). Nothing is ever decided
on an unsynced copy. Every change a stream delivers is passed to the listener (the scheduler:
a rollout in flight is judged when its workload changes, not on a poll), and every pod that
changed to the pod listener, with its labels — a refresh in its health window is judged when
one of its pods restarts (:meth:`EvidenceWatches.selects` says whose pod it is).

Copies nobody read for :data:`UNUSED_FOR` are stopped; at most
:data:`~imagerefresh.kube.watch.MAX_STREAMS` run (past that, reads go direct).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.selectors import matches
from imagerefresh.kube.watch import MAX_STREAMS, Collection
from imagerefresh.models import WorkloadKind
from imagerefresh.planner import ObservedPod, TargetKey

__all__ = ["UNUSED_FOR", "EvidenceWatches", "WatchedPod"]

log = structlog.get_logger(__name__)

# A copy no tick read for this long is stopped (its targets went, or tick too rarely to be
# worth a stream); the next read starts it again and reads directly until it is listed.
UNUSED_FOR = 2 * 3600.0
_REAP_EVERY = 60.0
_RESOURCES = {"Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}

Listener = Callable[[TargetKey, str], None]
PodListener = Callable[[str, Mapping[str, str]], None]  # (namespace, the pod's labels)
_SELECTORS_KEPT = 1_024  # workloads whose selectors are remembered (the rollouts in flight)


@dataclass(frozen=True, slots=True)
class WatchedPod:
    """A pod as the copy keeps it: its labels, and what it runs (or why it cannot be read)."""

    labels: Mapping[str, str]
    pod: ObservedPod | str

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> WatchedPod:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        try:
            return cls(labels, ObservedPod.from_api(obj))
        except (KeyError, TypeError, ValueError) as error:
            return cls(labels, f"the API returned an object we cannot read: {error!r}")


def _compact(kind: str) -> Callable[[dict[str, Any]], bytes]:
    """A workload kept as compact JSON: a fraction of its size as Python objects."""

    def keep(obj: dict[str, Any]) -> bytes:
        obj.setdefault("apiVersion", "apps/v1")
        obj.setdefault("kind", kind)  # a LIST's items carry no kind
        return json.dumps(obj, separators=(",", ":")).encode()

    return keep


class EvidenceWatches:
    """The watch-fed copies of the targets' workloads and pods (see the module docs)."""

    def __init__(self, api: KubeApi, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.clock = api, clock
        self._lock = threading.Lock()
        self._workloads: dict[tuple[str, str], Collection[bytes]] = {}  # (kind, namespace)
        self._named: dict[TargetKey, Collection[bytes]] = {}
        self._pods: dict[str, Collection[WatchedPod]] = {}
        self._used: dict[int, float] = {}  # id(collection) → when last read
        self._listener: Listener | None = None
        self._pod_listener: PodListener | None = None
        # Workload → (its version, its selector): pods are matched on the watch threads.
        self._selectors: dict[TargetKey, tuple[str, dict[str, Any]]] = {}
        self._selectors_lock = threading.Lock()
        self._reaped = clock()
        self._closed = False
        self._reported: set[int] = set()  # refusals logged (id of the collection)

    def listen(self, listener: Listener) -> None:
        """Tell ``listener`` (from a watch thread) of every workload change: key, version."""
        self._listener = listener

    def listen_pods(self, listener: PodListener) -> None:
        """Tell ``listener`` (from a watch thread) of every pod added or changed in a watched
        namespace: the namespace and the pod's labels."""
        self._pod_listener = listener

    # --- what the ticks read -----------------------------------------------------------------

    def workload(self, key: TargetKey) -> tuple[bool, dict[str, Any] | None]:
        """(known, the workload or None when it does not exist); not known: read directly."""
        collection = self._workload_collection(key)
        if collection is None:
            return False, None
        synced, kept = collection.get(key.name)
        if not synced:
            return False, None
        return True, (json.loads(kept) if kept is not None else None)

    def pods(self, namespace: str, selector: Mapping[str, Any]) -> list[WatchedPod] | None:
        """The pods ``selector`` (valid, non-empty) matches; None: read directly."""
        collection = self._pod_collection(namespace)
        snapshot = collection.snapshot() if collection is not None else None
        if snapshot is None:
            return None
        return [pod for pod in snapshot.items.values() if matches(selector, pod.labels)]

    def pods_synced(self, namespace: str) -> bool:
        """Whether a synced copy holds ``namespace``'s pods (their changes are reported)."""
        with self._lock:
            collection = self._pods.get(namespace)
        return collection is not None and collection.refused is None and collection.synced

    def selects(self, key: TargetKey, labels: Mapping[str, str]) -> bool:
        """Whether ``key``'s workload selects a pod with ``labels``; True when its copy cannot
        say (a pod that may be its own is judged rather than missed)."""
        collection = self.covering(key)
        if collection is None:
            return True
        version = collection.version_of(key.name)
        if not version:
            return True
        with self._selectors_lock:
            cached = self._selectors.get(key)
        if cached is None or cached[0] != version:
            synced, kept = collection.get(key.name)
            if not synced or kept is None:
                return True
            selector = (json.loads(kept).get("spec") or {}).get("selector") or {}
            cached = (version, selector)
            with self._selectors_lock:
                if len(self._selectors) >= _SELECTORS_KEPT:
                    self._selectors.clear()
                self._selectors[key] = cached
        try:
            return matches(cached[1], labels)
        except (KeyError, TypeError, AttributeError):
            return True  # a selector that cannot be read: judged, never missed

    def version(self, key: TargetKey) -> str | None:
        """The workload's resourceVersion in a synced copy ("" when absent); None: unknown."""
        collection = self.covering(key)
        return collection.version_of(key.name) if collection is not None else None

    def covering(self, key: TargetKey) -> Collection[bytes] | None:
        """The copy that holds ``key``'s workload, if one was started and not refused."""
        with self._lock:
            shared = self._workloads.get((str(key.kind), key.namespace))
            if shared is not None and shared.refused is None:
                return shared
            named = self._named.get(key)
        return named if named is not None and named.refused is None else None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            collections: list[Collection[Any]] = [
                *self._workloads.values(),
                *self._named.values(),
                *self._pods.values(),
            ]
        for collection in collections:
            collection.stop()

    # --- the copies ----------------------------------------------------------------------------

    def _workload_collection(self, key: TargetKey) -> Collection[bytes] | None:
        kind, namespace = str(key.kind), key.namespace
        resource = _RESOURCES[kind]
        path = f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}/{resource}"
        with self._lock:
            self._reap()
            shared = self._workloads.get((kind, namespace))
            if shared is None:
                shared = self._start(
                    self._workloads,
                    (kind, namespace),
                    Collection(
                        self.api,
                        path,
                        what=f"{resource}.apps in {namespace}",
                        keep=_compact(kind),
                        changed=self._told(WorkloadKind(kind), namespace),
                    ),
                )
            if shared is None or shared.refused is None:
                return self._touch(shared)
            named = self._named.get(key)
            if named is None:
                named = self._start(
                    self._named,
                    key,
                    Collection(
                        self.api,
                        path,
                        what=f"{resource}.apps {namespace}/{key.name}",
                        keep=_compact(kind),
                        name=key.name,
                        changed=self._told(WorkloadKind(kind), namespace),
                    ),
                )
            self._refused(named, "it is read directly on every tick")
            return self._touch(named)

    def _pod_collection(self, namespace: str) -> Collection[WatchedPod] | None:
        with self._lock:
            collection = self._pods.get(namespace)
            if collection is None:
                collection = self._start(
                    self._pods,
                    namespace,
                    Collection(
                        self.api,
                        f"/api/v1/namespaces/{quote(namespace, safe='')}/pods",
                        what=f"pods in {namespace}",
                        keep=WatchedPod.from_api,
                        changed=self._pod_told(namespace),
                    ),
                )
            if collection is not None and collection.refused is not None:
                self._refused(collection, "they are listed on every tick")
                return None
            return self._touch(collection)

    def _refused(self, collection: Collection[Any] | None, instead: str) -> None:
        """Log once why a copy is not kept, and what is done instead (holding the lock)."""
        if collection is None or collection.refused is None or id(collection) in self._reported:
            return
        self._reported.add(id(collection))
        log.info(
            "not watching",
            collection=collection.what,
            instead=instead,
            error=str(collection.refused),
        )

    def _start(self, where: dict[Any, Any], key: Any, collection: Collection[Any]) -> Any:
        """Start ``collection`` under ``key`` unless closed or at the stream cap (None)."""
        running = len(self._workloads) + len(self._named) + len(self._pods)
        if self._closed or running >= MAX_STREAMS:
            return None
        where[key] = collection.start()
        log.info("watching", collection=collection.what)
        return collection

    def _touch(self, collection: Collection[Any] | None) -> Collection[Any] | None:
        if collection is not None:
            self._used[id(collection)] = self.clock()
        return collection

    def _told(self, kind: WorkloadKind, namespace: str) -> Callable[[str, str], None]:
        def changed(name: str, version: str) -> None:
            listener = self._listener
            if listener is not None:
                listener(TargetKey(kind, namespace, name), version)

        return changed

    def _pod_told(self, namespace: str) -> Callable[[str, str], None]:
        def changed(name: str, version: str) -> None:
            listener = self._pod_listener
            collection = self._pods.get(namespace)
            if listener is None or not version or collection is None:
                return  # a pod deleted is no crash: its replacement, if any, is reported
            _, pod = collection.get(name)
            if pod is not None:
                listener(namespace, pod.labels)

        return changed

    def _reap(self) -> None:
        """Stop the copies nobody read for :data:`UNUSED_FOR` (holding the lock)."""
        now = self.clock()
        if now - self._reaped < _REAP_EVERY:
            return
        self._reaped = now
        places: tuple[dict[Any, Collection[Any]], ...] = (self._workloads, self._named, self._pods)
        for where in places:
            for key, collection in list(where.items()):
                if now - self._used.get(id(collection), now) > UNUSED_FOR:
                    del where[key]
                    self._used.pop(id(collection), None)
                    collection.stop()
                    log.info("no longer watching (unused)", collection=collection.what)
