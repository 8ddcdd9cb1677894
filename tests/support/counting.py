"""A KubeApi that counts the requests it sends: what tests of shared reads assert on."""

from __future__ import annotations

from collections import Counter
from typing import Any

from imagerefresh.kube import KubeApi

Json = dict[str, Any]


class CountingKubeApi(KubeApi):
    """A KubeApi that counts its requests by (verb, path)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: Counter[tuple[str, str]] = Counter()

    def _request(self, what: str, method: str, path: str, **kwargs: Any) -> Json:
        self.requests[(method, path)] += 1
        return super()._request(what, method, path, **kwargs)

    def count(self, method: str, resource: str) -> int:
        """Requests of ``method`` on paths naming ``resource`` (e.g. "serviceaccounts")."""
        return sum(
            n for (m, path), n in self.requests.items() if m == method and f"/{resource}/" in path
        )
