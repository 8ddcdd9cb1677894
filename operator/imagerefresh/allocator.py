"""Keep the C allocator from holding on to memory that Python has freed.

The operator's live heap is small, but glibc's malloc keeps freed memory for reuse, and two of
its defaults make a long-running, threaded, TLS-speaking Python process keep far more than it
uses:

* an arena per allocating thread (up to 8 per core), each keeping its own freed memory — the
  operator's Kubernetes requests run on a pool of threads;
* a *dynamic* mmap threshold: blocks of 128 KiB and more start out mmapped (returned to the
  system when freed), but freeing one raises the threshold, so that later ones — the 256 KiB
  buffer asyncio allocates for every TLS connection, kopf's included — come from the heap and
  stay there after a burst of connections is over.

:func:`tune_allocator` fixes both with ``mallopt(3)``, once, at start-up, before the operator
starts its threads: two arenas, and a fixed 128 KiB mmap threshold. It does nothing where the C
library is not glibc, and leaves each setting alone when its ``MALLOC_*`` environment variable
(glibc's own way to set it) is given.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["ARENAS", "MMAP_THRESHOLD_BYTES", "tune_allocator"]

ARENAS = 2
MMAP_THRESHOLD_BYTES = 128 * 1024
# <malloc.h>
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_ENVIRONMENT = {_M_ARENA_MAX: "MALLOC_ARENA_MAX", _M_MMAP_THRESHOLD: "MALLOC_MMAP_THRESHOLD_"}


def tune_allocator() -> dict[str, int]:
    """Apply the settings above; what was set (by its environment variable's name)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to tune
        return {}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    applied = {}
    for option, value in ((_M_ARENA_MAX, ARENAS), (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)):
        name = _ENVIRONMENT[option]
        if name in os.environ:
            continue
        if mallopt(option, value) == 1:  # mallopt returns 1 on success
            applied[name] = value
    return applied
