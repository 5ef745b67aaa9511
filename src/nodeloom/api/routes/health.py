"""Liveness and readiness probes (outside /api/v1)."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from nodeloom.api.deps import CtxDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.errors import ServiceUnavailable
from nodeloom.nodes.adapters import comfyui_fleet

router = APIRouter(route_class=GuardedRoute, tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(ctx: CtxDep) -> dict[str, str]:
    """The database (and, in scale-out, Redis) answers."""
    try:
        await ctx.db.read(lambda c: c.execute(sa.text("SELECT 1")).scalar())
    except Exception as exc:
        raise ServiceUnavailable("The database is not reachable.") from exc
    for name, check in ctx.readiness_checks.items():
        if not await check():
            raise ServiceUnavailable(f"{name} is not reachable.")
    return {"status": "ready"}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(ctx: CtxDep) -> PlainTextResponse:
    """Prometheus text format: the process's counters, and each ComfyUI fleet server it
    sends prompts to (in flight, queue, up, draining, failures, last seen) — with Redis,
    also those of the other processes (scale-out workers), labelled ``process``."""
    others = await ctx.fleet_reports.others() if ctx.fleet_reports is not None else {}
    text = ctx.metrics.render() + comfyui_fleet.render_metrics(others)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
