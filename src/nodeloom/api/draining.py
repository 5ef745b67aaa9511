"""Refusing new requests while the server drains (api/serving.py): a replica that got SIGTERM
keeps listening, so that a load balancer still sending to it gets 503 and ``Retry-After``
instead of connection errors. ``/healthz`` and ``/metrics`` still answer: the process is
alive, and ``/readyz`` (refused like the rest) takes it out of the balancer.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from nodeloom.api.problems import problem_response
from nodeloom.api.state import AppContext
from nodeloom.api.urls import public_base

DRAIN_RETRY_AFTER = "5"
_ALWAYS = frozenset({"/healthz", "/metrics"})


class RefuseWhileDraining:
    """503 + Retry-After for new requests once the server drains (see api/serving.py)."""

    def __init__(self, app: ASGIApp, ctx: AppContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.ctx.draining or scope["type"] == "lifespan" or scope["path"] in _ALWAYS:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1012, "reason": "server restarting"})
            return
        response = problem_response(
            503,
            "service_unavailable",
            "Service unavailable",
            "The server is restarting; retry shortly (another replica may answer now).",
            base_url=public_base(self.ctx.settings.base_url, scope),
            headers={"Retry-After": DRAIN_RETRY_AFTER, "Connection": "close"},
        )
        await response(scope, receive, send)
