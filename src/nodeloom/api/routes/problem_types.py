"""The pages that problem ``type`` URIs point to: ``/api/v1/problems/{code}``.

Public (no credential), like the OpenAPI document: they describe the API, not an account.
JSON by default; a browser (``Accept`` preferring ``text/html``) gets a small page that needs
nothing from the internet.
"""

from __future__ import annotations

import html
import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from nodeloom.errors import NotFound
from nodeloom.problem_catalog import CATALOG, PROBLEMS, ProblemType

router = APIRouter(tags=["problems"])

_CODE_SPAN = re.compile(r"`([^`]+)`")
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body{{font:16px/1.5 system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem}}
code{{background:#8882;padding:0 .2em;border-radius:3px}}
dt{{font-weight:600;margin-top:1rem}}
</style></head>
<body>{body}</body></html>
"""


def _inline(text: str) -> str:
    return _CODE_SPAN.sub(r"<code>\1</code>", html.escape(text, quote=False))


def _wants_html(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "text/html" in accept and "application/json" not in accept


def _entry_html(problem: ProblemType) -> str:
    return (
        f'<dt id="{problem.code}"><code>{problem.code}</code> &middot; {problem.status} '
        f"{html.escape(problem.title)}</dt>"
        f"<dd><p>{_inline(problem.meaning)}</p><p><b>What to do:</b> {_inline(problem.remedy)}"
        "</p></dd>"
    )


_HTML_200: dict[int | str, dict[str, Any]] = {200: {"content": {"text/html": {}}}}


@router.get("/problems", response_model=list[ProblemType], responses=_HTML_200)
async def list_problem_types(request: Request) -> Response | list[ProblemType]:
    """Every problem ``code`` this API answers with, its status and what to do."""
    if _wants_html(request):
        body = "<h1>Nodeloom API problems</h1><dl>" + "".join(map(_entry_html, CATALOG)) + "</dl>"
        return HTMLResponse(_PAGE.format(title="Nodeloom API problems", body=body))
    return list(CATALOG)


@router.get(
    "/problems/{code}",
    response_model=ProblemType,
    responses={**_HTML_200, 404: {"description": "No such problem code (not_found)"}},
)
async def get_problem_type(code: str, request: Request) -> Response | ProblemType:
    """What a problem ``code`` means and what to do about it (the ``type`` URI's page)."""
    problem = PROBLEMS.get(code)
    if problem is None:
        raise NotFound(f"No problem code {code!r}; GET /api/v1/problems lists them all.")
    if _wants_html(request):
        body = f'<p><a href="../problems">All problems</a></p><dl>{_entry_html(problem)}</dl>'
        return HTMLResponse(_PAGE.format(title=f"{problem.code}: {problem.title}", body=body))
    return problem
