"""The policy as the planner sees it: its spec and status parsed, its annotations' requests
(a reset, a refresh outside the windows) read — or, where spec or status cannot be read, why,
as a :class:`PolicyUnreadable` the tick reports instead of acting.

A status is input like any other: one this operator could not have written fails closed, and
only a reset asked for anew (and a tick that reads every target) rebuilds it from live evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from imagerefresh.models import PolicySpec, PolicyStatus
from imagerefresh.planner import PolicyView
from imagerefresh.planner.windows import WINDOW_OVERRIDE_ANNOTATION

__all__ = ["RESET_ANNOTATION", "WINDOW_OVERRIDE_ANNOTATION", "PolicyUnreadable", "policy_view"]

RESET_ANNOTATION = "images.tracebloc.io/reset"


class PolicyUnreadable(ValueError):
    """The policy's spec or status cannot be read: the tick does nothing but say so."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part  # "spec", "status", or "crd" (runtime/schema: the installed CRD)


def _errors(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in error.errors()[:5]
    )


def policy_view(policy: Mapping[str, Any], *, follow_up: bool = False) -> PolicyView:
    """The planner's view of a policy object; :class:`PolicyUnreadable` if it cannot be read.

    A status that does not parse fails closed — unless a new reset was requested, which
    rebuilds the status from live evidence (the tick then starts from an empty one). Only a
    tick that reads every target may rebuild it: a ``follow_up`` fails closed and leaves the
    reset to that tick.
    """
    metadata = policy["metadata"]
    name = f"{metadata['namespace']}/{metadata['name']}"
    annotations = metadata.get("annotations") or {}
    reset = annotations.get(RESET_ANNOTATION)
    try:
        spec = PolicySpec.model_validate(policy.get("spec") or {})
    except ValidationError as error:
        raise PolicyUnreadable(
            "spec",
            f"the spec of {name} is invalid ({_errors(error)}); nothing is refreshed until it "
            "is fixed",
        ) from error
    raw = policy.get("status") or {}
    try:
        status = PolicyStatus.model_validate(raw)
    except ValidationError as error:
        honoured = raw.get("lastReset") if isinstance(raw, dict) else None
        if follow_up or reset is None or reset == honoured:
            raise PolicyUnreadable(
                "status",
                f"the status of {name} cannot be read ({_errors(error)}); it was not written "
                "by this operator, so nothing is patched on it. Reset the policy to rebuild "
                f"it from live evidence: imagerefresh reset {name}",
            ) from error
        status = PolicyStatus()
    return PolicyView(
        namespace=metadata["namespace"],
        name=metadata["name"],
        generation=int(metadata.get("generation") or 0),
        spec=spec,
        status=status,
        reset_request=reset,
        window_override=annotations.get(WINDOW_OVERRIDE_ANNOTATION),
    )
