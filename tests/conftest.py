"""Shared pytest set-up: the real parts the tests run against are session fixtures in support/.

Property tests (hypothesis) explore new examples on a developer's machine, replaying the ones
that failed there before (``.hypothesis/``); in CI they run a fixed set, so that a verdict
never depends on which random examples a fresh machine drew. A failure found locally is then
fixed, or kept as an explicit example, not left to surface in CI by chance.
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

pytest_plugins = [
    "support.registry_env",
    "support.cluster_env",
    "support.operator_env",
    "support.podman_env",
    "support.admission",
    "support.realnode_env",
    "support.cosign_env",
    "support.referrers_env",
    "support.signed_images",
]

# Fixtures that run a Go build `make binaries` makes before the tests (never a test itself).
BINARY_FIXTURES = frozenset({"cosign", "referrers_registry"})


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``binaries`` every test that uses such a fixture, however indirectly (its
    fixture closure), so that `make unit` (``-m 'not cluster and not binaries'``) leaves it
    out."""
    for item in items:
        if BINARY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.binaries)
