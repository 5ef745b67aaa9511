"""Shared field types for response bodies."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import PlainSerializer


def format_timestamp(value: datetime) -> str:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-11-22T06:00:00.123Z``: every timestamp the
    API sends."""
    return (
        value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    )


Timestamp = Annotated[
    datetime, PlainSerializer(format_timestamp, return_type=str, when_used="json")
]
