"""The chart and its pre-pull helpers under an EMULATION of OpenShift's default security context
constraint, restricted-v2, on the real API server. OpenShift cannot run here; what these tests
reproduce is the part of restricted-v2 that decides whether a pod starts at all (OpenShift's
documentation, "Managing security context constraints"): each namespace is annotated with a
user range (``openshift.io/sa.scc.uid-range``) and an SELinux level (``openshift.io/sa.scc.mcs``);
a pod that names no user is given the range's first one (on each container, with an fsGroup
and the level on the pod), and a pod whose user or fsGroup lies outside the range, or that asks
for the host's network, is refused with a message shaped like OpenShift's.

The assignment is a MutatingAdmissionPolicy and the refusal a ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1), bound to the test's namespace only. Like OpenShift's SCC
admission plugin they act on every pod created in it, the ReplicaSet controller's and the
operator's alike, and the mutation happens before any validating policy — the chart's own
fence included — sees the pod. Not emulated: which SCCs a user may use, supplemental groups,
capabilities and volume types (the chart's pods ask for none of them).

Proven here: the chart's operator pod (which names no user) is admitted and given the
namespace's user, where a fixed user (the chart's former 65532) is refused; the operator's
helper with ``--pre-pull-user platform`` is admitted and given the namespace's user past the
chart's fence, and one with the default fixed user is refused with the values that fix it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from imagerefresh.kube.api import KubeApi
from imagerefresh.kube.pods import HelperPodApi, HelperRefused
from imagerefresh.models import WorkloadKind
from imagerefresh.planner import TargetKey
from imagerefresh.planner.actions import HelperPodCreate
from imagerefresh.planner.helperpod import DEFAULT_RUN_AS, Placement, RunAs, helper_manifest
from imagerefresh.reference import parse

from support.accounts import service_account_kubeconfig
from support.cluster_env import Cluster, eventually
from support.guarded import unguarded_pod
from support.helm_env import (
    CHART,
    CRD_FROM_THE_TESTS,
    KUBE_VERSION,
    KWOK_SCHEDULING,
    helm,
    only,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crd_installed")]

RELEASE = "os"
FULLNAME = f"{RELEASE}-imagerefresh"
FIRST_UID, UIDS = 1_000_650_000, 10_000
LEVEL = "s0:c26,c5"
ANNOTATIONS = {
    "openshift.io/sa.scc.uid-range": f"{FIRST_UID}/{UIDS}",
    "openshift.io/sa.scc.supplemental-groups": f"{FIRST_UID}/{UIDS}",
    "openshift.io/sa.scc.mcs": LEVEL,
}
EMULATED = "imagerefresh.test/openshift-emulation"
DIGEST = "sha256:" + "4e" * 32
IMAGE = f"registry.example.test:5000/tracebloc/resource-monitor@{DIGEST}"
NODE = "kwok-node-0"
SCC = "unable to validate against any security context constraint"


def emulation(name: str, selector: dict[str, Any]) -> list[dict[str, Any]]:
    """restricted-v2's user, fsGroup and SELinux assignment and its range check, as admission
    policies bound to the namespaces ``selector`` picks."""
    api = "admissionregistration.k8s.io/v1"
    pods = {
        "resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
             "resources": ["pods"]}
        ]
    }  # fmt: skip
    annotation = "namespaceObject.metadata.annotations['openshift.io/sa.scc.{}']"
    variables = [
        {"name": "first", "expression": f"int({annotation.format('uid-range')}.split('/')[0])"},
        {"name": "size", "expression": f"int({annotation.format('uid-range')}.split('/')[1])"},
        {"name": "level", "expression": annotation.format("mcs")},
        {
            "name": "podUser",
            "expression": "object.spec.?securityContext.?runAsUser.orValue(variables.first)",
        },
    ]
    assign = """Object{spec: Object.spec{
        securityContext: Object.spec.securityContext{
          fsGroup: object.spec.?securityContext.?fsGroup.orValue(variables.first),
          seLinuxOptions: Object.spec.securityContext.seLinuxOptions{
            level: object.spec.?securityContext.?seLinuxOptions.?level.orValue(variables.level)
          }
        },
        containers: object.spec.containers.map(c, Object.spec.containers{
          name: c.name,
          securityContext: Object.spec.containers.securityContext{
            runAsUser: c.?securityContext.?runAsUser.orValue(variables.podUser)
          }
        })
      }}"""
    outside = (
        "object.spec.containers.map(c, c.?securityContext.?runAsUser.orValue(variables.podUser))"
        ".filter(u, u < variables.first || u >= variables.first + variables.size)"
    )
    ranges = (
        "'[' + string(variables.first) + ', ' + string(variables.first + variables.size - 1) + ']'"
    )
    head = f'\'{SCC}: [provider "restricted-v2" (emulated): Forbidden: '
    binding = {"matchResources": {"namespaceSelector": {"matchLabels": selector}}}
    return [
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": pods,
                "variables": variables,
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {"expression": assign},
                    }
                ],
            },
        },
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, **binding},
        },
        {
            "apiVersion": api,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": pods,
                "variables": variables,
                "validations": [
                    {
                        "expression": f"size({outside}) == 0",
                        "messageExpression": (
                            f"{head}spec.containers[].securityContext.runAsUser: Invalid value: '"
                            f" + string({outside}[0]) + ': must be in the ranges: ' + {ranges}"
                            " + ']'"
                        ),
                    },
                    {
                        "expression": (
                            "object.spec.?securityContext.?fsGroup.orValue(variables.first) >= "
                            "variables.first && object.spec.?securityContext.?fsGroup.orValue("
                            "variables.first) < variables.first + variables.size"
                        ),
                        "messageExpression": (
                            f"{head}spec.securityContext.fsGroup: Invalid value: ' + "
                            "string(object.spec.securityContext.fsGroup) + ': must be in the "
                            f"ranges: ' + {ranges} + ']'"
                        ),
                    },
                    {
                        "expression": "!object.spec.?hostNetwork.orValue(false)",
                        "messageExpression": (
                            f"{head}spec.securityContext.hostNetwork: Invalid value: true: Host "
                            "network is not allowed to be used]'"
                        ),
                    },
                ],
            },
        },
        {
            "apiVersion": api,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"], **binding},
        },
    ]


def emulation_active(cluster: Cluster, namespace: str) -> bool | None:
    """Whether both policies act on ``namespace`` yet (a new binding takes a moment to reach
    the API server's admission): a pod naming no user is given the first of the range, and
    one naming another user is refused — asked with server-side dry runs, which admit fully."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": IMAGE}], "nodeName": NODE},
    }

    def dry_run(pod: dict[str, Any]) -> Any:
        return cluster.kubectl(
            "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-",
            input=json.dumps(pod), check=False,
        )  # fmt: skip

    given = dry_run(probe)
    if given.returncode != 0:
        return None
    user = json.loads(given.stdout)["spec"]["containers"][0].get("securityContext", {})
    probe["spec"]["securityContext"] = {"runAsUser": 1}
    refused = dry_run(probe)
    return (user.get("runAsUser") == FIRST_UID and SCC in refused.stderr) or None


