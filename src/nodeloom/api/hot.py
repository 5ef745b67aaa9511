"""The two requests a busy server answers most, without the framework's per-request work:
``POST /api/v1/webhooks/{token}`` (a trigger) and ``GET /api/v1/workflows/{id}/runs/{run_id}``
(a status poll).

FastAPI matches a request against every route in turn, solves a dependency graph, then
validates and serializes the endpoint's answer through its response model: about a fifth of
a loaded server's CPU on a trigger. Here each path is one regular expression, and the
endpoint functions of the routes (``routes/webhooks.trigger``, ``routes/runs.get_run``) are
called with what FastAPI would have given them; their answers are already plain JSON
values, encoded once. The routes stay declared on the app, which is how the OpenAPI
document describes them, and every other request goes to the app as before.

This middleware is the innermost of the app's own (api/app.py), so draining, the NUL check
and the RateLimit-* headers apply here as everywhere; errors become problem+json through the
same handlers (``problems.exception_handlers``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from fastapi.security import HTTPBearer
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from nodeloom.api import problems
from nodeloom.api.deps import get_principal
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes import runs, webhooks
from nodeloom.api.state import AppContext

Handler = Callable[[Request, AppContext, tuple[str, ...]], Awaitable[Response]]
_BEARER = HTTPBearer(auto_error=False)


async def _trigger(request: Request, ctx: AppContext, args: tuple[str, ...]) -> Response:
    body = await webhooks.trigger(args[0], request, ctx)
    return OrjsonResponse(body, status_code=202)


async def _run_status(request: Request, ctx: AppContext, args: tuple[str, ...]) -> Response:
    principal = await get_principal(request, ctx, await _BEARER(request))
    return await runs.get_run(args[0], args[1], principal, ctx)


_ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("POST", re.compile(r"/api/v1/webhooks/([^/]+)"), _trigger),
    ("GET", re.compile(r"/api/v1/workflows/([^/]+)/runs/([^/]+)"), _run_status),
]


class HotPaths:
    def __init__(self, app: ASGIApp, ctx: AppContext) -> None:
        self.app = app
        self.ctx = ctx
        self.handlers = problems.exception_handlers(ctx.settings.base_url)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for method, pattern, handler in _ROUTES:
                if scope["method"] != method:
                    continue
                match = pattern.fullmatch(scope["path"])
                if match is not None:
                    request = Request(scope, receive)
                    try:
                        response = await handler(request, self.ctx, match.groups())
                    except Exception as exc:
                        response = await problems.respond_to(self.handlers, request, exc)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)
