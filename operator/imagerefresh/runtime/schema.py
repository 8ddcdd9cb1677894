"""Whether the installed CRD can store every field the operator reads and writes.

The API server prunes what a CRD's structural schema does not declare — on every write and on
every read from etcd — and says nothing. An installed CRD older than the operator therefore
loses fields silently: a policy's ``spec.verify`` (pin only signed digests) never reaches the
operator, and the status it writes loses ``seen`` (the cooldown's clock) and ``failed`` (builds
never to retry) on every write. Acting on such a policy would pin unverified builds for a
policy that asked for verification, so while any field is missing the operator acts on no
policy at all (:class:`CrdCheck`): every policy's status would lose fields, and which policy
asked for a pruned field cannot be known — the API server dropped it before anyone could read
it.

The check is a comparison of two sets of paths, both pure:

- :func:`model_paths`: every field the models can hold, by its JSON name, walked from the
  models' own JSON schema (nested models, lists, maps) — a field added to the models is
  checked without touching this module;
- :func:`missing_paths`: which of them the installed structural schema would prune, following
  the API server's pruning rules (``properties``, ``items``, ``additionalProperties`` and
  ``x-kubernetes-preserve-unknown-fields``).

The installed schema is read from the API server's OpenAPI v3 document
(:meth:`~imagerefresh.kube.api.KubeApi.read_policy_schema`), which every authenticated client
may read, so the check needs no RBAC. A schema that cannot be read fails closed the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import Enum
from typing import Any

import structlog
from pydantic import BaseModel

from imagerefresh.kube.api import POLICY_GROUP, POLICY_PLURAL, KubeApi
from imagerefresh.kube.errors import KubeError
from imagerefresh.metrics import Metrics
from imagerefresh.models import PolicySpec, PolicyStatus
from imagerefresh.runtime.policyview import PolicyUnreadable

__all__ = [
    "CRD_NAME",
    "ITEMS",
    "RECHECK_CURRENT",
    "RECHECK_OUTDATED",
    "VALUES",
    "CrdCheck",
    "Path",
    "display",
    "missing_paths",
    "model_paths",
    "operator_paths",
    "outdated_message",
    "unreadable_message",
]

log = structlog.get_logger(__name__)

CRD_NAME = f"{POLICY_PLURAL}.{POLICY_GROUP}"
Path = tuple[str, ...]
ITEMS = "[]"  # a segment: every item of an array
VALUES = "*"  # a segment: the value under every key of a map
# A current CRD is read again this often (a downgrade is noticed within it); an outdated or
# unreadable one before every tick, but at most this often, so that policies ticking together
# share one read and an upgrade heals within seconds, without a restart.
RECHECK_CURRENT = 300.0
RECHECK_OUTDATED = 5.0
_SHOWN = 4  # missing fields named in a message before "and N more"
_PRESERVE = "x-kubernetes-preserve-unknown-fields"


# -- the models' paths ----------------------------------------------------------------------


def model_paths(model: type[BaseModel], root: str) -> frozenset[Path]:
    """Every path of a field ``model`` can hold, under ``root``, by JSON name (alias)."""
    schema = model.model_json_schema(by_alias=True)
    return frozenset(_walk(schema, schema.get("$defs") or {}, (root,), frozenset()))


def operator_paths() -> frozenset[Path]:
    """Every path of the policy the operator reads (spec) or writes (status)."""
    return model_paths(PolicySpec, "spec") | model_paths(PolicyStatus, "status")


def _walk(
    schema: Mapping[str, Any], defs: Mapping[str, Any], path: Path, seen: frozenset[str]
) -> Iterator[Path]:
    """``path`` and every path below it in a pydantic JSON schema."""
    yield path
    reference = schema.get("$ref")
    if isinstance(reference, str):
        name = reference.rsplit("/", 1)[-1]
        if name not in seen:  # a model that contains itself would recurse forever
            yield from _walk(defs[name], defs, path, seen | {name})
    for branch in (*schema.get("anyOf", ()), *schema.get("allOf", ())):
        yield from _walk(branch, defs, path, seen)
    for name, field in (schema.get("properties") or {}).items():
        yield from _walk(field, defs, (*path, name), seen)
    if isinstance(schema.get("items"), Mapping):
        yield from _walk(schema["items"], defs, (*path, ITEMS), seen)
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _walk(schema["additionalProperties"], defs, (*path, VALUES), seen)


# -- what the installed schema prunes --------------------------------------------------------


def missing_paths(schema: Mapping[str, Any], paths: Iterable[Path]) -> list[Path]:
    """The shortest prefixes of ``paths`` that the structural ``schema`` would prune, sorted.

    Follows the API server's pruning: a field is kept when its object declares it in
    ``properties``, or when the object preserves unknown fields, or as a map value under
    ``additionalProperties``; an array's items are kept by ``items``. Under a node that
    preserves unknown fields, an undeclared field keeps everything below it, a declared one is
    pruned by its own schema again, and array items inherit the preservation. A field of a
    missing object is not listed again: ``spec.verify`` stands for ``spec.verify.publicKeys``.
    """
    missing = {found for path in paths if (found := _first_pruned(schema, path)) is not None}
    return sorted(missing)


def _first_pruned(schema: Mapping[str, Any], path: Path) -> Path | None:
    """The prefix of ``path`` at which ``schema`` prunes it, or None when all of it is kept."""
    node: Mapping[str, Any] | None = schema
    inherited = False  # reached as the items of an array under preserved unknown fields
    for depth, segment in enumerate(path):
        if node is None:  # below a value the schema does not describe: pruned unless preserved
            return None if inherited else path[: depth + 1]
        step = _step(node, segment, inherited or node.get(_PRESERVE) is True)
        if step is _End.KEPT:
            return None
        if step is _End.PRUNED:
            return path[: depth + 1]
        node, inherited = step
    return None


class _End(Enum):
    KEPT = "everything below is kept as it is"
    PRUNED = "pruned here"


def _step(
    node: Mapping[str, Any], segment: str, preserving: bool
) -> tuple[Mapping[str, Any] | None, bool] | _End:
    """Where ``segment`` leads from ``node``: the schema below it (None: none) and whether it
    inherits preserved unknown fields — or the end of the walk."""
    if segment == ITEMS:
        items = node.get("items")
        if not isinstance(items, Mapping):
            return _End.KEPT if preserving else (None, False)  # scalars survive; objects do not
        return items, preserving
    properties = node.get("properties")
    if segment != VALUES and isinstance(properties, Mapping) and segment in properties:
        child = properties[segment]
        return (child if isinstance(child, Mapping) else None), False
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):  # a map: every key's value, pruned by that schema
        return extra, False
    if preserving:
        return _End.KEPT
    if extra is True:  # any key, its value kept only as a scalar
        return None, False
    return _End.PRUNED


def display(path: Path) -> str:
    """``status.targets[].failed``; a map's values as ``status.targets[].lastGood.*``."""
    text = ""
    for segment in path:
        text += segment if segment == ITEMS or not text else f".{segment}"
    return text


