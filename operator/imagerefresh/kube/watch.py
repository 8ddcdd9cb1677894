"""Watched collections: a local copy of what the API server holds, kept by one LIST and a WATCH.

This is client-go's informer, reduced to what a tick needs. A :class:`Collection` lists a
collection once (a namespace's Deployments, its pods, or one workload by name with
``fieldSelector=metadata.name``, which ``resourceNames`` RBAC allows), then watches it from the
list's ``resourceVersion`` on a thread of its own, applying each event to its copy. A watch the
API server ends on time is resumed from the last version it delivered (bookmarks keep that
version fresh while nothing changes), so a quiet collection costs one request per few minutes.

The copy is trusted only while it is **synced**: from the end of a successful LIST until the
stream breaks or falls silent. A 410 (the version is too old), a stream cut, an unreadable
event, a list refused: the copy is marked unsynced at once, and stays so until a new LIST
succeeds. A stream that delivered no event and no bookmark for :data:`SILENT_AFTER` seconds is
taken for dead the same way: the API server sends every stream that asked for bookmarks one
about once a minute (and one just before it ends the stream on time), so silence is not a
quiet collection but a connection nobody writes to any more. The first reader that notices
unsyncs the copy and cuts the stream, which is then listed again; a socket that receives
nothing for that long fails the read on the watch thread too, whether anyone reads or not.

A reader asks :meth:`Collection.snapshot` (or :meth:`~Collection.get`) and gets None while
unsynced — it must then read the API server directly, never decide on what the copy held. A
synced copy can still lag behind the API server by the time an event takes to arrive: whatever
is written on it carries a precondition (JSON Patch ``test`` ops, a status ``resourceVersion``)
that a change since fails, and what a verdict must not read stale is read directly
(``runtime/reads``).

Objects are kept as ``keep`` makes them — the few fields a decision reads, as compact JSON or a
small record — so that a fleet's copies cost little memory. ``size`` says what a kept object
costs; a copy past ``max_bytes`` (or ``max_items`` objects) is given up for good, as a refused
one is, and its readers read directly. ``changed`` is told the name and new
``resourceVersion`` of every object that changed (from the watch thread), and, when a synced
copy stops being synced, every name it held with the version ``""`` (nobody knows it now).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import Forbidden, KubeError, translate
from imagerefresh.kube.transport import send

__all__ = ["MAX_BYTES", "MAX_ITEMS", "MAX_STREAMS", "SILENT_AFTER", "Collection", "Snapshot"]

log = structlog.get_logger(__name__)

T = TypeVar("T")
Json = dict[str, Any]

# The API server ends each watch after about this long; it is resumed from the last version.
WATCH_SECONDS = 240
# A stream that delivered no event and no bookmark for this long is dead: unsynced and listed
# again. kube-apiserver's watch cache sends each stream that allows bookmarks one about every
# 60 s, and one 2 s before the stream's own timeout; 90 s leaves half a period to a busy API
# server before a healthy idle stream could be taken for dead.
SILENT_AFTER = 90.0
# A collection larger than this is not kept (a namespace of thousands of pods): its readers
# read directly, as they would without a watch.
MAX_ITEMS = 5_000
# Nor one whose kept objects take more than this (``size``): a namespace of huge objects.
MAX_BYTES = 4 * 1024 * 1024
# Watch streams one process keeps at most (each a thread and a connection); past it, readers
# read directly.
MAX_STREAMS = 256
# A LIST is read a page at a time, and a page is parsed whole: its size is what a copy costs
# at its peak. Pages are sized to about this many bytes of JSON, from the objects the page
# before weighed (the first asks for few: a namespace of huge objects is met carefully).
_PAGE_BYTES = 2 * 1024 * 1024
_PAGE_FIRST, _PAGE_MIN, _PAGE_MAX = 50, 10, 500
_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class _TooLarge(KubeError):
    """The collection holds more than ``max_items`` objects or ``max_bytes``: not kept."""


class _Expired(Exception):
    """The API server no longer holds the version the watch resumed from (410 Gone)."""


class _ListAgain(Exception):
    """The copy was unsynced on purpose (a silent stream, what it keeps changed): list again."""


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[T]):
    """The copy as of one synced instant: its objects by name, and the list's version."""

    items: Mapping[str, T]
    version: str


