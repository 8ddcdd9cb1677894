"""Which tick may honour a reset that rebuilds an unreadable status: only one that reads every
target. A follow-up (it reads only the rollouts in flight) fails closed and leaves the reset."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.runtime.policyview import PolicyUnreadable, policy_view

RESET = "images.tracebloc.io/reset"


def forged(reset: str | None) -> dict[str, Any]:
    annotations = {RESET: reset} if reset is not None else {}
    return {
        "metadata": {"namespace": "tracebloc", "name": "control-plane", "annotations": annotations},
        "spec": {
            "targets": [
                {
                    "kind": "Deployment",
                    "name": "jobs-manager",
                    "containers": [{"name": "api", "image": "tracebloc/jobs-manager:prod"}],
                }
            ]
        },
        "status": {"targets": "not a list", "lastReset": "old"},
    }


def test_a_new_reset_lets_a_full_tick_rebuild_a_status_it_cannot_read() -> None:
    view = policy_view(forged("new"))
    assert view.status.targets == ()
    assert view.reset_request == "new"


def test_a_follow_up_never_rebuilds_an_unreadable_status_even_with_a_new_reset() -> None:
    with pytest.raises(PolicyUnreadable) as unreadable:
        policy_view(forged("new"), follow_up=True)
    assert unreadable.value.part == "status"


def test_an_unreadable_status_without_a_new_reset_fails_closed_in_every_tick() -> None:
    for follow_up in (False, True):
        with pytest.raises(PolicyUnreadable):
            policy_view(forged("old"), follow_up=follow_up)
