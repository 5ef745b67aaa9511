"""The requests a busy server answers most, without the framework's per-request work:
``POST /api/v1/webhooks/{token}`` (a trigger), ``POST /api/v1/workflows/{id}/execute`` and
``GET /api/v1/workflows/{id}/runs/{run_id}`` (a status poll).

FastAPI matches a request against every route in turn, solves a dependency graph, then
validates and serializes the endpoint's answer through its response model: about a fifth of
a loaded server's CPU on a trigger. Here each path is one regular expression, and the
endpoint functions of the routes (``routes/webhooks.trigger``, ``routes/runs.execute``,
``routes/runs.get_run``) are called with what FastAPI would have given them; their answers
are already plain JSON values, encoded once. A request whose parameters FastAPI would refuse
(an ``Idempotency-Key`` over 255 characters) is left to the app, so the refusal is FastAPI's
own. The routes stay declared on the app, which is how the OpenAPI
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

# A handler answers, or returns None to leave the request to the app.
Handler = Callable[[Request, AppContext, tuple[str, ...]], Awaitable[Response | None]]
_BEARER = HTTPBearer(auto_error=False)
MAX_IDEMPOTENCY_KEY = 255  # as routes/runs.execute declares it


async def _trigger(request: Request, ctx: AppContext, args: tuple[str, ...]) -> Response:
    body = await webhooks.trigger(args[0], request, ctx)
    return OrjsonResponse(body, status_code=202)


async def _execute(request: Request, ctx: AppContext, args: tuple[str, ...]) -> Response | None:
    key = request.headers.get("idempotency-key")
    if key is not None and len(key) > MAX_IDEMPOTENCY_KEY:
        return None
    principal = await get_principal(request, ctx, await _BEARER(request))
    headers = Response()  # what the endpoint sets (Location...), as FastAPI would pass it
    del headers.headers["content-length"]
    body = await runs.execute(args[0], request, headers, principal, ctx, key)
    return OrjsonResponse(body, status_code=202, headers=dict(headers.headers))


async def _run_status(request: Request, ctx: AppContext, args: tuple[str, ...]) -> Response:
    principal = await get_principal(request, ctx, await _BEARER(request))
    return await runs.get_run(args[0], args[1], principal, ctx)


_ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("POST", re.compile(r"/api/v1/webhooks/([^/]+)"), _trigger),
    ("POST", re.compile(r"/api/v1/workflows/([^/]+)/execute"), _execute),
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
                    if response is not None:
                        await response(scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)
