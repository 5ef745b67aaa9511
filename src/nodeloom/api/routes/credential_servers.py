"""The servers of one of the account's comfyui credentials (a fleet): their state as every
process using them reports it, and the Drain button for each. Another account's credential
is 404, like a missing one (api/comfyui_servers.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from nodeloom.api.comfyui_servers import DrainAction, own_servers, set_draining
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.schemas.operator import FleetServerOut

router = APIRouter(route_class=GuardedRoute, tags=["credentials"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such credential or server in this account (not_found)"},
    409: {"description": "Undrain of a server its credential drains (conflict)"},
}


@router.get(
    "/credentials/{credential_id}/servers",
    response_model=list[FleetServerOut],
    responses=_ERRORS,
)
async def credential_servers(
    credential_id: str, principal: PrincipalDep, ctx: CtxDep
) -> list[FleetServerOut]:
    """The servers the credential names (``servers``): in flight, queue, failures, last
    seen, draining. None for a credential of one ``base_url`` or of the shared pool."""
    return (await own_servers(ctx, principal.account_id, credential_id)).rows


@router.post(
    "/credentials/{credential_id}/servers/{server_id}/{action}",
    response_model=FleetServerOut,
    responses=_ERRORS,
)
async def drain_credential_server(
    credential_id: str, server_id: str, action: DrainAction, principal: PrincipalDep, ctx: CtxDep
) -> FleetServerOut:
    """``drain``: one of the credential's servers finishes its prompts and gets no new one;
    ``undrain``: it takes new prompts again (not one the credential drains: 409)."""
    servers = await own_servers(ctx, principal.account_id, credential_id)
    return await set_draining(ctx, servers, server_id, action == "drain", principal.account_id)
