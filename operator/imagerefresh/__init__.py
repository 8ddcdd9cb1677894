"""imagerefresh: a Kubernetes operator that pins workloads to the newest digest of their tags.

Layers, innermost first (enforced by the import-linter contract in pyproject.toml):

* :mod:`~imagerefresh.reference` — the image reference grammar;
* :mod:`~imagerefresh.credentials`, :mod:`~imagerefresh.ratelimit` — pull secrets and the pull
  budget, pure bookkeeping;
* :mod:`~imagerefresh.registry` — the async registry client and its error hierarchy;
* :mod:`~imagerefresh.resolver` — many references resolved with one request each;
* :mod:`~imagerefresh.cli` — the command line.
"""