class Collection(Generic[T]):
    """One collection, listed then watched on a thread; see the module docs."""

    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        what: str,
        keep: Callable[[Json], T],
        name: str | None = None,
        changed: Callable[[str, str], None] | None = None,
        watch_seconds: int = WATCH_SECONDS,
        max_items: int = MAX_ITEMS,
        size: Callable[[T], int] | None = None,
        max_bytes: int = MAX_BYTES,
        silent_after: float = SILENT_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.path, self.what, self.keep = api, path, what, keep
        self.name = name  # one object by name (fieldSelector): what resourceNames RBAC allows
        self.changed = changed
        self.watch_seconds, self.max_items = watch_seconds, max_items
        self.size, self.max_bytes = size, max_bytes
        # Silence is measured on ``clock``: tests move a clock of their own, never sleep.
        self.silent_after, self.clock = silent_after, clock
        self.refused: KubeError | None = None  # the first LIST was forbidden: never synced
        self.lists = 0  # LISTs sent (a relist after a break counts)
        self._lock = threading.Lock()
        self._items: dict[str, T] = {}
        self._versions: dict[str, str] = {}
        self._sizes: dict[str, int] = {}
        self._bytes = 0  # what the kept objects take, as ``size`` counts them
        self._version = ""
        self._synced = False
        self._heard = clock()  # the last LIST, stream opened, event or bookmark (on ``clock``)
        self._again: str | None = None  # why the copy was unsynced to be listed again
        self._first = threading.Event()  # the first LIST answered (synced or refused)
        self._stopped = threading.Event()
        self._response: Any = None  # the stream being read, to cut it on stop
        self._resume: str | None = None  # for tests: the version the next watch resumes from
        self._held = threading.Event()  # for tests: events wait while set (a lagging watch)
        self._thread = threading.Thread(target=self._run, name=f"watch {what}", daemon=True)

    # --- what readers see ------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        with self._lock:
            return self._fresh()

    @property
    def kept_bytes(self) -> int:
        """What the kept objects take, as ``size`` counts them (0 without ``size``)."""
        with self._lock:
            return self._bytes

    def snapshot(self) -> Snapshot[T] | None:
        """The copy, or None while it is not synced (read the API server directly then)."""
        with self._lock:
            if not self._fresh():
                return None
            return Snapshot(dict(self._items), self._version)

    def get(self, name: str) -> tuple[bool, T | None]:
        """(synced, the object or None when absent); an unsynced copy says nothing."""
        with self._lock:
            return (True, self._items.get(name)) if self._fresh() else (False, None)

    def version_of(self, name: str) -> str | None:
        """The object's resourceVersion in the copy ("" when absent); None while unsynced."""
        with self._lock:
            return self._versions.get(name, "") if self._fresh() else None

    def wait_first_list(self, timeout: float) -> bool:
        """Whether the first LIST answered within ``timeout`` seconds (synced or refused)."""
        return self._first.wait(timeout)

    def list_again(self, why: str) -> None:
        """Unsync the copy at once and list it again (``why``: what it keeps has changed)."""
        log.info("listing again", collection=self.what, why=why)
        with self._lock:
            self._unsync_for(why)

    def _fresh(self) -> bool:
        """Whether the copy is synced now (holding the lock). A stream silent for longer than
        ``silent_after`` is unsynced here, by the first reader that notices, and cut."""
        if not self._synced:
            return False
        silent = self.clock() - self._heard
        if silent <= self.silent_after:
            return True
        log.info(
            "watch silent; reading directly until it is listed again",
            collection=self.what,
            silent_for=round(silent, 1),
        )
        self._unsync_for(f"no event and no bookmark for {round(silent)} s")
        return False

    def _unsync_for(self, why: str) -> None:
        """Unsync and have the watch thread list again (holding the lock)."""
        names = list(self._items) if self._synced else []
        self._synced = False
        self._again = why

        def cut() -> None:
            self._cut()
            self._tell_unknown(names)

        # On a thread of its own: closing a socket may block, the listener may take the time
        # it takes, and the caller holds the lock.
        threading.Thread(target=cut, name=f"cut {self.what}", daemon=True).start()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Collection[T]:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._held.clear()
        self._unsync()
        self._cut()

    def heard(self) -> float:
        """When the stream last delivered an event or a bookmark (or was listed, or opened),
        on ``clock``."""
        with self._lock:
            return self._heard

    # --- test seams: faults a real API server or network produces, on demand ---------------

    def cut(self) -> None:
        """Close the stream being read, as a proxy or a restarting API server would."""
        self._cut()

    def resume_from(self, version: str) -> None:
        """End the stream as the API server ends one on time, and resume from ``version`` (an
        old one makes the API server answer 410 Gone)."""
        self._resume = version
        self._cut()

    def hold(self) -> None:
        """Hold what arrives, events and bookmarks alike (a watch that lags, or a stream that
        falls silent); :meth:`release` applies it."""
        self._held.set()

    def release(self) -> None:
        self._held.clear()

    # --- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            try:
                version = self._relist()
                failures = 0
                while not self._stopped.is_set():
                    version = self._watch(version)
            except _Expired:
                self._unsync()
                log.info("watch expired; listing again", collection=self.what)
            except _ListAgain:
                self._unsync()  # said when it was decided; listed again at once
            except KubeError as error:
                self._unsync()
                if isinstance(error, Forbidden | _TooLarge):
                    # Never synced again: the reader chooses another way (by name, or direct
                    # reads) until the copy is dropped and started anew.
                    self.refused = error
                    self._first.set()
                    # A 403 is how scoped RBAC says "by name only": the caller decides whether
                    # it is news (runtime/watches reports the refusals it cannot work around).
                    level = log.debug if isinstance(error, Forbidden) else log.info
                    level("not watching", collection=self.what, error=str(error))
                    self._forget()
                    return
                wait = _BACKOFF[min(failures, len(_BACKOFF) - 1)]
                failures += 1
                log.info(
                    "watch broke; reading directly until it is listed again",
                    collection=self.what,
                    error=str(error),
                    retry_in=wait,
                )
                self._stopped.wait(wait)
            except Exception:  # a bug must not leave a copy that looks synced
                self._unsync()
                log.exception("watch failed unexpectedly", collection=self.what)
                self._stopped.wait(_BACKOFF[-1])
        self._unsync()

    def _unsync(self) -> None:
        with self._lock:
            names = list(self._items) if self._synced else []
            self._synced = False
        self._tell_unknown(names)

    def _tell_unknown(self, names: list[str]) -> None:
        """Tell the listener of every object a copy that just stopped being synced held, as
        changed to a version nobody knows: what follows them reads them directly now."""
        if self._stopped.is_set():
            return
        for name in names:
            self._tell(name, "")

    def _forget(self) -> None:
        """Let go of what a copy given up for good held."""
        with self._lock:
            self._items, self._versions, self._sizes, self._bytes = {}, {}, {}, 0

    def _cut(self) -> None:
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # already closed: the stream is over either way
                log.debug("closing a watch stream failed", collection=self.what)

    def _query(self) -> list[tuple[str, Any]]:
        return [("fieldSelector", f"metadata.name={self.name}")] if self.name else []

    def _too_large(self, what: str) -> _TooLarge:
        return _TooLarge(
            f"{what}: the copy would keep more than {self.max_bytes} bytes; not kept (read "
            "directly)"
        )

    def _relist(self) -> str:
        """LIST the collection into a new copy; its ``resourceVersion``."""
        self.lists += 1
        with self._lock:
            self._again = None  # what this LIST reads is what was asked for
        items: dict[str, T] = {}
        versions: dict[str, str] = {}
        sizes: dict[str, int] = {}
        total = 0
        token: str | None = None
        limit = _PAGE_FIRST
        while True:
            query = [*self._query(), ("limit", limit)]
            if token is not None:
                query.append(("continue", token))
            page, weight = self._page(query)
            found = page.get("items") or ()
            for obj in found:
                name, version = _identity(obj)
                items[name], versions[name] = self.keep(obj), version
                if self.size is not None:
                    sizes[name] = self.size(items[name])
                    total += sizes[name]
            if found:
                limit = max(_PAGE_MIN, min(_PAGE_MAX, _PAGE_BYTES * len(found) // max(weight, 1)))
            metadata = page.get("metadata") or {}
            del page, found  # the whole objects go before the next page is read
            if len(items) > self.max_items:
                raise _TooLarge(
                    f"list {self.what}: more than {self.max_items} objects; not kept (read "
                    "directly)"
                )
            if total > self.max_bytes:
                raise self._too_large(f"list {self.what}")
            token = metadata.get("continue") or None
            if token is None:
                version = str(metadata.get("resourceVersion") or "")
                break
        with self._lock:
            before = self._versions
            self._items, self._versions, self._version = items, versions, version
            self._sizes, self._bytes = sizes, total
            self._heard = self.clock()
            self._synced = not self._stopped.is_set() and self._again is None
        self._first.set()
        log.info("listed", collection=self.what, objects=len(items), kept_bytes=total)
        self._again_or_none()  # asked for again while this LIST ran: what it kept is not it
        for name in sorted({*before, *versions}):
            if before.get(name) != versions.get(name):
                self._tell(name, versions.get(name, ""))
        return version

    def _page(self, query: list[tuple[str, Any]]) -> tuple[Json, int]:
        """One page of the LIST, parsed, and how many bytes of JSON it was."""
        what = f"list {self.what}"
        try:
            response = send(
                self.api.connection,
                "GET",
                self.path,
                query,
                {"Accept": "application/json"},
                None,
                self.api.timeout,
            )
            try:
                data = response.data
            finally:
                response.release_conn()
            weight = len(data)
            page = json.loads(data)
        except Exception as error:
            raise translate(error, what=what) from error
        if not isinstance(page, dict):
            raise KubeError(f"{what}: the API server answered with a non-object; listed again")
        return page, weight

    def _watch(self, version: str) -> str:
        """Watch from ``version`` until the API server ends the stream; the last version seen.

        A stream that ends before its time, is cut, falls silent or fails, raises (unsynced
        until listed again).
        """
        if self._resume is not None:
            version, self._resume = self._resume, None
        query = [
            *self._query(),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", version),
            ("timeoutSeconds", str(self.watch_seconds)),
        ]
        what = f"watch {self.what}"
        # The read timeout is the silence allowed: a socket that receives nothing (not even a
        # bookmark) for that long fails the read, whether or not a reader noticed.
        timeout = (self.api.timeout[0], self.silent_after)
        started = time.monotonic()
        try:
            response = send(
                self.api.streams(MAX_STREAMS),
                "GET",
                self.path,
                query,
                {"Accept": "application/json"},
                None,
                timeout,
            )
        except Exception as error:
            raise _expired_or(translate(error, what=what)) from error
        self._response = response
        self._heard_now()  # the API server answered: the stream is alive from here
        if self._stopped.is_set():  # stopped before the stream could be cut
            response.release_conn()
            self._response = None
            return version
        try:
            self._again_or_none()  # unsynced while the stream opened: nobody could cut it
        except _ListAgain:
            response.release_conn()
            self._response = None
            raise
        try:
            for event in _events(response):
                version = self._apply(event, version, what)
        except (KubeError, _Expired, _ListAgain):
            raise
        except Exception as error:
            if self._stopped.is_set() or self._resume is not None:
                return version  # stopped, or a test ended it "on time" to resume elsewhere
            self._again_or_none()
            raise translate(error, what=f"{what}: the stream broke") from error
        finally:
            self._response = None
            response.release_conn()
        if self._resume is not None:
            return version
        self._again_or_none()
        if time.monotonic() - started < self.watch_seconds - 5 and not self._stopped.is_set():
            raise KubeError(f"{what}: the stream ended early")
        return version

    def _heard_now(self) -> None:
        with self._lock:
            self._heard = self.clock()

    def _again_or_none(self) -> None:
        """Raise :class:`_ListAgain` when the copy was unsynced to be listed again."""
        with self._lock:
            why = self._again
        if why is not None:
            raise _ListAgain(why)

    def _apply(self, event: Json, version: str, what: str) -> str:
        while self._held.is_set() and not self._stopped.is_set():
            time.sleep(0.05)
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            raise KubeError(f"{what}: an event without an object")
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Expired(obj.get("message"))
            raise KubeError(
                f"{what}: the API server ended the watch: {obj.get('message', 'no message')}",
                status=code if isinstance(code, int) else None,
            )
        name, new = _identity(obj)
        if kind == "BOOKMARK":
            self._heard_now()
            return new or version
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise KubeError(f"{what}: an event of unknown type {kind!r}")
        kept = self.keep(obj) if kind != "DELETED" else None
        size = self.size(kept) if kept is not None and self.size is not None else 0
        with self._lock:
            self._bytes -= self._sizes.pop(name, 0)
            if kept is None:
                self._items.pop(name, None)
                self._versions.pop(name, None)
            else:
                if name not in self._items and len(self._items) >= self.max_items:
                    raise _TooLarge(f"{what}: more than {self.max_items} objects; not kept")
                if self._bytes + size > self.max_bytes:
                    raise self._too_large(what)
                self._items[name], self._versions[name] = kept, new
                if self.size is not None:
                    self._sizes[name] = size
                    self._bytes += size
            self._version = new or self._version
            self._heard = self.clock()
        self._tell(name, "" if kept is None else new)
        return new or version

    def _tell(self, name: str, version: str) -> None:
        if self.changed is not None:
            try:
                self.changed(name, version)
            except Exception:  # a listener's bug must not break the copy
                log.exception("watch listener failed", collection=self.what)


def _expired_or(error: KubeError) -> Exception:
    return _Expired(str(error)) if error.status == 410 else error


def _identity(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name", ""), str):
        raise KubeError("a watched object without metadata.name")
    return str(metadata.get("name") or ""), str(metadata.get("resourceVersion") or "")


def _events(response: Any) -> Iterator[Json]:
    """The watch events of a streamed answer, one JSON object per line, as they arrive."""
    pending = b""
    for chunk in response.stream(65_536, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield _event(line)
    if pending.strip():
        yield _event(pending)


def _event(line: bytes) -> Json:
    try:
        event = json.loads(line)
    except ValueError as error:
        raise KubeError(f"a watch event that is not JSON: {error}") from error
    if not isinstance(event, dict):
        raise KubeError("a watch event that is not an object")
    return event
