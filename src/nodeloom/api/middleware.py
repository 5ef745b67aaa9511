"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs a task and a copy per request)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodeloom.api.problems import problem_response
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


class SecurityHeaders:
    """``X-Content-Type-Options: nosniff`` on every response: API bodies, problems, artifact
    downloads, the web app, and the answers api/hot.py builds itself. Without it a browser
    may guess that a text artifact or a JSON body is HTML and render it on our origin.
    Headers a response already sets are kept (the artifact route adds its own policy)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if "x-content-type-options" not in headers:
                    headers["X-Content-Type-Options"] = "nosniff"
            await send(message)

        await self.app(scope, receive, send_with_headers)
