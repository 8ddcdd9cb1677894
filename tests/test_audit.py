"""The coverage findings of `imagerefresh audit`, as a pure function of what it read."""

from __future__ import annotations

from typing import Any

import pytest

from imagerefresh.audit import (
    AuditedContainer,
    AuditedPolicy,
    AuditedWorkload,
    Finding,
    FindingKind,
    audit,
)
from imagerefresh.models import PolicySpec
from imagerefresh.planner import NamespacePolicy

D1 = "sha256:" + "1" * 64
JM = "tracebloc/jobs-manager:prod"


def policy(
    name: str, *targets: dict[str, Any], namespace: str = "tracebloc", **spec: Any
) -> AuditedPolicy:
    parsed = PolicySpec.model_validate({"targets": list(targets), **spec})
    return AuditedPolicy(namespace, name, parsed)


def allowing(*pairs: str) -> Any:
    """The operator's reach with these --allow-namespace-pair values (the CLI passes it)."""
    return NamespacePolicy(frozenset(tuple(pair.split("=")) for pair in pairs)).allows  # type: ignore[misc]


def target(name: str, kind: str = "Deployment", namespace: str | None = None, **images: str) -> Any:
    entry: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "containers": [{"name": n, "image": i} for n, i in images.items()],
    }
    if namespace is not None:
        entry["namespace"] = namespace
    return entry


def workload(
    name: str,
    kind: str = "Deployment",
    namespace: str = "tracebloc",
    init: dict[str, str] | None = None,
    **images: str,
) -> AuditedWorkload:
    containers = [AuditedContainer(n, i, True) for n, i in (init or {}).items()]
    containers += [AuditedContainer(n, i) for n, i in images.items()]
    return AuditedWorkload(kind, namespace, name, tuple(containers))


CONTROL_PLANE = policy("control-plane", target("jobs-manager", api=JM))
# An unreadable policy that still claims jobs-manager's api container.
BROKEN_CLAIMING_API = AuditedPolicy(
    "tracebloc", "broken", None, "bad", (("Deployment", "tracebloc", "jobs-manager", "api"),)
)


def kinds(findings: list[Finding]) -> list[tuple[str, str, str]]:
    return [(str(f.kind), f.workload, f.container) for f in findings]


def test_declared_containers_on_their_tracked_repository_are_clean() -> None:
    live = [workload("jobs-manager", api=f"docker.io/tracebloc/jobs-manager@{D1}")]
    assert audit([CONTROL_PLANE], live) == []
    assert audit([CONTROL_PLANE], live, all_mutable=True) == []


@pytest.mark.parametrize(
    "image",
    [
        JM,
        "tracebloc/jobs-manager:dev",
        f"docker.io/tracebloc/jobs-manager@{D1}",  # a digest is no excuse: never refreshed
        "index.docker.io/tracebloc/jobs-manager",
    ],
)
def test_a_tracked_repository_in_no_policy_is_uncovered_whatever_its_tag_or_digest(
    image: str,
) -> None:
    live = [workload("jobs-manager", api=JM), workload("requests-proxy", proxy=image)]
    assert audit([CONTROL_PLANE], live) == [
        Finding(
            "Deployment tracebloc/requests-proxy",
            "proxy",
            FindingKind.UNCOVERED,
            image,
            "runs docker.io/tracebloc/jobs-manager, which policy tracebloc/control-plane "
            "tracks, but no policy declares this container: it is never refreshed; add it to a "
            "policy's targets",
        )
    ]


def test_an_undeclared_sidecar_of_a_targeted_workload_is_uncovered() -> None:
    live = [workload("jobs-manager", api=JM, sidecar=JM)]
    assert kinds(audit([CONTROL_PLANE], live)) == [
        ("uncovered", "Deployment tracebloc/jobs-manager", "sidecar")
    ]


def test_init_containers_are_audited_and_labelled() -> None:
    live = [workload("jobs-manager", api=JM, init={"migrate": JM})]
    assert kinds(audit([CONTROL_PLANE], live)) == [
        ("uncovered", "Deployment tracebloc/jobs-manager", "migrate (init)")
    ]


