"""The Helm chart as rendered by the pinned `helm template`, parsed: what each value profile
produces, the least-privilege RBAC it grants, and what values.schema.json refuses.

No cluster here; tests/chart/test_chart_install.py installs the same chart on one.
"""

from __future__ import annotations

import re
import tarfile
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from imagerefresh.cli import LOG_FORMAT_ENV, LOG_LEVEL_ENV, main
from imagerefresh.cli import run as run_command
from imagerefresh.kube.namespaces import NamespaceScope, is_pattern
from imagerefresh.metrics import Metrics

from support.docs import DOCS, anchors
from support.helm_env import (
    CHART,
    KUBE_VERSION,
    REPO,
    helm,
    of_kind,
    only,
    operator_container,
    render,
    render_error,
)

DIGEST = "sha256:" + "ab" * 32
CRD_SOURCE = REPO / "crds" / "imagerefreshpolicies.images.tracebloc.io.yaml"
CHART_CRD = CHART / "files" / CRD_SOURCE.name
WORKLOAD_RESOURCES = {"deployments", "daemonsets", "statefulsets"}
# Watch-fed evidence (watchEvidence, on by default) adds these; off, the verbs of before.
WORKLOAD_VERBS = {"get", "list", "watch", "patch"}
WORKLOAD_VERBS_WITHOUT_WATCHES = {"get", "patch"}


def container(name: str, image: str) -> dict[str, str]:
    return {"name": name, "image": image}


def control_plane_policy(**extra: Any) -> dict[str, Any]:
    """The edge's three control-plane workloads (context document 004), as one values block."""
    return {
        "name": "control-plane",
        "spec": {
            "interval": "15m",
            "targets": [
                {
                    "kind": "Deployment",
                    "name": "jobs-manager",
                    "containers": [
                        container("api", "tracebloc/jobs-manager:prod"),
                        container("pods-monitor-container", "tracebloc/pods-monitor:prod"),
                    ],
                },
                {
                    "kind": "Deployment",
                    "name": "requests-proxy",
                    "containers": [container("proxy", "tracebloc/jobs-manager:prod")],
                },
                {
                    "kind": "DaemonSet",
                    "name": "resource-monitor",
                    "namespace": "tracebloc-node-agents",
                    "containers": [
                        container("tracebloc-resource-monitor", "tracebloc/resource-monitor:prod")
                    ],
                },
            ],
        },
        **extra,
    }


NODE_AGENTS_PAIR = {"policyNamespace": "tracebloc", "targetNamespace": "tracebloc-node-agents"}
CONTROL_PLANE: dict[str, Any] = {
    "allowNamespacePairs": [NODE_AGENTS_PAIR],
    "policies": [control_plane_policy()],
}

# Every value profile the chart supports, for the invariants that must hold in all of them.
PROFILES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "policies": CONTROL_PLANE,
    "policies-unscoped": {**CONTROL_PLANE, "rbac": {"scopeToPolicies": False}},
    "cross-namespace-pair": {"allowNamespacePairs": [NODE_AGENTS_PAIR]},
    "several-watched-namespaces": {
        "watch": {"namespaces": ["tracebloc", "team-a"]},
        "allowNamespacePairs": [{"policyNamespace": "team-a", "targetNamespace": "tracebloc"}],
    },
    # Context document 004: the node-agents namespace IS the release namespace.
    "pair-collapsed-onto-release-namespace": {
        "allowNamespacePairs": [{"policyNamespace": "tracebloc", "targetNamespace": "tracebloc"}],
        "policies": [
            {
                "name": "p",
                "spec": {
                    "targets": [
                        {
                            "kind": "DaemonSet",
                            "name": "resource-monitor",
                            "namespace": "tracebloc",
                            "containers": [container("m", "tracebloc/resource-monitor:prod")],
                        },
                        {
                            "kind": "Deployment",
                            "name": "jobs-manager",
                            "containers": [container("api", "tracebloc/jobs-manager:prod")],
                        },
                    ]
                },
            }
        ],
    },
    "watched-namespace-is-also-a-pair-target": {
        "watch": {"namespaces": ["tracebloc", "tracebloc-node-agents"]},
        "allowNamespacePairs": [NODE_AGENTS_PAIR],
        "policies": [
            control_plane_policy(),
            control_plane_policy(namespace="tracebloc-node-agents"),
        ],
    },
    "all-namespaces": {"watch": {"allNamespaces": True}},
    "namespace-pattern": {"watch": {"namespaces": ["tracebloc", "edge-*, !edge-test-*"]}},
    "namespace-pattern-with-policies": {
        "watch": {"namespaces": ["trace*"]},
        **CONTROL_PLANE,
    },
    "all-namespaces-with-policies": {"watch": {"allNamespaces": True}, **CONTROL_PLANE},
    "image-by-digest": {
        "image": {"repository": "registry.example:5000/ops/imagerefresh", "digest": DIGEST}
    },
    "monitoring": {
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
    },
    "pull-secret-names": {**CONTROL_PLANE, "rbac": {"pullSecrets": {"names": ["regcred", "hub"]}}},
    "pull-secret-names-unscoped": {
        "allowNamespacePairs": [NODE_AGENTS_PAIR],
        "rbac": {"pullSecrets": {"names": ["regcred"]}},
    },
    "all-namespaces-with-policies-and-pull-secrets": {
        "watch": {"allNamespaces": True},
        **CONTROL_PLANE,
        "rbac": {"pullSecrets": {"names": ["regcred"]}},
    },
    "two-replicas": {"replicaCount": 2},
    "two-replicas-all-namespaces": {"replicaCount": 2, "watch": {"allNamespaces": True}},
    "without-leader-election": {"leaderElection": {"enabled": False}},
    "insecure-registries": {"insecureRegistries": ["127.0.0.1:5000", "mirror.local"]},
    "node-reads": {"offline": {"readNodes": True}},
    "node-reads-all-namespaces-uncapped": {
        "watch": {"allNamespaces": True},
        "offline": {"readNodes": True, "nodeStatusMaxImages": -1},
    },
    "pre-pull": {**CONTROL_PLANE, "prePull": {"enabled": True}},
    "pre-pull-all-namespaces-unscoped": {
        "watch": {"allNamespaces": True},
        "prePull": {"enabled": True, "maxDeadlineSeconds": 600},
    },
    "without-watch-evidence": {"watchEvidence": False},
    "policies-without-watch-evidence": {**CONTROL_PLANE, "watchEvidence": False},
    "all-namespaces-without-watch-evidence": {
        "watch": {"allNamespaces": True},
        "watchEvidence": False,
    },
    "rbac-service-account-and-crd-managed-elsewhere": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "imagerefresh-operator"},
        "crds": {"enabled": False},
    },
}


LEADER_ELECTION_ROLE = "-leader-election"


def operator_roles(
    objects: list[dict[str, Any]], kind: str = "Role", namespace: str | None = None
) -> list[dict[str, Any]]:
    """The Roles for policies and targets (the leader-election Role has tests of its own)."""
    return [
        o
        for o in of_kind(objects, kind, namespace)
        if not o["metadata"]["name"].endswith(LEADER_ELECTION_ROLE)
    ]


def rules_of(
    objects: list[dict[str, Any]], kind: str, namespace: str | None
) -> list[dict[str, Any]]:
    (role,) = operator_roles(objects, kind, namespace)
    return list(role["rules"])


