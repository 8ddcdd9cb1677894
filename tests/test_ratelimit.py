"""imagerefresh.ratelimit: header parsing and the pull-budget ledger (pure, clock passed in)."""

from __future__ import annotations

import pytest
import structlog

from imagerefresh.ratelimit import (
    Affordability,
    BudgetSnapshot,
    PullBudget,
    RateLimitLedger,
    RateLimitReport,
    RequestKind,
    parse_ratelimit_headers,
)

HUB_HEADERS = {
    "RateLimit-Limit": "100;w=21600",
    "RateLimit-Remaining": "76;w=21600",
    "Docker-RateLimit-Source": "203.0.113.7",
}


def test_docker_hub_headers_parse_to_limit_remaining_window_and_source() -> None:
    assert parse_ratelimit_headers(HUB_HEADERS) == RateLimitReport(
        limit=100, remaining=76, window_seconds=21600, source="203.0.113.7"
    )


@pytest.mark.parametrize(
    ("limit", "remaining", "expected"),
    [
        ("100", "5", (100, 5, None)),
        ("100;w=3600, 1000;w=86400", "7;w=3600", (100, 7, 3600)),
        (" 10 ; w = 60 ", "0;w=60", (10, 0, 60)),
        ("10;w=60;comment=x", "3;w=60", (10, 3, 60)),
    ],
)
def test_quota_syntax_variants(limit: str, remaining: str, expected: tuple[int, ...]) -> None:
    report = parse_ratelimit_headers({"ratelimit-limit": limit, "ratelimit-remaining": remaining})
    assert (report.limit, report.remaining, report.window_seconds) == expected


def test_absent_headers_mean_not_limited() -> None:
    report = parse_ratelimit_headers({"content-type": "application/json"})
    assert not report.reported
    assert report.malformed == ()
    budget = PullBudget("registry.example", "anonymous")
    budget.record_report(report, now=0)
    answer = budget.can_afford(1000, reserve=2, now=0)
    assert answer.allowed
    assert not answer.limited
    assert answer.reason.startswith("not limited")


@pytest.mark.parametrize(
    "value",
    [
        "lots",
        "-1;w=60",
        "",
        "w=60",
        "٣;w=60",  # an Arabic-Indic three: a digit to Python, not to the header's grammar
        "9" * 40 + ";w=60",  # a count no int64 status field can hold
        "5;w=" + "9" * 40,
    ],
)
def test_malformed_headers_are_counted_and_never_guessed(value: str) -> None:
    report = parse_ratelimit_headers({"ratelimit-limit": "100;w=60", "ratelimit-remaining": value})
    assert report.remaining is None
    assert report.malformed == ("ratelimit-remaining",)
    budget = PullBudget("r", "anonymous")
    budget.record_report(report, now=0)
    answer = budget.can_afford(1, reserve=0, now=0)
    assert not answer.allowed
    assert answer.limited
    assert "could not be read" in answer.reason
    assert budget.malformed_headers == 1


def test_a_source_longer_than_any_address_or_account_id_is_cut() -> None:
    report = parse_ratelimit_headers({"docker-ratelimit-source": "x" * 10_000})
    assert report.source == "x" * 128


def _budget(remaining: int, limit: int = 100, window: int = 21600) -> PullBudget:
    budget = PullBudget("registry-1.docker.io", "anonymous")
    budget.record_report(RateLimitReport(limit, remaining, window, "203.0.113.7"), now=1000)
    return budget


@pytest.mark.parametrize(
    ("remaining", "pulls", "reserve", "allowed"),
    [
        (10, 3, 2, True),
        (5, 3, 2, True),
        (4, 3, 2, False),
        (2, 0, 2, True),
        (1, 0, 2, False),
        (0, 1, 0, False),
        (3, 3, 0, True),
    ],
)
def test_reserve_is_kept_for_the_kubelet(
    remaining: int, pulls: int, reserve: int, allowed: bool
) -> None:
    answer = _budget(remaining).can_afford(pulls, reserve, now=1001)
    assert answer.allowed is allowed
    assert answer.remaining == remaining
    if not allowed:
        assert f"needs {pulls} and {reserve} stay reserved" in answer.reason