def test_a_repository_nobody_tracks_is_no_finding_unless_all_mutable_asks_for_tags() -> None:
    live = [workload("web", nginx="nginx:1.27", pinned=f"redis@{D1}", untagged="busybox")]
    assert (
        audit(
            [
                CONTROL_PLANE,
            ],
            [workload("jobs-manager", api=JM), *live],
        )
        == []
    )
    found = audit([CONTROL_PLANE], [workload("jobs-manager", api=JM), *live], all_mutable=True)
    assert [(f.kind, f.container, f.detail) for f in found] == [
        (
            FindingKind.MUTABLE,
            "nginx",
            "runs the tag '1.27' with no digest and no policy declares it: what it runs can "
            "change under it; add it to a policy or pin a digest",
        ),
        (
            FindingKind.MUTABLE,
            "untagged",
            "runs the tag 'latest' with no digest and no policy declares it: what it runs can "
            "change under it; add it to a policy or pin a digest",
        ),
    ]


def test_an_unreadable_image_is_listed_only_by_all_mutable() -> None:
    live = [workload("web", odd="Not A Reference")]
    assert audit([], live) == []
    (finding,) = audit([], live, all_mutable=True)
    assert finding.kind is FindingKind.MUTABLE
    assert finding.detail.startswith("its image cannot be read as a reference (invalid")
    assert finding.detail.endswith("); no policy declares it")


@pytest.mark.parametrize(
    ("image", "runs"),
    [
        ("mirror.example/tracebloc/jobs-manager:prod", "mirror.example/tracebloc/jobs-manager"),
        (f"tracebloc/pods-monitor@{D1}", "docker.io/tracebloc/pods-monitor"),
        ("Not A Reference", "an unreadable image 'Not A Reference'"),
    ],
)
def test_a_target_running_another_repository_is_listed(image: str, runs: str) -> None:
    assert audit([CONTROL_PLANE], [workload("jobs-manager", api=image)]) == [
        Finding(
            "Deployment tracebloc/jobs-manager",
            "api",
            FindingKind.OTHER_REPOSITORY,
            image,
            f"policy tracebloc/control-plane tracks docker.io/tracebloc/jobs-manager, but it "
            f"runs {runs}: imagerefresh never changes repositories, so it is never refreshed; "
            "fix the policy or the workload",
        )
    ]


def test_a_missing_workload_and_a_missing_container_are_listed() -> None:
    both = policy("control-plane", target("jobs-manager", api=JM), target("gone", api=JM))
    assert audit([both], [workload("jobs-manager", other=JM)]) == [
        Finding(
            "Deployment tracebloc/gone",
            "api",
            FindingKind.MISSING_WORKLOAD,
            "-",
            "policy tracebloc/control-plane targets it, but it does not exist; create it or fix "
            "the policy",
        ),
        Finding(
            "Deployment tracebloc/jobs-manager",
            "api",
            FindingKind.MISSING_CONTAINER,
            "-",
            "policy tracebloc/control-plane declares this container, but the pod template has: "
            "other; fix the policy",
        ),
        Finding(
            "Deployment tracebloc/jobs-manager",
            "other",
            FindingKind.UNCOVERED,
            JM,
            "runs docker.io/tracebloc/jobs-manager, which policy tracebloc/control-plane "
            "tracks, but no policy declares this container: it is never refreshed; add it to a "
            "policy's targets",
        ),
    ]


def test_a_workload_is_matched_by_kind_namespace_and_name() -> None:
    cross = policy("control-plane", target("rm", "DaemonSet", "agents", m=JM))
    live = [
        workload("rm", "DaemonSet", "agents", m=JM),
        workload("rm", "Deployment", "agents", m=JM),  # same name, another kind
        workload("rm", "DaemonSet", "tracebloc", m=JM),  # same name, the policy's namespace
    ]
    assert kinds(audit([cross], live, reachable=allowing("tracebloc=agents"))) == [
        ("uncovered", "DaemonSet tracebloc/rm", "m"),
        ("uncovered", "Deployment agents/rm", "m"),
    ]