def grants(rules: list[dict[str, Any]], resource: str, verb: str) -> list[dict[str, Any]]:
    """The rules granting `verb` on `resource` (each may carry resourceNames)."""
    group, _, name = resource.rpartition(".") if "." in resource else ("", "", resource)
    found = []
    for rule in rules:
        in_group = group == "" or group in rule["apiGroups"]
        if verb in rule["verbs"] and name in rule["resources"] and in_group:
            found.append(rule)
    return found


def names_granted(rules: list[dict[str, Any]], resource: str, verb: str) -> set[str] | None:
    """None when `verb` on `resource` is granted for every name; else the names granted."""
    matching = grants(rules, resource, verb)
    if any("resourceNames" not in r for r in matching):
        return None
    return {n for r in matching for n in r["resourceNames"]}


# -- lint, packaging, the CRD -----------------------------------------------------------------


@pytest.mark.parametrize(
    "profile",
    ["defaults", "policies", "all-namespaces", "namespace-pattern", "monitoring", "pre-pull"],
)
def test_helm_lint_passes_strictly(profile: str) -> None:
    result = helm(
        "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, values=PROFILES[profile]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_chart_crd_is_a_relative_symlink_to_the_single_crd_source() -> None:
    assert CHART_CRD.is_symlink()
    link = Path(CHART_CRD.readlink())
    assert not link.is_absolute(), "an absolute link breaks in any other checkout"
    assert CHART_CRD.resolve() == CRD_SOURCE.resolve()
    assert sorted(p.name for p in CHART_CRD.parent.iterdir()) == [CRD_SOURCE.name]
    # Helm installs a crds/ directory once and never upgrades it: the chart has none.
    assert not (CHART / "crds").exists()


def rendered_crd(values: dict[str, Any] | None = None) -> dict[str, Any] | None:
    found = of_kind(render(values), "CustomResourceDefinition")
    assert len(found) <= 1
    return found[0] if found else None


def test_the_crd_is_a_template_rendering_the_crd_source_kept_on_uninstall() -> None:
    crd = rendered_crd()
    assert crd is not None
    source = yaml.safe_load(CRD_SOURCE.read_text())
    assert crd["spec"] == source["spec"]
    assert {k: v for k, v in crd.items() if k != "metadata"} == {
        k: v for k, v in source.items() if k != "metadata"
    }
    assert crd["metadata"]["name"] == source["metadata"]["name"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    labels = crd["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    assert labels["app.kubernetes.io/instance"] == "r"
    assert labels["app.kubernetes.io/component"] == "crd"


def test_crds_keep_false_lets_uninstall_delete_the_crd() -> None:
    crd = rendered_crd({"crds": {"keep": False}})
    assert crd is not None
    assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})


def test_crds_disabled_renders_no_crd_and_the_operator_unchanged() -> None:
    assert rendered_crd({"crds": {"enabled": False}}) is None
    without = [o for o in render() if o["kind"] != "CustomResourceDefinition"]
    assert render({"crds": {"enabled": False}}) == without


def test_values_without_crds_as_reuse_values_carries_them_from_an_older_release_keep_defaults() -> (
    None
):
    # `helm upgrade --reuse-values` uses the previous chart's values, which had no crds.*.
    assert rendered_crd({"crds": None}) == rendered_crd()


def test_packaged_chart_carries_the_crd_file_not_a_link_and_no_crds_directory(
    tmp_path: Path,
) -> None:
    result = helm("package", str(CHART), "--destination", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (archive,) = tmp_path.glob("imagerefresh-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.getmember(f"imagerefresh/files/{CRD_SOURCE.name}")
        assert member.isfile()
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert extracted.read() == CRD_SOURCE.read_bytes()
        assert not [n for n in tar.getnames() if n.startswith("imagerefresh/crds/")]
    # And the packaged chart renders the same CRD as the directory.
    packaged = helm("template", "r", str(archive), "--kube-version", KUBE_VERSION)
    assert packaged.returncode == 0, packaged.stderr
    assert of_kind(packaged.objects, "CustomResourceDefinition") == [rendered_crd()]


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "imagerefresh"
    assert chart["appVersion"] == project["version"]


# -- the operator Deployment --------------------------------------------------------------------


def test_defaults_render_one_hardened_guaranteed_operator_watching_the_release_namespace() -> None:
    objects = render()
    assert Counter(o["kind"] for o in objects) == Counter(
        {
            "CustomResourceDefinition": 1,
            "ServiceAccount": 1,
            "Role": 2,
            "RoleBinding": 2,
            "Deployment": 1,
        }
    )
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == only(objects, "ServiceAccount")["metadata"]["name"]
    # No fixed user, group or fsGroup: the image's numeric USER, or the platform's.
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod.get("initContainers", []) == []
    c = operator_container(objects)
    assert c["image"] == "docker.io/tracebloc/imagerefresh:0.1.0"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["args"] == [
        "--namespace=tracebloc",
        "--metrics-port=9090",
        "--liveness-port=8080",
        "--resolution-window=10",
        "--leader-elect",
        "--leader-election-namespace=tracebloc",
        "--leader-election-id=imagerefresh",
        "--no-scanning",
    ]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env[LOG_LEVEL_ENV] == "INFO"
    assert env[LOG_FORMAT_ENV] == "json"
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert not {"runAsUser", "runAsGroup"} & set(sc)
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 9090, "healthz": 8080}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"runAsUser": 1000}, {"runAsUser": 1000}),
        ({"runAsUser": 1000, "runAsGroup": 2000}, {"runAsUser": 1000, "runAsGroup": 2000}),
        (
            {"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000},
            {"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000},
        ),
        ({"fsGroup": 3000}, {"fsGroup": 3000}),
    ],
)
def test_the_operators_user_group_and_fs_group_are_rendered_only_as_the_values_set_them(
    values: dict[str, int], expected: dict[str, int]
) -> None:
    pod = only(render(values), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        **expected,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@pytest.mark.parametrize("key", ["runAsUser", "runAsGroup", "fsGroup"])
@pytest.mark.parametrize("value", [0, -1, "1000", 1.5])
def test_a_root_or_malformed_operator_user_is_refused_by_the_schema(key: str, value: Any) -> None:
    assert key in render_error({key: value})


def test_host_network_mode_binds_loopback_probes_loopback_and_names_the_api_server() -> None:
    values = {"hostNetwork": {"enabled": True, "apiServer": {"host": "127.0.0.1", "port": 6443}}}
    objects = render(values)
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    c = operator_container(objects)
    assert "--bind-address=127.0.0.1" in c["args"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"host": "127.0.0.1", "path": "/healthz", "port": "healthz"}
    # Without an address, the in-cluster default (the Service) is left alone.
    keep = render({"hostNetwork": {"enabled": True, "apiServer": {"host": "", "port": 6443}}})
    names = {e["name"] for e in operator_container(keep)["env"]}
    assert "KUBERNETES_SERVICE_HOST" not in names
    default = only(render(), "Deployment")["spec"]["template"]["spec"]
    assert "hostNetwork" not in default
    assert "--bind-address=127.0.0.1" not in operator_container(render())["args"]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_container_has_requests_equal_to_limits_for_cpu_and_memory(profile: str) -> None:
    pod = only(render(PROFILES[profile]), "Deployment")["spec"]["template"]["spec"]
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    assert containers
    for c in containers:
        resources = c["resources"]
        for dimension in ("cpu", "memory"):
            assert resources["requests"][dimension] == resources["limits"][dimension], c["name"]


def test_image_by_digest_renders_repository_at_digest_and_ignores_the_tag() -> None:
    values = {
        "image": {
            "repository": "registry.example:5000/ops/imagerefresh",
            "tag": "x",
            "digest": DIGEST,
        }
    }
    c = operator_container(render(values))
    assert c["image"] == f"registry.example:5000/ops/imagerefresh@{DIGEST}"
    assert c["imagePullPolicy"] == "IfNotPresent"


def test_image_tag_overrides_the_app_version() -> None:
    c = operator_container(render({"image": {"repository": "r.example/op", "tag": "0.2.0-rc1"}}))
    assert c["image"] == "r.example/op:0.2.0-rc1"


def test_operator_configuration_becomes_run_options() -> None:
    values = {
        "watch": {"namespaces": ["tracebloc", "team-a"]},
        "allowNamespacePairs": [NODE_AGENTS_PAIR],
        "insecureRegistries": ["127.0.0.1:5000"],
        "ports": {"metrics": 9100, "liveness": 8081},
        "resolutionWindow": 3,
        "logLevel": "DEBUG",
        "logFormat": "console",
    }
    c = operator_container(render(values))
    assert c["args"] == [
        "--namespace=team-a",
        "--namespace=tracebloc",
        "--allow-namespace-pair=tracebloc=tracebloc-node-agents",
        "--insecure-registry=127.0.0.1:5000",
        "--metrics-port=9100",
        "--liveness-port=8081",
        "--resolution-window=3",
        "--leader-elect",
        "--leader-election-namespace=tracebloc",
        "--leader-election-id=imagerefresh",
        "--no-scanning",
    ]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 9100, "healthz": 8081}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env[LOG_LEVEL_ENV], env[LOG_FORMAT_ENV]) == ("DEBUG", "console")


