"""create_app(settings): routers, exception handlers, middleware and the lifespan."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.middleware import Middleware

from nodeloom.api import hot, openapi, problems, webapp
from nodeloom.api.draining import RefuseWhileDraining
from nodeloom.api.middleware import (
    ContainErrors,
    ForwardedHeaders,
    RateLimitHeaders,
    RejectNul,
    SecurityHeaders,
)
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.route_table import API_PREFIX, api_routes
from nodeloom.api.state import AppContext
from nodeloom.auth.usage import KeyUsage
from nodeloom.engine.graph_cache import GraphCache
from nodeloom.engine.schedules import ScheduleFirer
from nodeloom.events.links import readiness
from nodeloom.nodes.registry import Registry
from nodeloom.ratelimit import RateLimiter
from nodeloom.runtime import Runtime, build_windows
from nodeloom.settings import Settings
from nodeloom.version import __version__

log = logging.getLogger("nodeloom")


def create_app(
    settings: Settings, registry: Registry | None = None, *, executes: bool = True
) -> FastAPI:
    """The ASGI app. ``settings.prepare()`` must have run and the schema be migrated.
    ``executes``: this process also runs nodes (``nodeloom serve`` without --no-worker)."""
    runtime = Runtime.build(settings, registry, executes=executes)
    graphs = GraphCache(runtime.registry, settings)
    ctx = AppContext(
        settings=settings,
        db=runtime.db,
        registry=runtime.registry,
        limiter=RateLimiter(build_windows(settings)),
        key_usage=KeyUsage(runtime.db),
        store=runtime.store,
        bus=runtime.bus,
        dispatcher=runtime.dispatcher,
        graphs=graphs,
        acceptor=runtime.build_acceptor(graphs),
        metrics=runtime.metrics,
        sandbox=runtime.sandbox,
        revocations=runtime.revocations,
        scratch=runtime.scratch,
        fleet_reports=runtime.fleet_reports,
        drain_feed=runtime.drain_feed,
    )
    redis_ready = readiness(runtime.bus)
    if redis_ready is not None:
        ctx.readiness_checks["Redis"] = redis_ready

    # Schedules fire through the acceptor, so every API process runs the loop (exactly one
    # of them wins each firing: engine/schedules.py).
    firer = ScheduleFirer(settings, runtime.db, ctx.acceptor, ctx.limiter)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        await firer.start()
        try:
            yield
        finally:
            await firer.stop()
            await ctx.key_usage.close()
            await ctx.limiter.close()
            await runtime.stop()

    app = FastAPI(
        title=openapi.TITLE,
        version=__version__,
        description=openapi.DESCRIPTION,
        default_response_class=OrjsonResponse,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # served by api/webapp.py from local assets (no CDN)
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    problems.install(app, settings.base_url)
    app.add_middleware(ContainErrors)
    app.add_middleware(RateLimitHeaders)
    app.add_middleware(RejectNul, base_url=settings.base_url)
    app.add_middleware(RefuseWhileDraining, ctx=ctx)
    app.add_middleware(SecurityHeaders)  # on every answer, the drain's 503 included
    if settings.forwarded_allow_ips.strip():  # outermost: the URLs built inside see its host
        app.add_middleware(ForwardedHeaders, trusted=settings.forwarded_allow_ips)
    # Shared with every other app of the process, built once (api/route_table.py).
    app.router.routes.extend(api_routes())
    openapi.install(app)
    webapp.install(app, settings.web_dist_dir)
    if settings.hot_paths:
        # Derived from the routes declared above (refuses to start if one is missing), and
        # last in the list, so innermost: every other middleware applies to it too.
        hot_routes = hot.derive(app.routes)
        app.user_middleware.append(Middleware(hot.HotPaths, hot_routes, runtime.metrics))
    return app