def test_a_target_without_a_namespace_defaults_to_its_policys() -> None:
    elsewhere = policy("p", target("jobs-manager", api=JM), namespace="other")
    assert kinds(audit([elsewhere], [workload("jobs-manager", namespace="other", api=JM)])) == []


def test_a_container_declared_by_any_policy_is_covered() -> None:
    second = policy("second", target("requests-proxy", proxy=JM))
    live = [workload("jobs-manager", api=JM), workload("requests-proxy", proxy=JM)]
    assert audit([CONTROL_PLANE, second], live) == []


def test_namespaces_restrict_the_workloads_and_the_targets_judged() -> None:
    cross = policy(
        "control-plane", target("jobs-manager", api=JM), target("rm", "DaemonSet", "agents", m=JM)
    )
    live = [workload("other", "Deployment", "agents", x=JM), workload("jobs-manager", api=JM)]
    reach = allowing("tracebloc=agents")
    assert kinds(audit([cross], live, namespaces=frozenset({"tracebloc"}), reachable=reach)) == []
    assert kinds(audit([cross], live, namespaces=frozenset({"agents"}), reachable=reach)) == [
        ("missing-workload", "DaemonSet agents/rm", "m"),
        ("uncovered", "Deployment agents/other", "x"),
    ]


def test_an_unreadable_policy_is_listed_and_tracks_nothing() -> None:
    broken = AuditedPolicy("tracebloc", "broken", None, "targets: Field required")
    assert audit([broken], [workload("jobs-manager", api=JM)]) == [
        Finding(
            "ImageRefreshPolicy tracebloc/broken",
            "-",
            FindingKind.INVALID_POLICY,
            "-",
            "its spec cannot be read (targets: Field required); it tracks nothing until it is "
            "fixed",
        )
    ]


def test_the_first_policy_by_name_is_named_as_the_tracker() -> None:
    a, b = policy("a", target("x", api=JM)), policy("b", target("y", api=JM))
    live = [workload("x", api=JM), workload("y", api=JM), workload("z", api=JM)]
    (finding,) = audit([b, a], live)
    assert "which policy tracebloc/a tracks" in finding.detail


def test_findings_render_as_json_objects() -> None:
    (finding,) = audit([CONTROL_PLANE], [workload("jobs-manager", api=JM), workload("r", p=JM)])
    assert finding.as_json() == {
        "kind": "uncovered",
        "workload": "Deployment tracebloc/r",
        "container": "p",
        "image": JM,
        "detail": finding.detail,
    }


def test_a_workload_is_read_from_the_api_with_its_init_containers() -> None:
    obj = {
        "kind": "StatefulSet",
        "metadata": {"namespace": "ns", "name": "db"},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "init", "image": "busybox"}],
                    "containers": [{"name": "db", "image": "postgres:16"}, {"name": "x"}],
                }
            }
        },
    }
    assert AuditedWorkload.from_api(obj) == AuditedWorkload(
        "StatefulSet",
        "ns",
        "db",
        (
            AuditedContainer("init", "busybox", True),
            AuditedContainer("db", "postgres:16", False),
            AuditedContainer("x", "", False),
        ),
    )
    assert str(AuditedWorkload.from_api(obj)) == "StatefulSet ns/db"


def test_an_unreadable_or_empty_image_is_shown_as_it_is_or_as_a_dash() -> None:
    live = [workload("web", odd="Not A Reference", empty="")]
    found = audit([], live, all_mutable=True)
    assert [(f.workload, f.container, f.kind, f.image) for f in found] == [
        ("Deployment tracebloc/web", "empty", FindingKind.MUTABLE, "-"),
        ("Deployment tracebloc/web", "odd", FindingKind.MUTABLE, "Not A Reference"),
    ]


def test_a_mutable_finding_names_the_workload_the_container_and_its_image() -> None:
    live = [workload("web", init={"setup": "busybox:1"}, nginx=f"nginx@{D1}")]
    assert [
        (f.workload, f.container, f.kind, f.image) for f in audit([], live, all_mutable=True)
    ] == [("Deployment tracebloc/web", "setup (init)", FindingKind.MUTABLE, "busybox:1")]


