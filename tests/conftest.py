"""Shared pytest set-up: the real parts the tests run against are session fixtures in support/."""

pytest_plugins = [
    "support.registry_env",
    "support.cluster_env",
    "support.operator_env",
    "support.podman_env",
    "support.admission",
    "support.realnode_env",
    "support.cosign_env",
]
