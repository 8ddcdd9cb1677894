"""docs/rbac.md is what the chart renders: every object by its name, every rule by its verbs.

The table's names are patterns over `<fullname>` and `<release namespace>`; they are
instantiated for two releases — one whose name contains the chart's (`imagerefresh`, whose
full name is the release name) and one whose name does not (`tb` → `tb-imagerefresh`) — and
compared, both ways, with every object a profile that renders all of them produces. The
rules table's verbs per resource are the union of what every rendered Role and ClusterRole
grants on it.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.docs import DOCS, code_spans, first_code, tables_with
from support.helm_env import CHART, KUBE_VERSION, helm

# Every optional object on: two replicas (the disruption budget), the Lease, monitoring, a
# second target namespace, node reads, the pre-pull fence; then the cluster-wide variant.
EVERYTHING: dict[str, Any] = {
    "replicaCount": 2,
    "prePull": {"enabled": True},
    "allowNamespacePairs": [{"policyNamespace": "edge", "targetNamespace": "edge-agents"}],
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "offline": {"readNodes": True},
}
CLUSTER_WIDE: dict[str, Any] = {**EVERYTHING, "watch": {"allNamespaces": True}}
# Pull secrets add a rule, never an object (and need known target namespaces).
WITH_SECRETS: dict[str, Any] = {**EVERYTHING, "rbac": {"pullSecrets": {"names": ["regcred"]}}}


def _documented() -> set[tuple[str, str]]:
    (table,) = tables_with(DOCS / "rbac.md", "object", "kind", "name")
    return {
        (kind.strip(), first_code(row["name"]))
        for row in table.rows
        for kind in row["kind"].split(",")
    }


def _objects(release: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    result = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        "edge",
        "--kube-version",
        KUBE_VERSION,
        values=values,
    )
    assert result.returncode == 0, result.stderr
    return result.objects


def _rendered(release: str, values: dict[str, Any]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in _objects(release, values)}


@pytest.mark.parametrize(
    ("release", "fullname"), [("imagerefresh", "imagerefresh"), ("tb", "tb-imagerefresh")]
)
def test_the_rbac_docs_name_every_rendered_object_as_the_chart_renders_it(
    release: str, fullname: str
) -> None:
    documented = {
        (kind, name.replace("<release namespace>", "edge").replace("<fullname>", fullname))
        for kind, name in _documented()
    }
    rendered = _rendered(release, EVERYTHING) | _rendered(release, CLUSTER_WIDE)
    assert rendered == documented, (
        f"rendered, not in docs/rbac.md: {sorted(rendered - documented)}; "
        f"in docs/rbac.md, not rendered: {sorted(documented - rendered)}"
    )


def test_the_rbac_docs_grant_each_resource_the_verbs_the_chart_renders() -> None:
    granted: dict[str, set[str]] = {}
    for values in (WITH_SECRETS, CLUSTER_WIDE):
        for role in _objects("tb", values):
            if role["kind"] not in {"Role", "ClusterRole"}:
                continue
            for rule in role["rules"]:
                for resource in rule["resources"]:
                    granted.setdefault(resource, set()).update(rule["verbs"])
    (table,) = tables_with(DOCS / "rbac.md", "where", "resource", "verbs")
    documented: dict[str, set[str]] = {}
    for row in table.rows:
        verbs = {verb.strip() for verb in row["verbs"].replace(";", ",").split(",")}
        for resource in code_spans(row["resource"]):  # a row without names repeats the above
            documented.setdefault(resource, set()).update(verbs)
    assert documented == granted
