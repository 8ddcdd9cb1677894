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
  on arrival to the labels the targets' selectors read and the digests they run.

Each copy keeps only what a decision reads (:mod:`.kept`), and one whose kept objects pass
:data:`~imagerefresh.kube.watch.MAX_BYTES` is given up for direct reads, as one of more than
:data:`~imagerefresh.kube.watch.MAX_ITEMS` objects is. A selector that reads a label the pods'
copy does not keep has it listed again with that label (read directly meanwhile).

**Read your own writes.** A copy may lag behind a patch of ours that has landed; a verdict
drawn from it would take our own patch for someone else's revert. The generation each landed
patch produced is remembered here, per workload and uid (told by
:meth:`~imagerefresh.kube.api.KubeApi.observe_patches`, from the API server's answer to the
patch): a copy whose object is older is not reported (:meth:`EvidenceWatches.workload` says
"unknown", :meth:`~EvidenceWatches.version` None), so the tick reads the workload directly and
the scheduler polls it until the copy has caught up. Only the operator's own memory is trusted
for this; what status says (``pending.generation``) can at most make ``runtime/reads`` read
directly (see there).

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
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.selectors import matches
from imagerefresh.kube.watch import MAX_STREAMS, Collection
from imagerefresh.models import WorkloadKind
from imagerefresh.planner import ObservedPod, TargetKey
from imagerefresh.runtime.kept import kept_pod, kept_workload, label_keys

__all__ = ["MAX_LABEL_KEYS", "UNUSED_FOR", "EvidenceWatches", "KeptWorkload", "WatchedPod"]

log = structlog.get_logger(__name__)

