"""create_app(settings): routers, exception handlers, middleware and the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from nodeloom import __version__
from nodeloom.api import problems
from nodeloom.api.middleware import RateLimitHeaders
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes import (
    artifacts,
    auth,
    events,
    health,
    keys,
    node_types,
    runs,
    webhooks,
    workflows,
)
from nodeloom.api.state import AppContext
from nodeloom.artifacts.store import LocalArtifactStore
from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.engine.dispatch.local import LocalDispatcher
from nodeloom.engine.runner import ExecutorEnv
from nodeloom.engine.submit import GraphCache
from nodeloom.events.bus import MemoryBus
from nodeloom.metrics import Metrics
from nodeloom.nodes.registry import Registry, build_registry
from nodeloom.ratelimit import RateLimiter
from nodeloom.schemas.runs import ExecuteRequest
from nodeloom.schemas.workflows import WorkflowCreate, WorkflowUpdate
from nodeloom.settings import Settings

API_PREFIX = "/api/v1"
log = logging.getLogger("nodeloom")


def create_app(settings: Settings, registry: Registry | None = None) -> FastAPI:
    """The ASGI app. ``settings.prepare()`` must have run and the schema be migrated."""
    db = Database(settings)
    registry = registry or build_registry()
    store = LocalArtifactStore(
        settings.artifacts_dir, fsync=settings.sqlite_synchronous == "FULL" or not db.is_sqlite
    )
    bus = MemoryBus()
    metrics = Metrics()
    threads = ThreadPoolExecutor(
        max_workers=max(2, settings.max_concurrent_nodes), thread_name_prefix="node"
    )
    env = ExecutorEnv(
        settings=settings,
        db=db,
        registry=registry,
        store=store,
        bus=bus,
        slots=asyncio.Semaphore(settings.max_concurrent_nodes),
        executor=threads,
        metrics=metrics,
    )
    ctx = AppContext(
        settings=settings,
        db=db,
        registry=registry,
        limiter=RateLimiter(settings.redis_url),
        key_usage=KeyUsage(db),
        store=store,
        bus=bus,
        dispatcher=LocalDispatcher(env),
        graphs=GraphCache(registry, settings),
        metrics=metrics,
        admission=asyncio.Semaphore(settings.max_concurrent_accepts),
    )
    dispatcher = ctx.dispatcher
    metrics.gauge(
        "nodeloom_db_statements", "Statements sent to the database.", lambda: db.statements
    )
    metrics.gauge("nodeloom_db_write_groups", "SQLite group commits.", lambda: db.write_groups)
    metrics.gauge(
        "nodeloom_db_grouped_writes",
        "Write transactions carried by SQLite group commits.",
        lambda: db.grouped_writes,
    )
    metrics.gauge(
        "nodeloom_runs_active",
        "Runs driven by this process.",
        lambda: float(getattr(dispatcher, "active_runs", 0)),
    )
    metrics.gauge(
        "nodeloom_runs_waiting",
        "Accepted runs waiting for a driver slot in this process.",
        lambda: float(getattr(dispatcher, "waiting_runs", 0)),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await bus.start()
        await ctx.dispatcher.start()
        try:
            yield
        finally:
            await ctx.dispatcher.stop()
            await bus.stop()
            await ctx.key_usage.close()
            await ctx.limiter.close()
            threads.shutdown(wait=False, cancel_futures=True)
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
    for module in (auth, keys, workflows, runs, artifacts, webhooks, events, node_types):
        app.include_router(module.router, prefix=API_PREFIX)
    _document_manual_bodies(app)
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
        for model in (WorkflowCreate, WorkflowUpdate, ExecuteRequest):
            model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in model_schema.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components[model.__name__] = model_schema
        problems.document_problems(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