def test_a_missing_container_lists_what_the_template_has_or_none() -> None:
    two = policy("p", target("a", api=JM), target("b", api=JM), target("c", api=JM))
    live = [workload("a", x=JM, y=JM), workload("b"), workload("c", api="")]
    found = audit([two], live)
    assert [(f.workload, f.kind, f.image, f.detail.split(": ")[-1]) for f in found] == [
        ("Deployment tracebloc/a", FindingKind.MISSING_CONTAINER, "-", "x, y; fix the policy"),
        ("Deployment tracebloc/a", FindingKind.UNCOVERED, JM, found[1].detail.split(": ")[-1]),
        ("Deployment tracebloc/a", FindingKind.UNCOVERED, JM, found[2].detail.split(": ")[-1]),
        ("Deployment tracebloc/b", FindingKind.MISSING_CONTAINER, "-", "none; fix the policy"),
        (
            "Deployment tracebloc/c",
            FindingKind.OTHER_REPOSITORY,
            "-",
            "imagerefresh never changes repositories, so it is never refreshed; fix the "
            "policy or the workload",
        ),
    ]
    assert "but it runs an unreadable image ''" in found[4].detail


def test_every_target_is_judged_whatever_the_ones_before_it_found() -> None:
    several = policy(
        "p",
        target("skipped", namespace="elsewhere", api=JM),
        target("gone", api=JM),
        target("a", api=JM, sidecar=JM),
        target("b", api=JM),
    )
    live = [workload("a", sidecar=JM), workload("b", api="mirror.example/x:1")]
    reach = allowing("tracebloc=elsewhere")
    assert kinds(audit([several], live, namespaces=frozenset({"tracebloc"}), reachable=reach)) == [
        ("missing-container", "Deployment tracebloc/a", "api"),
        ("other-repository", "Deployment tracebloc/b", "api"),
        ("missing-workload", "Deployment tracebloc/gone", "api"),
    ]


def test_a_nameless_container_is_read_with_an_empty_name() -> None:
    obj = {
        "kind": "Deployment",
        "metadata": {"namespace": "ns", "name": "x"},
        "spec": {"template": {"spec": {"containers": [{"image": "busybox:1"}]}}},
    }
    assert AuditedWorkload.from_api(obj).containers == (AuditedContainer("", "busybox:1"),)


# --- what the operator will never refresh, though a policy declares it ------------------------

