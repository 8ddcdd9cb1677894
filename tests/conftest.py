"""Shared pytest set-up: the real parts the tests run against are session fixtures in support/.

Property tests (hypothesis) explore new examples on a developer's machine, replaying the ones
that failed there before (``.hypothesis/``); in CI they run a fixed set, so that a verdict
never depends on which random examples a fresh machine drew. A failure found locally is then
fixed, or kept as an explicit example, not left to surface in CI by chance.
"""

import os

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