@dataclass
class OpenShiftLike:
    cluster: Cluster
    namespace: str
    kubeconfig: Path
    owner: dict[str, Any]

    def helper(self, run_as: RunAs) -> HelperPodCreate:
        placement = Placement.from_api(self.owner)
        assert placement is not None
        manifest = helper_manifest(
            self.namespace, placement, NODE, [IMAGE], timedelta(minutes=10), run_as=run_as
        )
        key = TargetKey(WorkloadKind.DAEMONSET, self.namespace, "agent")
        return HelperPodCreate(key, NODE, manifest, frozenset({parse(IMAGE).repository}))


@pytest.fixture(scope="module")
def openshift_like(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenShiftLike]:
    """A namespace as OpenShift annotates one, under the emulation, with the chart installed as
    docs/install.md says for OpenShift (no users anywhere, the helpers' too)."""
    suffix = secrets.token_hex(3)
    namespace, name = f"t-openshift-{suffix}", f"imagerefresh-test-restricted-v2-{suffix}"
    objects = emulation(name, {EMULATED: suffix})
    cluster.apply(*objects)
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {EMULATED: suffix},
                "annotations": ANNOTATIONS,
            },
        }
    )
    try:
        eventually(
            lambda: cluster.get("serviceaccount", "default", "-n", namespace),
            timeout=30,
            what=f"ServiceAccount default in {namespace}",
        )
        eventually(
            lambda: emulation_active(cluster, namespace),
            timeout=30,
            what="the emulated restricted-v2 acting on the namespace",
        )
        values = {
            **KWOK_SCHEDULING,
            **CRD_FROM_THE_TESTS,
            "prePull": {"enabled": True, "runAsUser": None, "runAsGroup": None},
        }
        installed = helm(
            "install", RELEASE, str(CHART), "--namespace", namespace, "--wait",
            "--timeout", "90s", values=values, env=cluster.env,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        cluster.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent"},
                "spec": {
                    "selector": {"matchLabels": {"app": "agent"}},
                    "template": {
                        "metadata": {"labels": {"app": "agent"}},
                        "spec": {
                            "nodeSelector": {"imagerefresh.test/no-such-node": "true"},
                            "containers": [{"name": "agent", "image": IMAGE}],
                        },
                    },
                },
            },
            namespace=namespace,
        )
        owner = cluster.get("daemonset", "agent", "-n", namespace)
        kubeconfig = service_account_kubeconfig(
            cluster, namespace, FULLNAME, tmp_path_factory.mktemp("openshift") / "operator"
        )
        yield OpenShiftLike(cluster, namespace, kubeconfig, owner)
    finally:
        helm("uninstall", RELEASE, "--namespace", namespace, env=cluster.env)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
        for obj in objects:
            cluster.kubectl("delete", obj["kind"], name, "--ignore-not-found")