# -- the check, as the ticks ask it -------------------------------------------------------


def outdated_message(missing: list[Path]) -> str:
    """What a policy's Degraded condition and event say while the CRD lacks ``missing``."""
    named = [display(path) for path in missing[:_SHOWN]]
    more = len(missing) - len(named)
    if more:
        fields = f"{', '.join(named)} and {more} more"
    else:
        fields = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
    return (
        f"the installed CRD {CRD_NAME} is older than this operator: it lacks {fields}, which "
        "the API server silently drops from every policy it stores; acting on a policy could "
        f"ignore what it asks for (verify) or lose what its status keeps. {_WHAT_TO_DO}"
    )


def unreadable_message(error: KubeError) -> str:
    """What a policy's Degraded condition and event say while the schema cannot be read."""
    return (
        f"the schema of the installed CRD {CRD_NAME} cannot be read ({error}), so whether the "
        "API server would drop fields this operator relies on is unknown. Nothing is done on "
        "any policy until it can be read; if the CRD is older than the operator, upgrade it "
        "(docs/upgrading.md)."
    )


_WHAT_TO_DO = (
    "Nothing is done on any policy until the CRD is upgraded: `helm upgrade` the release with "
    "this operator's chart (docs/upgrading.md), or `kubectl apply --server-side -f` the CRD "
    "of this operator's release. Then apply again the policies written meanwhile: the fields "
    "the old CRD dropped are gone from them."
)


class CrdCheck:
    """Whether the ticks may act, as far as the installed CRD goes; shared by every tick.

    :meth:`require` is asked before each tick reads its targets. A current CRD is read again
    after :data:`RECHECK_CURRENT` seconds; an outdated or unreadable one at every tick, at most
    every :data:`RECHECK_OUTDATED` seconds — the answer in between is the last one read.
    Concurrent ticks wait for one read.
    """

    def __init__(
        self,
        api: KubeApi,
        metrics: Metrics,
        *,
        paths: frozenset[Path] | None = None,
        clock: Callable[[], float] = time.monotonic,
        recheck_current: float = RECHECK_CURRENT,
        recheck_outdated: float = RECHECK_OUTDATED,
    ) -> None:
        self.api, self.metrics, self.clock = api, metrics, clock
        self.paths = paths if paths is not None else operator_paths()
        self.recheck_current, self.recheck_outdated = recheck_current, recheck_outdated
        self._lock = asyncio.Lock()
        self._checked_at: float | None = None
        self._problem: str | None = None  # None: the CRD stores every field

    async def require(self) -> None:
        """Return when the installed CRD stores every field; else raise
        :class:`~imagerefresh.runtime.gather.PolicyUnreadable` (part ``crd``) saying why."""
        problem = await self.problem()
        if problem is not None:
            raise PolicyUnreadable("crd", problem)

    async def problem(self) -> str | None:
        """Why the ticks may not act (None: they may), read again when it is due."""
        async with self._lock:
            now = self.clock()
            due = self.recheck_current if self._problem is None else self.recheck_outdated
            if self._checked_at is None or now - self._checked_at >= due:
                problem = await asyncio.to_thread(self._read)
                self._report(problem)
                self._problem, self._checked_at = problem, self.clock()
            return self._problem

    def _read(self) -> str | None:
        try:
            schema = self.api.read_policy_schema()
        except KubeError as error:
            return unreadable_message(error)
        missing = missing_paths(schema, self.paths)
        return outdated_message(missing) if missing else None

    def _report(self, problem: str | None) -> None:
        """The gauge always; the log only when the verdict changes (not at every tick)."""
        self.metrics.crd_outdated.set(int(problem is not None))
        if problem == self._problem and self._checked_at is not None:
            return
        if problem is None:
            log.info("installed CRD stores every field", crd=CRD_NAME)
        else:
            log.error("installed CRD cannot be used; no policy is acted on", problem=problem)