def test_own_gets_lower_the_believed_remaining_heads_tokens_and_blobs_do_not() -> None:
    budget = _budget(5)
    budget.record_request(RequestKind.HEAD, now=1001)
    budget.record_request(RequestKind.TOKEN, now=1001)
    budget.record_request(RequestKind.BLOB, now=1001)  # Docker Hub counts no pull for a blob
    assert budget.estimated_remaining(now=1001) == 5
    budget.record_request(RequestKind.GET, now=1002)
    assert budget.estimated_remaining(now=1002) == 4
    assert budget.requests == {
        RequestKind.HEAD: 1, RequestKind.TOKEN: 1, RequestKind.BLOB: 1, RequestKind.GET: 1,
    }  # fmt: skip
    assert [kind for kind in RequestKind if kind.is_pull] == [RequestKind.GET]


def test_a_report_older_than_its_window_means_the_budget_rolled_over() -> None:
    budget = _budget(0, limit=100, window=3600)
    assert budget.estimated_remaining(now=1000 + 3599) == 0
    assert budget.estimated_remaining(now=1000 + 3600) == 100


def test_own_request_counts_roll_over_with_the_window() -> None:
    budget = _budget(50, window=60)
    budget.record_request(RequestKind.HEAD, now=1000)
    budget.record_request(RequestKind.HEAD, now=1059)
    assert budget.requests[RequestKind.HEAD] == 2
    budget.record_request(RequestKind.HEAD, now=1060)
    assert budget.requests[RequestKind.HEAD] == 1


def test_ledger_keeps_one_budget_per_registry_and_identity() -> None:
    ledger = RateLimitLedger()
    assert ledger.budget("r", "alice") is ledger.budget("r", "alice")
    assert ledger.budget("r", "alice") is not ledger.budget("r", "bob")
    assert ledger.budget("r", "alice") is not ledger.budget("s", "alice")


def test_a_pause_refuses_every_identity_of_that_registry_until_it_ends() -> None:
    ledger = RateLimitLedger()
    ledger.pause("r", retry_after=60, now=100)
    assert not ledger.can_afford("r", "alice", 0, 0, now=159).allowed
    assert ledger.can_afford("s", "alice", 0, 0, now=159).allowed
    assert ledger.can_afford("r", "alice", 0, 0, now=160).allowed


def test_every_own_get_since_the_report_lowers_the_believed_remaining() -> None:
    budget = _budget(5)
    for now in (1001, 1002, 1003):
        budget.record_request(RequestKind.GET, now=now)
    assert budget.estimated_remaining(now=1003) == 2


def test_malformed_headers_are_counted_across_reports() -> None:
    budget = PullBudget("registry-1.docker.io", "anonymous")
    bad = parse_ratelimit_headers({"ratelimit-limit": "lots", "ratelimit-remaining": "many"})
    budget.record_report(bad, now=1)
    budget.record_report(bad, now=2)
    assert budget.malformed_headers == 4


def test_a_remaining_count_alone_is_read() -> None:
    report = parse_ratelimit_headers({"RateLimit-Remaining": "5;w=60"})
    assert (report.limit, report.remaining, report.window_seconds) == (None, 5, 60)


def test_a_malformed_header_is_logged_with_its_name_and_a_bounded_value() -> None:
    with structlog.testing.capture_logs() as logs:
        parse_ratelimit_headers({"ratelimit-limit": "100", "ratelimit-remaining": "x" * 500})
    assert logs == [
        {
            "event": "malformed rate-limit header",
            "header": "ratelimit-remaining",
            "value": "x" * 100,
            "log_level": "warning",
        }
    ]


HUB = "registry-1.docker.io"
WHO = f"{HUB} for tracebloc/regcred"


def _report(limit: int | None, remaining: int | None, window: int | None) -> RateLimitReport:
    return RateLimitReport(limit, remaining, window, "203.0.113.7")


