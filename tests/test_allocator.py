"""The allocator tuning: memory freed after a burst of TLS-sized buffers goes back to the system."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# A burst like kopf's and the operator's connections at start-up: threads each holding forty
# 256 KiB buffers (asyncio's per-TLS-connection size), with small objects outliving them. The
# survivors are 1 KiB so that they come from malloc's heap (CPython serves 512 bytes and less
# from its own arenas): there they sit above the buffers and keep heap-allocated buffers from
# being trimmed, as a connection's longer-lived objects do.
BURST_KIB = 40 * 256
# What the tuned process may keep: the survivors and allocator bookkeeping (about 0.7 MiB here),
# far below one burst. Without the fixed mmap threshold it keeps more than a burst.
RETAINED_BOUND_KIB = 2048
BURST = textwrap.dedent(
    """
    import re, threading
    from imagerefresh.allocator import tune_allocator
    tune_allocator()

    def rss_kib():
        return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1))

    survivors = []
    def burst():
        buffers = [bytearray(256 * 1024) for _ in range(40)]
        survivors.extend(bytes(1024) for _ in buffers)
        del buffers

    before = rss_kib()
    threads = [threading.Thread(target=burst) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _ in range(3):
        burst()
    print(rss_kib() - before)
    """
)


def retained_kib_after_a_burst() -> int:
    """How much more the tuned process's RSS is after the burst than before it."""
    # Only tune_allocator's settings count: glibc's MALLOC_* variables would stand in for them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    answer = subprocess.run(
        [sys.executable, "-c", BURST], capture_output=True, text=True, check=True, env=env
    )
    return int(answer.stdout)


def test_after_a_burst_of_large_buffers_the_tuned_process_keeps_a_fraction_of_one_burst() -> None:
    retained = retained_kib_after_a_burst()
    assert retained < RETAINED_BOUND_KIB, (
        f"kept {retained} KiB after bursts of {BURST_KIB} KiB each; the freed buffers stayed in "
        "malloc's heap instead of going back to the system"
    )


def tuning_in_a_fresh_process(**malloc_env: str) -> str:
    script = "from imagerefresh.allocator import tune_allocator; print(tune_allocator())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | malloc_env
    answer = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )
    return answer.stdout.strip()


def test_both_settings_are_applied_on_glibc() -> None:
    assert tuning_in_a_fresh_process() == (
        "{'MALLOC_ARENA_MAX': 2, 'MALLOC_MMAP_THRESHOLD_': 131072}"
    )


def test_an_explicit_malloc_environment_variable_wins() -> None:
    assert tuning_in_a_fresh_process(MALLOC_ARENA_MAX="4") == "{'MALLOC_MMAP_THRESHOLD_': 131072}"
