"""The cooldown's clock, rule by rule: what one tick's answers make of ``status.seen``, and
when a digest may be pinned by it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from imagerefresh.models import SeenDigest
from imagerefresh.planner.cooldown import cooled_at, observe

from support.ticks import T0, digest

A, B = "docker.io/team/a:prod", "docker.io/team/b:prod"
D1, D2 = digest(1), digest(2)
HOUR = timedelta(hours=1)
LATER = T0 + timedelta(minutes=10)


def entry(tracked: str, value: str, since: object = T0) -> SeenDigest:
    return SeenDigest(tracked=tracked, digest=value, since=since)


def test_the_same_answer_keeps_its_clock_and_a_new_one_starts_it_now() -> None:
    seen = (entry(A, D1), entry(B, D1))
    after = observe(seen, [A, B], {A: frozenset({D1}), B: frozenset({D2})}, LATER)
    assert after == (entry(A, D1), entry(B, D2, LATER))


def test_an_unanswered_reference_keeps_its_entry_and_the_next_ones_are_still_observed() -> None:
    after = observe((entry(A, D1),), [B, A], {B: frozenset({D2})}, LATER)
    assert after == (entry(A, D1), entry(B, D2, LATER))
    assert observe((), [A], {}, LATER) == ()


def test_two_answers_in_one_tick_are_a_tag_in_motion_and_restart_the_clock() -> None:
    after = observe((entry(A, D1),), [A], {A: frozenset({D1, D2})}, LATER)
    assert after == (entry(A, min(D1, D2), LATER),)


def test_a_start_in_the_future_is_read_as_a_move_now() -> None:
    ahead = entry(A, D1, T0 + timedelta(days=1))
    assert observe((ahead,), [A], {A: frozenset({D1})}, LATER) == (entry(A, D1, LATER),)


def test_references_no_longer_tracked_are_forgotten() -> None:
    assert observe((entry(A, D1), entry(B, D1)), [B], {}, LATER) == (entry(B, D1),)


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        ({A: entry(A, D1)}, T0 + HOUR),  # the tag has answered D1 since T0
        ({}, LATER + HOUR),  # no clock: it starts now
        ({A: entry(A, D2)}, LATER + HOUR),  # a clock of another digest
        ({B: entry(B, D1)}, LATER + HOUR),  # a clock of another reference
        ({A: entry(A, D1, T0 + timedelta(days=1))}, LATER + HOUR),  # a start in the future
        ({A: entry(A, D1, LATER)}, LATER + HOUR),  # started this very instant
    ],
    ids=["running", "none", "other-digest", "other-reference", "future", "now"],
)
def test_a_digest_may_be_pinned_minimum_age_after_its_clock_started(
    seen: dict[str, SeenDigest], expected: object
) -> None:
    assert cooled_at(seen, A, D1, HOUR, LATER) == expected