# Every answer in full: whether, why (the words an SRE reads in a Deferred target's message),
# whether a limit applies at all, and the pulls believed left.
ANSWERS: list[tuple[str, BudgetSnapshot, int, int, Affordability]] = [
    (
        "paused by a 429",
        BudgetSnapshot(HUB, "anonymous", _report(100, 50, 21600), 50, blocked="paused for 30s"),
        1,
        0,
        Affordability(False, "paused for 30s", True),
    ),
    (
        "no headers: not limited",
        BudgetSnapshot(HUB, "tracebloc/regcred", RateLimitReport()),
        1000,
        2,
        Affordability(True, f"not limited: {WHO} reports no rate limit", False),
    ),
    (
        "both headers malformed",
        BudgetSnapshot(
            HUB,
            "tracebloc/regcred",
            RateLimitReport(malformed=("ratelimit-limit", "ratelimit-remaining")),
        ),
        1,
        0,
        Affordability(
            False,
            f"{WHO} sent rate-limit headers that could not be read "
            "(ratelimit-limit, ratelimit-remaining); refusing to guess",
            True,
        ),
    ),
    (
        "a limit but no remaining count",
        BudgetSnapshot(HUB, "tracebloc/regcred", _report(100, None, 21600)),
        1,
        0,
        Affordability(
            False,
            f"{WHO} sent rate-limit headers that could not be read (no remaining count); "
            "refusing to guess",
            True,
        ),
    ),
    (
        "enough, with limit and window",
        BudgetSnapshot(HUB, "tracebloc/regcred", _report(100, 10, 21600), 10),
        3,
        2,
        Affordability(
            True, f"{WHO} has 10 pulls left of 100 per 21600s; this refresh needs 3", True, 10
        ),
    ),
    (
        "too few, limit without a window",
        BudgetSnapshot(HUB, "tracebloc/regcred", _report(100, 4, None), 4),
        3,
        2,
        Affordability(
            False,
            f"{WHO} has 4 pulls left of 100; this refresh needs 3 and 2 stay reserved for the "
            "kubelet",
            True,
            4,
        ),
    ),
    (
        "a remaining count without a limit",
        BudgetSnapshot(HUB, "tracebloc/regcred", _report(None, 4, 60), 4),
        1,
        0,
        Affordability(True, f"{WHO} has 4 pulls left; this refresh needs 1", True, 4),
    ),
]


@pytest.mark.parametrize(
    ("case", "snapshot", "pulls", "reserve", "answer"), ANSWERS, ids=[a[0] for a in ANSWERS]
)
def test_every_answer_says_whether_why_and_what_is_left(
    case: str, snapshot: BudgetSnapshot, pulls: int, reserve: int, answer: Affordability
) -> None:
    assert snapshot.can_afford(pulls, reserve) == answer


def test_a_remaining_count_without_a_limit_survives_its_window_rolling_over() -> None:
    budget = PullBudget(HUB, "anonymous")
    budget.record_report(_report(None, 7, 60), now=1000)
    assert budget.estimated_remaining(now=1060) == 7
    assert budget.can_afford(7, reserve=0, now=1060).allowed


def test_the_ledger_answers_for_the_registry_and_account_asked_about() -> None:
    ledger = RateLimitLedger()
    ledger.budget(HUB, "account-1").record_report(_report(100, 5, 60), now=1000)
    assert ledger.can_afford(HUB, "account-1", 3, 2, now=1001) == Affordability(
        True, f"{HUB} for account-1 has 5 pulls left of 100 per 60s; this refresh needs 3", True, 5
    )
    assert not ledger.can_afford(HUB, "account-1", 4, 2, now=1001).allowed
    assert ledger.can_afford(HUB, "account-2", 4, 2, now=1001).reason == (
        f"not limited: {HUB} for account-2 reports no rate limit"
    )


def test_a_snapshot_names_the_pull_secret_never_the_account_key() -> None:
    ledger = RateLimitLedger()
    ledger.budget(HUB, "account-1").record_report(_report(100, 5, 60), now=1000)
    shown = ledger.snapshot(HUB, "account-1", 1001, label="tracebloc/regcred")
    assert shown == BudgetSnapshot(HUB, "tracebloc/regcred", _report(100, 5, 60), 5)
    assert ledger.snapshot(HUB, "account-1", 1001) == BudgetSnapshot(
        HUB, "account-1", _report(100, 5, 60), 5
    )


