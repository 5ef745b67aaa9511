"""Paged lists: the rows of one page, and the ``Link: <...>; rel="next"`` header to the next.

Every list route reads ``limit + 1`` rows from its store: the one row more says whether a
next page exists without counting the whole list.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from nodeloom.store import Record
from nodeloom.store.paging import encode_cursor


def link_next(request: Request, cursor: str) -> str:
    url = request.url.include_query_params(cursor=cursor)
    return f'<{url}>; rel="next"'


def created_cursor(row: Record) -> str:
    """The cursor after ``row`` in a list kept newest first by (created_at, id)."""
    return encode_cursor(row.created_at, row.id)


def page_of(
    request: Request,
    rows: list[Record],
    limit: int,
    cursor_after: Callable[[Record], str] = created_cursor,
) -> tuple[list[Record], dict[str, str]]:
    """The first ``limit`` of the ``limit + 1`` rows a store read, and the answer's headers:
    a Link to the page after the last of them when the store found a row more."""
    if len(rows) <= limit:
        return rows, {}
    rows = rows[:limit]
    return rows, {"Link": link_next(request, cursor_after(rows[-1]))}
