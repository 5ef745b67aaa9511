"""API key management. Takes a JWT only: a leaked key must not be able to mint more keys."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy.engine import Connection

from nodeloom.api.deps import CtxDep, JwtPrincipalDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.auth import revocation
from nodeloom.auth.revocation import key_scope
from nodeloom.auth.tokens import new_api_key
from nodeloom.db.dialect import serialize
from nodeloom.errors import Conflict, NotFound
from nodeloom.schemas.accounts import ApiKeyCreate, ApiKeyCreated, ApiKeyOut
from nodeloom.store import Record, api_keys

router = APIRouter(
    route_class=GuardedRoute,
    tags=["api-keys"],
    responses={403: {"description": "An API key was sent; these need a JWT (jwt_required)"}},
)


MAX_ACTIVE_KEYS = 50


@router.post(
    "/api-keys",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyCreated,
    responses={409: {"description": f"Already {MAX_ACTIVE_KEYS} active keys (conflict)"}},
)
async def create_key(body: ApiKeyCreate, principal: JwtPrincipalDep, ctx: CtxDep) -> ApiKeyCreated:
    """Generate a key. Its value is in this response only; the server keeps a keyed hash.
    An account has at most 50 active keys (and one request budget, however many it has)."""
    new = new_api_key(ctx.settings.secret)

    def create(conn: Connection) -> Record:
        serialize(conn, f"api-keys:{principal.account_id}")
        if api_keys.active_count(conn, principal.account_id) >= MAX_ACTIVE_KEYS:
            raise Conflict(
                f"An account may have at most {MAX_ACTIVE_KEYS} active API keys; revoke one first."
            )
        return api_keys.create(
            conn,
            account_id=principal.account_id,
            name=body.name,
            prefix=new.prefix,
            key_hash=new.key_hash,
        )

    row = await ctx.db.write(create)
    return ApiKeyCreated(
        id=row.id, name=row.name, key=new.key, prefix=row.prefix, created_at=row.created_at
    )


@router.get("/api-keys", response_model=list[ApiKeyOut])
async def list_keys(principal: JwtPrincipalDep, ctx: CtxDep) -> list[ApiKeyOut]:
    rows = await ctx.db.read(lambda c: api_keys.list_for(c, principal.account_id))
    return [ApiKeyOut.model_validate(row) for row in rows]


@router.delete(
    "/api-keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response
)
async def revoke_key(key_id: str, principal: JwtPrincipalDep, ctx: CtxDep) -> Response:
    """Revoke at once: requests check the key on every call, and open event streams that it
    authenticated are closed (here now, on other processes within a second)."""

    def revoke(conn: Connection) -> bool:
        found = api_keys.revoke(conn, principal.account_id, key_id)
        if found:
            revocation.record(conn, key_scope(key_id))
        return found

    if not await ctx.db.write(revoke):
        raise NotFound("No such API key.")
    ctx.revocations.revoke(key_scope(key_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
