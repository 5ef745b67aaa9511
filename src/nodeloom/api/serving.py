"""Serving with a drain: uvicorn, except that the first SIGTERM (or Ctrl-C) does not close
the listening socket at once.

A load balancer keeps sending requests for a moment after it asked a replica to stop, and a
closed socket turns them into connection errors. Instead, on the first signal the server keeps
listening and answers every new request with 503 and ``Retry-After`` (``/readyz`` too, so the
balancer takes it out; ``/healthz`` stays 200: the process is alive), while the executor lets
running nodes finish and commit (``shutdown_grace_seconds``). Then it shuts down the way
uvicorn does. A second signal exits at once. The refusing itself is api/draining.py, a
middleware the app is built with.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
from types import FrameType

import uvicorn
from starlette.types import ASGIApp

from nodeloom import logs
from nodeloom.api.app import create_app
from nodeloom.api.balance import CloseSurplusConnections, ConnectionShare
from nodeloom.api.state import AppContext
from nodeloom.settings import Settings


def uvicorn_config(app: ASGIApp, settings: Settings, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        log_level=settings.log_level.lower(),
        log_config=logs.uvicorn_log_config(),  # credentials scrubbed from uvicorn's lines
        access_log=settings.access_log,
        # X-Forwarded-* are the app's to believe or not (api/middleware.ForwardedHeaders,
        # NODELOOM_FORWARDED_ALLOW_IPS): uvicorn's copy would trust 127.0.0.1 regardless.
        proxy_headers=False,
        timeout_graceful_shutdown=5,  # after the drain: what is left is idle connections
        # Events are small JSON; per-connection deflate state doubled memory per socket and
        # pushed p99 delivery past 50 ms with 1,000 subscribers (bench/bench_events.py).
        ws_per_message_deflate=False,
    )


def serve(
    settings: Settings,
    host: str,
    port: int,
    *,
    executes: bool,
    sock: socket.socket | None = None,
    share: ConnectionShare | None = None,
) -> None:
    """Serve the app until SIGTERM/Ctrl-C (then drain), on ``sock`` if given (a child of
    ``serve --processes N``, with its ``share`` of the connections) or on a socket uvicorn
    binds."""
    app = create_app(settings, executes=executes)
    if share is not None:
        app.add_middleware(CloseSurplusConnections, share=share)
    server = DrainingServer(uvicorn_config(app, settings, host, port), app.state.ctx, share)
    server.run(sockets=[sock] if sock is not None else None)


class DrainingServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, ctx: AppContext, share: ConnectionShare | None = None
    ) -> None:
        super().__init__(config)
        self.ctx = ctx
        self.share = share
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None
        self._publishing: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.share is not None:
            connections = self.server_state.connections
            self._publishing = asyncio.create_task(
                self.share.publish_forever(lambda: len(connections)), name="connection-share"
            )
        # Everything built so far (modules, the app, the catalog) lives as long as the
        # process: out of the collector's way, a full collection scans only what requests
        # create. Measured under webhook load: full collections of ~100 ms became ~5-25 ms.
        gc.freeze()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.started and not self.should_exit and not self.ctx.draining and self._loop:
            self.ctx.draining = True
            self._captured_signals.append(sig)  # re-raised after shutdown, as uvicorn does
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        if self.ctx.draining and not self.should_exit:
            sig = signal.SIGINT  # a second signal: stop now, without waiting for nodes
            self.should_exit = True
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        self._drain = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        with contextlib.suppress(Exception):
            await self.ctx.dispatcher.stop()
        self.should_exit = True