LIVE_JM = workload("jobs-manager", api=JM, pods=JM)
TENANT = policy("tenant", target("jobs-manager", "Deployment", "tracebloc", api=JM), namespace="t")
REACH_CASES = [
    pytest.param(
        [CONTROL_PLANE, policy("second", target("jobs-manager", api=JM))],
        None,
        None,
        [
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),
            ("uncovered", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="two-policies-one-container-conflict-on-both",
    ),
    pytest.param(
        [
            policy("a", target("jobs-manager", api=JM, pods=JM)),
            policy("b", target("jobs-manager", pods=JM)),
        ],
        None,
        None,
        [
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),  # the target as a whole
            ("conflict", "Deployment tracebloc/jobs-manager", "pods"),
            ("conflict", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="one-contested-container-holds-its-whole-target",
    ),
    pytest.param(
        [
            policy(
                "twice",
                target("jobs-manager", api=JM),
                target("jobs-manager", "Deployment", "tracebloc", pods=JM),
            )
        ],
        None,
        None,
        [
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),
            ("conflict", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="one-policy-twice-after-namespace-defaulting",
    ),
    pytest.param(
        [policy("cp", target("jobs-manager", api=JM, pods=JM), suspend=True)],
        None,
        None,
        [
            ("suspended", "Deployment tracebloc/jobs-manager", "api"),
            ("suspended", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="suspended",
    ),
    pytest.param(
        [policy("cp", target("jobs-manager", api=JM, pods=JM), dryRun=True)],
        None,
        None,
        [
            ("dry-run", "Deployment tracebloc/jobs-manager", "api"),
            ("dry-run", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="dry-run",
    ),
    pytest.param(
        [policy("cp", target("jobs-manager", api=JM, pods=JM), dryRun=True, suspend=True)],
        None,
        None,
        [
            ("suspended", "Deployment tracebloc/jobs-manager", "api"),
            ("suspended", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="suspended-before-dry-run",
    ),
    pytest.param(
        [
            policy("active", target("jobs-manager", api=JM, pods=JM)),
            policy("paused", target("jobs-manager", pods=JM), suspend=True),
        ],
        None,
        None,
        [
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),
            ("conflict", "Deployment tracebloc/jobs-manager", "pods"),
            ("suspended", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="a-suspended-policy-still-claims",
    ),
    pytest.param(
        [policy("cp", target("jobs-manager", api=JM, pods=JM), dryRun=True), CONTROL_PLANE],
        None,
        None,
        [
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),
            ("conflict", "Deployment tracebloc/jobs-manager", "pods"),
        ],
        id="conflict-before-dry-run",
    ),
    pytest.param(
        [TENANT],
        None,
        None,
        [("out-of-reach", "Deployment tracebloc/jobs-manager", "api")],  # pods: nobody tracks
        id="beyond-the-allow-list",
    ),
    pytest.param(
        [TENANT],
        "t=tracebloc",
        None,
        [("uncovered", "Deployment tracebloc/jobs-manager", "pods")],
        id="within-the-allow-list",
    ),
    pytest.param(
        [TENANT],
        "t=*",
        None,
        [("uncovered", "Deployment tracebloc/jobs-manager", "pods")],
        id="within-a-wildcard-pair",
    ),
    pytest.param(
        [TENANT, policy("owner", target("jobs-manager", api=JM, pods=JM))],
        None,
        None,
        [("out-of-reach", "Deployment tracebloc/jobs-manager", "api")],
        id="beyond-reach-claims-nothing-from-the-owner",
    ),
    pytest.param(
        [TENANT, policy("owner", target("jobs-manager", api=JM, pods=JM))],
        None,
        {"tracebloc"},
        [],
        id="beyond-reach-is-not-the-owners-finding",
    ),
    pytest.param(
        [TENANT, policy("owner", target("jobs-manager", api=JM, pods=JM))],
        None,
        {"t"},
        [("out-of-reach", "Deployment tracebloc/jobs-manager", "api")],
        id="beyond-reach-is-the-tenants-finding",
    ),
    pytest.param(
        [policy("tenant", target("elsewhere", api=JM), namespace="t")],
        None,
        {"tracebloc"},
        [],
        id="beyond-reach-tracking-makes-nobody-uncovered",
    ),
    pytest.param(
        [
            CONTROL_PLANE,
            BROKEN_CLAIMING_API,
        ],
        None,
        None,
        [
            ("conflict", "Deployment tracebloc/jobs-manager", "api"),
            ("uncovered", "Deployment tracebloc/jobs-manager", "pods"),
            ("invalid-policy", "ImageRefreshPolicy tracebloc/broken", "-"),
        ],
        id="an-unreadable-policy-still-claims",
    ),
    pytest.param(
        [
            CONTROL_PLANE,
            AuditedPolicy(
                "t", "broken", None, "bad", (("Deployment", "tracebloc", "jobs-manager", "api"),)
            ),
        ],
        None,
        None,
        [
            ("uncovered", "Deployment tracebloc/jobs-manager", "pods"),
            ("invalid-policy", "ImageRefreshPolicy t/broken", "-"),
        ],
        id="an-unreadable-policy-claims-only-within-reach",
    ),
]


@pytest.mark.parametrize(("policies", "pairs", "audited", "expected"), REACH_CASES)
def test_only_a_container_one_reaching_running_policy_declares_is_covered(
    policies: list[AuditedPolicy],
    pairs: str | None,
    audited: set[str] | None,
    expected: list[tuple[str, str, str]],
) -> None:
    found = audit(
        policies,
        [LIVE_JM],
        namespaces=frozenset(audited) if audited is not None else None,
        reachable=allowing(pairs) if pairs else allowing(),
    )
    assert kinds(found) == expected


def test_the_default_reach_is_the_policys_own_namespace() -> None:
    assert kinds(audit([TENANT], [LIVE_JM])) == [
        ("out-of-reach", "Deployment tracebloc/jobs-manager", "api")
    ]


@pytest.mark.parametrize(
    ("policies", "detail"),
    [
        (
            [policy("cp", target("jobs-manager", api=JM), suspend=True)],
            "policy tracebloc/cp is suspended: it refreshes nothing; set spec.suspend to false, "
            "or move the container to a policy that runs",
        ),
        (
            [policy("cp", target("jobs-manager", api=JM), dryRun=True)],
            "policy tracebloc/cp is dryRun: it reports what it would do and never patches; set "
            "spec.dryRun to false when its plan is what you want",
        ),
        (
            [TENANT],
            "policy t/tenant may not reach namespace tracebloc: the operator's allow-list has no "
            "pair t=tracebloc, so it is never refreshed; allow the pair in the operator's "
            "configuration, or declare it in a policy in tracebloc",
        ),
        (
            [
                policy("b", target("jobs-manager", api=JM)),
                policy("a", target("jobs-manager", api=JM)),
            ],
            "container 'api' is declared by policy tracebloc/a and by tracebloc/b, so this target "
            "is never refreshed; one container, one policy: remove it from all but one",
        ),
        (
            [policy(n, target("jobs-manager", api=JM)) for n in ("c", "b", "a")],
            "container 'api' is declared by policy tracebloc/a and by tracebloc/b, tracebloc/c, so "
            "this target is never refreshed; one container, one policy: remove it from all but one",
        ),
        (
            [
                CONTROL_PLANE,
                BROKEN_CLAIMING_API,
            ],
            "container 'api' is declared by policy tracebloc/control-plane and by "
            "tracebloc/broken, so this target is never refreshed; one container, one policy: "
            "remove it from all but one",
        ),
        (
            [
                policy(
                    "p",
                    target("jobs-manager", api=JM),
                    target("jobs-manager", "Deployment", "tracebloc", api=JM),
                )
            ],
            "policy tracebloc/p targets Deployment tracebloc/jobs-manager more than once (after "
            "defaulting the namespace), so neither is refreshed; declare each workload once",
        ),
    ],
)
def test_each_reason_a_declared_container_is_never_refreshed_says_what_to_do(
    policies: list[AuditedPolicy], detail: str
) -> None:
    found = audit(policies, [workload("jobs-manager", api=JM)])
    assert found
    assert found[0].detail == detail
    assert found[0].image == JM  # as it runs


def test_a_dry_run_target_is_judged_on_its_workload_first() -> None:
    dry = policy("cp", target("jobs-manager", api=JM), target("gone", api=JM), dryRun=True)
    live = [workload("jobs-manager", api="mirror.example/x:1")]
    assert kinds(audit([dry], live)) == [
        ("missing-workload", "Deployment tracebloc/gone", "api"),
        ("other-repository", "Deployment tracebloc/jobs-manager", "api"),
    ]


def test_a_finding_shows_the_live_image_where_it_was_read_and_a_dash_where_not() -> None:
    paused = policy("cp", target("jobs-manager", api=JM, migrate=JM), suspend=True)
    live = [workload("jobs-manager", init={"migrate": f"tracebloc/jobs-manager@{D1}"}, api=JM)]
    assert [(f.container, f.image) for f in audit([paused], live)] == [
        ("api", JM),
        ("migrate (init)", f"tracebloc/jobs-manager@{D1}"),
    ]
    (unread,) = audit([TENANT], [LIVE_JM], namespaces=frozenset({"t"}))  # tracebloc not read
    assert (unread.kind, unread.container, unread.image) == (FindingKind.OUT_OF_REACH, "api", "-")


def test_a_policy_wide_finding_shows_a_dash_for_a_container_that_runs_no_image_or_none() -> None:
    paused = policy("cp", target("jobs-manager", api=JM, gone=JM), suspend=True)
    detail = (
        "policy tracebloc/cp is suspended: it refreshes nothing; set spec.suspend to false, or "
        "move the container to a policy that runs"
    )
    assert audit([paused], [workload("jobs-manager", api="")]) == [
        Finding("Deployment tracebloc/jobs-manager", name, FindingKind.SUSPENDED, "-", detail)
        for name in ("api", "gone")
    ]
