"""ReadCache on its own: one read for concurrent askers of a key, its error theirs too, and
answers aged by their lifetime, by the round's instant and by the horizon."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from imagerefresh.kube import KubeError
from imagerefresh.kube.readcache import ReadCache


def test_read_cache_asks_once_for_concurrent_askers_of_one_key() -> None:
    cache = ReadCache()
    calls: Counter[str] = Counter()
    started = threading.Event()
    release = threading.Event()

    def slow_read() -> str:
        calls["slow"] += 1
        started.set()
        release.wait(5)
        return "answer"

    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get("k", slow_read))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    assert started.wait(5)
    release.set()
    for thread in threads:
        thread.join(5)
    assert results == ["answer"] * 8
    assert calls["slow"] == 1
    assert cache.get("other", lambda: "second") == "second"


def test_read_cache_gives_every_asker_the_first_askers_error() -> None:
    cache = ReadCache()
    calls: Counter[str] = Counter()

    def failing() -> str:
        calls["failing"] += 1
        raise KubeError("get ServiceAccount ns/x: forbidden")

    for _ in range(3):
        with pytest.raises(KubeError, match="forbidden"):
            cache.get(("ServiceAccount", "ns", "x"), failing)
    assert calls["failing"] == 1


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_shared_read_cache_answers_within_its_lifetime_and_reads_again_after() -> None:
    clock = Clock()
    cache = ReadCache(lifetime=10.0, clock=clock)
    answers = iter(["first", "second", "third"])
    key = ("ServiceAccount", "ns", "default")

    assert cache.get(key, lambda: next(answers)) == "first"
    clock.now += 9.9  # a policy ticking in the same window
    assert cache.get(key, lambda: next(answers)) == "first"
    clock.now += 0.1  # the window is over: never older than the lifetime
    assert cache.get(key, lambda: next(answers)) == "second"
    assert cache.get(("other",), lambda: next(answers)) == "third"


def test_a_shared_read_cache_never_remembers_an_error_past_its_askers() -> None:
    cache = ReadCache(lifetime=10.0, clock=Clock())
    calls: Counter[str] = Counter()

    def failing_once() -> str:
        calls["read"] += 1
        if calls["read"] == 1:
            raise KubeError("get ServiceAccount ns/x: the server is currently unable")
        return "answer"

    with pytest.raises(KubeError, match="unable"):
        cache.get("k", failing_once)
    assert cache.get("k", failing_once) == "answer"  # the next tick reads again
    assert cache.get("k", failing_once) == "answer"
    assert calls["read"] == 2


def test_a_shared_read_cache_drops_what_it_may_no_longer_use() -> None:
    clock = Clock()
    cache = ReadCache(lifetime=10.0, clock=clock)
    for index in range(50):
        cache.get(index, lambda: "answer")
    clock.now += 10.0
    cache.get("fresh", lambda: "answer")
    assert len(cache) == 1  # bounded by one window's reads, not the operator's life


def test_a_round_shares_its_reads_however_long_it_lasts_and_the_next_round_reads_again() -> None:
    clock = Clock()
    cache = ReadCache(lifetime=10.0, clock=clock, horizon=300.0)
    answers = iter(["round", "next round", "unanchored"])
    key = ("ServiceAccount", "ns", "default")
    grid = clock.now

    clock.now = grid + 1  # the round's first tick reads
    assert cache.for_round(grid).get(key, lambda: next(answers)) == "round"
    clock.now = grid + 25  # a late tick of the round, long past the lifetime from now
    assert cache.for_round(grid).get(key, lambda: next(answers)) == "round"
    clock.now = grid + 30  # the next round reads again
    assert cache.for_round(grid + 30).get(key, lambda: next(answers)) == "next round"
    clock.now = grid + 41  # a tick of no round: the lifetime from now
    assert cache.get(key, lambda: next(answers)) == "unanchored"


def test_a_round_s_reads_are_kept_no_longer_than_the_horizon() -> None:
    clock = Clock()
    cache = ReadCache(lifetime=10.0, clock=clock, horizon=300.0)
    grid = clock.now
    for index in range(50):
        cache.get(index, lambda: "answer")
    clock.now = grid + 300  # a round this far behind takes none of them
    assert cache.for_round(grid).get(0, lambda: "read again") == "read again"
    assert len(cache) == 1
