"""Go-style durations (``90s``, ``15m``, ``1h30m``), as Kubernetes users write them.

The CRD validates the same strings with CEL's ``duration()``, which is Go's
``time.ParseDuration``; this module accepts exactly that grammar (a sequence of decimal numbers
with units ``ns``, ``us``/``µs``, ``ms``, ``s``, ``m``, ``h``) so a policy the API server admits
is a policy the operator reads, and formats a :class:`~datetime.timedelta` back the way Go's
``Duration.String`` does.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

__all__ = ["GO_DURATION_PATTERN", "Duration", "format_duration", "parse_duration"]

# The shape the CRD admits before CEL's duration() checks the minimum.
GO_DURATION_PATTERN = r"^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$"

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_RE = re.compile(rf"(?:{_PART_RE.pattern})+")


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration; raise ValueError naming the accepted form."""
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    if body == "0":
        return timedelta(0)
    if not body:
        raise ValueError(f"invalid duration {text!r}: it is empty")
    if _DURATION_RE.fullmatch(body) is None:
        raise ValueError(
            f"invalid duration {text!r}: write a Go duration such as 30s, 15m or 1h30m"
        )
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART_RE.findall(body))
    return timedelta(seconds=sign * seconds)


def format_duration(value: timedelta) -> str:
    """Format like Go's ``Duration.String`` for whole seconds: ``1h30m0s``, ``15m0s``, ``30s``."""
    total = value.total_seconds()
    sign = "-" if total < 0 else ""
    total = abs(total)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{seconds:g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return sign + text


def _coerce(value: object) -> object:
    if isinstance(value, str):
        return parse_duration(value)
    return value


Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": GO_DURATION_PATTERN}),
]
