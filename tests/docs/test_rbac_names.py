"""docs/rbac.md names every object the chart renders as `helm template` renders it.

The table's names are patterns over `<fullname>` and `<release namespace>`; they are
instantiated for two releases — one whose name contains the chart's (`imagerefresh`, whose
full name is the release name) and one whose name does not (`tb` → `tb-imagerefresh`) — and
compared, both ways, with every object a profile that renders all of them produces.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.docs import DOCS, first_code, tables_with
from support.helm_env import CHART, KUBE_VERSION, helm

# Every optional object on: two replicas (the disruption budget), the Lease, monitoring, a
# second target namespace; then the cluster-wide variant.
EVERYTHING: dict[str, Any] = {
    "replicaCount": 2,
    "allowNamespacePairs": [{"policyNamespace": "edge", "targetNamespace": "edge-agents"}],
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
}
CLUSTER_WIDE: dict[str, Any] = {**EVERYTHING, "watch": {"allNamespaces": True}}


def _documented() -> set[tuple[str, str]]:
    (table,) = tables_with(DOCS / "rbac.md", "object", "kind", "name")
    return {
        (kind.strip(), first_code(row["name"]))
        for row in table.rows
        for kind in row["kind"].split(",")
    }


def _rendered(release: str, values: dict[str, Any]) -> set[tuple[str, str]]:
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
    return {(o["kind"], o["metadata"]["name"]) for o in result.objects}


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
