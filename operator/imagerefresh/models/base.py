"""The shared shape of every API model: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel

__all__ = ["ApiModel", "Timestamp", "format_timestamp"]


class ApiModel(BaseModel):
    """A Kubernetes-style object part: camelCase aliases, frozen, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    def to_api(self) -> dict[str, object]:
        """The JSON form written to the API server (aliases, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC at second precision, as ``metav1.Time`` serialises."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_timestamp(value: object) -> object:
    if isinstance(value, str):
        # Python 3.11's fromisoformat reads RFC 3339's "Z" itself.
        return datetime.fromisoformat(value)
    return value


Timestamp = Annotated[
    datetime,
    BeforeValidator(_parse_timestamp),
    PlainSerializer(format_timestamp, return_type=str),
]
