"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs a task and a copy per request)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from nodeloom.api.problems import problem_response, respond_to
from nodeloom.api.urls import public_base, valid_host
from nodeloom.ratelimit import Decision


class _HttpOnly:
    """Middleware that acts on HTTP requests (``handle``) and passes anything else (a
    WebSocket, the lifespan) through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class _HeadersOnStart(_HttpOnly):
    """Middleware that adds headers to each HTTP response as its start goes out (``add``)."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.add(scope, message)
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def add(self, scope: Scope, start: Message) -> None:
        raise NotImplementedError


class RateLimitHeaders(_HeadersOnStart):
    """Adds RateLimit-* headers to every response whose request was counted against a limit."""

    def add(self, scope: Scope, start: Message) -> None:
        decision = scope.get("state", {}).get("ratelimit")
        if isinstance(decision, Decision):
            headers = MutableHeaders(scope=start)
            for name, value in decision.headers().items():
                if name not in headers:
                    headers[name] = value


class RejectNul:
    """A NUL in the path or the query string is refused (400) before routing: PostgreSQL
    cannot take it in a text parameter, and no id, name or cursor of ours contains one."""

    def __init__(self, app: ASGIApp, base_url: str | None) -> None:
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
                base_url=public_base(self.base_url, scope),
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class ContainErrors(_HttpOnly):
    """An exception no route handled is answered here with the app's own handler for it (a
    problem+json 500 for a bug), and goes no further. Left to the framework, the outermost
    handler answers and then re-raises, and the server closes the connection: the client's
    next request on that keep-alive connection would be reset. Installed just outside the
    hot paths, so their errors are contained too."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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


class SecurityHeaders(_HeadersOnStart):
    """``X-Content-Type-Options: nosniff`` on every response: API bodies, problems, artifact
    downloads, the web app, and the answers api/hot.py builds itself. Without it a browser
    may guess that a text artifact or a JSON body is HTML and render it on our origin.
    Headers a response already sets are kept (the artifact route adds its own policy)."""

    def add(self, scope: Scope, start: Message) -> None:
        headers = MutableHeaders(scope=start)
        if "x-content-type-options" not in headers:
            headers["X-Content-Type-Options"] = "nosniff"


class ForwardedHeaders:
    """Believe ``X-Forwarded-Proto``, ``X-Forwarded-For`` and ``X-Forwarded-Host`` from the
    reverse proxies in ``NODELOOM_FORWARDED_ALLOW_IPS``, and from nobody else.

    The scheme and the client address are uvicorn's ``ProxyHeadersMiddleware``'s work; this
    adds the host: the first ``X-Forwarded-Host`` (the one the client used) replaces the
    ``Host`` header, so URLs built from the request (api/urls.py, ``Link`` headers) carry
    the public address. The peer is checked here, before uvicorn's middleware replaces it
    with the forwarded client. ``nodeloom serve`` turns uvicorn's own copy of that
    middleware off (api/serving.py), so one list decides, the same in tests and in
    production.
    """

    def __init__(self, app: ASGIApp, trusted: str) -> None:
        self.proxy = ProxyHeadersMiddleware(app, trusted_hosts=trusted)  # type: ignore[arg-type]
        self.trusted = self.proxy.trusted_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            client = scope.get("client")
            if client and client[0] in self.trusted:
                _forwarded_host(scope)
        await self.proxy(scope, receive, send)  # type: ignore[arg-type]


def _forwarded_host(scope: Scope) -> None:
    headers: list[tuple[bytes, bytes]] = list(scope["headers"])
    forwarded = next((v for k, v in headers if k == b"x-forwarded-host"), None)
    if forwarded is None:
        return
    host = forwarded.decode("latin-1").split(",")[0].strip()
    if not valid_host(host):
        return
    # In place, as uvicorn's middleware changes the scheme: Starlette's error middleware,
    # outside this one, builds its 500 answer from the same scope.
    scope["headers"] = [(k, v) for k, v in headers if k != b"host"] + [
        (b"host", host.encode("latin-1"))
    ]
