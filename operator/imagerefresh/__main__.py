"""``python -m imagerefresh`` is the ``imagerefresh`` command."""

from imagerefresh.cli import main

main()
