"""An edge as the tracebloc edge chart (1.9.x) renders it, for the CronJob migration's tests.

FACTS.md "The CronJob being replaced": release ``R`` in namespace ``NS`` has the Deployments
``R-jobs-manager`` (containers ``api``, ``pods-monitor-container``) and ``R-requests-proxy``
(``proxy``), the DaemonSet ``R-resource-monitor`` (``tracebloc-resource-monitor``) in the
node-agents namespace, and the CronJob ``R-image-refresh`` with its env, schedule,
``concurrencyPolicy: Forbid`` and ``activeDeadlineSeconds: 3600``, keeping its state in
annotations on ``R-jobs-manager``. Pods land on kwok's nodes; a pod reports the digest of its
container's ``imagerefresh.test/image-id.<container>`` template annotation, if any.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imagerefresh.reference import parse

from support.operator_env import kwok_pod_template

Json = dict[str, Any]

SCHEDULE = "7,22,37,52 * * * *"
PULL_SECRET = "tracebloc-regcred"


@dataclass
class Edge:
    """The release's names and images: ``images`` maps each of the three images (jobs-manager,
    pods-monitor, resource-monitor) to the reference its containers run."""

    release: str
    namespace: str
    node_agents: str
    registry: str = "docker.io"
    tag: str = "prod"
    images: dict[str, str] = field(default_factory=dict)
    running: dict[str, str] = field(default_factory=dict)  # image → the digest pods report
    state: dict[str, str] = field(default_factory=dict)  # annotations on R-jobs-manager
    env: dict[str, str] = field(default_factory=dict)  # overrides of the CronJob's env
    schedule: str = SCHEDULE

    def image(self, name: str) -> str:
        default = f"{self.registry}/tracebloc/{name}:{self.tag}"
        return self.images.get(name, default)

    def _template(self, containers: Mapping[str, str], app: str) -> Json:
        ids = {
            f"imagerefresh.test/image-id.{container}": self._repo(image) + "@" + digest
            for container, image in containers.items()
            if (digest := self.running.get(image))
        }
        template = kwok_pod_template(
            {c: self.image(i) for c, i in containers.items()}, ids, {"app": app}
        )
        template["spec"]["imagePullSecrets"] = [{"name": PULL_SECRET}]
        return template

    def _repo(self, image: str) -> str:
        return parse(self.image(image)).repository

    def jobs_manager(self) -> Json:
        name = f"{self.release}-jobs-manager"
        containers = {"api": "jobs-manager", "pods-monitor-container": "pods-monitor"}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": self.state},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "jobs-manager"}},
                "template": self._template(containers, "jobs-manager"),
            },
        }

    def requests_proxy(self) -> Json:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"{self.release}-requests-proxy", "namespace": self.namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "requests-proxy"}},
                "template": self._template({"proxy": "jobs-manager"}, "requests-proxy"),
            },
        }

    def resource_monitor(self) -> Json:
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": f"{self.release}-resource-monitor",
                "namespace": self.node_agents,
            },
            "spec": {
                "selector": {"matchLabels": {"app": "resource-monitor"}},
                "updateStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "10%"},
                },
                "template": self._template(
                    {"tracebloc-resource-monitor": "resource-monitor"}, "resource-monitor"
                ),
            },
        }

    def cronjob_env(self) -> dict[str, str]:
        return {
            "DEPLOYMENT_NAME": f"{self.release}-jobs-manager",
            "REQUESTS_PROXY_DEPLOYMENT": f"{self.release}-requests-proxy",
            "RESOURCE_MONITOR_DAEMONSET": f"{self.release}-resource-monitor",
            "NODE_AGENTS_NAMESPACE": self.node_agents,
            "IMAGE_REGISTRY": self.registry,
            "IMAGE_TAG": self.tag,
            "ROLLOUT_TIMEOUT": "10m",
            "MAX_REFRESH_ATTEMPTS": "3",
            "MAX_SKIP_TICKS": "8",
            "JOBS_MANAGER_PINNED": "0",
            "PODS_MONITOR_PINNED": "0",
            "RESOURCE_MONITOR_PINNED": "0",
            **self.env,
        }

    def cronjob(self) -> Json:
        name = f"{self.release}-image-refresh"
        # Its runs land on kwok's nodes, where a Job's pod completes at once.
        pod = kwok_pod_template({"refresh": "docker.io/bitnami/kubectl:1.31"})
        pod["spec"].update(
            {
                "serviceAccountName": name,
                "restartPolicy": "Never",
                "volumes": [{"name": "script", "configMap": {"name": name}}],
            }
        )
        (container,) = pod["spec"]["containers"]
        container.update(
            {
                "command": ["/bin/bash", "/scripts/image-refresh.sh"],
                "env": [{"name": k, "value": v} for k, v in self.cronjob_env().items()],
                "volumeMounts": [{"name": "script", "mountPath": "/scripts"}],
            }
        )
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "schedule": self.schedule,
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"activeDeadlineSeconds": 3600, "template": pod}},
            },
        }

    def cronjob_parts(self) -> list[Json]:
        """The CronJob's ConfigMap (its script) and ServiceAccount, as the chart renders them."""
        name = f"{self.release}-image-refresh"
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": self.namespace},
                "data": {"image-refresh.sh": "#!/bin/bash\nexit 0\n"},
            },
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": self.namespace},
            },
        ]

    def workloads(self) -> dict[str, Json]:
        return {
            "jobs-manager": self.jobs_manager(),
            "requests-proxy": self.requests_proxy(),
            "resource-monitor": self.resource_monitor(),
        }