# A copy no tick read for this long is stopped (its targets went, or tick too rarely to be
# worth a stream); the next read starts it again and reads directly until it is listed.
UNUSED_FOR = 2 * 3600.0
_REAP_EVERY = 60.0
_RESOURCES = {"Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}
# Label keys a namespace's pod copy keeps at most (the union of its targets' selectors); a
# selector reading more is answered by direct reads.
MAX_LABEL_KEYS = 64
# Workloads whose last landed patch of ours is remembered, at most (the oldest forgotten
# first: a copy listed since is fresher than any of them anyway).
_OWN_WRITES = 10_000
_INACTIVE_PHASES = ("Succeeded", "Failed")
# How often every copy is asked whether it is still synced, whether or not a tick reads it:
# a stream that fell silent is noticed (and its rollouts judged on direct reads) this soon.
_WATCHDOG_EVERY = 5.0

Listener = Callable[[TargetKey, str], None]
PodListener = Callable[[str, Mapping[str, str]], None]  # (namespace, the pod's labels)
_SELECTORS_KEPT = 1_024  # workloads whose selectors are remembered (the rollouts in flight)


@dataclass(frozen=True, slots=True)
class WatchedPod:
    """A pod as the copy keeps it: the labels selectors read, what it runs (or why it cannot
    be read), whether its workload's status counts it (not being deleted, not finished), and
    what it costs the copy (bytes of the kept fields as compact JSON)."""

    labels: Mapping[str, str]
    pod: ObservedPod | str
    counted: bool = True
    size: int = 0

    @classmethod
    def from_api(cls, obj: Mapping[str, Any], labels: Iterable[str] = ()) -> WatchedPod:
        """``obj`` reduced to what a copy keeps (:func:`~.kept.kept_pod`); of its labels,
        those named in ``labels``."""
        kept = kept_pod(obj, labels)
        size = len(json.dumps(kept, separators=(",", ":"), default=str))
        metadata = kept.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        found = metadata.get("labels") or {}
        found = {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        phase = (kept.get("status") or {}).get("phase") if isinstance(kept, dict) else None
        counted = not metadata.get("deletionTimestamp") and phase not in _INACTIVE_PHASES
        try:
            return cls(found, ObservedPod.from_api(kept), counted, size)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            why = f"the API returned an object we cannot read: {error!r}"
            return cls(found, why, counted, size)


@dataclass(frozen=True, slots=True)
class KeptWorkload:
    """A workload as the copy keeps it: compact JSON of what a decision reads (a fraction of
    its size as Python objects), and the uid and generation it is checked by."""

    raw: bytes
    uid: str
    generation: int

    @classmethod
    def of(cls, obj: dict[str, Any], kind: str) -> KeptWorkload:
        kept = kept_workload(obj)
        kept.setdefault("apiVersion", "apps/v1")
        kept.setdefault("kind", kind)  # a LIST's items carry no kind
        metadata = kept.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        generation = metadata.get("generation")
        return cls(
            json.dumps(kept, separators=(",", ":")).encode(),
            str(metadata.get("uid") or ""),
            generation if isinstance(generation, int) else 0,
        )


def _kept(kind: str) -> Callable[[dict[str, Any]], KeptWorkload]:
    return lambda obj: KeptWorkload.of(obj, kind)


def _workload_size(kept: KeptWorkload) -> int:
    return len(kept.raw)


def _pod_size(kept: WatchedPod) -> int:
    return kept.size


class EvidenceWatches:
    """The watch-fed copies of the targets' workloads and pods (see the module docs)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int | None = None,
    ) -> None:
        """``clock``: what copies measure silence and disuse on (tests move their own);
        ``max_bytes``: each copy's cap (:data:`~imagerefresh.kube.watch.MAX_BYTES`)."""
        self.api, self.clock, self.max_bytes = api, clock, max_bytes
        self._lock = threading.Lock()
        self._workloads: dict[tuple[str, str], Collection[KeptWorkload]] = {}  # (kind, ns)
        self._named: dict[TargetKey, Collection[KeptWorkload]] = {}
        self._pods: dict[str, Collection[WatchedPod]] = {}
        self._labels: dict[str, frozenset[str]] = {}  # namespace → label keys its pods keep
        self._used: dict[int, float] = {}  # id(collection) → when last read
        self._listener: Listener | None = None
        self._pod_listener: PodListener | None = None
        # Workload → (its version, its selector): pods are matched on the watch threads.
        self._selectors: dict[TargetKey, tuple[str, dict[str, Any]]] = {}
        self._selectors_lock = threading.Lock()
        self._reaped = clock()
        self._closed = False
        self._reported: set[int] = set()  # refusals logged (id of the collection)
        # The generation our last landed patch produced, per workload (with its uid).
        self._written: OrderedDict[TargetKey, tuple[str, int]] = OrderedDict()
        api.observe_patches(self.wrote)
        self._closing = threading.Event()
        self._watchdog: threading.Thread | None = None

    def listen(self, listener: Listener) -> None:
        """Tell ``listener`` (from a watch thread) of every workload change: key, version."""
        self._listener = listener

    def listen_pods(self, listener: PodListener) -> None:
        """Tell ``listener`` (from a watch thread) of every pod added or changed in a watched
        namespace: the namespace and the pod's labels."""
        self._pod_listener = listener

    # --- our own writes ----------------------------------------------------------------------

    def wrote(self, obj: Mapping[str, Any]) -> None:
        """A patch of ours landed on ``obj`` (the API server's answer): remember the
        generation it produced, which the copy must reach before it is reported."""
        metadata = obj.get("metadata")
        if not isinstance(metadata, Mapping):
            return
        generation, uid = metadata.get("generation"), metadata.get("uid")
        try:
            key = TargetKey(
                WorkloadKind(str(obj.get("kind"))),
                str(metadata["namespace"]),
                str(metadata["name"]),
            )
        except (KeyError, ValueError):
            return
        if not isinstance(generation, int) or not isinstance(uid, str):
            return
        with self._lock:
            before = self._written.pop(key, None)
            if before is not None and before[0] == uid:
                generation = max(generation, before[1])
            self._written[key] = (uid, generation)
            while len(self._written) > _OWN_WRITES:
                self._written.popitem(last=False)

    def landed(self, key: TargetKey) -> tuple[str, int] | None:
        """(uid, generation) our last landed patch of ``key`` produced, as remembered."""
        with self._lock:
            return self._written.get(key)

    def behind(self, key: TargetKey) -> bool:
        """Whether the synced copy holds ``key``'s workload older than our last landed patch
        of it (what :meth:`workload` then does not report)."""
        collection = self.covering(key)
        if collection is None:
            return False
        synced, kept = collection.get(key.name)
        return synced and self._behind(key, kept)

    def _behind(self, key: TargetKey, kept: KeptWorkload | None) -> bool:
        """Whether the copy's object is older than our last landed patch of it."""
        landed = self.landed(key)
        if kept is None or landed is None:
            return False  # absent (deleted since, or not yet listed) or never patched by us
        uid, generation = landed
        return kept.uid == uid and kept.generation < generation

    # --- what the ticks read -----------------------------------------------------------------

    def workload(self, key: TargetKey) -> tuple[bool, dict[str, Any] | None]:
        """(known, the workload or None when it does not exist); not known: read directly —
        the copy is not synced, or it is older than our last landed patch of the workload."""
        collection = self._workload_collection(key)
        if collection is None:
            return False, None
        synced, kept = collection.get(key.name)
        if not synced or self._behind(key, kept):
            return False, None
        return True, (json.loads(kept.raw) if kept is not None else None)

    def pods(self, namespace: str, selector: Mapping[str, Any]) -> list[WatchedPod] | None:
        """The pods ``selector`` (valid, non-empty) matches; None: read directly."""
        return self.pods_of(namespace, [selector])[0]

    def pods_of(
        self, namespace: str, selectors: Sequence[Mapping[str, Any]]
    ) -> list[list[WatchedPod] | None]:
        """For each selector (valid, non-empty), the pods it matches; None: read directly.

        The copy keeps the labels these selectors read: one that reads a label it does not
        keep yet has it listed again, keeping that label too (one LIST for all of them).
        """
        wanted = frozenset().union(*(label_keys(selector) for selector in selectors))
        collection = self._pod_collection(namespace, wanted)
        snapshot = collection.snapshot() if collection is not None else None
        if snapshot is None:
            return [None] * len(selectors)
        pods = list(snapshot.items.values())
        return [[pod for pod in pods if matches(selector, pod.labels)] for selector in selectors]

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
            selector = (json.loads(kept.raw).get("spec") or {}).get("selector") or {}
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
        """The workload's resourceVersion in a synced copy ("" when absent); None: unknown —
        not synced, or older than our last landed patch of it (then it is polled)."""
        collection = self.covering(key)
        if collection is None:
            return None
        synced, kept = collection.get(key.name)
        if not synced or self._behind(key, kept):
            return None
        return collection.version_of(key.name)

    def covering(self, key: TargetKey) -> Collection[KeptWorkload] | None:
        """The copy that holds ``key``'s workload, if one was started and not refused."""
        with self._lock:
            shared = self._workloads.get((str(key.kind), key.namespace))
            if shared is not None and shared.refused is None:
                return shared
            named = self._named.get(key)
        return named if named is not None and named.refused is None else None

    def close(self) -> None:
        self._closing.set()
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

    def _workload_collection(self, key: TargetKey) -> Collection[KeptWorkload] | None:
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
                        keep=_kept(kind),
                        changed=self._told(WorkloadKind(kind), namespace),
                        **self._bounds(_workload_size),
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
                        keep=_kept(kind),
                        name=key.name,
                        changed=self._told(WorkloadKind(kind), namespace),
                        **self._bounds(_workload_size),
                    ),
                )
            self._refused(named, "it is read directly on every tick")
            return self._touch(named)

    def _pod_collection(
        self, namespace: str, wanted: frozenset[str]
    ) -> Collection[WatchedPod] | None:
        """The namespace's pod copy, keeping the label keys in ``wanted`` (None: read
        directly — refused, or too many keys, or listed again to keep new ones)."""
        with self._lock:
            keys = self._labels.get(namespace, frozenset())
            grown = keys | wanted
            if len(grown) > MAX_LABEL_KEYS:
                return None  # selectors reading that many labels are answered directly
            self._labels[namespace] = grown
            collection = self._pods.get(namespace)
            if collection is None:
                collection = self._start(
                    self._pods,
                    namespace,
                    Collection(
                        self.api,
                        f"/api/v1/namespaces/{quote(namespace, safe='')}/pods",
                        what=f"pods in {namespace}",
                        keep=self._pod_keeper(namespace),
                        changed=self._pod_told(namespace),
                        **self._bounds(_pod_size),
                    ),
                )
            elif grown != keys and collection.refused is None:
                new = ", ".join(sorted(grown - keys))
                collection.list_again(f"a selector reads labels it did not keep: {new}")
            if collection is not None and collection.refused is not None:
                self._refused(collection, "they are listed on every tick")
                return None
            return self._touch(collection)

    def _pod_keeper(self, namespace: str) -> Callable[[dict[str, Any]], WatchedPod]:
        """A pod as the namespace's copy keeps it, with the label keys wanted at the time."""

        def keep(obj: dict[str, Any]) -> WatchedPod:
            return WatchedPod.from_api(obj, self._labels.get(namespace, frozenset()))

        return keep

    def _bounds(self, size: Callable[[Any], int]) -> dict[str, Any]:
        """What every copy is built with: its size measure, cap and clock."""
        bounds: dict[str, Any] = {"size": size, "clock": lambda: self.clock()}
        if self.max_bytes is not None:
            bounds["max_bytes"] = self.max_bytes
        return bounds

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
        if self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch_the_copies, name="watch copies", daemon=True
            )
            self._watchdog.start()
        return collection

    def _watch_the_copies(self) -> None:
        """Ask every copy, every :data:`_WATCHDOG_EVERY`, whether it is synced: one whose
        stream fell silent unsyncs then, and tells the listener, even while no tick reads it."""
        while not self._closing.wait(_WATCHDOG_EVERY):
            with self._lock:
                copies: list[Collection[Any]] = [
                    *self._workloads.values(),
                    *self._named.values(),
                    *self._pods.values(),
                ]
            for collection in copies:
                collection.synced  # noqa: B018 — asking is what notices a silent stream

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
                    if where is self._pods:
                        self._labels.pop(key, None)  # the next copy keeps what is read then
                    self._used.pop(id(collection), None)
                    collection.stop()
                    log.info("no longer watching (unused)", collection=collection.what)