def test_a_shorter_second_429_never_cuts_the_first_pause_short() -> None:
    ledger = RateLimitLedger()
    ledger.pause("r", retry_after=60, now=100)
    assert ledger.pause("r", retry_after=10, now=110) == 160
    assert not ledger.can_afford("r", "alice", 0, 0, now=150).allowed
    assert ledger.can_afford("r", "alice", 0, 0, now=160).allowed


# --- reservations: pulls a planned refresh will make, never spent twice ------------------------


def _limited(remaining: int = 5) -> RateLimitLedger:
    ledger = RateLimitLedger()
    ledger.budget(HUB, "account-1").record_report(_report(100, remaining, 21600), now=1000)
    return ledger


def test_a_reservation_lowers_what_every_later_snapshot_of_that_account_sees() -> None:
    ledger = _limited(5)
    ledger.reserve(HUB, "account-1", 3, now=1001, settles_in=600)
    assert ledger.snapshot(HUB, "account-1", 1002).remaining == 2
    assert not ledger.can_afford(HUB, "account-1", 1, 2, now=1002).allowed
    assert ledger.snapshot(HUB, "account-2", 1002).remaining is None  # another account


def test_a_report_before_the_pulls_settle_keeps_the_reservation() -> None:
    ledger = _limited(5)
    ledger.reserve(HUB, "account-1", 3, now=1001, settles_in=600)
    # The registry has not seen the kubelet's pulls yet: still 5, and still 3 of them reserved.
    ledger.budget(HUB, "account-1").record_report(_report(100, 5, 21600), now=1100)
    assert ledger.snapshot(HUB, "account-1", 1101).remaining == 2


def test_a_report_observed_after_the_pulls_settled_counts_them_and_ends_the_reservation() -> None:
    ledger = _limited(5)
    ledger.reserve(HUB, "account-1", 3, now=1001, settles_in=600)
    ledger.budget(HUB, "account-1").record_report(_report(100, 2, 21600), now=1601)
    assert ledger.snapshot(HUB, "account-1", 1602).remaining == 2


def test_a_released_reservation_frees_its_pulls() -> None:
    ledger = _limited(5)
    held = ledger.reserve(HUB, "account-1", 3, now=1001, settles_in=600)
    ledger.release(held)
    assert ledger.snapshot(HUB, "account-1", 1002).remaining == 5


def test_a_reservation_ends_with_its_counting_window() -> None:
    ledger = _limited(5)
    ledger.reserve(HUB, "account-1", 3, now=1001, settles_in=600)
    assert ledger.snapshot(HUB, "account-1", 1000 + 21600).remaining == 100


def _rolled(window: int = 60) -> RateLimitLedger:
    """A report of 5 left of 100 at 1000, in windows of ``window`` seconds."""
    ledger = RateLimitLedger()
    ledger.budget(HUB, "account-1").record_report(_report(100, 5, window), now=1000)
    return ledger


def test_every_reservation_of_a_window_counts_together() -> None:
    ledger = _limited(5)
    ledger.reserve(HUB, "account-1", 3, now=1001, settles_in=600)
    ledger.reserve(HUB, "account-1", 1, now=1002, settles_in=600)
    assert ledger.snapshot(HUB, "account-1", 1003).remaining == 1
    assert ledger.can_afford(HUB, "account-1", 1, 0, now=1003).allowed
    assert not ledger.can_afford(HUB, "account-1", 2, 0, now=1003).allowed


def test_a_reservation_made_as_the_window_rolls_over_counts_against_the_new_one() -> None:
    ledger = _rolled()
    ledger.reserve(HUB, "account-1", 3, now=1060, settles_in=600)  # the first instant of it
    assert ledger.snapshot(HUB, "account-1", 1060).remaining == 97
    assert ledger.snapshot(HUB, "account-1", 1119).remaining == 97


def test_a_reservation_a_whole_window_old_counts_no_more_once_another_is_made() -> None:
    ledger = _rolled()
    ledger.reserve(HUB, "account-1", 3, now=1060, settles_in=600)
    ledger.reserve(HUB, "account-1", 2, now=1119, settles_in=600)  # same window: both count
    assert ledger.snapshot(HUB, "account-1", 1119).remaining == 95
    ledger.reserve(HUB, "account-1", 1, now=1120, settles_in=600)  # the first: a window old
    assert ledger.snapshot(HUB, "account-1", 1120).remaining == 97