def test_all_namespaces_renders_the_flag_instead_of_namespaces() -> None:
    args = operator_container(render(PROFILES["all-namespaces"]))["args"]
    assert "--all-namespaces" in args
    assert not [a for a in args if a.startswith("--namespace")]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_rendered_args_and_env_are_accepted_by_the_real_command_line(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's entrypoint is `imagerefresh run`: the args must parse as run's options, and
    the log settings (global options, before `run`) must be taken from the environment."""
    c = operator_container(render(PROFILES[profile]))
    args = c["args"]
    with run_command.make_context("run", args) as ctx:
        assert ctx.params["scanning"] is False
        elect = PROFILES[profile].get("leaderElection", {}).get("enabled", True)
        assert ctx.params["leader_elect"] is elect
        assert ctx.params["watch_evidence"] is PROFILES[profile].get("watchEvidence", True)
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    for name in (LOG_LEVEL_ENV, LOG_FORMAT_ENV):
        monkeypatch.setenv(name, env[name])
    with main.make_context("imagerefresh", ["run"]) as ctx:
        assert ctx.params == {"log_level": env[LOG_LEVEL_ENV], "log_format": env[LOG_FORMAT_ENV]}


def test_kwok_scheduling_values_reach_the_pod() -> None:
    values = {
        "nodeSelector": {"type": "kwok"},
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "priorityClassName": "system-cluster-critical",
    }
    pod = only(render(values), "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert pod["tolerations"] == values["tolerations"]
    assert pod["priorityClassName"] == "system-cluster-critical"


# -- policies from values -----------------------------------------------------------------------


def test_policies_from_values_render_as_image_refresh_policies_in_their_namespaces() -> None:
    values = {
        **CONTROL_PLANE,
        "watch": {"namespaces": ["tracebloc", "team-a"]},
        "policies": [
            control_plane_policy(),
            {
                "name": "apps",
                "namespace": "team-a",
                "spec": {
                    "suspend": True,
                    "targets": [
                        {
                            "kind": "StatefulSet",
                            "name": "db",
                            "containers": [container("db", "mysql:8")],
                        }
                    ],
                },
            },
        ],
    }
    objects = render(values)
    policies = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p
        for p in of_kind(objects, "ImageRefreshPolicy")
    }
    assert set(policies) == {("tracebloc", "control-plane"), ("team-a", "apps")}
    assert policies[("tracebloc", "control-plane")]["spec"] == control_plane_policy()["spec"]
    assert policies[("team-a", "apps")]["apiVersion"] == "images.tracebloc.io/v1alpha1"
    assert policies[("team-a", "apps")]["spec"]["suspend"] is True


def test_policies_scope_workload_access_to_the_declared_names_per_namespace_and_kind() -> None:
    objects = render(CONTROL_PLANE)
    home = rules_of(objects, "Role", "tracebloc")
    agents = rules_of(objects, "Role", "tracebloc-node-agents")
    # list and watch too, by name: the operator's by-name watch (fieldSelector=metadata.name).
    for verb in sorted(WORKLOAD_VERBS):
        assert names_granted(home, "apps.deployments", verb) == {"jobs-manager", "requests-proxy"}
        assert not grants(home, "apps.daemonsets", verb)
        assert not grants(home, "apps.statefulsets", verb)
        assert names_granted(agents, "apps.daemonsets", verb) == {"resource-monitor"}
        assert not grants(agents, "apps.deployments", verb)
    # The target-only namespace gets no access to policies.
    assert not grants(agents, "images.tracebloc.io.imagerefreshpolicies", "get")
    assert grants(agents, "pods", "list")
    assert grants(agents, "pods", "watch")
    assert grants(agents, "events", "create")


def test_unscoped_policies_grant_every_workload_in_the_reachable_namespaces() -> None:
    objects = render(PROFILES["policies-unscoped"])
    for ns in ("tracebloc", "tracebloc-node-agents"):
        rules = rules_of(objects, "Role", ns)
        for resource in WORKLOAD_RESOURCES:
            for verb in sorted(WORKLOAD_VERBS):  # list and watch: one stream per namespace
                assert names_granted(rules, f"apps.{resource}", verb) is None, (resource, verb)
        assert names_granted(rules, "pods", "watch") is None


def test_a_cross_namespace_pair_adds_a_target_role_in_the_target_namespace_only() -> None:
    objects = render(PROFILES["cross-namespace-pair"])
    assert {r["metadata"]["namespace"] for r in operator_roles(objects)} == {
        "tracebloc",
        "tracebloc-node-agents",
    }
    agents = rules_of(objects, "Role", "tracebloc-node-agents")
    assert names_granted(agents, "apps.daemonsets", "patch") is None
    assert not grants(agents, "images.tracebloc.io.imagerefreshpolicies", "list")
    args = operator_container(objects)["args"]
    assert "--allow-namespace-pair=tracebloc=tracebloc-node-agents" in args
    assert "--namespace=tracebloc" in args
    assert "--namespace=tracebloc-node-agents" not in args


def secret_rules(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every rule of every Role and ClusterRole that mentions Secrets, with its role's kind."""
    return [
        (role["kind"], rule)
        for role in of_kind(objects, "Role") + of_kind(objects, "ClusterRole")
        for rule in role["rules"]
        if "secrets" in rule["resources"]
    ]


@pytest.mark.parametrize(
    "profile", sorted(p for p in PROFILES if "pullSecrets" not in PROFILES[p].get("rbac", {}))
)
def test_without_pull_secret_names_no_role_grants_anything_on_secrets(profile: str) -> None:
    assert secret_rules(render(PROFILES[profile])) == []


def test_pull_secret_names_grant_only_get_on_those_names_in_each_target_namespace() -> None:
    objects = render(PROFILES["pull-secret-names"])
    for ns in ("tracebloc", "tracebloc-node-agents"):
        rules = rules_of(objects, "Role", ns)
        assert names_granted(rules, "secrets", "get") == {"regcred", "hub"}
        for verb in ("list", "watch", "create", "update", "patch", "delete"):
            assert not grants(rules, "secrets", verb)
    for kind, rule in secret_rules(objects):
        assert kind == "Role"
        assert rule == {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["hub", "regcred"],
            "verbs": ["get"],
        }


def test_pull_secret_names_without_policies_go_to_the_watched_and_allowed_namespaces() -> None:
    objects = render(PROFILES["pull-secret-names-unscoped"])
    for ns in ("tracebloc", "tracebloc-node-agents"):
        assert names_granted(rules_of(objects, "Role", ns), "secrets", "get") == {"regcred"}
    assert {kind for kind, _ in secret_rules(objects)} == {"Role"}


def test_all_namespaces_never_grants_secrets_cluster_wide() -> None:
    # Without names: no Secret rule anywhere, the ClusterRole included.
    assert secret_rules(render(PROFILES["all-namespaces"])) == []
    # With names and policies: only in the namespaced Roles of the policies' targets.
    objects = render(PROFILES["all-namespaces-with-policies-and-pull-secrets"])
    assert not grants(only(objects, "ClusterRole")["rules"], "secrets", "get")
    for ns in ("tracebloc", "tracebloc-node-agents"):
        assert names_granted(rules_of(objects, "Role", ns), "secrets", "get") == {"regcred"}
    assert {kind for kind, _ in secret_rules(objects)} == {"Role"}


def test_pull_secret_names_with_all_namespaces_and_no_policies_are_refused() -> None:
    error = render_error(
        {"watch": {"allNamespaces": True}, "rbac": {"pullSecrets": {"names": ["regcred"]}}}
    )
    assert "rbac.pullSecrets.names" in error
    assert "never grants Secrets cluster-wide" in error


def test_all_namespaces_puts_policy_rules_in_a_cluster_role_named_after_the_release_namespace() -> (
    None
):
    objects = render(PROFILES["all-namespaces"])
    role = only(objects, "ClusterRole")
    binding = only(objects, "ClusterRoleBinding")
    assert role["metadata"]["name"] == binding["metadata"]["name"] == "tracebloc-r-imagerefresh"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    rules = role["rules"]
    assert grants(rules, "images.tracebloc.io.imagerefreshpolicies", "watch")
    assert names_granted(rules, "apps.deployments", "patch") is None
    assert not operator_roles(objects)


def test_all_namespaces_with_policies_keeps_workload_access_namespaced_and_named() -> None:
    objects = render(PROFILES["all-namespaces-with-policies"])
    cluster_rules = only(objects, "ClusterRole")["rules"]
    assert not [r for r in cluster_rules if r["apiGroups"] == ["apps"]]
    assert not grants(cluster_rules, "secrets", "get")
    assert not grants(cluster_rules, "pods", "list")
    home = rules_of(objects, "Role", "tracebloc")
    assert names_granted(home, "apps.deployments", "patch") == {"jobs-manager", "requests-proxy"}


def test_a_namespace_pattern_grants_policy_rules_cluster_wide_as_the_operator_watches_them() -> (
    None
):
    values = PROFILES["namespace-pattern"]
    objects = render(values)
    rules = only(objects, "ClusterRole")["rules"]
    for verb in ("get", "list", "watch"):
        assert grants(rules, "images.tracebloc.io.imagerefreshpolicies", verb)
    assert grants(rules, "images.tracebloc.io.imagerefreshpolicies/status", "update")
    assert grants(rules, "events", "create")
    # No policy names the targets: they may be in any namespace the pattern serves.
    assert names_granted(rules, "apps.deployments", "patch") is None
    assert not operator_roles(objects)  # the Lease's Role only
    args = operator_container(objects)["args"]
    namespaces = tuple(a.removeprefix("--namespace=") for a in args if a.startswith("--namespace="))
    assert namespaces == ("edge-*, !edge-test-*", "tracebloc")
    scope = NamespaceScope.of(namespaces)
    assert scope.clusterwide
    assert scope.serves("edge-berlin")
    assert not scope.serves("edge-test-1")


def test_a_namespace_pattern_with_policies_keeps_workload_access_namespaced_and_named() -> None:
    objects = render(PROFILES["namespace-pattern-with-policies"])
    cluster_rules = only(objects, "ClusterRole")["rules"]
    assert grants(cluster_rules, "images.tracebloc.io.imagerefreshpolicies", "watch")
    assert not [r for r in cluster_rules if r["apiGroups"] == ["apps"]]
    assert not grants(cluster_rules, "pods", "list")
    home = rules_of(objects, "Role", "tracebloc")
    assert names_granted(home, "apps.deployments", "patch") == {"jobs-manager", "requests-proxy"}
    assert not grants(home, "images.tracebloc.io.imagerefreshpolicies", "watch")


def test_pull_secret_names_with_a_namespace_pattern_and_no_policies_are_refused() -> None:
    error = render_error(
        {"watch": {"namespaces": ["edge-*"]}, "rbac": {"pullSecrets": {"names": ["regcred"]}}}
    )
    assert "never grants Secrets cluster-wide" in error


SERVED = [
    ("edge-*", "edge-berlin"),
    ("edge-*", "edge"),
    ("edge-*", "tracebloc"),
    ("edge-?", "edge-1"),
    ("edge-?", "edge-12"),
    ("*, !kube-*", "tracebloc"),
    ("*, !kube-*", "kube-system"),
    ("!kube-*", "tracebloc"),
    ("edge-*, !*-test, *-test-keep", "edge-a-test"),
    ("edge-*, !*-test, edge-b-*", "edge-b-test"),
    ("edge-*, *-test", "other-test"),
    ("tracebloc", "tracebloc"),
    ("tracebloc", "tracebloc-node-agents"),
]


@pytest.mark.parametrize(("pattern", "where"), SERVED)
def test_the_chart_accepts_a_policy_in_a_namespace_exactly_when_the_operator_serves_it(
    pattern: str, where: str
) -> None:
    policy = control_plane_policy(namespace=where)
    policy["spec"] = {"targets": policy["spec"]["targets"][:1]}  # in its own namespace
    values = {"watch": {"namespaces": [pattern]}, "policies": [policy]}
    if NamespaceScope.of([pattern]).serves(where):
        assert only(render(values), "ImageRefreshPolicy")["metadata"]["namespace"] == where
    else:
        assert "which the operator does not watch" in render_error(values)


def leader_election_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    roles = [
        r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith(LEADER_ELECTION_ROLE)
    ]
    assert len(roles) <= 1
    return list(roles[0]["rules"]) if roles else []


@pytest.mark.parametrize("profile", ["defaults", "two-replicas-all-namespaces"])
def test_leader_election_grants_only_its_lease_by_name_and_create_in_the_release_namespace(
    profile: str,
) -> None:
    objects = render(PROFILES[profile])
    rules = leader_election_rules(objects)
    assert names_granted(rules, "coordination.k8s.io.leases", "get") == {"imagerefresh"}
    assert names_granted(rules, "coordination.k8s.io.leases", "update") == {"imagerefresh"}
    assert names_granted(rules, "coordination.k8s.io.leases", "watch") == {"imagerefresh"}
    assert grants(rules, "coordination.k8s.io.leases", "create")
    for verb in ("list", "patch", "delete"):
        assert not grants(rules, "coordination.k8s.io.leases", verb)
    every_rule = [r for role in of_kind(objects, "Role", None) for r in role["rules"]]
    every_rule += [r for role in of_kind(objects, "ClusterRole") for r in role["rules"]]
    leases = [r for r in every_rule if "leases" in r["resources"]]
    assert leases == rules  # nowhere else, and never cluster-wide


def test_two_replicas_get_a_disruption_budget_keeping_one_and_a_rolling_update() -> None:
    objects = render(PROFILES["two-replicas"])
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    budget = only(objects, "PodDisruptionBudget", "tracebloc")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert not of_kind(render(), "PodDisruptionBudget")  # one replica: nothing to keep


def test_without_leader_election_one_replica_recreated_and_no_lease_access() -> None:
    objects = render(PROFILES["without-leader-election"])
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not [a for a in operator_container(objects)["args"] if a.startswith("--leader")]
    assert leader_election_rules(objects) == []
    refused = render_error({"leaderElection": {"enabled": False}, "replicaCount": 2})
    assert "replicaCount above 1 needs leaderElection.enabled" in refused


# -- node reads (offline evidence) ----------------------------------------------------------


def node_rules(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every rule of every Role and ClusterRole that mentions nodes, with its role's name."""
    return [
        (role["metadata"]["name"], rule)
        for role in of_kind(objects, "Role", None) + of_kind(objects, "ClusterRole")
        for rule in role["rules"]
        if any(resource.split("/")[0] == "nodes" for resource in rule["resources"])
    ]


@pytest.mark.parametrize("profile", sorted(p for p in PROFILES if "offline" not in PROFILES[p]))
def test_without_node_reads_nothing_grants_nodes_and_the_operator_does_not_read_them(
    profile: str,
) -> None:
    objects = render(PROFILES[profile])
    assert node_rules(objects) == []
    args = operator_container(objects)["args"]
    assert not [a for a in args if a.startswith(("--read-nodes", "--node-"))]


@pytest.mark.parametrize("profile", ["node-reads", "node-reads-all-namespaces-uncapped"])
def test_node_reads_grant_only_get_and_list_on_nodes_in_a_cluster_role_of_their_own(
    profile: str,
) -> None:
    objects = render(PROFILES[profile])
    name = "tracebloc-r-imagerefresh-nodes"
    assert node_rules(objects) == [
        (name, {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]})
    ]
    (role,) = [r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"] == name]
    assert len(role["rules"]) == 1  # nothing else rides along cluster-wide
    (binding,) = [
        b for b in of_kind(objects, "ClusterRoleBinding") if b["metadata"]["name"] == name
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": name,
    }
    account = only(objects, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]


def test_node_reads_become_run_options_with_the_kubelets_image_cap() -> None:
    args = operator_container(render(PROFILES["node-reads"]))["args"]
    assert args[args.index("--read-nodes") + 1] == "--node-status-max-images=50"
    with run_command.make_context("run", list(args)) as ctx:
        assert (ctx.params["read_nodes"], ctx.params["node_status_max_images"]) == (True, 50)
    uncapped = operator_container(render(PROFILES["node-reads-all-namespaces-uncapped"]))
    assert "--node-status-max-images=-1" in uncapped["args"]


def test_node_reads_without_rbac_creation_render_the_options_and_no_role() -> None:
    objects = render({"offline": {"readNodes": True}, "rbac": {"create": False}})
    assert node_rules(objects) == []
    assert "--read-nodes" in operator_container(objects)["args"]


# -- watch-fed evidence ---------------------------------------------------------------------------


def workload_and_pod_reads(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(role kind, resource, verb) of every list or watch granted on workloads or pods."""
    return {
        (role["kind"], resource, verb)
        for role in of_kind(objects, "Role") + of_kind(objects, "ClusterRole")
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if resource in WORKLOAD_RESOURCES | {"pods"} and verb in {"list", "watch"}
    }


@pytest.mark.parametrize("profile", ["defaults", "policies", "all-namespaces"])
def test_watch_evidence_is_on_by_default_and_grants_list_and_watch_on_workloads_and_pods(
    profile: str,
) -> None:
    objects = render(PROFILES[profile])
    args = operator_container(objects)["args"]
    assert "--no-watch-evidence" not in args
    with run_command.make_context("run", list(args)) as ctx:
        assert ctx.params["watch_evidence"] is True
    kind = "ClusterRole" if profile == "all-namespaces" else "Role"
    granted = workload_and_pod_reads(objects)
    for resource in WORKLOAD_RESOURCES if profile != "policies" else {"deployments"}:
        assert {(kind, resource, "list"), (kind, resource, "watch")} <= granted, resource
    assert {(kind, "pods", "list"), (kind, "pods", "watch")} <= granted


@pytest.mark.parametrize(
    "profile", sorted(p for p in PROFILES if PROFILES[p].get("watchEvidence") is False)
)
def test_without_watch_evidence_the_flag_is_rendered_and_no_list_or_watch_on_workloads_or_pod_watch(
    profile: str,
) -> None:
    objects = render(PROFILES[profile])
    args = operator_container(objects)["args"]
    assert "--no-watch-evidence" in args
    with run_command.make_context("run", list(args)) as ctx:
        assert ctx.params["watch_evidence"] is False
    # Only the pods' list by label selector, as before watches; nothing on workloads but reads
    # by name and patches.
    assert {verb for _, resource, verb in workload_and_pod_reads(objects)} == {"list"}
    assert {resource for _, resource, _ in workload_and_pod_reads(objects)} == {"pods"}


@pytest.mark.parametrize("profile", ["defaults", "policies", "all-namespaces"])
def test_watch_evidence_off_changes_only_the_flag_and_the_list_and_watch_verbs(
    profile: str,
) -> None:
    def without_reads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for o in objects:
            if o["kind"] == "Deployment":
                args = o["spec"]["template"]["spec"]["containers"][0]["args"]
                args[:] = [a for a in args if a != "--no-watch-evidence"]
            if o["kind"] in {"Role", "ClusterRole"}:
                for rule in o["rules"]:
                    if set(rule["resources"]) & (WORKLOAD_RESOURCES | {"pods"}):
                        rule["verbs"] = [v for v in rule["verbs"] if v not in {"list", "watch"}]
                        rule["verbs"] += ["list"] if rule["resources"] == ["pods"] else []
        return objects

    on = render(PROFILES[profile])
    off = render({**PROFILES[profile], "watchEvidence": False})
    assert without_reads(off) == without_reads(on)


def test_values_without_watch_evidence_as_reuse_values_render_it_off_consistently() -> None:
    # `helm upgrade --reuse-values` from a chart without the value carries none: the operator
    # then runs without watches, and the Roles grant none of the verbs only watches need.
    for values in (PROFILES["defaults"], PROFILES["policies"]):
        assert render({**values, "watchEvidence": None}) == render(
            {**values, "watchEvidence": False}
        )


# -- pre-pull helpers ----------------------------------------------------------------------------

PRE_PULL_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]}
FENCE = "imagerefresh pre-pull fence:"


def fence(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o["kind"] in {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    ]


def pod_writes(objects: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(kind, namespace) of every Role or ClusterRole granting any verb on pods but a read."""
    return [
        (role["kind"], role["metadata"].get("namespace"))
        for role in of_kind(objects, "Role") + of_kind(objects, "ClusterRole")
        for rule in role["rules"]
        if "pods" in rule["resources"] and set(rule["verbs"]) - {"list", "watch"}
    ]


@pytest.mark.parametrize(
    "profile", sorted(p for p in PROFILES if not PROFILES[p].get("prePull", {}).get("enabled"))
)
def test_without_pre_pull_no_fence_no_pod_writes_and_no_flag(profile: str) -> None:
    objects = render(PROFILES[profile])
    assert fence(objects) == []
    assert pod_writes(objects) == []
    assert "--pre-pull-pods" not in operator_container(objects)["args"]


def test_pre_pull_off_renders_the_same_whatever_its_deadline() -> None:
    for values in (PROFILES["defaults"], PROFILES["policies"], PROFILES["all-namespaces"]):
        off = {**values, "prePull": {"enabled": False, "maxDeadlineSeconds": 86400}}
        assert render(off) == render(values)


def test_pre_pull_grants_pod_create_and_delete_in_every_target_namespaces_role_only() -> None:
    objects = render(PROFILES["pre-pull"])
    assert "--pre-pull-pods" in operator_container(objects)["args"]
    for role in operator_roles(objects):
        parts = role["metadata"]["annotations"]["imagerefresh.tracebloc.io/roles"].split(",")
        assert (PRE_PULL_RULE in role["rules"]) == ("target" in parts), role["metadata"]
    assert sorted(pod_writes(objects)) == [
        ("Role", "tracebloc"),
        ("Role", "tracebloc-node-agents"),
    ]
    assert of_kind(objects, "ClusterRole") == []


def test_pre_pull_with_unscoped_cluster_wide_targets_goes_in_the_cluster_role() -> None:
    objects = render(PROFILES["pre-pull-all-namespaces-unscoped"])
    assert pod_writes(objects) == [("ClusterRole", None)]
    (role,) = operator_roles(objects, "ClusterRole")
    assert PRE_PULL_RULE in role["rules"]


def test_pre_pull_fence_admits_only_the_operators_pod_creates_and_deletes_and_denies() -> None:
    objects = render(PROFILES["pre-pull"])
    policy = only(objects, "ValidatingAdmissionPolicy")
    binding = only(objects, "ValidatingAdmissionPolicyBinding")
    name = "tracebloc-r-imagerefresh-pre-pull"
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == name
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"] == {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "DELETE"],
                "resources": ["pods"],
            }
        ]
    }
    assert [c["expression"] for c in spec["matchConditions"]] == [
        "request.userInfo.username == 'system:serviceaccount:tracebloc:r-imagerefresh'"
    ]
    assert "paramKind" not in spec
    for validation in spec["validations"]:
        assert validation["message"].startswith(FENCE + " "), validation
    deadline = [v for v in spec["validations"] if "activeDeadlineSeconds" in v["expression"]]
    assert len(deadline) == 1
    assert "<= 3600" in deadline[0]["expression"]
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}


