"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs a task and a copy per request)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodeloom.api.problems import problem_response, respond_to
from nodeloom.ratelimit import Decision


class RateLimitHeaders:
    """Adds RateLimit-* headers to every response whose request was counted against a limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                decision = scope.get("state", {}).get("ratelimit")
                if isinstance(decision, Decision):
                    headers = MutableHeaders(scope=message)
                    for name, value in decision.headers().items():
                        if name not in headers:
                            headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class RejectNul:
    """A NUL in the path or the query string is refused (400) before routing: PostgreSQL
    cannot take it in a text parameter, and no id, name or cursor of ours contains one."""

    def __init__(self, app: ASGIApp, base_url: str) -> None:
        self.app = app
        self.base_url = base_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (
            "\x00" in scope["path"]
            or b"%00" in scope["query_string"]
            or b"\x00" in scope["query_string"]
        ):
            response = problem_response(
                400,
                "invalid_request",
                "Invalid request",
                "The path and query may not contain the NUL character (U+0000).",
                base_url=self.base_url,
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class ContainErrors:
    """An exception no route handled is answered here with the app's own handler for it (a
    problem+json 500 for a bug), and goes no further. Left to the framework, the outermost
    handler answers and then re-raises, and the server closes the connection: the client's
    next request on that keep-alive connection would be reset. Installed just outside the
    hot paths, so their errors are contained too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:  # too late to answer: the server closes the connection, as it must
                raise
            handlers = scope["app"].exception_handlers
            response = await respond_to(handlers, Request(scope), exc)
            await response(scope, receive, send)
