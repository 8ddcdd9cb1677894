"""``python -m imagerefresh`` is the ``imagerefresh`` command."""

from imagerefresh.entry import main

main()
