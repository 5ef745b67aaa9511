"""API key management. Takes a JWT only: a leaked key must not be able to mint more keys."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from nodeloom.api.deps import CtxDep, JwtPrincipalDep
from nodeloom.auth.tokens import new_api_key
from nodeloom.errors import NotFound
from nodeloom.schemas.accounts import ApiKeyCreate, ApiKeyCreated, ApiKeyOut
from nodeloom.store import api_keys

router = APIRouter(
    tags=["api-keys"],
    responses={403: {"description": "An API key was sent; these need a JWT (jwt_required)"}},
)


@router.post("/api-keys", status_code=status.HTTP_201_CREATED, response_model=ApiKeyCreated)
async def create_key(body: ApiKeyCreate, principal: JwtPrincipalDep, ctx: CtxDep) -> ApiKeyCreated:
    """Generate a key. Its value is in this response only; the server keeps a keyed hash."""
    new = new_api_key(ctx.settings.secret)
    async with ctx.db.write() as session:
        row = await api_keys.create(
            session,
            account_id=principal.account_id,
            name=body.name,
            prefix=new.prefix,
            key_hash=new.key_hash,
        )
    return ApiKeyCreated(
        id=row.id, name=row.name, key=new.key, prefix=row.prefix, created_at=row.created_at
    )


@router.get("/api-keys", response_model=list[ApiKeyOut])
async def list_keys(principal: JwtPrincipalDep, ctx: CtxDep) -> list[ApiKeyOut]:
    async with ctx.db.read() as session:
        rows = await api_keys.list_for(session, principal.account_id)
    return [ApiKeyOut.model_validate(row) for row in rows]


@router.delete(
    "/api-keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response
)
async def revoke_key(key_id: str, principal: JwtPrincipalDep, ctx: CtxDep) -> Response:
    """Revoke at once: every replica checks the key row on each request."""
    async with ctx.db.write() as session:
        found = await api_keys.revoke(session, principal.account_id, key_id)
    if not found:
        raise NotFound("No such API key.")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