def test_the_charts_operator_pod_names_no_user_and_is_given_the_namespaces(
    openshift_like: OpenShiftLike,
) -> None:
    cluster, ns = openshift_like.cluster, openshift_like.namespace
    (pod,) = cluster.get("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    deployment = cluster.get("deployment", FULLNAME, "-n", ns)
    rendered = deployment["spec"]["template"]["spec"]
    assert "runAsUser" not in rendered["securityContext"]
    assert "fsGroup" not in rendered["securityContext"]
    assert "runAsUser" not in rendered["containers"][0]["securityContext"]
    # What the emulated restricted-v2 assigned, as OpenShift would.
    assert pod["spec"]["containers"][0]["securityContext"]["runAsUser"] == FIRST_UID
    assert pod["spec"]["securityContext"]["fsGroup"] == FIRST_UID
    assert pod["spec"]["securityContext"]["seLinuxOptions"] == {"level": LEVEL}


def test_a_fixed_operator_user_outside_the_namespaces_range_is_refused(
    openshift_like: OpenShiftLike,
) -> None:
    """Why the chart renders no user: the one it used to fix (65532) is refused here."""
    cluster, ns = openshift_like.cluster, openshift_like.namespace
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", ns, "--kube-version", KUBE_VERSION,
        values={**KWOK_SCHEDULING, "runAsUser": 65532, "runAsGroup": 65532},
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    template = only(rendered.objects, "Deployment")["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fixed-user"}, **template}
    pod["metadata"] = {"name": "fixed-user", "labels": template["metadata"]["labels"]}
    refused = cluster.kubectl(
        "create", "--dry-run=server", "-n", ns, "-f", "-", input=json.dumps(pod), check=False
    )
    assert refused.returncode != 0
    assert SCC in refused.stderr, refused.stderr
    assert f"Invalid value: 65532: must be in the ranges: [{FIRST_UID}, " in refused.stderr


def test_a_helper_that_names_no_user_passes_the_fence_with_the_user_the_platform_gave_it(
    openshift_like: OpenShiftLike,
) -> None:
    cluster, ns = openshift_like.cluster, openshift_like.namespace
    pods = HelperPodApi(KubeApi.from_environment(str(openshift_like.kubeconfig)))
    create = openshift_like.helper(RunAs(None, None))
    assert "runAsUser" not in create.manifest["spec"]["securityContext"]
    pods.create(unguarded_pod(create))
    name = create.manifest["metadata"]["name"]
    stored = cluster.get("pod", name, "-n", ns)["spec"]
    assert stored["containers"][0]["securityContext"]["runAsUser"] == FIRST_UID
    assert stored["securityContext"]["fsGroup"] == FIRST_UID
    assert stored["securityContext"]["seLinuxOptions"] == {"level": LEVEL}
    cluster.kubectl("delete", "pod", name, "-n", ns, "--wait=false")


def test_a_helper_with_a_fixed_user_is_refused_and_the_operator_names_the_values_to_change(
    openshift_like: OpenShiftLike,
) -> None:
    pods = HelperPodApi(KubeApi.from_environment(str(openshift_like.kubeconfig)))
    create = openshift_like.helper(DEFAULT_RUN_AS)
    with pytest.raises(HelperRefused) as refused:
        pods.create(unguarded_pod(create))
    said = str(refused.value)
    assert "OpenShift's security context constraints refused the helper pod" in said, said
    assert f"Invalid value: 65534: must be in the ranges: [{FIRST_UID}, " in said, said
    assert "prePull.runAsUser and prePull.runAsGroup to null" in said, said
    ns = openshift_like.namespace
    assert (
        openshift_like.cluster.get("pods", "-n", ns, "-l", "images.tracebloc.io/pre-pull")["items"]
        == []
    )
