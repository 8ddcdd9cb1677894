"""The Kubernetes adapter: the only modules that call the Kubernetes API.

:class:`~imagerefresh.kube.api.KubeApi` is the facade (raw API JSON in and out); every failure
is a :class:`~imagerefresh.kube.errors.KubeError`, translated in one place
(:func:`~imagerefresh.kube.errors.translate`).
"""

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.errors import (
    Forbidden,
    KubeError,
    KubeUnavailable,
    NotFound,
    NotLeader,
    PreconditionFailed,
    ResourceConflict,
    translate,
)

__all__ = [
    "Forbidden",
    "KubeApi",
    "KubeError",
    "KubeUnavailable",
    "NotFound",
    "NotLeader",
    "PreconditionFailed",
    "ResourceConflict",
    "translate",
]
