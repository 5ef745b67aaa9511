"""Keyset pagination, newest first, with opaque cursors: the one paging helper of the stores.

Every list reads ``limit + 1`` rows (the one more tells the caller that a next page exists,
without counting the list) after the cursor of the last row shown. Two keys order them:

- ``newest_first``: (created_at, id), for rows made at any moment (workflows, runs, assets,
  credentials, webhooks, schedules); the cursor is ``encode_cursor(created_at, id)``;
- ``highest_first``: one integer that grows with time (a ledger entry's id, a version's
  number); the cursor is that number, bare (``number_cursor``) or tagged with the list's
  name (``tagged_cursor``).

A cursor this server did not issue is 400 ``invalid_request`` (pointer ``query:cursor``).
The routes' side (the page's rows and its ``Link`` header) is api/paging.py.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from nodeloom.errors import FieldError, InvalidRequest

NUMBER_MAX = 2**31  # the largest number a bare number cursor may carry


def invalid_cursor() -> InvalidRequest:
    return InvalidRequest(
        "cursor is not one this server issued",
        errors=[FieldError("query:cursor", "invalid cursor")],
    )


def _encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode(cursor: str) -> str:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()


def encode_cursor(created_at: datetime, row_id: str) -> str:
    return _encode(f"{created_at.isoformat()}|{row_id}")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        stamp, row_id = _decode(cursor).split("|", 1)
        moment = datetime.fromisoformat(stamp)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment, row_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_cursor() from exc


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


def tagged_cursor(tag: str, number: int) -> str:
    """The cursor after the row whose key is ``number``, in the list called ``tag``."""
    return _encode(f"{tag}|{number}")


def decode_tagged(tag: str, cursor: str) -> int:
    try:
        found, value = _decode(cursor).split("|", 1)
        if found != tag:
            raise ValueError(found)
        return int(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_cursor() from exc


def number_cursor(cursor: str | None) -> int | None:
    """A bare number cursor (1 to NUMBER_MAX), or None for the first page."""
    if cursor is None:
        return None
    if not cursor.isdigit() or not 1 <= int(cursor) <= NUMBER_MAX:
        raise invalid_cursor()
    return int(cursor)


def highest_first(
    query: sa.Select[Any], column: Any, limit: int, below: int | None
) -> sa.Select[Any]:
    """``query`` as one page ordered by the growing integer ``column``, highest first, below
    ``below`` when given: ``limit + 1`` rows."""
    if below is not None:
        query = query.where(column < below)
    return query.order_by(column.desc()).limit(limit + 1)
