"""Dependencies shared by the routes, as Annotated aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from nodeloom.api.state import AppContext
from nodeloom.auth.authenticate import authenticate
from nodeloom.auth.principal import CredentialKind, Principal
from nodeloom.errors import Forbidden, JwtRequired, RateLimited
from nodeloom.ratelimit import Decision
from nodeloom.store import accounts

bearer = HTTPBearer(auto_error=False, description="An API key (nlk_...) or a JWT access token")


async def get_ctx(request: Request) -> AppContext:
    # async on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, and this
    # one is part of every request (the hop was ~8% of the server's CPU under load).
    ctx: AppContext = request.app.state.ctx
    return ctx


CtxDep = Annotated[AppContext, Depends(get_ctx)]


async def count_request(ctx: AppContext, principal: Principal) -> tuple[Decision, str]:
    """Count a request against its API key (``rate_limit_api_key``) and against its account
    (``rate_limit_jwt``, shared by all of the account's credentials, so making more keys
    buys no more requests). The answer is the refusal, else the window nearer its end, with
    which window it is ("API key" or "account")."""
    settings = ctx.settings
    window = settings.rate_limit_window_seconds
    decisions: list[tuple[Decision, str]] = []
    key = principal.key_rate_key
    if key is not None:
        by_key = await ctx.limiter.hit(key, settings.rate_limit_api_key, window)
        decisions.append((by_key, "API key"))
        if not by_key.allowed:
            return decisions[-1]
    account = await ctx.limiter.hit(principal.account_rate_key, settings.rate_limit_jwt, window)
    decisions.append((account, "account"))
    if not account.allowed:
        return decisions[-1]
    return min(decisions, key=lambda d: d[0].remaining)


async def get_principal(
    request: Request,
    ctx: CtxDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    token = credentials.credentials if credentials else None
    principal = await authenticate(ctx.db, ctx.settings.secret, ctx.key_usage, token)
    decision, whose = await count_request(ctx, principal)
    request.state.ratelimit = decision
    if not decision.allowed:
        raise RateLimited(
            f"More than {decision.limit} requests in {ctx.settings.rate_limit_window_seconds} s "
            f"for this {whose}; "
            f"retry in {decision.reset_seconds} s.",
            headers=decision.headers(),
        )
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_jwt_principal(principal: PrincipalDep) -> Principal:
    if principal.via is not CredentialKind.JWT:
        raise JwtRequired("API keys are managed with a JWT access token from /auth/login.")
    return principal


JwtPrincipalDep = Annotated[Principal, Depends(get_jwt_principal)]


async def get_operator(principal: PrincipalDep, ctx: CtxDep) -> Principal:
    """The principal, when its account is one of the server's operators
    (``NODELOOM_OPERATOR_EMAILS``, else the first account)."""
    emails = ctx.settings.operator_emails
    if not await ctx.db.read(lambda c: accounts.is_operator(c, principal.account_id, emails)):
        raise Forbidden("Only the server's operators may see this (NODELOOM_OPERATOR_EMAILS).")
    return principal


OperatorDep = Annotated[Principal, Depends(get_operator)]