def test_pre_pull_fence_follows_the_service_account_and_the_deadline_values() -> None:
    objects = render(
        {
            "prePull": {"enabled": True, "maxDeadlineSeconds": 120},
            "serviceAccount": {"create": False, "name": "ops"},
            "rbac": {"create": False},
        },
        namespace="edge",
    )
    # The fence is rendered with the value even when RBAC is granted outside the chart.
    assert pod_writes(objects) == []
    spec = only(objects, "ValidatingAdmissionPolicy")["spec"]
    assert spec["matchConditions"][0]["expression"].endswith("'system:serviceaccount:edge:ops'")
    (deadline,) = [v for v in spec["validations"] if "activeDeadlineSeconds" in v["expression"]]
    assert "<= 120" in deadline["expression"]
    assert "from 1 to 120" in deadline["message"]
    # The operator is told the same limit: its helpers never carry a longer deadline.
    assert "--pre-pull-max-deadline=120" in operator_container(objects)["args"]


def security_rules(objects: list[dict[str, Any]]) -> str:
    validations = only(objects, "ValidatingAdmissionPolicy")["spec"]["validations"]
    return "\n".join(v["expression"] for v in validations if "runAsUser" in v["expression"])


@pytest.mark.parametrize(
    ("user", "flag", "rules"),
    [
        (
            {},
            "65534:65534",
            [".?runAsUser.orValue(0) == 65534", ".?runAsGroup.orValue(0) == 65534"],
        ),
        (
            {"runAsUser": 1000, "runAsGroup": None},
            "1000",
            [".?runAsUser.orValue(0) == 1000", ".?runAsGroup.orValue(-1) == -1"],
        ),
        (
            {"runAsUser": None, "runAsGroup": None},
            "platform",
            [".?runAsUser.orValue(1) >= 1", ".?runAsGroup.orValue(1) >= 1"],
        ),
    ],
)
def test_the_helpers_user_reaches_the_operator_and_the_fence_alike(
    user: dict[str, Any], flag: str, rules: list[str]
) -> None:
    """A fixed user is admitted exactly; none (null) admits the non-root user a platform
    assigns — the operator's flag and the fence's rule come from the same two values."""
    objects = render({"prePull": {"enabled": True, **user}})
    assert f"--pre-pull-user={flag}" in operator_container(objects)["args"]
    for rule in rules:
        assert rule in security_rules(objects)


