"""What the shell reads for refresh windows from a policy object: the override annotation,
and a window the operator cannot read (an unknown zone), which fails the whole policy closed."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.runtime.policyview import PolicyUnreadable, policy_view

OVERRIDE = "images.tracebloc.io/refresh-outside-window"


def policy_object(annotations: dict[str, str], zone: str = "Europe/Berlin") -> dict[str, Any]:
    window = {"days": ["Sat"], "start": "02:00", "end": "05:00", "timeZone": zone}
    return {
        "metadata": {"namespace": "tracebloc", "name": "control-plane", "annotations": annotations},
        "spec": {
            "windows": [window],
            "targets": [
                {
                    "kind": "Deployment",
                    "name": "jobs-manager",
                    "containers": [{"name": "api", "image": "tracebloc/jobs-manager:prod"}],
                }
            ],
        },
        "status": {"lastWindowOverride": "before"},
    }


def test_the_override_annotation_and_the_last_honoured_value_are_read() -> None:
    view = policy_view(policy_object({OVERRIDE: "2026-12-01T08:00:00Z"}))
    assert view.window_override == "2026-12-01T08:00:00Z"
    assert view.status.last_window_override == "before"
    assert policy_view(policy_object({})).window_override is None


def test_a_zone_the_operator_does_not_know_makes_the_policy_invalid_naming_it() -> None:
    with pytest.raises(PolicyUnreadable) as unreadable:
        policy_view(policy_object({}, zone="Mars/Olympus_Mons"))
    assert unreadable.value.part == "spec"
    assert "timeZone 'Mars/Olympus_Mons' is not an IANA time zone" in str(unreadable.value)
    assert "nothing is refreshed until it is fixed" in str(unreadable.value)
