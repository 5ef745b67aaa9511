"""The ``Link: <...>; rel="next"`` header of paged lists."""

from __future__ import annotations

from starlette.requests import Request


def link_next(request: Request, cursor: str) -> str:
    url = request.url.include_query_params(cursor=cursor)
    return f'<{url}>; rel="next"'
