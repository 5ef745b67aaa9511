"""Sign-up, log-in and the caller's own account."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, status

from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.auth.passwords import hash_password, verify_password
from nodeloom.auth.tokens import issue_jwt
from nodeloom.errors import Conflict, Forbidden, InvalidCredentials, NotFound, RateLimited
from nodeloom.schemas.accounts import AccountOut, LoginRequest, SignupRequest, TokenOut
from nodeloom.store import accounts

router = APIRouter(tags=["auth"])

LOGIN_WINDOW_SECONDS = 15 * 60


@router.post(
    "/auth/signup",
    status_code=status.HTTP_201_CREATED,
    response_model=AccountOut,
    responses={
        403: {"description": "Sign-up is disabled on this server (forbidden)"},
        409: {"description": "An account with this e-mail already exists (conflict)"},
    },
)
async def signup(body: SignupRequest, ctx: CtxDep) -> AccountOut:
    """Create an account: the first one (the owner) always, later ones when sign-up is on."""
    password_hash = await asyncio.to_thread(hash_password, body.password)
    settings = ctx.settings
    async with ctx.db.write() as session:
        first = await accounts.count(session) == 0
        if not first and not settings.signup_enabled:
            raise Forbidden("Sign-up is disabled on this server; ask its administrator.")
        if await accounts.by_email(session, body.email) is not None:
            raise Conflict("An account with this e-mail already exists.")
        account = await accounts.create(
            session,
            email=body.email,
            password_hash=password_hash,
            plan=settings.owner_plan if first else settings.signup_plan,
            credits=settings.owner_credits if first else settings.signup_credits,
        )
        return AccountOut.model_validate(account)


@router.post(
    "/auth/login",
    response_model=TokenOut,
    responses={
        401: {"description": "Wrong e-mail or password (invalid_credentials)"},
        429: {"description": "Too many failed log-ins for this e-mail (rate_limited)"},
    },
)
async def login(body: LoginRequest, ctx: CtxDep) -> TokenOut:
    """Exchange e-mail and password for a JWT access token (Bearer, ``expires_in`` seconds)."""
    settings = ctx.settings
    throttle_key = f"login:{body.email}"
    verdict = await ctx.limiter.check(
        throttle_key, settings.login_max_failures, LOGIN_WINDOW_SECONDS
    )
    if not verdict.allowed:
        raise RateLimited(
            "Too many failed log-ins for this e-mail; try again later.",
            headers={"Retry-After": str(max(1, verdict.reset_seconds))},
        )
    async with ctx.db.read() as session:
        account = await accounts.by_email(session, body.email)
    stored = account.password_hash if account else None
    # Unknown e-mails are verified against a dummy hash: same work, same timing.
    ok = await asyncio.to_thread(verify_password, stored, body.password)
    if not ok or account is None:
        await ctx.limiter.hit(throttle_key, settings.login_max_failures, LOGIN_WINDOW_SECONDS)
        raise InvalidCredentials("Wrong e-mail or password.")
    token = issue_jwt(settings.secret, account.id, settings.jwt_ttl_seconds)
    return TokenOut(access_token=token, expires_in=settings.jwt_ttl_seconds)


@router.get("/me", response_model=AccountOut)
async def me(principal: PrincipalDep, ctx: CtxDep) -> AccountOut:
    async with ctx.db.read() as session:
        account = await accounts.by_id(session, principal.account_id)
    if account is None:
        raise NotFound("Account not found.")
    return AccountOut.model_validate(account)
