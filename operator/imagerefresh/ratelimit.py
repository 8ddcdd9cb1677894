"""Pull-rate accounting: what each registry says we have left, and what we spent ourselves.

Docker Hub reports its pull budget on every manifest response (``ratelimit-limit: 100;w=21600``,
``ratelimit-remaining: 76;w=21600``, ``docker-ratelimit-source: <ip or user id>``) and counts
only manifest GETs as pulls — HEADs are free. The replaced CronJob did this arithmetic by hand in
a comment; here it is a ledger with one :class:`PullBudget` per (registry, account), fed by the
registry client and asked by the planner: *can I afford N more pulls and still leave R for the
kubelet?* The registry's limit is per account, so the budget is too: keyed by
:attr:`~imagerefresh.credentials.Credentials.account` (the whole credential, never the username
alone) or ``anonymous``. A snapshot carries the name status shows (the pull secret), never
the account key.

A registry that sends no rate-limit headers reports no limit for that identity (Docker Hub
documents exactly this for unlimited accounts, and most private registries never send them):
the budget says so explicitly and refreshes proceed. Headers that are present but malformed are
logged and counted, never guessed into a number — the budget then reports "unknown" and the
answer is no, because an unreadable budget is not an empty one.

The pulls a refresh makes happen later, when the kubelet pulls the new digest. So that two
policies ticking at the same instant never both spend the same pulls, a planned refresh
*reserves* them (:meth:`RateLimitLedger.reserve`) before the next tick reads the budget: a
reservation counts against every snapshot until a report is observed that must include its
pulls — one observed after the reservation's settle time (the rollout's progress deadline) —
or until its counting window ends. A report in between may already count some of them: the
estimate is then low for a while, never high. A refresh whose patch did not land releases
its reservation at once.

Everything takes ``now`` (seconds, monotonic or wall — the caller's choice, used consistently)
so the accounting is pure and testable.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

import structlog

__all__ = [
    "Affordability",
    "BudgetSnapshot",
    "PullBudget",
    "RateLimitLedger",
    "RateLimitReport",
    "RequestKind",
    "Reservation",
    "parse_ratelimit_headers",
]

log = structlog.get_logger(__name__)

LIMIT_HEADER = "ratelimit-limit"
REMAINING_HEADER = "ratelimit-remaining"
SOURCE_HEADER = "docker-ratelimit-source"
# When a registry reports no window of its own, our own request counts roll over hourly.
DEFAULT_COUNTING_WINDOW = 3600

# ASCII digits only (a hostile registry's "٣" is not 3), and few enough of them that a count
# always fits the int64 the policy status is stored as: more digits are malformed, not huge.
_QUOTA_RE = re.compile(
    # count[;w=window][;other params] — a w= the window group could not read is malformed.
    r"^\s*(?P<count>[0-9]{1,15})\s*(?:;\s*w\s*=\s*(?P<window>[0-9]{1,15})\s*)?"
    r"(?:;(?!\s*w\s*=).*)?$",
    re.ASCII | re.DOTALL,
)
# docker-ratelimit-source is an address or an account id; a longer value is cut, not stored.
MAX_SOURCE_LENGTH = 128


class RequestKind(StrEnum):
    """The kinds of registry request the operator makes; only GET (of a manifest, or of the
    referrers of a digest) costs a pull. A blob GET (a signature's payload or bundle) is
    counted but not charged: Docker Hub counts manifest GETs only."""

    TOKEN = "token"
    HEAD = "HEAD"
    GET = "GET"
    BLOB = "blob"

    @property
    def is_pull(self) -> bool:
        """Whether the registry charges the request to the pull budget."""
        return self is RequestKind.GET


@dataclass(frozen=True, slots=True)
class RateLimitReport:
    """What one registry response said about the pull budget."""

    limit: int | None = None
    remaining: int | None = None
    window_seconds: int | None = None
    source: str | None = None
    malformed: tuple[str, ...] = ()

    @property
    def reported(self) -> bool:
        """Whether the response carried a usable limit at all."""
        return self.limit is not None or self.remaining is not None


def _parse_quota(value: str) -> tuple[int, int | None] | None:
    # Several quota policies may be listed, comma-separated; the first is the binding one.
    match = _QUOTA_RE.match(value.split(",")[0])
    if match is None:
        return None
    window = match["window"]
    return int(match["count"]), int(window) if window is not None else None


def parse_ratelimit_headers(headers: Mapping[str, str]) -> RateLimitReport:
    """Read ``ratelimit-limit`` / ``ratelimit-remaining`` / ``docker-ratelimit-source``."""
    lowered = {key.lower(): value for key, value in headers.items()}
    parsed: dict[str, tuple[int, int | None]] = {}
    malformed: list[str] = []
    for name in (LIMIT_HEADER, REMAINING_HEADER):
        if name not in lowered:
            continue
        quota = _parse_quota(lowered[name])
        if quota is None:
            malformed.append(name)
            log.warning("malformed rate-limit header", header=name, value=lowered[name][:100])
        else:
            parsed[name] = quota
    limit = parsed.get(LIMIT_HEADER)
    remaining = parsed.get(REMAINING_HEADER)
    windows = [quota[1] for quota in (limit, remaining) if quota is not None and quota[1]]
    return RateLimitReport(
        limit=limit[0] if limit else None,
        remaining=remaining[0] if remaining else None,
        window_seconds=windows[0] if windows else None,
        source=source[:MAX_SOURCE_LENGTH] if (source := lowered.get(SOURCE_HEADER)) else source,
        malformed=tuple(malformed),
    )


@dataclass(frozen=True, slots=True)
class Affordability:
    """The answer to "may I spend these pulls?", with the reason an operator can act on."""

    allowed: bool
    reason: str
    limited: bool
    remaining: int | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """Pulls a planned refresh will make: counted until a report must include them."""

    registry: str
    identity: str
    pulls: int
    made_at: float
    settled_by: float  # by then the kubelet has made them: a report after it counts them


@dataclass(slots=True)
class PullBudget:
    """The pull budget of one identity at one registry, as last reported plus our own spend."""

    registry: str
    identity: str
    report: RateLimitReport | None = None
    observed_at: float | None = None
    malformed_headers: int = 0
    window_started_at: float | None = None
    requests: Counter[RequestKind] = field(default_factory=Counter)
    pulls_since_report: int = 0
    reservations: list[Reservation] = field(default_factory=list)

    @property
    def window_seconds(self) -> int:
        if self.report is not None and self.report.window_seconds:
            return self.report.window_seconds
        return DEFAULT_COUNTING_WINDOW

    def record_request(self, kind: RequestKind, now: float) -> None:
        """Count one request we sent; GETs also lower the remaining pulls we believe in."""
        if self.window_started_at is None or now - self.window_started_at >= self.window_seconds:
            self.window_started_at = now
            self.requests.clear()
        self.requests[kind] += 1
        if kind.is_pull:
            self.pulls_since_report += 1

    def record_report(self, report: RateLimitReport, now: float) -> None:
        """Take what a response said; a response without headers means "not limited"."""
        if report.malformed:
            self.malformed_headers += len(report.malformed)
        self.report = report
        self.observed_at = now
        self.pulls_since_report = 0
        # A report observed once a reservation's pulls must have been made counts them.
        self.reservations = [r for r in self.reservations if r.settled_by > now]

    def reserve(self, reservation: Reservation) -> None:
        # Those of a window that has ended count no more (and are never kept for ever).
        start = reservation.made_at - self.window_seconds
        self.reservations = [r for r in self.reservations if r.made_at > start]
        self.reservations.append(reservation)

    def release(self, reservation: Reservation) -> None:
        """The refresh never happened (its patch did not land): its pulls are free again."""
        if reservation in self.reservations:
            self.reservations.remove(reservation)

    def reserved(self, since: float | None = None) -> int:
        """Pulls planned refreshes (those from ``since`` on) will make, no report counted yet."""
        return sum(r.pulls for r in self.reservations if since is None or r.made_at >= since)

    def estimated_remaining(self, now: float) -> int | None:
        """Pulls left: the last reported figure less our own GETs since and the pulls reserved
        by refreshes not yet counted; None when unknown."""
        report = self.report
        if report is None or report.remaining is None:
            return None
        assert self.observed_at is not None
        if report.window_seconds and now - self.observed_at >= report.window_seconds:
            # A whole window has passed since the report: the budget has rolled over, and only
            # what was reserved in the new window counts against it.
            full = report.limit if report.limit is not None else report.remaining
            return full - self.reserved(since=self.observed_at + report.window_seconds)
        return report.remaining - self.pulls_since_report - self.reserved()

    def snapshot(self, now: float, blocked: str | None = None) -> BudgetSnapshot:
        return BudgetSnapshot(
            self.registry, self.identity, self.report, self.estimated_remaining(now), blocked
        )

    def can_afford(self, pulls: int, reserve: int, now: float) -> Affordability:
        """Whether ``pulls`` more pulls still leave ``reserve`` for the kubelet."""
        return self.snapshot(now).can_afford(pulls, reserve)


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """A budget frozen at one instant, for a pure planner that spends it across many targets."""

    registry: str
    identity: str
    report: RateLimitReport | None = None
    remaining: int | None = None  # believed remaining pulls; None when unknown or unlimited
    blocked: str | None = None  # why no pull may be spent at all (a 429 pause)

    def can_afford(
        self, pulls: int, reserve: int, already_spent: int = 0, *, needs: str = "this refresh needs"
    ) -> Affordability:
        """Whether ``pulls`` more, after ``already_spent`` this tick, still leave ``reserve``.

        ``needs`` says, in the reason, what wants them ("this refresh needs").
        """
        who = f"{self.registry} for {self.identity}"
        if self.blocked is not None:
            return Affordability(False, self.blocked, True)
        report = self.report
        if report is None or (not report.reported and not report.malformed):
            return Affordability(True, f"not limited: {who} reports no rate limit", False)
        if self.remaining is None:
            return Affordability(
                False,
                f"{who} sent rate-limit headers that could not be read "
                f"({', '.join(report.malformed) or 'no remaining count'}); refusing to guess",
                True,
            )
        remaining = self.remaining - already_spent
        window = f" per {report.window_seconds}s" if report.window_seconds else ""
        of_limit = f" of {report.limit}{window}" if report.limit is not None else ""
        status = f"{who} has {remaining} pulls left{of_limit}"
        if remaining - pulls < reserve:
            return Affordability(
                False,
                f"{status}; {needs} {pulls} and {reserve} stay reserved for the kubelet",
                True,
                remaining,
            )
        return Affordability(True, f"{status}; {needs} {pulls}", True, remaining)


@dataclass(slots=True)
class RateLimitLedger:
    """Every budget the operator knows, keyed by (registry host, account)."""

    budgets: dict[tuple[str, str], PullBudget] = field(default_factory=dict)
    paused_until: dict[str, float] = field(default_factory=dict)

    def budget(self, registry: str, identity: str) -> PullBudget:
        key = (registry, identity)
        if key not in self.budgets:
            self.budgets[key] = PullBudget(registry=registry, identity=identity)
        return self.budgets[key]

    def pause(self, registry: str, retry_after: float, now: float) -> float:
        """A 429: nothing goes to ``registry`` until ``now + retry_after``; returns that time."""
        until = max(self.paused_until.get(registry, now), now + retry_after)
        self.paused_until[registry] = until
        return until

    def pause_remaining(self, registry: str, now: float) -> float:
        """Seconds until ``registry`` may be asked again (0 when it is not paused)."""
        until = self.paused_until.get(registry)
        return 0.0 if until is None else max(0.0, until - now)

    def reserve(
        self, registry: str, identity: str, pulls: int, now: float, settles_in: float
    ) -> Reservation:
        """Count ``pulls`` a planned refresh will make, from ``now`` until a report observed
        ``settles_in`` seconds later (or the end of the window) must count them."""
        reservation = Reservation(registry, identity, pulls, now, now + settles_in)
        self.budget(registry, identity).reserve(reservation)
        return reservation

    def release(self, reservation: Reservation) -> None:
        self.budget(reservation.registry, reservation.identity).release(reservation)

    def can_afford(
        self, registry: str, identity: str, pulls: int, reserve: int, now: float
    ) -> Affordability:
        """Whether ``identity`` may spend ``pulls`` more at ``registry`` and keep ``reserve``."""
        return self.snapshot(registry, identity, now).can_afford(pulls, reserve)

    def snapshot(
        self, registry: str, identity: str, now: float, *, label: str | None = None
    ) -> BudgetSnapshot:
        """The budget of ``identity`` at ``registry`` as of ``now``, pause included.

        ``label`` is how the snapshot names the account (the pull secret) when the budget is
        keyed by an account key that must not be shown.
        """
        paused = self.pause_remaining(registry, now)
        blocked = (
            f"{registry} answered 429 Too Many Requests; paused for {paused:.0f}s more"
            if paused > 0
            else None
        )
        snapshot = self.budget(registry, identity).snapshot(now, blocked)
        return snapshot if label is None else replace(snapshot, identity=label)
