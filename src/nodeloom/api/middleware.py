"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs a task and a copy per request)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