def test_a_helper_group_without_a_user_is_refused_at_install() -> None:
    error = render_error({"prePull": {"enabled": True, "runAsUser": None, "runAsGroup": 5}})
    assert "prePull.runAsGroup needs prePull.runAsUser" in error


def test_the_fence_admits_the_clusters_default_priority_class_by_name_only() -> None:
    def rule(values: dict[str, Any]) -> str:
        validations = only(render(values), "ValidatingAdmissionPolicy")["spec"]["validations"]
        (found,) = [v["expression"] for v in validations if "priorityClassName" in v["expression"]]
        return found

    assert rule({"prePull": {"enabled": True}}).endswith("in ['', '']")
    named = {"prePull": {"enabled": True, "defaultPriorityClassName": "edge-default"}}
    assert rule(named).endswith("in ['', 'edge-default']")


# -- invariants over every profile ----------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_no_two_rendered_objects_share_kind_namespace_and_name(profile: str) -> None:
    objects = render(PROFILES[profile])
    keys = Counter(
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects
    )
    assert [k for k, n in keys.items() if n > 1] == []


def test_a_pair_collapsed_onto_the_release_namespace_yields_one_merged_role() -> None:
    objects = render(PROFILES["pair-collapsed-onto-release-namespace"])
    (role,) = operator_roles(objects)
    rules = role["rules"]
    assert names_granted(rules, "apps.daemonsets", "patch") == {"resource-monitor"}
    assert names_granted(rules, "apps.deployments", "patch") == {"jobs-manager"}
    assert grants(rules, "images.tracebloc.io.imagerefreshpolicies", "watch")


