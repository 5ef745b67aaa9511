"""The server's operators' view (``OperatorDep``: NODELOOM_OPERATOR_EMAILS, else the first
account): the shared ComfyUI pool's servers and every account's, as every process using
them sees them, and the Drain button for each."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from nodeloom.api.comfyui_servers import (
    DrainAction,
    every_server,
    reports,
    set_draining,
    timestamped,
)
from nodeloom.api.deps import CtxDep, OperatorDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.nodes.adapters import comfyui_fleet
from nodeloom.nodes.adapters.comfyui_reports import fleet_servers
from nodeloom.schemas.operator import (
    ComfyUIPoolOut,
    ComfyUIServersOut,
    FleetServerOut,
    PoolServerOut,
)
from nodeloom.store import comfyui_drains

router = APIRouter(route_class=GuardedRoute, tags=["operator"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such server (not_found)"},
    409: {"description": "Undrain of a server its configuration drains (conflict)"},
}


@router.get("/operator/comfyui-pool", response_model=ComfyUIPoolOut)
async def comfyui_pool(operator: OperatorDep, ctx: CtxDep) -> ComfyUIPoolOut:
    """The servers of NODELOOM_COMFYUI_POOL: in flight, queue, failures, last seen,
    draining. Scaled out, the workers' view comes through Redis (every 5 s)."""
    drained = await ctx.db.read(comfyui_drains.drained)
    rows = fleet_servers(comfyui_fleet.POOL, ctx.settings.comfyui_pool, await reports(ctx), drained)
    servers = [PoolServerOut.model_validate(timestamped(row)) for row in rows]
    return ComfyUIPoolOut(account_limit=ctx.settings.comfyui_pool_account_limit, servers=servers)


@router.get("/operator/comfyui-servers", response_model=ComfyUIServersOut)
async def comfyui_servers(operator: OperatorDep, ctx: CtxDep) -> ComfyUIServersOut:
    """Every ComfyUI server Nodeloom talks to: the pool's (with its URL) and those the
    accounts' comfyui credentials name (its host and the account's e-mail)."""
    servers = await every_server(ctx)
    return ComfyUIServersOut(
        account_limit=ctx.settings.comfyui_pool_account_limit, servers=servers.rows
    )


@router.post(
    "/operator/comfyui-servers/{server_id}/{action}",
    response_model=FleetServerOut,
    responses=_ERRORS,
)
async def drain_server(
    server_id: str, action: DrainAction, operator: OperatorDep, ctx: CtxDep
) -> FleetServerOut:
    """``drain``: the server finishes its prompts and gets no new one, from every process
    within ``comfyui_check_seconds``, and stays drained across restarts until ``undrain``
    (not for a server its configuration drains: 409)."""
    servers = await every_server(ctx)
    return await set_draining(ctx, servers, server_id, action == "drain", operator.account_id)
