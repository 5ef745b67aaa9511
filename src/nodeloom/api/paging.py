"""Paged lists: the rows of one page, and the ``Link: <...>; rel="next"`` header to the next.

Every list route reads ``limit + 1`` rows from its store (store/paging.py): the one row more
says whether a next page exists without counting the whole list. A route that answers its
own response passes ``page_of``'s headers to it; one that returns its items for FastAPI to
serialize uses ``paged``, which sets them on the response.

A list route takes its page as one parameter, ``page: PageDep``: the ``limit`` and
``cursor`` query parameters every list shares (same bounds, same descriptions), with the
request and response the page is answered on, so the route names neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Query
from starlette.requests import Request
from starlette.responses import Response

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


def paged(
    request: Request,
    response: Response,
    rows: list[Record],
    limit: int,
    cursor_after: Callable[[Record], str] = created_cursor,
) -> list[Record]:
    """``page_of``'s rows, its ``Link`` header set on ``response``."""
    rows, headers = page_of(request, rows, limit, cursor_after)
    response.headers.update(headers)
    return rows


LimitQuery = Annotated[int, Query(ge=1, le=200, description="Page size (default 50)")]
CursorQuery = Annotated[str | None, Query(max_length=200, description="From a Link header")]


@dataclass(frozen=True)
class Page:
    """The page a list request asks for, and where its ``Link`` header goes."""

    limit: int
    cursor: str | None
    request: Request
    response: Response

    def rows(
        self, rows: list[Record], cursor_after: Callable[[Record], str] = created_cursor
    ) -> list[Record]:
        """The page's rows of the ``limit + 1`` read; the Link set on the response FastAPI
        serializes the route's answer into."""
        return paged(self.request, self.response, rows, self.limit, cursor_after)

    def rows_and_headers(
        self, rows: list[Record], cursor_after: Callable[[Record], str] = created_cursor
    ) -> tuple[list[Record], dict[str, str]]:
        """For a route that answers its own response: the rows and the headers to give it."""
        return page_of(self.request, rows, self.limit, cursor_after)


async def page_query(  # async: a plain def would run in a worker thread
    request: Request, response: Response, limit: LimitQuery = 50, cursor: CursorQuery = None
) -> Page:
    return Page(limit, cursor, request, response)


PageDep = Annotated[Page, Depends(page_query)]