def test_two_releases_reaching_one_target_namespace_use_distinct_role_names() -> None:
    one = render(PROFILES["cross-namespace-pair"], namespace="tracebloc")
    other = render(
        {
            "allowNamespacePairs": [
                {"policyNamespace": "edge-b", "targetNamespace": "tracebloc-node-agents"}
            ]
        },
        namespace="edge-b",
    )
    names = [
        only(objects, "Role", "tracebloc-node-agents")["metadata"]["name"]
        for objects in (one, other)
    ]
    assert len(set(names)) == 2


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_rbac_is_least_privilege_in_every_profile(profile: str) -> None:
    values = PROFILES[profile]
    objects = render(values)
    roles = of_kind(objects, "Role") + of_kind(objects, "ClusterRole")
    account = only(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    sa = {"name": account, "namespace": only(objects, "Deployment")["metadata"]["namespace"]}
    for role in roles:
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule[field], rule
            resources = set(rule["resources"])
            verbs = set(rule["verbs"])
            if resources & WORKLOAD_RESOURCES:
                if values.get("watchEvidence", True):
                    assert verbs == WORKLOAD_VERBS, rule
                else:
                    assert verbs == WORKLOAD_VERBS_WITHOUT_WATCHES, rule
            if resources & {"pods", "serviceaccounts", "secrets"}:
                if verbs == {"create", "delete"}:
                    # Pre-pull helpers, only when asked for, and never beside anything else.
                    assert values.get("prePull", {}).get("enabled") is True, rule
                    assert resources == {"pods"}, rule
                elif resources == {"pods"}:
                    watched = values.get("watchEvidence", True)
                    assert verbs == ({"list", "watch"} if watched else {"list"}), rule
                else:
                    assert verbs == {"get"}, rule
            if "secrets" in resources:
                # By name only, as listed in values; never list/watch, never cluster-wide.
                assert role["kind"] == "Role", rule
                assert verbs == {"get"}, rule
                names = values["rbac"]["pullSecrets"]["names"]
                assert sorted(rule["resourceNames"]) == sorted(names), rule
            if "events" in resources:
                assert verbs == {"create"}, rule
            if "imagerefreshpolicies" in resources:
                # Read-only: kopf stores nothing on the policies it watches for the operator.
                assert verbs == {"get", "list", "watch"}, rule
            if "imagerefreshpolicies/status" in resources:
                assert verbs == {"update"}, rule
            if "nodes" in resources:
                # Offline evidence, only when asked for: read-only, and nothing else with it.
                assert values.get("offline", {}).get("readNodes") is True, rule
                assert (role["kind"], resources, verbs) == (
                    "ClusterRole",
                    {"nodes"},
                    {"get", "list"},
                )
            assert not resources & {"customresourcedefinitions", "namespaces"}, rule
    watch = values.get("watch", {})
    if not watch.get("allNamespaces") and not any(map(is_pattern, watch.get("namespaces", []))):
        # Then only node reads, when asked for, are cluster-wide.
        reads = values.get("offline", {}).get("readNodes")
        allowed = {"tracebloc-r-imagerefresh-nodes"} if reads else set()
        for kind in ("ClusterRole", "ClusterRoleBinding"):
            assert {o["metadata"]["name"] for o in of_kind(objects, kind)} <= allowed
    for binding in of_kind(objects, "RoleBinding") + of_kind(objects, "ClusterRoleBinding"):
        namespace = binding["metadata"].get("namespace")
        kind = "Role" if namespace else "ClusterRole"
        target = [
            r
            for r in of_kind(objects, kind, namespace)
            if r["metadata"]["name"] == binding["roleRef"]["name"]
        ]
        assert len(target) == 1, binding
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}
        ]


