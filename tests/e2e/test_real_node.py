"""The operator (``imagerefresh run``) with pods on the real node: a kubelet with containerd.

What kwok only pretends — pulls, the image IDs a runtime reports, a build that crashes, a probe
that fails, and above all pods restarting while the registry is gone — is shown here by the
real parts. Every verdict is read from the API server (pod status as the kubelet wrote it) and
from the operator's status and events; nothing dials the node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster_env import Cluster, eventually
from support.operator_env import Operator, running_operator
from support.realnode_env import CRASH, SLEEP, RealNode, waiting_reason
from support.registry_env import ImagePusher, RegistryServer, free_port
from support.scenario import (
    condition,
    event_messages,
    event_reasons,
    images,
    policy,
    settle,
    target,
    target_status,
)

pytestmark = pytest.mark.cluster

IMAGEREFRESH = str(Path(sys.executable).with_name("imagerefresh"))


@pytest.fixture
def node_operator(crd_installed: Cluster, registry: str, tmp_path: Path) -> Iterator[Operator]:
    with running_operator(crd_installed, registry, tmp_path / "operator.log") as running:
        yield running


def image_id(pod: dict[str, Any]) -> str:
    statuses = pod["status"].get("containerStatuses", [])
    return str(statuses[0].get("imageID", "")) if statuses else ""


def test_the_real_node_is_a_ready_kubelet_on_containerd_2_that_only_opted_in_pods_reach(
    cluster: Cluster, real_node: RealNode, namespace: str
) -> None:
    node = cluster.get("node", real_node.name)
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.37.2"
    assert info["containerRuntimeVersion"].startswith("containerd://2.")
    assert {"key": "imagerefresh.test/real-node", "value": "true", "effect": "NoSchedule"} in node[
        "spec"
    ]["taints"]
    # A DaemonSet that tolerates only kwok's taint runs on the kwok nodes, not here.
    kwok_nodes = cluster.get("nodes", "-l", "type=kwok")["items"]
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
                        "containers": [{"name": "agent", "image": "example.test/agent:1"}],
                        "tolerations": [
                            {
                                "key": "kwok.x-k8s.io/node",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                            }
                        ],
                    },
                },
            },
        },
        namespace=namespace,
    )
    eventually(
        lambda: (
            cluster.get("daemonset", "agent", "-n", namespace)["status"].get(
                "desiredNumberScheduled"
            )
            == len(kwok_nodes)
        ),
        timeout=30,
        what="the DaemonSet counting the kwok nodes only",
    )


def test_pinned_pods_restart_with_the_registry_stopped_and_a_tag_on_always_does_not(
    crd_installed: Cluster,
    registry: str,
    cluster: Cluster,
    real_node: RealNode,
    policy_namespace: str,
    tmp_path: Path,
) -> None:
    ns = policy_namespace
    (tmp_path / "registry").mkdir()
    own = RegistryServer(tmp_path / "registry", free_port())
    own.start()
    try:
        real_node.trust(own.host)
        pusher = ImagePusher(own.host)
        first = pusher.push(f"{ns}/app", "prod", seed="offline-1", entrypoint=SLEEP)
        tag = f"{own.host}/{ns}/app:prod"
        cluster.apply(
            real_node.deployment("pinned", tag),
            real_node.deployment("always", tag, pull_policy="Always"),
            namespace=ns,
        )
        real_node.running(ns, "pinned")
        real_node.running(ns, "always")
        # The only operator here: a second one, not told this registry speaks plain HTTP, would
        # write its errors into the same status.
        with running_operator(
            cluster,
            registry,
            tmp_path / "own-operator.log",
            extra_args=("--insecure-registry", own.host),
        ) as operator:
            # Judged as it settles: this test is about the restart, not the health window.
            cluster.apply(
                policy("control-plane", target("pinned", app=tag), healthyFor="0s"), namespace=ns
            )
            operator.wait_first_tick(ns, "control-plane")
            adopted = settle(operator, cluster, ns, "pinned")
            assert adopted["containers"][0]["running"] == [first.digest]
            assert images(cluster, ns, "pinned") == {"app": tag}  # adopted: nothing patched

            second = pusher.push(f"{ns}/app", "prod", seed="offline-2", entrypoint=SLEEP)
            operator.tick(ns, "control-plane")
            pinned = f"{own.host}/{ns}/app@{second.digest}"
            assert images(cluster, ns, "pinned") == {"app": pinned}
            before = real_node.running(ns, "pinned")
            assert image_id(before[0]).endswith(f"@{second.digest}")
            settled = settle(operator, cluster, ns, "pinned")
            # What the restart below proves, the operator reported before the registry went.
            assert settled["containers"][0]["offline"] == {
                "ready": True,
                "reason": "every pod would restart from its node's cache",
                "nodes": [],
            }
        pusher.close()
    finally:
        own.stop()  # the real registry process: nothing answers on its port any more

    old = {
        p["metadata"]["uid"] for p in real_node.pods(ns, "pinned") + real_node.pods(ns, "always")
    }
    cluster.kubectl("delete", "pods", "-n", ns, "--all", "--grace-period=0", "--wait=true")
    real_node.restart_containerd()

    back = real_node.running(ns, "pinned")
    assert back[0]["metadata"]["uid"] not in old
    assert back[0]["spec"]["containers"][0]["image"] == pinned
    assert image_id(back[0]).endswith(f"@{second.digest}")
    assert "running" in back[0]["status"]["containerStatuses"][0]["state"]

    def backing_off() -> dict[str, Any] | None:
        pods = [p for p in real_node.pods(ns, "always") if p["metadata"]["uid"] not in old]
        return pods[0] if pods and waiting_reason(pods[0]) == "ImagePullBackOff" else None

    stuck = eventually(backing_off, timeout=120, what="the Always pod in ImagePullBackOff")
    assert not any(
        c["type"] == "Ready" and c["status"] == "True" for c in stuck["status"]["conditions"]
    )


def test_adoption_and_settling_are_judged_on_the_image_ids_containerd_reports(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    single = pusher.push(f"{ns}/single", "prod", seed=f"{ns}-single", entrypoint=SLEEP)
    # Content of this test's own (seeded by the namespace): containerd names in imageID the
    # first repository it pulled a digest from, which for content seen before is another's.
    index = pusher.push(
        f"{ns}/multi", "prod", seed=f"{ns}-index", kind="oci-index", entrypoint=SLEEP
    )
    by_digest = f"{reg}/{ns}/single@{single.digest}"
    cluster.apply(
        real_node.deployment("by-tag", f"{reg}/{ns}/single:prod"),
        real_node.deployment("by-digest", by_digest),
        real_node.deployment("index", f"{reg}/{ns}/multi:prod"),
        namespace=ns,
    )
    tag_pod = real_node.running(ns, "by-tag")[0]
    digest_pod = real_node.running(ns, "by-digest")[0]
    index_pod = real_node.running(ns, "index")[0]
    # What containerd reports (e2e/README.md "What the real node reports").
    assert image_id(tag_pod) == f"{reg}/{ns}/single@{single.digest}"
    assert image_id(digest_pod) == f"{reg}/{ns}/single@{single.digest}"
    assert image_id(index_pod) == f"{reg}/{ns}/multi@{index.digest}"

    generations = {
        name: cluster.get("deployment", name, "-n", ns)["metadata"]["generation"]
        for name in ("by-tag", "by-digest", "index")
    }
    cluster.apply(
        policy(
            "control-plane",
            target("by-tag", app=f"{reg}/{ns}/single:prod"),
            target("by-digest", app=f"{reg}/{ns}/single:prod"),
            target("index", app=f"{reg}/{ns}/multi:prod"),
            # Judged as it settles: this test is about what settles it, not the health window.
            healthyFor="0s",
        ),
        namespace=ns,
    )
    node_operator.wait_first_tick(ns, "control-plane")
    for name, digest in (("by-tag", single.digest), ("by-digest", single.digest)):
        found = settle(node_operator, cluster, ns, name)
        assert found["containers"][0]["running"] == [digest]
    found = settle(node_operator, cluster, ns, "index")
    assert found["containers"][0]["running"] == [index.digest]
    for name, generation in generations.items():  # adopted, none patched
        assert cluster.get("deployment", name, "-n", ns)["metadata"]["generation"] == generation

    # A new push of the index: pinned, pulled by digest, settled on what the new pod reports.
    newer = pusher.push(
        f"{ns}/multi", "prod", seed=f"{ns}-index-2", kind="oci-index", entrypoint=SLEEP
    )
    node_operator.tick(ns, "control-plane")
    assert images(cluster, ns, "index") == {"app": f"{reg}/{ns}/multi@{newer.digest}"}
    found = settle(node_operator, cluster, ns, "index")
    assert found["containers"][0]["running"] == [newer.digest]
    assert image_id(real_node.running(ns, "index")[0]) == f"{reg}/{ns}/multi@{newer.digest}"


def _running_a_good_build(
    cluster: Cluster, real_node: RealNode, pusher: ImagePusher, ns: str, reg: str, seed: str
) -> str:
    """Deployment ``app`` on the real node, pinned to a good build of ``app:prod`` and Running;
    that build's digest. Its progress deadline is short, so a failing rollout is judged soon."""
    good = pusher.push(f"{ns}/app", "prod", seed=seed, entrypoint=SLEEP)
    # A readiness probe, as every control-plane Deployment has: without one, a container that
    # exits at once is Ready for an instant, the rollout completes and the old pod is gone
    # (e2e/README.md "What the real node reports"); then only rolloutTimeout ends the refresh.
    pinned = f"{reg}/{ns}/app@{good.digest}"
    deployment = real_node.deployment("app", pinned, readiness=["/bin/busybox", "true"])
    deployment["spec"]["progressDeadlineSeconds"] = 10
    cluster.apply(deployment, namespace=ns)
    real_node.running(ns, "app")
    return good.digest


