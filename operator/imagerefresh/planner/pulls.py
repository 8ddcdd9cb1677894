"""The registry pulls a write causes, per account: what it must carry, and what is charged.

One rule, used by the planner to charge a write and by the write guard to check the charge:

- a patch: each image it newly writes, once per pod the workload wants (a DaemonSet's
  scheduled nodes), per account — except an image every pod already runs (an adoption: the
  nodes hold it) or one every node of the workload is proven to hold (a pre-pull's, whose
  helper pods paid for it);
- a helper pod: each of its images once (it pulls them onto its one node).

A pull is charged to the account the kubelet pulls with: the registry host and the identity
the workload's pull secret gives there (``anonymous`` without one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from imagerefresh.offline import NodeInventory
from imagerefresh.planner.evidence import ANONYMOUS, Account, TargetEvidence
from imagerefresh.planner.proof import held_everywhere, runs_everywhere
from imagerefresh.reference import InvalidReference, parse, registry_host

__all__ = ["account_of", "helper_pulls", "patch_pulls"]


def account_of(image: str, identities: Mapping[str, str]) -> Account | None:
    """The account that pulls ``image`` (None when it does not parse)."""
    try:
        host = registry_host(parse(image).domain)
    except InvalidReference:
        return None
    return host, identities.get(host, ANONYMOUS)


def patch_pulls(
    changes: Iterable[tuple[str, str]],
    evidence: TargetEvidence,
    inventory: NodeInventory | None,
) -> dict[Account, int]:
    """The pulls a patch writing ``changes`` (container, image) causes, per account."""
    workload = evidence.workload
    pods = workload.expected_pods if workload is not None else 0
    images: dict[Account, set[str]] = {}
    for container, image in changes:
        account = account_of(image, evidence.identities)
        if account is None or _free(evidence, inventory, container, image):
            continue
        images.setdefault(account, set()).add(image)
    return {account: len(found) * pods for account, found in images.items() if pods}


def _free(
    evidence: TargetEvidence, inventory: NodeInventory | None, container: str, image: str
) -> bool:
    digest = parse(image).digest
    if digest is None:
        return False  # a tag: whatever it answers when a pod starts may be new
    return runs_everywhere(evidence, container, digest) or held_everywhere(
        evidence, inventory, container, image
    )


def helper_pulls(images: Iterable[str], identities: Mapping[str, str]) -> dict[Account, int]:
    """The pulls a helper pod pulling ``images`` onto its node causes, per account."""
    found: dict[Account, set[str]] = {}
    for image in images:
        account = account_of(image, identities)
        if account is not None:
            found.setdefault(account, set()).add(image)
    return {account: len(each) for account, each in found.items()}