# -- monitoring ---------------------------------------------------------------------------------


def _exported_metric_names() -> set[str]:
    metrics = Metrics(CollectorRegistry())
    names = set()
    for family in metrics.registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    # Counters are exported with _total; families without labels yet have no samples.
    names.update(f"{name}_total" for name in list(names))
    return names


def test_service_monitor_scrapes_the_operators_metrics_port_with_its_own_labels() -> None:
    objects = render(PROFILES["monitoring"])
    service = only(objects, "Service")
    monitor = only(objects, "ServiceMonitor")
    pod = only(objects, "Deployment")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True


def test_prometheus_rule_alerts_on_frozen_locked_rate_limited_and_degraded() -> None:
    rule = only(render(PROFILES["monitoring"]), "PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {
        "ImageRefreshTargetFrozen",
        "ImageRefreshTargetLocked",
        "ImageRefreshRateLimited",
        "ImageRefreshDegraded",
    } <= set(alerts)
    assert "imagerefresh_target_frozen" in alerts["ImageRefreshTargetFrozen"]["expr"]
    assert alerts["ImageRefreshTargetFrozen"]["expr"].endswith("== 1")
    assert "imagerefresh_target_locked" in alerts["ImageRefreshTargetLocked"]["expr"]
    assert "imagerefresh_ticks_total" in alerts["ImageRefreshDegraded"]["expr"]
    exported = _exported_metric_names()
    for name, alert in alerts.items():
        used = set(re.findall(r"\b(?:imagerefresh|process)_\w+", alert["expr"]))
        assert used, name
        assert used <= exported, (name, used - exported)
    (per_policy,) = (g for g in rule["spec"]["groups"] if g["name"] == "imagerefresh")
    for alert in per_policy["rules"]:
        # Prometheus templates survive Helm's: the annotation still holds {{ $labels... }}.
        assert "{{ $labels." in alert["annotations"]["summary"]


def test_every_alert_links_its_runbook_section_of_the_troubleshooting_docs() -> None:
    rule = only(render(PROFILES["monitoring"]), "PrometheusRule")
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    base = "https://github.com/tracebloc/imagerefresh/blob/main/docs/troubleshooting.md#"
    sections = anchors(DOCS / "troubleshooting.md")
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        assert url.startswith(base), (alert["alert"], url)
        assert url.removeprefix(base) in sections, (alert["alert"], url)


def test_runbook_urls_follow_the_base_url_value_and_go_when_it_is_empty() -> None:
    def runbooks(base: str) -> set[str | None]:
        values = {"metrics": {"prometheusRule": {"enabled": True, "runbookBaseURL": base}}}
        rule = only(render(values), "PrometheusRule")
        return {
            r["annotations"].get("runbook_url")
            for group in rule["spec"]["groups"]
            for r in group["rules"]
        }

    mirrored = runbooks("https://docs.internal.example/imagerefresh/0.1.0/")
    assert "https://docs.internal.example/imagerefresh/0.1.0/troubleshooting.md#locked" in mirrored
    assert all(url and url.startswith("https://docs.internal.example/") for url in mirrored)
    assert runbooks("") == {None}


# Series a policy owns: forget_policy removes them, and they vanish with the operator.
PER_POLICY_SERIES = re.compile(
    r"imagerefresh_(target_|policy_|ticks|tick_|last_tick|refreshes|status_writes|ratelimit)"
)


def test_operator_alerts_read_only_this_releases_heartbeat_never_a_policys_series() -> None:
    rule = only(render(PROFILES["monitoring"]), "PrometheusRule")
    (group,) = (g for g in rule["spec"]["groups"] if g["name"] == "imagerefresh-operator")
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "ImageRefreshOperatorDown",
        "ImageRefreshOperatorRestarting",
        "ImageRefreshNoLeader",
    }
    assert alerts["ImageRefreshOperatorDown"]["expr"].startswith("absent(imagerefresh_build_info{")
    for name, alert in alerts.items():
        assert not PER_POLICY_SERIES.search(alert["expr"]), name
        selectors = re.findall(r"\b(?:imagerefresh|process)_\w+\{([^}]*)\}", alert["expr"])
        assert selectors, name
        assert set(selectors) == {'job="r-imagerefresh-metrics", namespace="tracebloc"'}, name


def test_operator_alerts_follow_the_operator_selector_severity_and_for_values() -> None:
    values = {
        "metrics": {
            "prometheusRule": {
                "enabled": True,
                "operatorSelector": 'job="imagerefresh"',
                "for": {"operatorDown": "2m", "noLeader": "10m"},
                "severity": {"operatorDown": "page", "locked": "page"},
            }
        }
    }
    rule = only(render(values), "PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    down = alerts["ImageRefreshOperatorDown"]
    assert down["expr"] == 'absent(imagerefresh_build_info{job="imagerefresh"})'
    assert (down["for"], down["labels"]["severity"]) == ("2m", "page")
    assert alerts["ImageRefreshNoLeader"]["for"] == "10m"
    assert alerts["ImageRefreshNoLeader"]["labels"]["severity"] == "critical"
    assert alerts["ImageRefreshTargetLocked"]["labels"]["severity"] == "page"
    assert alerts["ImageRefreshTargetFrozen"]["labels"]["severity"] == "warning"


def test_rbac_service_account_and_crd_can_be_left_to_the_cluster_admin() -> None:
    objects = render(PROFILES["rbac-service-account-and-crd-managed-elsewhere"])
    assert {o["kind"] for o in objects} == {"Deployment"}
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "imagerefresh-operator"


def test_monitoring_is_off_by_default() -> None:
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"Service", "ServiceMonitor", "PrometheusRule"}


