"""Keyset pagination over (created_at, id), newest first, with opaque cursors."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from nodeloom.errors import FieldError, InvalidRequest


def encode_cursor(created_at: datetime, row_id: str) -> str:
    raw = f"{created_at.isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        stamp, row_id = base64.urlsafe_b64decode(padded).decode().split("|", 1)
        moment = datetime.fromisoformat(stamp)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment, row_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            "cursor is not one this server issued",
            errors=[FieldError("query:cursor", "invalid cursor")],
        ) from exc


def newest_first(
    query: sa.Select[Any], table: sa.Table, limit: int, cursor: str | None
) -> sa.Select[Any]:
    """``query`` as one page of ``table``'s rows, newest first after ``cursor``: ``limit + 1``
    rows, the one more telling the caller that a next page exists."""
    return (
        query.where(after_cursor(table.c.created_at, table.c.id, cursor))
        .order_by(table.c.created_at.desc(), table.c.id.desc())
        .limit(limit + 1)
    )


def after_cursor(created_col: Any, id_col: Any, cursor: str | None) -> Any:
    """A WHERE clause selecting rows after ``cursor`` in newest-first order, or true."""
    if cursor is None:
        return sa.true()
    created_at, row_id = decode_cursor(cursor)
    return sa.tuple_(created_col, id_col) < sa.tuple_(
        sa.literal(created_at, created_col.type), row_id
    )
