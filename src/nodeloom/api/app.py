"""create_app(settings): routers, exception handlers, middleware and the lifespan."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.middleware import Middleware

from nodeloom.api import hot, problems, webapp
from nodeloom.api.middleware import (
    ContainErrors,
    ForwardedHeaders,
    RateLimitHeaders,
    RejectNul,
    SecurityHeaders,
)
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes import (
    approvals,
    artifacts,
    assets,
    auth,
    callbacks,
    credentials,
    events,
    health,
    keys,
    node_types,
    problem_types,
    provider_hooks,
    runs,
    schedules,
    versions,
    webhooks,
    workflows,
)
from nodeloom.api.serving import RefuseWhileDraining
from nodeloom.api.state import AppContext
from nodeloom.auth.usage import KeyUsage
from nodeloom.engine.schedules import ScheduleFirer
from nodeloom.engine.submit import GraphCache
from nodeloom.events.links import readiness
from nodeloom.nodes.registry import Registry
from nodeloom.ratelimit import RateLimiter
from nodeloom.runtime import Runtime, build_windows
from nodeloom.schemas.approvals import ApprovalDecision
from nodeloom.schemas.events import openapi_schemas as event_schemas
from nodeloom.schemas.runs import ExecuteRequest, RetryRequest
from nodeloom.schemas.workflows import RestoreRequest, WorkflowCreate, WorkflowUpdate
from nodeloom.settings import Settings
from nodeloom.version import __version__

API_PREFIX = "/api/v1"
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
        title="Nodeloom",
        version=__version__,
        description="Workflow automation for generative-media pipelines.",
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
    app.include_router(health.router)
    for module in (auth, keys, workflows, versions, runs, artifacts, webhooks, events, node_types):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(assets.router, prefix=API_PREFIX)
    app.include_router(schedules.router, prefix=API_PREFIX)
    app.include_router(callbacks.router, prefix=API_PREFIX)
    app.include_router(credentials.router, prefix=API_PREFIX)
    app.include_router(provider_hooks.router, prefix=API_PREFIX)
    app.include_router(problem_types.router, prefix=API_PREFIX)
    app.include_router(approvals.router, prefix=API_PREFIX)
    _document_manual_bodies(app)
    webapp.install(app, settings.web_dist_dir)
    if settings.hot_paths:
        # Derived from the routes declared above (refuses to start if one is missing), and
        # last in the list, so innermost: every other middleware applies to it too.
        hot_routes = hot.derive(app.routes)
        app.user_middleware.append(Middleware(hot.HotPaths, hot_routes, runtime.metrics))
    return app


def _document_manual_bodies(app: FastAPI) -> None:
    """Routes that parse their body by hand still describe it in OpenAPI."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        manual = (WorkflowCreate, WorkflowUpdate, ExecuteRequest, RestoreRequest, RetryRequest)
        for model in (*manual, ApprovalDecision):
            model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in model_schema.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components[model.__name__] = model_schema
        for name, sub in event_schemas().items():
            components.setdefault(name, sub)
        problems.document_problems(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
