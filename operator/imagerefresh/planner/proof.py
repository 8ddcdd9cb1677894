"""What live evidence proves about a workload's images: what every pod runs, what it ran, what
its nodes hold.

A write is judged by what it changes, and status cannot say what changed: anyone with
``update`` on the status subresource writes it. So the exemptions the gates grant — an
adoption costs no pull and waits for no cooldown, a rollback restores what ran, a pre-pulled
patch pulls nothing more — are granted only on evidence read from the cluster this tick:

- **every pod runs it**: each pod of the workload reports the digest (or one of its platform
  manifests, which containers/image runtimes report) in that container, and there are as many
  pods as the workload wants;
- **the workload ran it**: the template of its previous revision (the ReplicaSet or
  ControllerRevision before the current one) names the image, or a pod runs it now — a pod
  reporting a platform manifest proves the index whose children were read to contain it;
- **its nodes hold it**: every node the workload's pods run on (not Ready or cordoned ones
  aside, when nodes are read) has a helper pod that pulled it, a pod of the workload running
  it, or lists it in ``status.images``.
"""

from __future__ import annotations

from collections.abc import Iterable

from imagerefresh.offline import NodeInventory, held_name
from imagerefresh.planner.evidence import Resolved, TargetEvidence
from imagerefresh.reference import InvalidReference, parse

__all__ = [
    "content_of",
    "held_everywhere",
    "holds_on",
    "normalised",
    "pre_pull_nodes",
    "ran",
    "runs_everywhere",
]


def normalised(image: str) -> str:
    """The fully qualified form of ``image``, or ``image`` itself when it does not parse."""
    try:
        return str(parse(image))
    except InvalidReference:
        return image


def content_of(evidence: TargetEvidence, container: str, digest: str) -> Resolved:
    """``digest`` with the platform manifests known to be its children (from the registry's
    answer for the container's tag, or from an index read for this tick)."""
    children = set(evidence.children.get(digest, ()))
    outcome = evidence.digests.get(container)
    if isinstance(outcome, Resolved) and outcome.digest == digest:
        children |= outcome.children
    return Resolved(digest, frozenset(children))


def runs_everywhere(evidence: TargetEvidence, container: str, digest: str) -> bool:
    """Whether every pod of the workload runs ``digest`` in ``container`` — and there are as
    many pods as it wants (a pod still to be created would pull it)."""
    workload = evidence.workload
    pods = evidence.pods
    if workload is None or not pods or len(pods) < workload.expected_pods:
        return False
    wanted = content_of(evidence, container, digest)
    return all(wanted.is_content_of(pod.running.get(container)) for pod in pods)


def ran(evidence: TargetEvidence, container: str, repository: str) -> frozenset[str]:
    """The images (fully qualified) the workload is proven to have run in ``container``: its
    previous revision's template image, and ``repository`` at each digest a pod runs now (and
    at each index read for this tick whose platform manifest a pod runs)."""
    proven: set[str] = set()
    previous = (evidence.previous_template or {}).get(container)
    if previous is not None:
        proven.add(normalised(previous))
    running = {d for pod in evidence.pods if (d := pod.running.get(container)) is not None}
    for digest in running:
        proven.add(f"{repository}@{digest}")
    for index, children in evidence.children.items():
        if running & children:
            proven.add(f"{repository}@{index}")
    return frozenset(proven)


def pre_pull_nodes(
    evidence: TargetEvidence, inventory: NodeInventory | None
) -> tuple[list[str], list[str]]:
    """The nodes the workload's pods run on that a pre-pull puts images onto, and those it
    skips (not Ready, or cordoned — known only when the operator reads nodes)."""
    running = sorted({pod.scheduled for pod in evidence.pods if pod.scheduled})
    if inventory is None or inventory.unreadable is not None:
        return running, []
    wanted, skipped = [], []
    for node in running:
        known = inventory.nodes.get(node)
        if known is not None and not (known.ready and known.schedulable):
            skipped.append(node)
        else:
            wanted.append(node)
    return wanted, skipped


def holds_on(
    evidence: TargetEvidence,
    inventory: NodeInventory | None,
    node: str,
    images: Iterable[tuple[str, str]],
) -> bool:
    """Whether ``node`` is proven to hold every (container, image): a helper there pulled it,
    a pod of the workload there runs it, or the node lists it."""
    listed = inventory.nodes.get(node) if inventory is not None else None
    helpers = evidence.helpers or ()
    for container, image in images:
        digests = content_of(evidence, container, parse(image).digest or "")
        wanted = frozenset({digests.digest, *digests.children})
        if any(h.node == node and h.holds(image, wanted) for h in helpers):
            continue
        pods = (p for p in evidence.pods if p.scheduled == node)
        if any(p.running.get(container) in wanted for p in pods):
            continue
        if listed is not None and held_name(image) in listed.images:
            continue
        return False
    return True


def held_everywhere(
    evidence: TargetEvidence, inventory: NodeInventory | None, container: str, image: str
) -> bool:
    """Whether every node a pre-pull would put ``image`` onto holds it (and there is one)."""
    nodes, _ = pre_pull_nodes(evidence, inventory)
    return bool(nodes) and all(
        holds_on(evidence, inventory, node, [(container, image)]) for node in nodes
    )
