"""Sign-up, log-in and the caller's own account."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, status
from sqlalchemy.engine import Connection

from nodeloom.api.deps import CtxDep, JwtPrincipalDep, PrincipalDep
from nodeloom.api.paging import PageDep
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routing import GuardedRoute
from nodeloom.auth import revocation
from nodeloom.auth.access_tokens import issue_jwt
from nodeloom.auth.passwords import hash_password, verify_password
from nodeloom.auth.revocation import jwt_scope
from nodeloom.db.dialect import serialize
from nodeloom.errors import Conflict, Forbidden, InvalidCredentials, NotFound, RateLimited
from nodeloom.schemas.accounts import (
    AccountOut,
    LedgerEntryOut,
    LoginRequest,
    PasswordChange,
    SetupStatus,
    SignupRequest,
    TokenOut,
)
from nodeloom.settings import Settings
from nodeloom.store import Record, accounts, ledger
from nodeloom.timestamps import format_timestamp

router = APIRouter(route_class=GuardedRoute, tags=["auth"])


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

    def create(conn: Connection) -> Record:
        # Concurrent first sign-ups must not all see "no account yet" (PostgreSQL runs them
        # side by side; SQLite already takes one writer at a time).
        serialize(conn, "signup")
        first = accounts.count(conn) == 0
        if not first and not settings.signup_enabled:
            raise Forbidden("Sign-up is disabled on this server; ask its administrator.")
        if accounts.by_email(conn, body.email) is not None:
            raise Conflict("An account with this e-mail already exists.")
        return accounts.create(
            conn,
            email=body.email,
            password_hash=password_hash,
            plan=settings.owner_plan if first else settings.signup_plan,
            credits=settings.owner_credits if first else settings.signup_credits,
        )

    return AccountOut.model_validate(await ctx.db.write(create))


# Failed log-ins are counted per (e-mail, client address), in widening windows: a few quick
# retries are free, then each further one waits longer, up to a 15-minute lock-out of that
# address for that e-mail. Another address is not affected, so a stranger's wrong passwords
# cannot lock an account's owner out. One address failing for many e-mails (credential
# stuffing) is stopped by its own window.
LOGIN_PAIR_WINDOWS = ((3, 10), (6, 60))  # (failures, seconds) before the settings' window
LOGIN_WINDOW_SECONDS = 15 * 60
LOGIN_ADDRESS_FAILURES = 50


def _client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _login_windows(settings: Settings, email: str, address: str) -> list[tuple[str, int, int]]:
    pair = f"login:{email}|{address}"
    tiers = [*LOGIN_PAIR_WINDOWS, (settings.login_max_failures, LOGIN_WINDOW_SECONDS)]
    # One key per window: a limiter key holds one window's hits.
    windows = [(f"{pair}|{seconds}", count, seconds) for count, seconds in tiers]
    windows.append((f"login-address:{address}", LOGIN_ADDRESS_FAILURES, LOGIN_WINDOW_SECONDS))
    return windows


@router.post(
    "/auth/login",
    response_model=TokenOut,
    responses={
        401: {"description": "Wrong e-mail or password (invalid_credentials)"},
        403: {"description": "The account is disabled (forbidden)"},
        429: {"description": "Too many failed log-ins from this address (rate_limited)"},
    },
)
async def login(body: LoginRequest, request: Request, ctx: CtxDep) -> TokenOut:
    """Exchange e-mail and password for a JWT access token (Bearer, ``expires_in`` seconds)."""
    settings = ctx.settings
    windows = _login_windows(settings, body.email, _client_address(request))
    for key, count, seconds in windows:
        verdict = await ctx.limiter.check(key, count, seconds)
        if not verdict.allowed:
            raise RateLimited(
                "Too many failed log-ins from this address; try again later.",
                headers={"Retry-After": str(max(1, verdict.reset_seconds))},
            )
    account = await ctx.db.read(lambda c: accounts.by_email(c, body.email))
    stored = account.password_hash if account else None
    # Unknown e-mails are verified against a dummy hash: same work, same timing.
    ok = await asyncio.to_thread(verify_password, stored, body.password)
    if not ok or account is None:
        for key, count, seconds in windows:
            await ctx.limiter.hit(key, count, seconds)
        raise InvalidCredentials("Wrong e-mail or password.")
    if account.disabled_at is not None:
        raise Forbidden("This account is disabled; ask the server's administrator.")
    token = issue_jwt(settings.secret, account.id, settings.jwt_ttl_seconds, account.token_version)
    return TokenOut(access_token=token, expires_in=settings.jwt_ttl_seconds)


@router.post(
    "/me/password",
    response_model=TokenOut,
    responses={
        401: {"description": "Missing credentials, or the current password is wrong"},
        403: {"description": "An API key was sent; this needs a JWT (jwt_required)"},
    },
)
async def change_password(
    body: PasswordChange, principal: JwtPrincipalDep, ctx: CtxDep
) -> TokenOut:
    """Change the password. Every access token issued before stops working at once (open
    event streams included); the answer carries a fresh one. API keys are not affected."""
    settings = ctx.settings
    account = await ctx.db.read(lambda c: accounts.by_id(c, principal.account_id))
    if account is None:
        raise NotFound("Account not found.")
    if not await asyncio.to_thread(verify_password, account.password_hash, body.current_password):
        raise InvalidCredentials("The current password is wrong.")
    password_hash = await asyncio.to_thread(hash_password, body.new_password)

    def change(conn: Connection) -> int:
        version = accounts.set_password(conn, account.id, password_hash)
        revocation.record(conn, jwt_scope(account.id, version - 1))
        return version

    version = await ctx.db.write(change)
    ctx.revocations.revoke(jwt_scope(account.id, version - 1))
    token = issue_jwt(settings.secret, account.id, settings.jwt_ttl_seconds, version)
    return TokenOut(access_token=token, expires_in=settings.jwt_ttl_seconds)


@router.get("/me", response_model=AccountOut)
async def me(principal: PrincipalDep, ctx: CtxDep) -> AccountOut:
    emails = ctx.settings.operator_emails

    def read(c: Connection) -> tuple[Record | None, bool]:
        found = accounts.by_id(c, principal.account_id)
        return found, found is not None and accounts.is_operator(c, found.id, emails)

    account, operator = await ctx.db.read(read)
    if account is None:
        raise NotFound("Account not found.")
    out = AccountOut.model_validate(account)
    out.operator = operator
    return out


@router.get("/auth/setup", response_model=SetupStatus)
async def setup_status(ctx: CtxDep) -> SetupStatus:
    """Needs no credentials: tells a first visitor whether the owner account is still to be
    created (the web app then shows its set-up page) and whether sign-up is open."""
    first = await ctx.db.read(accounts.count) == 0
    return SetupStatus(setup_required=first, signup_enabled=first or ctx.settings.signup_enabled)


@router.get("/me/ledger", response_model=list[LedgerEntryOut])
async def my_ledger(principal: PrincipalDep, ctx: CtxDep, page: PageDep) -> OrjsonResponse:
    """The caller's credit movements, newest first, paged like every list."""
    rows = await ctx.db.read(
        lambda c: ledger.page(c, principal.account_id, page.limit, page.cursor)
    )
    rows, headers = page.rows_and_headers(rows, lambda r: ledger.encode_cursor(r.id))
    body = [
        {
            "id": r.id,
            "kind": r.kind,
            "amount": r.amount,
            "balance_change": ledger.BALANCE_SIGN.get(r.kind, 0) * r.amount,
            "run_id": r.run_id or None,
            "node_id": r.node_id or None,
            "note": r.note,
            "created_at": format_timestamp(r.created_at),
        }
        for r in rows
    ]
    return OrjsonResponse(body, headers=headers)
