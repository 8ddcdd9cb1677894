"""Workloads and their pods: read one, list pods by selector (many in one LIST), list every
workload of a kind, and the one place image patches are sent."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from imagerefresh.kube.errors import KubeError, NotFound
from imagerefresh.kube.selectors import InvalidSelector, label_selector, matches
from imagerefresh.kube.transport import (
    FIELD_MANAGER,
    JSON_PATCH,
    Json,
    Transport,
    scope,
    segment,
)
from imagerefresh.planner import Cleared, ImagePatch

log = structlog.get_logger(__name__)

__all__ = ["WORKLOADS", "WorkloadRequests"]

# kind → its resource under /apis/apps/v1
WORKLOADS = {"Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}


class WorkloadRequests(Transport):
    """Deployments, DaemonSets, StatefulSets and the pods they select."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Told every workload a patch of ours landed on, as the API server answered it.
        self._patch_observers: list[Callable[[Mapping[str, Any]], None]] = []

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment/DaemonSet/StatefulSet as raw API JSON, or None when it does not exist."""
        path = _workload_path(kind, namespace, name)
        try:
            obj = self._request(f"get {kind} {namespace}/{name}", "GET", path)
        except NotFound:
            return None
        obj.setdefault("apiVersion", "apps/v1")
        obj.setdefault("kind", str(kind))
        return obj

    def list_pods(self, namespace: str, selector: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pods ``selector`` (a workload's ``spec.selector``) matches, as raw API JSON."""
        return self._list_pods(namespace, _selector_query(namespace, selector))

    def list_pods_of(
        self, namespace: str, selectors: Sequence[Mapping[str, Any]]
    ) -> list[list[Json] | KubeError]:
        """For each selector, the pods it matches (or why they cannot be listed), in one LIST.

        The workloads of one namespace usually select their pods by one shared label (``app``):
        one LIST by the set-based query ``app in (a,b,…)`` returns every pod any of them may
        select, which is then split by matching each full selector locally, as the API server
        matches it. When the selectors share no ``matchLabels`` key, each is listed on its own.
        """
        answers: list[list[Json] | KubeError] = []
        valid: dict[int, Mapping[str, Any]] = {}
        for index, selector in enumerate(selectors):
            try:
                _selector_query(namespace, selector)
            except KubeError as error:
                answers.append(error)
                continue
            answers.append([])
            valid[index] = selector
        union = _union_query(list(valid.values()))
        if union is None:
            for index, selector in valid.items():
                try:
                    answers[index] = self.list_pods(namespace, selector)
                except KubeError as error:
                    answers[index] = error
            return answers
        try:
            pods = self._list_pods(namespace, union)
        except KubeError as error:
            for index in valid:
                answers[index] = error
            return answers
        for index, selector in valid.items():
            answers[index] = [pod for pod in pods if matches(selector, _labels(pod))]
        return answers

    def _list_pods(self, namespace: str, query: str) -> list[Json]:
        what = f"list pods in {namespace}"
        pods: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params: list[tuple[str, Any]] = [("labelSelector", query), ("limit", self.page_size)]
            if token is not None:
                params.append(("continue", token))
            page = self._request(
                f"{what} matching {query}",
                "GET",
                f"/api/v1/namespaces/{segment(namespace)}/pods",
                query=params,
            )
            for pod in page.get("items") or ():
                pod.setdefault("apiVersion", "v1")
                pod.setdefault("kind", "Pod")
                pods.append(pod)
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return pods

    def patch_images(self, cleared: Cleared[ImagePatch]) -> dict[str, Any]:
        """Apply the guarded JSON Patch a cleared write carries; the patched object as raw JSON.

        A ``test`` op that no longer holds raises PreconditionFailed and changes nothing. This
        is the one place patches are sent, and it sends only what the write guard cleared
        (:func:`~imagerefresh.planner.clear_writes`): anything else is a TypeError, never a request.
        """
        if not isinstance(cleared, Cleared) or not isinstance(cleared.write, ImagePatch):
            raise TypeError("only a patch the write guard cleared is sent")
        patch = cleared.write
        target = patch.target
        path = _workload_path(target.kind, target.namespace, target.name)
        images = {change.container: change.image for change in patch.changes}
        obj = self._request(
            f"patch {target.kind} {target.namespace}/{target.name} ({patch.purpose} of "
            f"{', '.join(images)})",
            "PATCH",
            path,
            query=[("fieldManager", FIELD_MANAGER)],
            body=patch.json_patch(),
            content_type=JSON_PATCH,
        )
        log.info("images patched", target=str(target), purpose=str(patch.purpose), images=images)
        for observer in self._patch_observers:
            try:
                observer(obj)
            except Exception:  # an observer's bug must not turn a landed patch into an error
                log.exception("a patch observer failed", target=str(target))
        return obj

    def observe_patches(self, observer: Callable[[Mapping[str, Any]], None]) -> None:
        """Tell ``observer`` of every workload a patch lands on, as the API server answered
        it (the generation it produced: what a watch-fed copy must reach before it is read)."""
        self._patch_observers.append(observer)

    def list_workloads(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every Deployment/DaemonSet/StatefulSet of ``kind`` in ``namespace`` (None: all)."""
        resource = WORKLOADS[str(kind)]
        where = f"/namespaces/{segment(namespace)}" if namespace is not None else ""
        items = self._list(
            f"list {resource}.apps {scope(namespace)}", f"/apis/apps/v1{where}/{resource}"
        )
        for item in items:
            item.setdefault("kind", str(kind))
        return items


def _selector_query(namespace: str, selector: Mapping[str, Any]) -> str:
    try:
        return label_selector(selector)
    except InvalidSelector as error:
        raise KubeError(
            f"list pods in {namespace}: the workload's spec.selector cannot be used ({error}); "
            "fix the selector"
        ) from error


def _union_query(selectors: Sequence[Mapping[str, Any]]) -> str | None:
    """``key in (v1,v2,…)`` selecting a superset of every selector's pods; None if there is none.

    Every selector must pin the same ``matchLabels`` key; its values are the union. A single
    selector needs no union (its own query is exact).
    """
    if len(selectors) < 2:
        return None
    labels = [dict(selector.get("matchLabels") or {}) for selector in selectors]
    shared = set(labels[0]).intersection(*labels[1:])
    if not shared:
        return None
    key = "app" if "app" in shared else min(shared)
    values = sorted({str(found[key]) for found in labels})
    return f"{key} in ({','.join(values)})"


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _workload_path(kind: str, namespace: str, name: str) -> str:
    try:
        resource = WORKLOADS[str(kind)]
    except KeyError:
        raise ValueError(
            f"unsupported workload kind {kind!r}: Deployment, DaemonSet or StatefulSet"
        ) from None
    return f"/apis/apps/v1/namespaces/{segment(namespace)}/{resource}/{segment(name)}"