# -- values.schema.json and the chart's own checks ---------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bogus": True}, "additional properties 'bogus' not allowed"),
        ({"crds": {"enabled": "yes"}}, "/crds/enabled"),
        ({"crds": {"install": True}}, "additional properties 'install' not allowed"),
        ({"replicaCount": "1"}, "/replicaCount"),
        ({"replicaCount": 3}, "/replicaCount"),
        ({"leaderElection": {"id": "Not_A_Name"}}, "/leaderElection/id"),
        # kopf peering is gone: leaderElection is how replicas share the work.
        ({"peering": {"enabled": True}}, "additional properties 'peering' not allowed"),
        ({"ports": {"metrics": -1, "liveness": 8080}}, "/ports/metrics"),
        ({"ports": {"metrics": 70000, "liveness": 8080}}, "/ports/metrics"),
        ({"image": {"repository": "r.example/op", "digest": "sha256:abc"}}, "/image/digest"),
        ({"image": {"repository": "r.example/op:1.0"}}, "/image/repository"),
        ({"watch": {"namespaces": ["Edge_*"]}}, "/watch/namespaces/0"),
        ({"watch": {"namespaces": ["edge-[0-9]"]}}, "/watch/namespaces/0"),
        ({"watch": {"allNamespaces": "yes"}}, "/watch/allNamespaces"),
        ({"resources": {"cpu": "0", "memory": "128Mi"}}, "/resources/cpu"),
        ({"resources": {"cpu": "100m", "memory": "lots"}}, "/resources/memory"),
        ({"resources": {"cpu": "100m", "memory": "128Mi", "gpu": 1}}, "/resources"),
        ({"runAsUser": 0}, "/runAsUser"),
        ({"logLevel": "chatty"}, "/logLevel"),
        ({"allowNamespacePairs": ["tracebloc=agents"]}, "/allowNamespacePairs/0"),
        ({"insecureRegistries": ["http://mirror"]}, "/insecureRegistries/0"),
        ({"imagePullSecrets": [{"name": "regcred"}]}, "/imagePullSecrets/0"),
        ({"rbac": {"pullSecrets": {"names": "regcred"}}}, "/rbac/pullSecrets/names"),
        # `read` is gone: Secrets are read only when named.
        ({"rbac": {"pullSecrets": {"read": True}}}, "additional properties 'read' not allowed"),
        (
            {
                "policies": [
                    {
                        "name": "p",
                        "spec": {
                            "targets": [
                                {"kind": "Job", "name": "x", "containers": [container("a", "b:c")]}
                            ]
                        },
                    }
                ]
            },
            "/policies/0/spec/targets/0/kind",
        ),
        ({"prePull": {"enabled": "yes"}}, "/prePull/enabled"),
        ({"prePull": {"maxDeadlineSeconds": 59}}, "/prePull/maxDeadlineSeconds"),
        ({"prePull": {"maxDeadlineSeconds": 86401}}, "/prePull/maxDeadlineSeconds"),
        ({"prePull": {"maxDeadlineSeconds": 600.5}}, "/prePull/maxDeadlineSeconds"),
        ({"prePull": {"runAsUser": 0}}, "/prePull/runAsUser"),
        ({"prePull": {"runAsGroup": "65534"}}, "/prePull/runAsGroup"),
        (
            {"prePull": {"defaultPriorityClassName": "Not A Name"}},
            "/prePull/defaultPriorityClassName",
        ),
        (
            {"prePull": {"defaultPriorityClassName": "x' || true || '"}},
            "/prePull/defaultPriorityClassName",
        ),
        ({"prePull": {"namespaces": ["x"]}}, "additional properties 'namespaces' not allowed"),
        ({"offline": {"readNodes": "yes"}}, "/offline/readNodes"),
        ({"watchEvidence": "false"}, "/watchEvidence"),
        ({"offline": {"nodeStatusMaxImages": -2}}, "/offline/nodeStatusMaxImages"),
        ({"offline": {"nodeStatusMaxImages": 1.5}}, "/offline/nodeStatusMaxImages"),
        ({"offline": {"watchNodes": True}}, "additional properties 'watchNodes' not allowed"),
        (
            {"metrics": {"prometheusRule": {"for": {"notOfflineReady": "an hour"}}}},
            "/metrics/prometheusRule/for/notOfflineReady",
        ),
        ({"policies": [{"name": "p", "spec": {"targets": []}}]}, "/policies/0/spec/targets"),
        ({"policies": [{"name": "p", "spec": {}, "labels": {}}]}, "/policies/0"),
        (
            {"metrics": {"serviceMonitor": {"interval": "often"}}},
            "/metrics/serviceMonitor/interval",
        ),
        # A selector is the inside of {...}: braces would break every operator alert's expr.
        (
            {"metrics": {"prometheusRule": {"operatorSelector": '{job="x"}'}}},
            "/metrics/prometheusRule/operatorSelector",
        ),
        (
            {"metrics": {"prometheusRule": {"for": {"operatorDown": "soon"}}}},
            "/metrics/prometheusRule/for/operatorDown",
        ),
        (
            {"metrics": {"prometheusRule": {"severity": {"noLeader": ""}}}},
            "/metrics/prometheusRule/severity/noLeader",
        ),
        (
            {"metrics": {"prometheusRule": {"restartsAtLeast": 0}}},
            "/metrics/prometheusRule/restartsAtLeast",
        ),
        # A runbook base is a URL: a template brace or a space would break every annotation.
        (
            {"metrics": {"prometheusRule": {"runbookBaseURL": "docs/{{ .x }}"}}},
            "/metrics/prometheusRule/runbookBaseURL",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_values_schema_rejects_bad_values_with_a_message(
    values: dict[str, Any], message: str
) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert message in error


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"policies": [control_plane_policy(namespace="elsewhere")]},
            "namespace elsewhere, which the operator does not watch",
        ),
        (
            {"policies": [control_plane_policy()]},
            "no allowNamespacePairs entry lets namespace tracebloc reach tracebloc-node-agents",
        ),
        (
            {**CONTROL_PLANE, "policies": [control_plane_policy(), control_plane_policy()]},
            "tracebloc/control-plane is declared twice",
        ),
        ({"ports": {"metrics": 8080, "liveness": 8080}}, "must differ"),
        ({"watch": {"namespaces": ["a"], "allNamespaces": True}}, "exclude each other"),
    ],
    ids=[
        "policy-outside-watched",
        "cross-namespace-without-pair",
        "duplicate-policy",
        "same-ports",
        "namespaces-and-all",
    ],
)
def test_the_chart_refuses_configurations_the_operator_would_refuse(
    values: dict[str, Any], message: str
) -> None:
    assert message in render_error(values)


def test_helm_lint_reports_schema_violations() -> None:
    result = helm("lint", str(CHART), "--kube-version", KUBE_VERSION, values={"replicaCount": -1})
    assert result.returncode != 0
    assert "/replicaCount" in result.stdout + result.stderr