def test_a_build_that_crashes_is_rolled_back_and_distinct_crashing_builds_lock_the_target(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    good = _running_a_good_build(cluster, real_node, pusher, ns, reg, "crash-good")
    pinned_good = f"{reg}/{ns}/app@{good}"
    original = real_node.running(ns, "app")[0]["metadata"]["uid"]
    cluster.apply(
        policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod"), maxRefreshAttempts=2),
        namespace=ns,
    )
    node_operator.wait_first_tick(ns, "control-plane")

    for attempt, seed in enumerate(("crash-bad-1", "crash-bad-2"), start=1):
        bad = pusher.push(f"{ns}/app", "prod", seed=seed, entrypoint=CRASH)
        node_operator.tick(ns, "control-plane")
        assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{bad.digest}"}

        # The verdict comes from following the rollout and its pods, with no tick asked for: a
        # tick now could pin the same bad build again before the second one is pushed. Its
        # first crash fails it at once (the rollout never settles: the readiness probe never
        # passes), not the progress deadline.
        phase = "Waiting" if attempt == 1 else "Locked"

        def judged(phase: str = phase) -> dict[str, Any] | None:
            found = target_status(cluster, ns, "app")
            return found if found["phase"] == phase else None

        found = eventually(judged, timeout=120, what=f"crashing build {attempt} judged {phase}")
        assert found["refreshAttempts"] == attempt
        # Its pods ran it (containerd reported its image ID) and crashed: a build never to
        # be tried here again, whatever the tag does.
        assert found["failed"][0]["digest"] == bad.digest
        crashed = event_messages(cluster, ns, "app", "RefreshFailed")[-1]
        assert "the new build crashed while it rolled out: container app" in crashed
        assert f"on node {real_node.name}" in crashed
        assert "exit code 1 (Error)" in crashed  # as the kubelet reported it, ended or restarted
        eventually(
            lambda: images(cluster, ns, "app") == {"app": pinned_good},
            timeout=30,
            what=f"the rollback of crashing build {attempt}",
        )
        # The old pod was never taken away; it is the one Running, on the good digest.
        pods = real_node.running(ns, "app")
        assert pods[0]["metadata"]["uid"] == original
        assert image_id(pods[0]).endswith(f"@{good}")
    event_reasons(cluster, ns, "app", "RolledBack", "RollingBack", "Locked")
    node_operator.tick(ns, "control-plane")
    assert images(cluster, ns, "app") == {"app": pinned_good}  # no re-imaging while Locked


def test_readiness_that_never_comes_freezes_the_target_and_a_passing_probe_thaws_it(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
    tmp_path: Path,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    flags = tmp_path / "flags"
    flags.mkdir()
    (flags / "ready").write_text("")
    pusher.push(f"{ns}/app", "prod", seed="probe-1", entrypoint=SLEEP)
    tag = f"{reg}/{ns}/app:prod"
    probe = ["/bin/busybox", "test", "-e", "/flags/ready"]
    cluster.apply(
        real_node.deployment("app", tag, readiness=probe, volumes={str(flags): "/flags"}),
        namespace=ns,
    )
    real_node.running(ns, "app")
    cluster.apply(policy("control-plane", target("app", app=tag), maxSkipTicks=2), namespace=ns)
    node_operator.wait_first_tick(ns, "control-plane")
    settle(node_operator, cluster, ns, "app")

    (flags / "ready").unlink()  # the kubelet's exec probe now fails on the real pod

    def unready() -> bool:
        pods = real_node.pods(ns, "app")
        return bool(pods) and all(
            c["status"] == "False"
            for p in pods
            for c in p["status"]["conditions"]
            if c["type"] == "Ready"
        )

    eventually(unready, timeout=60, what="the pod to fail its readiness probe")
    newer = pusher.push(f"{ns}/app", "prod", seed="probe-2", entrypoint=SLEEP)
    frozen = settle(node_operator, cluster, ns, "app", phase="Frozen", timeout=60)
    assert frozen["skipStreak"] >= 2
    event_reasons(cluster, ns, "app", "Frozen")
    assert images(cluster, ns, "app") == {"app": tag}  # nothing refreshed under a failing probe

    (flags / "ready").write_text("")
    real_node.running(ns, "app")
    thawed = settle(node_operator, cluster, ns, "app", phase="Current", timeout=120)
    assert thawed["skipStreak"] == 0
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{newer.digest}"}
    assert image_id(real_node.running(ns, "app")[0]).endswith(f"@{newer.digest}")


def test_a_build_the_node_cannot_pull_counts_an_attempt_but_is_not_barred(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    pinned_good = (
        f"{reg}/{ns}/app@{_running_a_good_build(cluster, real_node, pusher, ns, reg, 'pull-good')}"
    )
    cluster.apply(policy("control-plane", target("app", app=f"{reg}/{ns}/app:prod")), namespace=ns)
    node_operator.wait_first_tick(ns, "control-plane")
    # An index offering only arm64: the amd64 kubelet cannot pull it ("no match for platform").
    foreign = pusher.push(
        f"{ns}/app", "prod", seed="pull-foreign", kind="oci-index", entrypoint=SLEEP,
        platforms=(("linux", "arm64"),),
    )  # fmt: skip
    node_operator.tick(ns, "control-plane")
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{foreign.digest}"}

    def pull_failing() -> bool:
        return any(
            p["spec"]["containers"][0]["image"].endswith(foreign.digest)
            and waiting_reason(p) in ("ErrImagePull", "ImagePullBackOff")
            and not image_id(p)
            for p in real_node.pods(ns, "app")
        )

    eventually(pull_failing, timeout=120, what="the kubelet failing to pull the foreign build")

    def rolled_back() -> dict[str, Any] | None:
        found = target_status(cluster, ns, "app")
        return found if found["refreshAttempts"] == 1 and found.get("pending") is None else None

    judged = eventually(rolled_back, timeout=120, what="the failed pull judged and rolled back")
    assert judged["failed"] == []  # never ran: not the build's fault
    messages = [
        e["message"]
        for e in cluster.get("events", "-n", ns)["items"]
        if e["reason"] == "RefreshFailed"
    ]
    assert any("no pod ran the new image" in message for message in messages)
    eventually(
        lambda: images(cluster, ns, "app") == {"app": pinned_good},
        timeout=30,
        what="the rollback to the good build",
    )
    real_node.running(ns, "app")
    node_operator.tick(ns, "control-plane")  # not barred: it is tried again
    assert images(cluster, ns, "app") == {"app": f"{reg}/{ns}/app@{foreign.digest}"}


def test_offline_readiness_is_true_only_where_the_node_proves_a_pinned_restart(
    node_operator: Operator,
    cluster: Cluster,
    real_node: RealNode,
    pusher: ImagePusher,
    policy_namespace: str,
) -> None:
    ns, reg = policy_namespace, node_operator.registry
    build = pusher.push(f"{ns}/app", "prod", seed=f"{ns}-offline", entrypoint=SLEEP)
    pinned, tag = f"{reg}/{ns}/app@{build.digest}", f"{reg}/{ns}/app:prod"
    with_sidecar = real_node.deployment("sidecar", pinned)
    template = real_node.template({"app": pinned, "sidecar": pinned}, labels={"app": "sidecar"})
    template["spec"]["containers"][1]["imagePullPolicy"] = "Always"  # undeclared, not offline-safe
    with_sidecar["spec"]["template"] = template
    scaled_to_zero = real_node.deployment("zero", pinned)
    scaled_to_zero["spec"]["replicas"] = 0
    cluster.apply(
        real_node.deployment("pinned", pinned),
        real_node.deployment("tagged", tag),
        real_node.deployment("always", pinned, pull_policy="Always"),
        with_sidecar,
        scaled_to_zero,
        namespace=ns,
    )
    for name in ("pinned", "tagged", "always", "sidecar"):
        real_node.running(ns, name)
    # A dry run reports and never patches: the tagged template stays on its tag.
    cluster.apply(
        policy(
            "control-plane",
            *(target(n, app=tag) for n in ("pinned", "tagged", "always", "sidecar", "zero")),
            dryRun=True,
        ),
        namespace=ns,
    )
    node_operator.wait_first_tick(ns, "control-plane")

    def offline(name: str) -> dict[str, Any]:
        return dict(target_status(cluster, ns, name)["containers"][0]["offline"])

    assert offline("pinned") == {
        "ready": True,
        "reason": "every pod would restart from its node's cache",
        "nodes": [],
    }
    expected = {
        "tagged": f"template on a tag: {tag} restarts offline",
        "always": "imagePullPolicy: Always on container 'app'",
        "sidecar": "imagePullPolicy: Always on container 'sidecar'",
        "zero": "no pods prove it",
    }
    for name, reason in expected.items():
        found = offline(name)
        assert (found["ready"], found.get("nodes", [])) == (False, []), name
        assert found["reason"].startswith(reason), found
    ready = condition(cluster, ns, "OfflineReady")
    assert (ready["status"], ready["reason"]) == ("False", "NeedsRegistryToRestart")
    assert all(f"Deployment {ns}/{name}" in ready["message"] for name in expected)
    assert f"Deployment {ns}/pinned" not in ready["message"]
    # The proof came from the node: the pod's container reports the pinned digest it pulled.
    assert image_id(real_node.running(ns, "pinned")[0]).endswith(f"@{build.digest}")

    # The command line sees the same, and exits 1 on findings.
    audit = subprocess.run(
        [IMAGEREFRESH, "audit", "--offline", "--namespace", ns, "-o", "json"],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
        check=False,
    )
    assert audit.returncode == 1, audit.stdout + audit.stderr
    findings = json.loads(audit.stdout)
    offline_findings = [f for f in findings if f["kind"] == "not-offline-ready"]
    listed = {f["workload"].removeprefix(f"Deployment {ns}/") for f in offline_findings}
    assert listed == set(expected)
    # Beside them, the coverage audit's own findings: the policy is a dry run (of every
    # container, pinned included), and the sidecar runs the tracked repository undeclared.
    assert {f["kind"] for f in findings} == {"not-offline-ready", "dry-run", "uncovered"}
