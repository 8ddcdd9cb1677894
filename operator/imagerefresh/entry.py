"""The installed commands: ``imagerefresh`` and ``kubectl-imagerefresh``.

Each imports the command line through :func:`~imagerefresh.collector.import_frozen` before it
runs: every start of the operator, crash restarts included, pays for its imports at a CPU limit
of a tenth of a core, and the cyclic collector's passes over objects that live as long as the
process are the part of that cost nothing needs. ``python -m imagerefresh`` starts here too;
the command line itself (:mod:`.cli`) stays importable the ordinary way.
"""

from __future__ import annotations

from imagerefresh.collector import import_frozen

__all__ = ["kubectl_plugin", "main"]

_COMMAND_LINE = "imagerefresh.cli"


def main() -> None:
    """``imagerefresh``."""
    import_frozen(_COMMAND_LINE).main()


def kubectl_plugin() -> None:
    """``kubectl-imagerefresh`` (kubectl's plugin mechanism runs it from ``$PATH``)."""
    import_frozen(_COMMAND_LINE).kubectl_plugin()
