"""The spec and status models: what they accept, reject, and how they serialise."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from imagerefresh.models import PolicySpec, PolicyStatus

HEX = "a" * 64


def policy(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "targets": [
            {
                "kind": "Deployment",
                "name": "jobs-manager",
                "containers": [{"name": "api", "image": "tracebloc/jobs-manager:prod"}],
            }
        ]
    }
    base.update(fields)
    return base


def test_defaults_are_the_documented_ones() -> None:
    spec = PolicySpec.model_validate(policy())
    assert spec.interval == timedelta(minutes=15)
    assert (spec.max_skip_ticks, spec.max_refresh_attempts) == (8, 3)
    assert spec.rollout_timeout == timedelta(minutes=10)
    assert (spec.rollback_on_failure, spec.suspend, spec.dry_run) == (True, False, False)
    assert spec.pull_budget.reserve == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"interval": "10s"}, "interval must be at least 30s"),
        ({"interval": "soon"}, "Go duration"),
        ({"rolloutTimeout": "1s"}, "rolloutTimeout must be at least 30s"),
        ({"maxSkipTicks": 0}, "greater than or equal to 1"),
        ({"maxRefreshAttempts": -1}, "greater than or equal to 1"),
        ({"pullBudget": {"reserve": -1}}, "greater than or equal to 0"),
        ({"targets": []}, "at least 1"),
        (
            {
                "targets": [
                    {"kind": "CronJob", "name": "x", "containers": [{"name": "a", "image": "a"}]}
                ]
            },
            "Deployment",
        ),
        ({"targets": [{"kind": "Deployment", "name": "x", "containers": []}]}, "at least 1"),
        (
            {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "x",
                        "containers": [{"name": "a", "image": f"a@sha256:{HEX}"}],
                    }
                ]
            },
            "carries a digest",
        ),
        (
            {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "x",
                        "containers": [{"name": "a", "image": "a", "digest": "sha256:abc"}],
                    }
                ]
            },
            "pattern",
        ),
        (
            {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "x",
                        "containers": [{"name": "a", "image": "Bad/Image"}],
                    }
                ]
            },
            "lowercase",
        ),
        (
            {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "x",
                        "containers": [{"name": "a", "image": "a"}, {"name": "a", "image": "b"}],
                    }
                ]
            },
            "once per target",
        ),
        (
            {
                "targets": [
                    {"kind": "Deployment", "name": "x", "containers": [{"name": "a", "image": "a"}]}
                ]
                * 2
            },
            "once per policy",
        ),
        (
            {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "x",
                        "containers": [{"name": "a", "image": "https://r.example/a:b"}],
                    }
                ]
            },
            "URL scheme",
        ),
        (
            {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "x",
                        "rolloutTimeout": "29s",
                        "containers": [{"name": "a", "image": "a"}],
                    }
                ]
            },
            "rolloutTimeout must be at least 30s",
        ),
        ({"unknown": 1}, "Extra inputs"),
    ],
)
def test_malformed_policies_are_rejected_with_a_reason(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        PolicySpec.model_validate(policy(**fields))


def test_tracking_normalises_and_defaults_the_tag() -> None:
    spec = PolicySpec.model_validate(
        policy(
            targets=[
                {"kind": "Deployment", "name": "x", "containers": [{"name": "a", "image": "nginx"}]}
            ]
        )
    )
    assert str(spec.targets[0].containers[0].tracked) == "docker.io/library/nginx:latest"


def test_status_round_trips_through_its_api_form() -> None:
    raw = {
        "observedGeneration": 3,
        "phase": "Refreshing",
        "targetCount": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "TargetsNotCurrent",
                "message": "m",
                "lastTransitionTime": "2026-11-29T12:00:00Z",
                "observedGeneration": 3,
            }
        ],
        "targets": [
            {
                "kind": "Deployment",
                "namespace": "ns",
                "name": "n",
                "phase": "Refreshing",
                "message": "",
                "skipStreak": 0,
                "refreshAttempts": 1,
                "contested": 0,
                "pending": {
                    "purpose": "refresh",
                    "images": {"api": "a@sha256:" + HEX},
                    "previous": {"api": "a:p"},
                    "startedAt": "2026-11-29T12:00:00Z",
                    "generation": 7,
                    "adopted": [],
                    "refusals": 0,
                },
                "lastGood": {},
                "contestedImages": {},
                "containers": [{"name": "api", "tracked": "docker.io/a:p", "running": []}],
                "failed": [{"digest": "sha256:" + HEX, "at": "2026-11-29T11:00:00Z"}],
            }
        ],
        "seen": [
            {
                "tracked": "docker.io/library/a:p",
                "digest": "sha256:" + HEX,
                "since": "2026-11-29T11:30:00Z",
            }
        ],
        "registries": [
            {
                "host": "registry-1.docker.io",
                "identity": "anonymous",
                "limit": 100,
                "remaining": 76,
                "windowSeconds": 21600,
                "source": "203.0.113.7",
            }
        ],
    }
    status = PolicyStatus.model_validate(raw)
    assert status.to_api() == raw


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"healthyFor": "61m"}, ()),
        ({"healthyFor": "-1s"}, ()),
        (
            {
                "targets": [
                    {
                        "kind": "Deployment",
                        "name": "x",
                        "healthyFor": "2h",
                        "containers": [{"name": "a", "image": "a"}],
                    }
                ]
            },
            ("targets", 0, "healthyFor"),
        ),
    ],
)
def test_a_health_window_outside_0s_to_1h_is_rejected_in_these_exact_words(
    fields: dict[str, Any], where: tuple[object, ...]
) -> None:
    # The API user reads this message whole on a rejected apply: pin it, not a fragment of it.
    with pytest.raises(ValidationError) as raised:
        PolicySpec.model_validate(policy(**fields))
    errors = {(error["loc"], error["msg"]) for error in raised.value.errors()}
    assert (where, "Value error, healthyFor must be between 0s and 1h") in errors
