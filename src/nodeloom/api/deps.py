"""Dependencies shared by the routes, as Annotated aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from nodeloom.api.state import AppContext
from nodeloom.auth.authenticate import authenticate
from nodeloom.auth.principal import CredentialKind, Principal
from nodeloom.errors import JwtRequired, RateLimited

bearer = HTTPBearer(auto_error=False, description="An API key (nlk_...) or a JWT access token")


def get_ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


CtxDep = Annotated[AppContext, Depends(get_ctx)]


async def get_principal(
    request: Request,
    ctx: CtxDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    token = credentials.credentials if credentials else None
    principal = await authenticate(ctx.db, ctx.settings.secret, ctx.key_usage, token)
    settings = ctx.settings
    limit = (
        settings.rate_limit_api_key
        if principal.via is CredentialKind.API_KEY
        else settings.rate_limit_jwt
    )
    decision = await ctx.limiter.hit(principal.rate_key, limit)
    request.state.ratelimit = decision
    if not decision.allowed:
        raise RateLimited(
            f"More than {limit} requests in 60 s; retry in {decision.reset_seconds} s.",
            headers=decision.headers(),
        )
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_jwt_principal(principal: PrincipalDep) -> Principal:
    if principal.via is not CredentialKind.JWT:
        raise JwtRequired("API keys are managed with a JWT access token from /auth/login.")
    return principal


JwtPrincipalDep = Annotated[Principal, Depends(get_jwt_principal)]
