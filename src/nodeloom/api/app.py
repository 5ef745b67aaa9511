"""create_app(settings): routers, exception handlers, middleware and the lifespan."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from nodeloom import __version__
from nodeloom.api import problems
from nodeloom.api.middleware import RateLimitHeaders
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes import auth, health, keys, node_types, workflows
from nodeloom.api.state import AppContext
from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.nodes.registry import Registry, build_registry
from nodeloom.ratelimit import RateLimiter
from nodeloom.schemas.workflows import WorkflowCreate, WorkflowUpdate
from nodeloom.settings import Settings

API_PREFIX = "/api/v1"
log = logging.getLogger("nodeloom")


def create_app(settings: Settings, registry: Registry | None = None) -> FastAPI:
    """The ASGI app. ``settings.prepare()`` must have run and the schema be migrated."""
    db = Database(settings)
    ctx = AppContext(
        settings=settings,
        db=db,
        registry=registry or build_registry(),
        limiter=RateLimiter(settings.redis_url),
        key_usage=KeyUsage(db),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for start in ctx.extras.get("on_startup", []):
            await start()
        try:
            yield
        finally:
            for stop in reversed(ctx.extras.get("on_shutdown", [])):
                await stop()
            await ctx.key_usage.close()
            await db.dispose()

    app = FastAPI(
        title="Nodeloom",
        version=__version__,
        description="Workflow automation for generative-media pipelines.",
        default_response_class=OrjsonResponse,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    problems.install(app)
    app.add_middleware(RateLimitHeaders)
    app.include_router(health.router)
    for module in (auth, keys, workflows, node_types):
        app.include_router(module.router, prefix=API_PREFIX)
    for extend in _extensions():
        extend(app, ctx)
    _document_manual_bodies(app)
    return app


def _extensions() -> list[Any]:
    """Capabilities that add routes and lifecycle hooks (runs, webhooks, events)."""
    return []


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
        for model in (WorkflowCreate, WorkflowUpdate):
            model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in model_schema.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components[model.__name__] = model_schema
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
